//! An MCP session belongs to the user who opened it: another user's key cannot use it or
//! end it, and learns nothing about whether it exists.

use reqwest::Method;
use serde_json::json;

use crate::common::{Gateway, client, key, user_yaml};

fn config() -> String {
    format!(
        "tools:\n  builtin: [echo]\nusers:\n{}{}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["admin"])
    )
}

/// Sends `body` (or nothing) to `/mcp` as `user`, in `session` if given; the status, the
/// session id the answer carries and the answer's text.
pub(crate) async fn mcp(
    gateway: &Gateway,
    method: Method,
    user: &str,
    session: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, Option<String>, String) {
    let mut request = client()
        .request(method, gateway.url("/mcp"))
        .bearer_auth(key(user))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.expect("the gateway answers");
    let status = response.status().as_u16();
    let issued = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.expect("the answer's body");
    (status, issued, text)
}

/// Opens a session as `user`; its id.
pub(crate) async fn open_session(gateway: &Gateway, user: &str) -> String {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}
    });
    let (status, issued, text) = mcp(gateway, Method::POST, user, None, Some(initialize)).await;
    assert_eq!(status, 200, "{text}");
    let session = issued.expect("initialize issues a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, text) = mcp(
        gateway,
        Method::POST,
        user,
        Some(&session),
        Some(initialized),
    )
    .await;
    assert!((200..300).contains(&status), "({status}) {text}");
    session
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
