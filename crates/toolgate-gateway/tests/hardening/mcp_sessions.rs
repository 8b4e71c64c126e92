//! An MCP session belongs to the user who opened it: another user's key cannot use it or
//! end it, and learns nothing about whether it exists.

use std::io::Write;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::common::{
    Gateway, client, eventually, key, mcp, metric, open_session, rpc_answer, user_yaml,
};

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

/// What rmcp logs (at `info`, under this target) for each session it opens.
const RMCP_SESSIONS: &str = "rmcp::transport::streamable_http_server::session::local";

/// What the MCP server logs (at `debug`) when it closes the session of an `initialize`
/// whose client left before the answer.
const CLOSED_UNANSWERED: &str = "closing the MCP session of an `initialize` whose client left";

/// Sends `initialize` to `/mcp` as `user` on a connection of its own and hangs up at once,
/// without reading a byte of the answer.
fn initialize_and_hang_up(gateway: &Gateway, user: &str) {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "gone", "version": "1"}}
    })
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        key(user),
        body.len()
    );
    let address = gateway.base.trim_start_matches("http://");
    let mut connection = std::net::TcpStream::connect(address).expect("connecting");
    connection.write_all(request.as_bytes()).expect("sending");
    drop(connection);
}

#[tokio::test]
async fn an_initialize_whose_client_hangs_up_leaves_no_session_the_gateway_does_not_count() {
    const PER_USER: usize = 2;
    // Enough, from a few connections at once, that some hang-ups reach the gateway while
    // the MCP server is still opening the session (as a flood does), whatever the machine.
    const THREADS: usize = 4;
    const EACH: usize = 50;
    let yaml = format!(
        "server:\n  mcp_sessions:\n    per_user: {PER_USER}\nlogging:\n  level: \"info,{RMCP_SESSIONS}=info,toolgate_mcp=debug\"\n{}",
        config()
    );
    let gateway = Gateway::start(&yaml);
    std::thread::scope(|threads| {
        for _ in 0..THREADS {
            threads.spawn(|| {
                for _ in 0..EACH {
                    initialize_and_hang_up(&gateway, "alice");
                }
            });
        }
    });
    // Every session rmcp opened for them is closed at once, or held by alice and counted
    // against her cap (and closed when refused past it): none is left to rmcp's keep-alive.
    let accounted = || async {
        let metrics = gateway.metrics().await;
        let held = metric(&metrics, "toolgate_mcp_sessions", &[]) as usize;
        let refused = metric(&metrics, "toolgate_mcp_sessions_refused_total", &[]) as usize;
        let log = gateway.stderr();
        let opened = log.matches("create new session").count();
        let closed = log.matches(CLOSED_UNANSWERED).count();
        (opened, held + refused + closed)
    };
    let wait = Duration::from_secs(30);
    eventually(
        "rmcp opened sessions for the hung-up initialize requests",
        wait,
        || async { accounted().await.0 > 0 },
    )
    .await;
    // Until the count holds twice, a little apart: no session is still being opened.
    let deadline = std::time::Instant::now() + wait;
    let mut before = None;
    loop {
        let (opened, counted) = accounted().await;
        if opened == counted && before == Some(opened) {
            break;
        }
        before = (opened == counted).then_some(opened);
        assert!(
            std::time::Instant::now() < deadline,
            "rmcp opened {opened} sessions, the gateway closed or counted {counted}:\n{}",
            gateway.stderr()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let held = metric(&gateway.metrics().await, "toolgate_mcp_sessions", &[]) as usize;
    assert!(held <= PER_USER, "alice holds {held} sessions");
}

#[tokio::test]
async fn an_initialize_whose_params_do_not_read_is_invalid_params_naming_what_is_wrong() {
    let gateway = Gateway::start(&config());
    let client_info = json!({"name": "x", "version": "1"});
    for (params, says) in [
        (json!({}), "`protocolVersion` is missing"),
        (
            json!({"protocolVersion": 5, "capabilities": {}, "clientInfo": client_info}),
            "`protocolVersion` must be the revision of MCP the client speaks, a string such as \"2025-11-25\", not a number",
        ),
        (
            json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": 5}, "clientInfo": client_info}),
            "`capabilities.sampling` must be an object",
        ),
    ] {
        let initialize =
            json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": params});
        let (status, issued, text) =
            mcp(&gateway, Method::POST, "alice", None, Some(initialize)).await;
        assert_eq!(status, 400, "{text}");
        assert!(issued.is_none(), "a session was opened: {text}");
        let answer = rpc_answer(&text);
        assert_eq!(answer["id"], 7, "{text}");
        assert_eq!(answer["error"]["code"], -32602, "{text}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("malformed `initialize` request: "),
            "{text}"
        );
        assert!(message.contains(says), "{text}");
    }
}

#[tokio::test]
async fn an_unsupported_protocol_version_header_is_a_json_rpc_error_naming_the_versions() {
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "x", "version": "1"}}
    });
    for (session, body) in [(Some(&session), tools_list()), (None, initialize)] {
        let id = body["id"].clone();
        let mut request = client()
            .post(gateway.url("/mcp"))
            .bearer_auth(key("alice"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "1999-01-01")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.expect("the gateway answers");
        assert_eq!(response.status(), 400);
        let answer: serde_json::Value = response.json().await.expect("JSON");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["id"], id, "the request's own id: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], -32022, "{answer}");
        assert_eq!(error["data"]["requested"], "1999-01-01", "{answer}");
        let supported = error["data"]["supported"].as_array().expect("the versions");
        assert!(supported.contains(&json!("2025-11-25")), "{answer}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("send one it speaks"), "{answer}");
    }
}
