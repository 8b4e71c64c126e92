//! What the logs may not carry, even at `debug`: input values, and colour codes on a
//! stderr that is not a terminal.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::common::{Gateway, invoke, mcp, open_session, user_yaml};

const SECRET: &str = "input-value-that-must-never-be-logged-7f3a";

fn config() -> String {
    format!(
        "tools:\n  builtin: [echo]\nlogging:\n  level: debug\nusers:\n{}",
        user_yaml("alice", &["admin"])
    )
}

/// Calls echo with [`SECRET`] over `/v1` and over `/mcp`.
async fn call_with_secret(gateway: &Gateway) {
    let answer = invoke(gateway, "alice", "echo", json!({"text": SECRET})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let session = open_session(gateway, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": SECRET}}});
    let (status, _, text) = mcp(gateway, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(SECRET), "the call itself works: {text}");
    // Let the last log lines of the call reach the pipe.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn at_debug_level_no_tool_argument_or_result_reaches_the_log() {
    let gateway = Gateway::start(&config());
    call_with_secret(&gateway).await;
    let stderr = gateway.stderr();
    assert!(stderr.contains("DEBUG"), "the debug level is on:\n{stderr}");
    assert!(
        !stderr.contains(SECRET),
        "an input value was logged:\n{stderr}"
    );
}

#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    let gateway = Gateway::start(&config());
    call_with_secret(&gateway).await;
    let stderr = gateway.stderr();
    assert!(!stderr.is_empty(), "the gateway logged something");
    assert!(
        !stderr.contains("\x1b["),
        "colour codes on a pipe:\n{stderr:?}"
    );
}

/// Asks `/mcp` for a prompt that is not there: an error answer to the caller. The log
/// lines written meanwhile.
async fn log_of_a_callers_mistake(gateway: &Gateway) -> String {
    let session = open_session(gateway, "alice").await;
    let get = json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get",
                     "params": {"name": "no-such-prompt"}});
    let (status, _, text) = mcp(gateway, Method::POST, "alice", Some(&session), Some(get)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"error\""), "answered with an error: {text}");
    // Let the last log lines of the request reach the pipe.
    tokio::time::sleep(Duration::from_millis(200)).await;
    gateway.stderr()
}

#[tokio::test]
async fn a_callers_mistake_answered_on_mcp_writes_no_warning_in_rusts_words() {
    let yaml = format!(
        "tools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    );
    let gateway = Gateway::start(&yaml);
    let stderr = log_of_a_callers_mistake(&gateway).await;
    assert!(!stderr.contains("response error"), "{stderr}");
    assert!(!stderr.contains("ErrorData"), "{stderr}");

    // An operator who asks for rmcp's lines gets them.
    let asked = Gateway::start_with_env(&yaml, &[("RUST_LOG", "info,rmcp=warn")]);
    let stderr = log_of_a_callers_mistake(&asked).await;
    assert!(stderr.contains("response error"), "{stderr}");
}
