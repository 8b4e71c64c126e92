//! `tools/call` of a streamable HTTP session answered in the task of its HTTP request
//! (`server/direct.rs`), next to the same session's calls through rmcp: the server in
//! process, behind axum on an ephemeral loopback port, driven by raw HTTP.
//!
//! Which way a call went shows on its stream: rmcp starts a request's stream with a
//! priming event (`retry:`, with the default `sse_retry`); the direct answer has none.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, RawHttp, counting, wait_tool, within};
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::SessionConfig;
use serde_json::{Value, json};
use tokio::sync::Notify;
use toolgate_mcp::McpServer;

const VERSION: &str = "2025-06-18";

/// A server on loopback whose `wait` tool runs until its call is cancelled.
struct Served {
    url: String,
    /// Notified when a `wait` call ends: it saw its cancellation, or it was dropped.
    ended: Arc<Notify>,
    /// Notified when a `wait` call starts.
    waiting: Arc<Notify>,
    http: reqwest::Client,
}

async fn serve(keep_alive: Duration) -> Served {
    // A client that left is noticed at the next write: a comment every half second.
    serve_with(keep_alive, Duration::from_millis(500)).await
}

/// [`serve`], with a comment every `sse_keep_alive` on the stream of a call still running.
async fn serve_with(keep_alive: Duration, sse_keep_alive: Duration) -> Served {
    let ended = Arc::new(Notify::new());
    let waiting = Arc::new(Notify::new());
    let pipeline = counting()
        .tool(wait_tool(&waiting, &ended))
        .build()
        .expect("built");
    let mut sessions = SessionConfig::default();
    sessions.keep_alive = Some(keep_alive);
    let mut config = StreamableHttpServerConfig::default();
    config.sse_keep_alive = Some(sse_keep_alive);
    let service = McpServer::new(pipeline).http_service_with_sessions(config, sessions);
    let app = axum::Router::new().nest_service("/mcp", service);
    let url = format!("{}/mcp", common::serve_on_loopback(app).await);
    Served {
        url,
        ended,
        waiting,
        http: reqwest::Client::new(),
    }
}

impl Served {
    async fn post(&self, session: Option<&str>, body: &Value) -> reqwest::Response {
        self.raw().post(session, body).await
    }

    fn raw(&self) -> RawHttp<'_> {
        RawHttp {
            http: &self.http,
            url: &self.url,
            version: VERSION,
            bearer: None,
        }
    }

    /// A session: `initialize` declaring `capabilities`, then `initialized`.
    async fn session(&self, capabilities: Value) -> String {
        self.raw().session(capabilities, "direct-test").await
    }

    /// Calls `tool` in `session` (with `meta` as its `_meta`) and reads the whole answer.
    async fn call(&self, session: &str, id: u64, tool: &str, meta: Option<Value>) -> Answer {
        let mut params = json!({"name": tool, "arguments": {}});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let response = self.post(Some(session), &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let text = within(10, "the answer", response.text())
            .await
            .expect("read");
        Answer::parse(&text)
    }
}

/// The body of an answer sent in one piece: an SSE stream of known length, read whole.
async fn whole_body(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let length: usize = (response.headers().get("content-length"))
        .expect("a body of known length")
        .to_str()
        .expect("ascii")
        .parse()
        .expect("a length");
    let text = within(10, "the body", response.text()).await.expect("read");
    assert_eq!(text.len(), length);
    text
}

/// An answer's SSE stream, read whole.
struct Answer {
    /// Whether rmcp's priming event came first.
    primed: bool,
    /// The JSON-RPC message the stream carried.
    message: Value,
}

impl Answer {
    fn parse(text: &str) -> Answer {
        let primed = text.lines().any(|line| line.starts_with("retry:"));
        let message = text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .find(|data| !data.is_empty())
            .map(|data| serde_json::from_str(data).expect("JSON"))
            .unwrap_or_else(|| panic!("no message in {text:?}"));
        Answer { primed, message }
    }

    fn count(&self) -> u64 {
        self.message["result"]["structuredContent"]["result"]
            .as_u64()
            .or_else(|| {
                self.message["result"]["content"][0]["text"]
                    .as_str()
                    .and_then(|t| t.parse().ok())
            })
            .unwrap_or_else(|| panic!("no count in {}", self.message))
    }
}

#[tokio::test]
async fn a_call_that_needs_no_other_stream_is_answered_directly_in_the_same_session() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({})).await;

    let first = server.call(&session, 1, "count", None).await;
    assert!(!first.primed, "answered directly: {}", first.message);
    assert_eq!(first.message["id"], 1);
    assert_eq!(first.count(), 1);

    // Progress goes to the call's own stream: rmcp's.
    let progress = json!({"progressToken": "p-1"});
    let second = server.call(&session, 2, "count", Some(progress)).await;
    assert!(second.primed, "through rmcp: {}", second.message);
    assert_eq!(second.message["id"], 2);
    // One session, whichever way its calls go.
    assert_eq!(second.count(), 2);
    assert_eq!(server.call(&session, 3, "count", None).await.count(), 3);
}

#[tokio::test]
async fn a_client_that_can_be_asked_for_input_is_answered_through_rmcp() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    for capabilities in [
        json!({"elicitation": {}}),
        json!({"sampling": {}}),
        json!({"roots": {}}),
    ] {
        let session = server.session(capabilities.clone()).await;
        let answer = server.call(&session, 1, "count", None).await;
        assert!(answer.primed, "{capabilities}: {}", answer.message);
        assert_eq!(answer.count(), 1);
    }
    // As is a session that asked for log messages.
    let session = server.session(json!({})).await;
    let level = json!({"jsonrpc": "2.0", "id": 7, "method": "logging/setLevel",
        "params": {"level": "info"}});
    let response = server.post(Some(&session), &level).await;
    within(10, "setLevel", response.text()).await.expect("read");
    assert!(server.call(&session, 8, "count", None).await.primed);
}

#[tokio::test]
async fn notifications_cancelled_cancels_a_call_answered_directly() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({})).await;
    let started = server.waiting.notified();
    let body = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let waiting = server.post(Some(&session), &body).await;
    within(10, "the call starts", started).await;

    let ended = server.ended.notified();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 41, "reason": "changed my mind"}});
    let response = server.post(Some(&session), &cancel).await;
    assert!(response.status().is_success(), "{}", response.status());
    within(10, "the call ends", ended).await;
    // Its stream ends.
    within(10, "the stream ends", waiting.text())
        .await
        .expect("read");
}

#[tokio::test]
async fn a_call_stays_cancellable_when_a_request_reusing_its_id_is_refused() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({})).await;
    let started = server.waiting.notified();
    let body = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let waiting = server.post(Some(&session), &body).await;
    within(10, "the call starts", started).await;
    // The client reuses the id while the first call runs: that second call is refused.
    let reused = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "count", "arguments": {}}});
    let refused = server.post(Some(&session), &reused).await;
    assert_eq!(refused.status(), 400);

    let ended = server.ended.notified();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 41}});
    let response = server.post(Some(&session), &cancel).await;
    assert!(response.status().is_success(), "{}", response.status());
    within(10, "the waiting call ends", ended).await;
    within(10, "its stream ends", waiting.text())
        .await
        .expect("read");
}

#[tokio::test]
async fn ending_the_session_cancels_its_calls_answered_directly() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({})).await;
    let started = server.waiting.notified();
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let _waiting = server.post(Some(&session), &body).await;
    within(10, "the call starts", started).await;

    let ended = server.ended.notified();
    let response = within(
        10,
        "DELETE",
        server
            .http
            .delete(&server.url)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", VERSION)
            .send(),
    )
    .await
    .expect("answered");
    assert!(response.status().is_success(), "{}", response.status());
    within(10, "the call ends", ended).await;
}

#[tokio::test]
async fn a_client_that_leaves_cancels_its_call_answered_directly() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({})).await;
    let started = server.waiting.notified();
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let waiting = server.post(Some(&session), &body).await;
    within(10, "the call starts", started).await;
    let ended = server.ended.notified();
    // The client goes away without cancelling anything: it drops its connection.
    drop(waiting);
    drop(server.http);
    within(10, "the call ends", ended).await;
}

/// A call is awaited before the response's headers go out, until the first keep-alive
/// comment would be due: a client that leaves in that time cancels it too.
#[tokio::test]
async fn a_client_that_leaves_before_its_answer_began_cancels_its_call() {
    let server = serve_with(SessionConfig::DEFAULT_KEEP_ALIVE, Duration::from_secs(3600)).await;
    let session = server.session(json!({})).await;
    let started = server.waiting.notified();
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let http = server.http.clone();
    let request = server.raw().request(Some(&session), &body);
    let waiting = tokio::spawn(request.send());
    within(10, "the call starts", started).await;
    let ended = server.ended.notified();
    // No header has come back yet; the client drops its connection.
    assert!(!waiting.is_finished(), "the headers wait for the answer");
    waiting.abort();
    drop(http);
    drop(server.http);
    within(10, "the call ends", ended).await;
}

/// A call that ends before the first keep-alive comment would be due is answered with a
/// body of known length — its one event — so the response goes out in one piece.
#[tokio::test]
async fn a_call_that_ends_in_time_is_answered_with_its_event_as_the_whole_body() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "count", "arguments": {}}});
    let text = whole_body(server.post(Some(&session), &body).await).await;
    let data = text
        .strip_prefix("data: ")
        .and_then(|rest| rest.strip_suffix("\n\n"))
        .expect("one SSE event");
    let answer: Value = serde_json::from_str(data).expect("JSON-RPC");
    assert_eq!(answer["id"], 3);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
}

/// Through rmcp, a call's stream opens with a priming event; the response is held until
/// the answer follows it, so the headers, the priming event and the answer go out in one
/// body of known length rather than in two writes.
#[tokio::test]
async fn a_call_through_rmcp_is_answered_with_its_priming_event_in_one_body() {
    let server = serve(SessionConfig::DEFAULT_KEEP_ALIVE).await;
    let session = server.session(json!({"elicitation": {}})).await;
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "count", "arguments": {}}});
    let text = whole_body(server.post(Some(&session), &body).await).await;
    let answer = Answer::parse(&text);
    assert!(answer.primed, "through rmcp: {text}");
    assert_eq!(answer.message["id"], 4);
    assert_eq!(answer.count(), 1);
}

/// The hold ends with the keep-alive interval: a call through rmcp still running then has
/// its headers and priming event sent, and its answer streams after them.
#[tokio::test]
async fn a_long_call_through_rmcp_has_its_headers_sent_after_the_keep_alive_interval() {
    let server = serve_with(
        SessionConfig::DEFAULT_KEEP_ALIVE,
        Duration::from_millis(200),
    )
    .await;
    let session = server.session(json!({"elicitation": {}})).await;
    let started = server.waiting.notified();
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let response = server.post(Some(&session), &body).await;
    within(10, "the call starts", started).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("content-length").is_none(),
        "the stream goes on while the call runs"
    );
    // The call still runs: the client leaves, which cancels it.
    let ended = server.ended.notified();
    drop(response);
    within(10, "the call ends", ended).await;
}

/// rmcp closes a session that exchanged no message within its keep-alive; calls answered
/// directly do not reach it, so some go through rmcp to keep the session open.
#[tokio::test]
async fn a_session_answered_directly_stays_open_past_rmcps_keep_alive() {
    let keep_alive = Duration::from_secs(2);
    let server = serve(keep_alive).await;
    let session = server.session(json!({})).await;
    let until = tokio::time::Instant::now() + keep_alive * 3;
    let (mut n, mut through_rmcp) = (0, 0);
    while tokio::time::Instant::now() < until {
        n += 1;
        let answer = server.call(&session, n, "count", None).await;
        assert_eq!(answer.count(), n, "the session lives on");
        through_rmcp += u64::from(answer.primed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(through_rmcp >= 1, "some calls renew the session at rmcp");
    assert!(through_rmcp < n / 2, "{through_rmcp} of {n} through rmcp");
}
