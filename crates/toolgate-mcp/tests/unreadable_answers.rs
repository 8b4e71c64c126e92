//! An answer a streamable-HTTP upstream writes on a call's stream with the call's own id,
//! that cannot be read (a number past a 64-bit float): the call fails at once, saying so,
//! instead of waiting out its deadline, and the next call on the connection is answered.

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::hand_written::{event_stream, initialized, json_answer};
use common::{imported, serve_on_loopback, within};
use serde_json::{Value, json};
use toolgate_core::InvokeOptions;
use toolgate_mcp::UpstreamConfig;

/// Answers a call whose arguments name `unreadable` with an event that cannot be read,
/// any other with its arguments.
async fn posted(body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => initialized(&id, "unreadable"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}},
        ]}})),
        "tools/call" => {
            let arguments = &message["params"]["arguments"];
            let data = if arguments.get("unreadable").is_some() {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{{"v":1e999}}}}}}"#
                )
            } else {
                json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                    {"type": "text", "text": arguments.to_string()}]}})
                .to_string()
            };
            let event = format!("event: message\ndata: {data}\n\n");
            event_stream(futures::stream::iter([event]))
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

#[tokio::test]
async fn a_call_answered_on_its_stream_with_a_message_that_cannot_be_read_fails_at_once() {
    let app = axum::Router::new().route("/mcp", axum::routing::post(posted));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("unreadable", url)
        .discover(false)
        .call_timeout(Duration::from_secs(30));
    let (_upstream, pipeline) = imported(config).await;
    for _ in 0..2 {
        let error = within(
            60,
            "a call answered with a message that cannot be read",
            pipeline.invoke("echo", json!({"unreadable": true}), InvokeOptions::new()),
        )
        .await
        .expect_err("cannot be read");
        assert_eq!(error.code(), "tool_error", "{error}");
        let message = error.to_string();
        assert!(
            message.contains(
                "MCP server `unreadable` answered this call with a message that cannot be read: a number too large to read"
            ),
            "{message}"
        );
    }
    let answer = within(
        60,
        "a call",
        pipeline.invoke("echo", json!({"text": "after"}), InvokeOptions::new()),
    )
    .await
    .expect("answered");
    assert!(answer.to_string().contains("after"), "{answer}");
}
