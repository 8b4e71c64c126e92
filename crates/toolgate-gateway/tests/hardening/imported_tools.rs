//! Tools imported from an upstream MCP server (the official Python SDK, over stdio): their
//! arguments are checked before the call leaves, and their results reach an MCP client
//! whole — every content block, the image's bytes exactly — with only what policy removes
//! (here, redaction of an email in the text) changed.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    Gateway, invoke, mcp, open_session, python, python_mcp_available, run, user_yaml,
};

fn config() -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    format!(
        "upstreams:\n  - name: shapes\n    command: {python}\n    args: [\"{script}\"]\n\
policies:\n  redaction: {{}}\n\
users:\n{alice}",
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    )
}

/// The JSON-RPC result of an answer that may come as server-sent events (skipping the
/// empty event that primes the stream).
fn rpc_result(body: &str) -> Value {
    let answer = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(body))
        .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in: {body}"));
    answer["result"].clone()
}

#[tokio::test]
async fn a_wrong_argument_is_refused_before_the_call_leaves_naming_the_field() {
    if !python_mcp_available("a_wrong_argument_is_refused_before_the_call_leaves_naming_the_field")
    {
        return;
    }
    let gateway = Gateway::start(&config());
    let good = invoke(&gateway, "alice", "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(good.status, 200, "{}", good.body);
    assert_eq!(
        good.body["output"]["structuredContent"]["result"], 5,
        "{}",
        good.body
    );

    let bad = invoke(&gateway, "alice", "add", json!({"a": "two", "b": 3})).await;
    assert_eq!(
        (bad.status, bad.error_code()),
        (400, "invalid_input"),
        "{}",
        bad.body
    );
    assert_eq!(
        bad.body["error"]["violations"][0]["path"], "a",
        "{}",
        bad.body
    );

    let session = open_session(&gateway, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "add", "arguments": {"b": 3}}});
    let (status, _, body) = mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{body}");
    let result = rpc_result(&body);
    assert_eq!(result["isError"], true, "{body}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("argument `a`"),
        "{body}"
    );
}

#[tokio::test]
async fn an_image_result_reaches_the_mcp_client_whole_with_its_text_redacted() {
    if !python_mcp_available("an_image_result_reaches_the_mcp_client_whole_with_its_text_redacted")
    {
        return;
    }
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "picture", "arguments": {}}});
    let (status, _, body) = mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{body}");
    let result = rpc_result(&body);
    let content = result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(content.len(), 2, "{body}");
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "a picture for [REDACTED:email]"})
    );
    assert_eq!(content[1]["type"], "image", "{body}");
    assert_eq!(content[1]["mimeType"], "image/png", "{body}");
    let data = content[1]["data"].as_str().unwrap_or_default();
    assert!(
        data.ends_with("/020+7946+0958+AA"),
        "the image's bytes changed: {data}"
    );
    assert_ne!(result["isError"], true, "{body}");
}

#[test]
fn check_says_which_imported_tools_have_their_arguments_checked() {
    if !python_mcp_available("check_says_which_imported_tools_have_their_arguments_checked") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, config()).unwrap();
    let (status, stdout, stderr) = run(&["check", "--config", path.to_str().unwrap()], "");
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("add  [mcp]\n  arguments checked against the upstream's input schema"),
        "{stdout}"
    );
}
