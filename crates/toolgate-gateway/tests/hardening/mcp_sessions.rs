//! An MCP session belongs to the user who opened it: another user's key cannot use it or
//! end it, and learns nothing about whether it exists.

use reqwest::Method;
use serde_json::json;

use crate::common::{Gateway, mcp, open_session, user_yaml};

fn config() -> String {
    format!(
        "tools:\n  builtin: [echo]\nusers:\n{}{}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["admin"])
    )
}

fn tools_list() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
}

#[tokio::test]
async fn another_user_cannot_use_or_end_a_session_and_is_told_it_is_unknown() {
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;

    let (status, _, used) = mcp(
        &gateway,
        Method::POST,
        "bob",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 404, "bob used alice's session: {used}");
    let (status, _, ended) = mcp(&gateway, Method::DELETE, "bob", Some(&session), None).await;
    assert_eq!(status, 404, "bob ended alice's session: {ended}");
    let (status, _, unknown) = mcp(
        &gateway,
        Method::POST,
        "bob",
        Some("no-such-session"),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 404, "{unknown}");
    assert_eq!(used, unknown, "a foreign session must look unknown");
    assert_eq!(ended, unknown, "a foreign session must look unknown");

    let (status, _, text) = mcp(
        &gateway,
        Method::POST,
        "alice",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 200, "alice's session survives bob: {text}");
    assert!(text.contains("echo"), "{text}");
}

#[tokio::test]
async fn ending_an_unknown_session_is_404() {
    let gateway = Gateway::start(&config());
    let (status, _, text) = mcp(
        &gateway,
        Method::DELETE,
        "alice",
        Some("no-such-session"),
        None,
    )
    .await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("unknown_session"), "{text}");
}

#[tokio::test]
async fn the_owner_ends_a_session_with_204_and_it_is_gone() {
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;
    let (status, _, text) = mcp(&gateway, Method::DELETE, "alice", Some(&session), None).await;
    assert!(status == 200 || status == 204, "({status}) {text}");
    let (status, _, text) = mcp(
        &gateway,
        Method::POST,
        "alice",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 404, "an ended session is unknown: {text}");
}

#[tokio::test]
async fn an_unknown_method_in_a_session_leaves_the_session_open() {
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;
    let unknown = json!({"jsonrpc": "2.0", "id": 5, "method": "no/such_method"});
    let (status, _, text) = mcp(
        &gateway,
        Method::POST,
        "alice",
        Some(&session),
        Some(unknown),
    )
    .await;
    assert!(!text.contains("unknown_session"), "({status}) {text}");
    let (status, _, text) = mcp(
        &gateway,
        Method::POST,
        "alice",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(
        status, 200,
        "the session survives an unknown method: {text}"
    );
}

#[tokio::test]
async fn a_reload_keeps_mcp_sessions_and_they_see_the_new_configuration() {
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;
    let (status, _, before) = mcp(
        &gateway,
        Method::POST,
        "alice",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 200, "{before}");
    assert!(!before.contains("\"calculator\""), "{before}");

    let reloaded = config().replace("builtin: [echo]", "builtin: [echo, calculator]");
    std::fs::write(&gateway.config, reloaded).unwrap();
    gateway.reload(1).await;

    let (status, _, after) = mcp(
        &gateway,
        Method::POST,
        "alice",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 200, "the session outlives the reload: {after}");
    assert!(
        after.contains("\"calculator\""),
        "and serves the new configuration: {after}"
    );
    // Still bound to its owner.
    let (status, _, body) = mcp(
        &gateway,
        Method::POST,
        "bob",
        Some(&session),
        Some(tools_list()),
    )
    .await;
    assert_eq!(status, 404, "{body}");
}
