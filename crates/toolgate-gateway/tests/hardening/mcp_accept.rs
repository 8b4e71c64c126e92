//! `/mcp` reads `Accept` as RFC 9110 does: `*/*` (curl's default, and many HTTP
//! libraries') accepts the JSON and event-stream answers of MCP, so a client that sends it
//! is served; a client that refuses one of them with `q=0`, or names only one, is answered
//! 406 `not_acceptable` with what to send instead.

use serde_json::{Value, json};

use crate::common::{Answer, Gateway, key, mcp_request, rpc_answer, user_yaml};

fn config() -> String {
    format!(
        "tools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    )
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "curl-like", "version": "0"}}
    })
}

/// Sends `method` to `/mcp` as alice with `accept`, in `session` if given, with `body` if
/// given.
async fn send(
    gateway: &Gateway,
    method: reqwest::Method,
    accept: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> reqwest::Response {
    mcp_request(gateway, method, &key("alice"), accept, session, body)
        .send()
        .await
        .expect("the gateway answers")
}

/// POSTs `body` with `accept`: the status, the session id the answer carries, its text.
async fn post(
    gateway: &Gateway,
    accept: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, Option<String>, String) {
    let response = send(gateway, reqwest::Method::POST, accept, session, Some(body)).await;
    let status = response.status().as_u16();
    let issued = response
        .headers()
        .get("mcp-session-id")
        .and_then(|id| id.to_str().ok())
        .map(str::to_owned);
    (status, issued, response.text().await.expect("the answer"))
}

#[tokio::test]
async fn a_client_accepting_anything_opens_a_session_and_lists_the_tools() {
    let gateway = Gateway::start(&config());
    let (status, session, text) = post(&gateway, "*/*", None, initialize()).await;
    assert_eq!(status, 200, "{text}");
    let session = session.expect("initialize issues a session id");
    assert!(
        rpc_answer(&text)["result"]["serverInfo"].is_object(),
        "{text}"
    );

    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, text) = post(&gateway, "*/*", Some(&session), initialized).await;
    assert!((200..300).contains(&status), "({status}) {text}");

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, _, text) = post(&gateway, "*/*", Some(&session), list).await;
    assert_eq!(status, 200, "{text}");
    let tools = rpc_answer(&text)["result"]["tools"].clone();
    let names: Vec<_> = tools
        .as_array()
        .unwrap_or_else(|| panic!("no tool list: {text}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names, ["echo"], "{text}");

    // The session's own stream, with wildcards only.
    let stream = send(
        &gateway,
        reqwest::Method::GET,
        "application/*, text/*",
        Some(&session),
        None,
    )
    .await;
    assert_eq!(stream.status().as_u16(), 200);
    let kind = stream.headers().get("content-type").cloned();
    assert!(
        kind.as_ref()
            .is_some_and(|kind| kind.as_bytes().starts_with(b"text/event-stream")),
        "{kind:?}"
    );
}

#[tokio::test]
async fn an_accept_refusing_one_of_the_types_is_answered_406_with_what_to_send() {
    let gateway = Gateway::start(&config());
    for accept in [
        "application/json",
        "*/*, text/event-stream;q=0",
        "application/json, text/*;q=0",
    ] {
        let response = send(
            &gateway,
            reqwest::Method::POST,
            accept,
            None,
            Some(initialize()),
        )
        .await;
        let answer = Answer::read(response).await;
        assert_eq!(answer.status, 406, "{accept}: {}", answer.body);
        assert_eq!(answer.error_code(), "not_acceptable", "{}", answer.body);
        let message = answer.error_message();
        assert!(
            message.contains("`Accept: application/json, text/event-stream`"),
            "{accept}: {message}"
        );
    }
    let refused = send(&gateway, reqwest::Method::GET, "*/*;q=0", None, None).await;
    let answer = Answer::read(refused).await;
    assert_eq!(answer.status, 406, "{}", answer.body);
    assert!(
        answer
            .error_message()
            .contains("`Accept: text/event-stream`"),
        "{}",
        answer.body
    );
}
