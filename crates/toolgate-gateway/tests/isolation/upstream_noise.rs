//! An upstream that is loud cannot fill the log with what it chose, nor lose its stderr:
//! a stderr line too long to relay is left out and the lines after it are relayed, and
//! the notifications it sends are not logged one by one unless the operator asks.
//!
//! The upstream is `tests/upstreams/noisy.py` (official Python MCP SDK), over stdio.

use std::time::Duration;

use serde_json::json;

use crate::common::{Gateway, invoke, python, python_mcp_available, user_yaml};

const NOISY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/noisy.py");

/// A gateway with `noisy.py` over stdio (tools prefixed `noisy_`), logging at `level`.
fn gateway(level: &str) -> Gateway {
    Gateway::start(&format!(
        "logging:\n  level: \"{level}\"\nusers:\n{}upstreams:\n  - {{ name: noisy, command: \"{}\", args: [\"{NOISY}\"], prefix: noisy_, call_timeout: 60s }}\n",
        user_yaml("alice", &["admin"]),
        python()
    ))
}

/// Has the upstream write a stderr line of 9000 bytes and then more than a pipe holds;
/// waits for its last line in the log.
async fn long_stderr_line(gateway: &Gateway) {
    let answer = invoke(gateway, "alice", "noisy_long_stderr_line", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(
        answer.body.to_string().contains("stderr open"),
        "the upstream could not write all of its stderr: {}",
        answer.body
    );
    gateway
        .wait_for_log("after the long line", 1, Duration::from_secs(60))
        .await;
}

#[tokio::test]
async fn a_stderr_line_too_long_is_left_out_and_the_upstream_s_later_lines_are_relayed() {
    let test = "a_stderr_line_too_long_is_left_out_and_the_upstream_s_later_lines_are_relayed";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = gateway("info");
    long_stderr_line(&gateway).await;
    // Its stderr is still read: the same program writes and answers once more.
    long_stderr_line(&gateway).await;
    gateway
        .wait_for_log("after the long line", 2, Duration::from_secs(60))
        .await;
    let log = gateway.stderr();
    assert_eq!(
        log.matches("(a line of more than 8192 bytes was left out)")
            .count(),
        2,
        "{log}"
    );
    assert!(!log.contains(&"x".repeat(100)), "the long line was logged");
}

#[tokio::test]
async fn an_upstream_s_notifications_are_not_logged_one_by_one() {
    let test = "an_upstream_s_notifications_are_not_logged_one_by_one";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = gateway("info");
    let answer = invoke(&gateway, "alice", "noisy_notify", json!({"count": 100})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    // Whatever the notifications had logged was logged before this line.
    long_stderr_line(&gateway).await;
    let log = gateway.stderr();
    assert!(!log.contains("received notification"), "{log}");
    assert!(
        !log.contains("noisy-notification"),
        "what the upstream sent reached the log:\n{log}"
    );
}

#[tokio::test]
async fn a_filter_that_names_rmcp_still_shows_its_notification_lines() {
    let test = "a_filter_that_names_rmcp_still_shows_its_notification_lines";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = gateway("info,rmcp=info");
    let answer = invoke(&gateway, "alice", "noisy_notify", json!({"count": 3})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    gateway
        .wait_for_log("received notification", 3, Duration::from_secs(60))
        .await;
}
