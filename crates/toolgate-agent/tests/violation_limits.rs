//! The violations of an invalid-input error reach the model within the result size limit,
//! in every provider format: whole entries, then how many were left out.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolgate_agent::format::{anthropic, gemini, mcp, openai};
use toolgate_agent::{
    ExecuteOptions, InMemoryStateManager, ThreadConfig, ToolCall, ToolResult, ToolSystem,
};
use toolgate_core::error::{InputViolation, InputViolations};
use toolgate_core::{JsonTool, Pipeline, ToolError};

const THREAD: &str = "thread-1";
const LIMIT: usize = 2_000;
const FIELDS: usize = 10_000;

/// `fill_form` takes an object of strings, and refuses every field that is not one — the
/// way a tool checks a form, one violation per bad field.
fn system() -> ToolSystem {
    let form = JsonTool::new(
        "fill_form",
        "Fills a form: every field is a string.",
        json!({ "type": "object", "additionalProperties": { "type": "string" } }),
        |input, _| {
            Box::pin(async move {
                let violations: Vec<InputViolation> = input
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, value)| !value.is_string())
                    .map(|(field, _)| InputViolation {
                        path: field.clone(),
                        message: "expected a string".to_owned(),
                    })
                    .collect();
                if violations.is_empty() {
                    Ok(json!("filled"))
                } else {
                    Err(ToolError::InvalidInput(InputViolations(violations)))
                }
            })
        },
    );
    let state = Arc::new(InMemoryStateManager::new());
    state.set_config(THREAD, ThreadConfig::enabling(["fill_form"]));
    ToolSystem::builder(Pipeline::builder().tool(Arc::new(form)), state)
        .result_max_chars(LIMIT)
        .build()
        .unwrap()
}

/// `count` fields, every one a number.
fn bad_fields(count: usize) -> Value {
    let fields: Map<String, Value> = (0..count)
        .map(|i| (format!("field_{i:05}"), json!(i)))
        .collect();
    Value::Object(fields)
}

async fn fill(fields: Value) -> ToolResult {
    system()
        .execute_tools(
            THREAD,
            vec![ToolCall::new("call_1", "fill_form", fields)],
            ExecuteOptions::new(),
        )
        .await
        .remove(0)
}

/// The violation of field `i`, as the message lists it.
fn entry(i: usize) -> String {
    format!("argument `field_{i:05}`: expected a string")
}

/// Asserts that `message` is within the limit, lists the first violations whole and in
/// order, and says how many it left out; answers how many it lists.
fn assert_cut(message: &str) -> usize {
    assert!(
        message.chars().count() <= LIMIT,
        "{} characters, over the limit of {LIMIT}",
        message.chars().count()
    );
    let listed = message
        .strip_prefix("invalid arguments: ")
        .unwrap_or_else(|| panic!("not an invalid-arguments message: {message}"));
    let (entries, more) = listed
        .rsplit_once("; … and ")
        .unwrap_or_else(|| panic!("does not say how many were left out: {message}"));
    let entries: Vec<&str> = entries.split("; ").collect();
    for (i, shown) in entries.iter().enumerate() {
        assert_eq!(*shown, entry(i), "entry {i} is not whole");
    }
    let left_out = FIELDS - entries.len();
    let grouped = format!("{},{:03} more", left_out / 1000, left_out % 1000);
    assert_eq!(more, grouped);
    entries.len()
}

#[tokio::test]
async fn ten_thousand_violations_are_cut_to_whole_entries_within_the_limit() {
    let result = fill(bad_fields(FIELDS)).await;
    let error = result.error.as_ref().unwrap();
    assert_eq!(error.code, "invalid_input");
    let shown = assert_cut(&error.message);
    assert!(shown > 10, "only {shown} entries fit in {LIMIT} characters");
    // The list keeps the entries the message shows, no more.
    assert_eq!(error.violations.len(), shown);
    assert_eq!(
        error.violations[shown - 1].path,
        format!("field_{:05}", shown - 1)
    );
    let truncation = result.metadata.truncation.unwrap();
    assert_eq!(truncation.limit, LIMIT);
    assert!(truncation.original_chars > FIELDS * entry(0).len());
    // The ToolResult as JSON carries no more than that either.
    let wire = serde_json::to_value(&result).unwrap();
    assert_eq!(wire["error"]["violations"].as_array().unwrap().len(), shown);
}

#[tokio::test]
async fn every_provider_format_renders_the_cut_violations() {
    let result = fill(bad_fields(FIELDS)).await;
    let content = |text: &Value| {
        let text = text.as_str().unwrap();
        text.strip_prefix("error [invalid_input]: ")
            .unwrap()
            .to_owned()
    };
    let rendered = [
        ("openai chat", content(&openai::chat_tool_message(&result)["content"])),
        (
            "openai responses",
            content(&openai::responses_tool_output(&result)["output"]),
        ),
        (
            "anthropic",
            content(&anthropic::tool_result_block(&result)["content"]),
        ),
        (
            "gemini",
            gemini::function_response_part(&result)["functionResponse"]["response"]["error"]
                ["message"]
                .as_str()
                .unwrap()
                .to_owned(),
        ),
        (
            "mcp",
            content(&mcp::call_result(&result)["content"][0]["text"]),
        ),
    ];
    for (format, message) in rendered {
        let shown = std::panic::catch_unwind(|| assert_cut(&message))
            .unwrap_or_else(|_| panic!("{format} renders the violations past the limit"));
        assert!(shown > 10, "{format}");
    }
}

#[tokio::test]
async fn violations_within_the_limit_are_all_kept() {
    let result = fill(bad_fields(3)).await;
    let error = result.error.as_ref().unwrap();
    assert_eq!(
        error.message,
        format!(
            "invalid arguments: {}; {}; {}",
            entry(0),
            entry(1),
            entry(2)
        )
    );
    assert_eq!(error.violations.len(), 3);
    assert!(result.metadata.truncation.is_none());
}

#[tokio::test]
async fn a_violation_naming_a_key_longer_than_the_limit_repeats_it_cut_in_words_and_list() {
    let long = "x".repeat(3 * LIMIT);
    let result = fill(json!({ long.clone(): 1 })).await;
    let error = result.error.as_ref().unwrap();
    let shown = format!("{}…", "x".repeat(256));
    assert_eq!(
        error.message,
        format!("invalid arguments: argument `{shown}`: expected a string")
    );
    // The list repeats what the words do, so the result stays within the limit.
    assert_eq!(error.violations.len(), 1);
    assert_eq!(error.violations[0].path, shown);
    assert!(result.metadata.truncation.is_none());
}
