//! Arguments whose JSON names a key twice in one object are refused, and the model is told
//! which key: serde_json would keep the last value silently, and a policy and the tool
//! could read different ones.

mod common;

use std::sync::Arc;

use common::{Runs, THREAD, state, system};
use serde_json::{Value, json};
use toolgate_agent::format::openai;
use toolgate_agent::{Arguments, ExecuteOptions, ToolCall};

#[test]
fn arguments_with_a_repeated_key_are_unparseable_saying_which_key_and_where() {
    let raw = r#"{"path": "/tmp/x", "options": {"mode": "r", "mode": "w"}}"#;
    assert_eq!(
        Arguments::from_json_str(raw),
        Arguments::Unparseable {
            raw: raw.to_owned(),
            error: "the key `mode` appears twice in the object at `/options`: send each key once"
                .to_owned(),
        }
    );
}

#[test]
fn arguments_without_a_repeated_key_parse_as_serde_json_parses_them() {
    for raw in [
        r#"{"path": "/tmp/x", "options": {"mode": "r", "path": "/tmp/y"}, "n": [1, 1.5, -2]}"#,
        r#"{"a": {"a": {"a": 18446744073709551615}}}"#,
        "[]",
        "  ",
    ] {
        let expected = if raw.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str::<Value>(raw).unwrap()
        };
        assert_eq!(
            Arguments::from_json_str(raw),
            Arguments::Json { value: expected },
            "{raw}"
        );
    }
}

#[test]
fn an_openai_call_with_a_repeated_argument_key_is_unparseable() {
    let message = json!({"tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "read_file",
            "arguments": "{\"path\": \"/etc/passwd\", \"path\": \"/tmp/x\"}"}}]});
    let calls = openai::parse_chat_tool_calls(&message).unwrap();
    let Arguments::Unparseable { error, .. } = &calls[0].arguments else {
        panic!("{:?}", calls[0].arguments)
    };
    assert_eq!(
        error,
        "the key `path` appears twice in the top-level object: send each key once"
    );
}

#[test]
fn a_tool_call_read_from_json_refuses_a_repeated_key_in_its_arguments() {
    let text = r#"{"id": "c1", "name": "echo",
        "arguments": {"kind": "json", "value": {"text": "a", "text": "b"}}}"#;
    let error = serde_json::from_str::<ToolCall>(text).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("the key `text` appears twice in one object: send each key once"),
        "{error}"
    );
    let text = r#"{"id": "c1", "name": "echo",
        "arguments": {"kind": "json", "value": {"text": "a", "more": {"text": "b"}}}}"#;
    let call = serde_json::from_str::<ToolCall>(text).unwrap();
    assert_eq!(
        call.arguments.json(),
        Some(&json!({"text": "a", "more": {"text": "b"}}))
    );
}

#[tokio::test]
async fn a_call_with_a_repeated_argument_key_is_answered_invalid_input_naming_the_key() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let raw = r#"{"text": "hello", "text": "rm -rf /"}"#;
    let call = ToolCall::from_json_str("c1", "echo", raw);
    let results = system
        .execute_tools(THREAD, vec![call], ExecuteOptions::new())
        .await;
    assert_eq!(results[0].error_code(), Some("invalid_input"));
    let message = &results[0].error.as_ref().unwrap().message;
    assert!(
        message
            .contains("the key `text` appears twice in the top-level object: send each key once"),
        "{message}"
    );
    assert_eq!(results[0].metadata.raw_arguments.as_deref(), Some(raw));
    assert_eq!(results[0].output, None);
}
