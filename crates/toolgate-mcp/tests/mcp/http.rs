//! The MCP server over streamable HTTP on an ephemeral loopback port (the demo server in
//! a child process), driven by the rmcp client — and by raw HTTP where a test needs to
//! drop a connection or send what the rmcp client would not.

use crate::common;

use std::time::Duration;

use crate::common::{
    HttpDemo, RawHttp, call, call_until_ok, http_client, is_error, scenarios, text, within,
};
use serde_json::{Value, json};

const ACCEPT: &str = "application/json, text/event-stream";
const VERSION: &str = "2025-06-18";

#[tokio::test]
async fn http_lists_tools_with_schemas_and_annotations_filtered_per_principal() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::list_shows_schemas_and_annotations_and_hides_admin_tools(&client).await;

    let admin = http_client(&server.url, Some("ann"), Some("admin")).await;
    let tools = within(20, "tools/list", admin.peer().list_all_tools())
        .await
        .expect("listed");
    assert!(
        tools.iter().any(|t| t.name == "admin_stats"),
        "an admin sees admin_stats"
    );
}

#[tokio::test]
async fn http_call_returns_structured_content_and_sees_the_principal() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::call_returns_structured_content_for_an_object_output(&client).await;
    let result = call(&client, "whoami", json!({})).await.expect("answered");
    assert_eq!(text(&result), "bob");
}

#[tokio::test]
async fn http_invalid_arguments_are_a_tool_error() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::invalid_arguments_are_a_tool_error_naming_the_argument(&client).await;
}

#[tokio::test]
async fn http_policy_denial_is_a_tool_error() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::policy_denial_is_a_tool_error_with_the_reason(&client).await;
    let operator = http_client(&server.url, Some("olga"), Some("operator")).await;
    let result = call(&operator, "delete_all", json!({}))
        .await
        .expect("answered");
    assert_eq!(text(&result), "deleted nothing");
}

#[tokio::test]
async fn http_rate_limit_answers_with_retry_after() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::rate_limit_answers_with_the_retry_after_delay(&client).await;
    // The limit is per principal: another user still has calls left.
    let other = http_client(&server.url, Some("eve"), None).await;
    let result = call(&other, "metered_ping", json!({}))
        .await
        .expect("answered");
    assert_eq!(text(&result), "pong");
}

#[tokio::test]
async fn http_unknown_tool_is_a_json_rpc_error() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::unknown_and_hidden_tools_are_protocol_errors(&client).await;
}

#[tokio::test]
async fn http_session_is_the_session_scope() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    let other = http_client(&server.url, Some("bob"), None).await;
    scenarios::calls_of_one_connection_share_its_session(&client, &other).await;
}

#[tokio::test]
async fn http_cancellation_notification_releases_the_concurrency_permit() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let client = http_client(&server.url, Some("bob"), None).await;
    scenarios::cancelled_call_releases_its_concurrency_permit(&client).await;
}

/// Raw requests to `url` as the principal `raw`.
fn raw<'a>(http: &'a reqwest::Client, url: &'a str) -> RawHttp<'a> {
    RawHttp {
        http,
        url,
        version: VERSION,
        bearer: Some("raw"),
    }
}

/// A raw MCP session over HTTP: initialize, then `initialized`.
async fn raw_session(http: &reqwest::Client, url: &str) -> String {
    raw(http, url).session(json!({}), "raw-test").await
}

/// A `POST` in `session`, its headers awaited without a bound (a long call's come late).
async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let request = raw(http, url).request(session, body);
    request.send().await.expect("the server answers")
}

#[tokio::test]
async fn http_client_disconnect_cancels_the_call_and_releases_its_permit() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let observer = http_client(&server.url, Some("bob"), None).await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client");
    let session = raw_session(&http, &server.url).await;

    // The long call holds the only permit: the observer is refused (the observer's
    // probe may take the permit first; then the long call is refused and sent again).
    let mut id = 1;
    let (response, refused) = within(10, "the long call holds the permit", async {
        loop {
            id += 1;
            let long = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"ms": 120_000}}});
            let mut response = post(&http, &server.url, Some(&session), &long).await;
            assert!(response.status().is_success(), "{}", response.status());
            // A refused call is answered at once; a running one only sends SSE comments
            // and priming events.
            if answered_within(&mut response, Duration::from_millis(300)).await {
                continue;
            }
            let probe = call(&observer, "slow", json!({"ms": 1}))
                .await
                .expect("answered");
            if is_error(&probe) {
                break (response, probe);
            }
        }
    })
    .await;
    assert!(
        text(&refused).starts_with("too many concurrent calls"),
        "{}",
        text(&refused)
    );

    // The client goes away without cancelling anything: it just drops the connection.
    drop(response);
    drop(http);
    let result = call_until_ok(&observer, "slow", json!({"ms": 1}), 10).await;
    assert_eq!(text(&result), "worked 1 ms");
}

/// Whether a JSON-RPC answer arrives on an SSE response within `wait`.
async fn answered_within(response: &mut reqwest::Response, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    let mut seen = String::new();
    while let Ok(chunk) = tokio::time::timeout_at(deadline, response.chunk()).await {
        match chunk.expect("readable") {
            Some(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            None => return true,
        }
        if seen.contains("\"jsonrpc\"") {
            return true;
        }
    }
    false
}

#[tokio::test]
async fn http_arguments_that_are_not_an_object_are_a_json_rpc_error() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let http = reqwest::Client::new();
    let session = raw_session(&http, &server.url).await;
    let bad = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "echo", "arguments": "not an object"}});
    let response = within(
        10,
        "malformed tools/call",
        post(&http, &server.url, Some(&session), &bad),
    )
    .await;
    let status = response.status();
    let body = within(10, "the answer", response.text())
        .await
        .expect("readable");
    let error = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .chain(serde_json::from_str::<Value>(&body).ok())
        .find(|m| m.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC error in the answer ({status}): {body}"));
    let code = error["error"]["code"].as_i64().expect("a code");
    assert!([-32602, -32600, -32700].contains(&code), "{error}");
    assert!(error.get("result").is_none());
}

#[tokio::test]
async fn http_a_body_that_is_not_json_is_a_400_json_rpc_parse_error() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let response = within(
        10,
        "a malformed POST",
        reqwest::Client::new()
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("authorization", "Bearer raw")
            .body(r#"{"jsonrpc": "2.0", "id": 1, "method""#)
            .send(),
    )
    .await
    .expect("the server answers");
    assert_eq!(response.status().as_u16(), 400);
    let text = within(10, "the answer", response.text())
        .await
        .expect("readable");
    let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
}

/// The JSON-RPC answers in `body`, a JSON answer or an SSE stream's events.
fn answers_in(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .chain(serde_json::from_str::<Value>(body).ok())
        .filter(|m| m.get("id").is_some())
        .collect()
}

#[tokio::test]
async fn http_a_number_too_large_or_a_lone_surrogate_is_a_400_naming_it_with_the_request_s_id() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let http = reqwest::Client::new();
    for (body, id, says) in [
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"x":1e400}}}"#,
            json!(3),
            "a number in the message is too large to read (`1e400`)",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"echo","arguments":{"x":"\ud800"}}}"#,
            json!("s"),
            "the escape `\\ud800`, half of a UTF-16 surrogate pair",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
            Value::Null,
            "too large to read",
        ),
    ] {
        let response = within(
            10,
            "a POST with an unreadable value",
            http.post(&server.url)
                .header("content-type", "application/json")
                .header("accept", ACCEPT)
                .header("authorization", "Bearer raw")
                .body(body)
                .send(),
        )
        .await
        .expect("the server answers");
        assert_eq!(response.status().as_u16(), 400, "{body}");
        let text = within(10, "the answer", response.text())
            .await
            .expect("readable");
        let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message:?} does not say {says:?}");
    }
}

#[tokio::test]
async fn http_a_second_initialize_in_a_session_is_refused_and_the_session_goes_on() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let http = reqwest::Client::new();
    let session = raw_session(&http, &server.url).await;
    let again = json!({"jsonrpc": "2.0", "id": 5, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
            "capabilities": {"sampling": {}, "elicitation": {}},
            "clientInfo": {"name": "someone else", "version": "2"}}});
    let response = post(&http, &server.url, Some(&session), &again).await;
    let body = within(10, "the answer", response.text())
        .await
        .expect("readable");
    let answer = answers_in(&body)
        .into_iter()
        .find(|m| m["id"] == 5)
        .unwrap_or_else(|| panic!("no answer to the second initialize: {body}"));
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("this connection is already initialized"),
        "{message}"
    );
    let ping = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"});
    let response = post(&http, &server.url, Some(&session), &ping).await;
    let body = within(10, "the answer", response.text())
        .await
        .expect("readable");
    assert!(
        answers_in(&body)
            .iter()
            .any(|m| m["id"] == 6 && m["result"].is_object()),
        "the session goes on: {body}"
    );
}

#[tokio::test]
async fn http_an_invalid_request_s_id_is_echoed_only_when_json_rpc_allows_it() {
    let server = HttpDemo::start("127.0.0.1:0", &[]).await;
    let http = reqwest::Client::new();
    for (id, echoed) in [
        ("7", json!(7)),
        (r#""seven""#, json!("seven")),
        ("1.5", Value::Null),
        ("123456789012345678901234567890", Value::Null),
        ("{\"an\": \"object\"}", Value::Null),
    ] {
        // JSON, but not a JSON-RPC message: `method` is a number.
        let body = format!(r#"{{"jsonrpc": "2.0", "id": {id}, "method": 5}}"#);
        let response = within(
            10,
            "an invalid request",
            http.post(&server.url)
                .header("content-type", "application/json")
                .header("accept", ACCEPT)
                .header("authorization", "Bearer raw")
                .body(body)
                .send(),
        )
        .await
        .expect("the server answers");
        assert_eq!(response.status().as_u16(), 400, "id {id}");
        let answer: Value = serde_json::from_str(
            &within(10, "the answer", response.text())
                .await
                .expect("readable"),
        )
        .expect("a JSON answer");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        assert_eq!(answer["id"], echoed, "id {id}: {answer}");
    }
}

#[tokio::test]
async fn http_a_session_is_its_openers_and_anyone_else_is_told_it_does_not_exist() {
    use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    use toolgate_core::User;

    // A host that serves MCP itself, naming the caller by its bearer token, with a
    // counter kept in each session's scope.
    let server = toolgate_mcp::McpServer::new(common::counting().build().expect("built")).identify(
        |parts| {
            let bearer = parts.headers.get("authorization")?.to_str().ok()?;
            Some(User::new(bearer.strip_prefix("Bearer ")?))
        },
    );
    let app = axum::Router::new().nest_service(
        "/mcp",
        server.http_service(StreamableHttpServerConfig::default()),
    );
    let url = format!("{}/mcp", common::serve_on_loopback(app).await);
    let http = reqwest::Client::new();
    let as_user = |bearer| RawHttp {
        http: &http,
        url: &url,
        version: VERSION,
        bearer: Some(bearer),
    };
    let (alice, bob) = (as_user("alice"), as_user("bob"));
    let session = alice.session(json!({}), "alice").await;
    let count = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "count", "arguments": {}}});
    let counted = |response: reqwest::Response| async move {
        assert_eq!(response.status(), 200);
        let body = within(10, "the answer", response.text())
            .await
            .expect("read");
        answers_in(&body)[0]["result"]["content"][0]["text"].clone()
    };
    assert_eq!(counted(alice.post(Some(&session), &count).await).await, "1");

    // Bob, with alice's session id: a call, the stream, the end of the session.
    let refused = [
        bob.post(Some(&session), &count).await,
        http.get(&url)
            .bearer_auth("bob")
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .send()
            .await
            .expect("answered"),
        http.delete(&url)
            .bearer_auth("bob")
            .header("mcp-session-id", &session)
            .send()
            .await
            .expect("answered"),
    ];
    let never_issued = bob.post(Some("no-such-session"), &count).await;
    let unknown = (never_issued.status(), never_issued.text().await.unwrap());
    for response in refused {
        assert_eq!((response.status(), response.text().await.unwrap()), unknown);
    }
    assert_eq!(unknown.0, 404);

    // Alice's session goes on, its count hers alone; once she ends it, it is gone.
    assert_eq!(counted(alice.post(Some(&session), &count).await).await, "2");
    let ended = http
        .delete(&url)
        .bearer_auth("alice")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("answered");
    assert!(ended.status().is_success(), "{}", ended.status());
    assert_eq!(alice.post(Some(&session), &count).await.status(), 404);
}
