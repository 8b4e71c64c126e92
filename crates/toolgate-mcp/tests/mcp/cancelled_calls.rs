//! A call its client cancels with `notifications/cancelled` is stopped and not answered
//! (MCP, basic/utilities/cancellation: the receiver SHOULD NOT send a response for it),
//! on each way toolgate serves it: over a byte stream (stdio), and in a streamable HTTP
//! session through rmcp or answered in the task of its HTTP request. A call cut any other
//! way — a timeout, the host's shutdown — is still answered.
//!
//! Driven by raw JSON-RPC, as a client of no SDK would: an SDK hides what arrives for a
//! request it cancelled.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{RawHttp, serve_on_loopback, wait_tool, within};
use rmcp::transport::StreamableHttpServerConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::sync::Notify;
use toolgate_core::Pipeline;
use toolgate_mcp::McpServer;

/// The id of the call that is cancelled.
const CANCELLED: u64 = 41;

/// A server whose `wait` tool runs until its call is cancelled.
struct Waiting {
    server: McpServer,
    /// Notified when a `wait` call starts.
    started: Arc<Notify>,
    /// Notified when a `wait` call ends: its work stopped.
    ended: Arc<Notify>,
}

fn waiting(timeout: Option<Duration>) -> Waiting {
    let (started, ended) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let pipeline = Pipeline::builder()
        .tool(wait_tool(&started, &ended))
        .build()
        .expect("built");
    let mut server = McpServer::new(pipeline);
    if let Some(timeout) = timeout {
        server = server.call_timeout(timeout);
    }
    Waiting {
        server,
        started,
        ended,
    }
}

fn wait_call(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}})
}

fn cancel(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "changed my mind"}})
}

/// A client over a pair of pipes, as over stdin and stdout, writing and reading lines.
struct Lined {
    to_server: DuplexStream,
    from_server: Lines<BufReader<DuplexStream>>,
}

impl Lined {
    async fn start(server: McpServer) -> Lined {
        let (to_server, server_reads) = tokio::io::duplex(64 * 1024);
        let (server_writes, from_server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move { server.serve_io(server_reads, server_writes).await });
        let mut client = Lined {
            to_server,
            from_server: BufReader::new(from_server).lines(),
        };
        client
            .send(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "cancel-test", "version": "1"}}}),
            )
            .await;
        assert_eq!(client.next().await["id"], 1);
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    async fn send(&mut self, message: &Value) {
        let line = format!("{message}\n");
        within(
            10,
            "writing a line",
            self.to_server.write_all(line.as_bytes()),
        )
        .await
        .expect("the server reads");
    }

    async fn next(&mut self) -> Value {
        let line = within(10, "the server's next line", self.from_server.next_line())
            .await
            .expect("readable")
            .expect("the server writes");
        serde_json::from_str(&line).expect("JSON")
    }

    /// Pings with `id` and returns every message that came before its answer.
    async fn until_pong(&mut self, id: u64) -> Vec<Value> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .await;
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            if message["id"] == id && message.get("method").is_none() {
                assert_eq!(message["result"], json!({}), "{message}");
                return before;
            }
            before.push(message);
        }
    }
}

/// The messages among `messages` that answer request `id`.
fn answers(messages: &[Value], id: u64) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m["id"] == id && m.get("method").is_none())
        .collect()
}

#[tokio::test]
async fn a_call_cancelled_over_stdio_is_stopped_and_not_answered() {
    let served = waiting(None);
    let (started, ended) = (served.started.notified(), served.ended.notified());
    let mut client = Lined::start(served.server).await;
    client.send(&wait_call(CANCELLED)).await;
    within(10, "the call starts", started).await;

    client.send(&cancel(CANCELLED)).await;
    within(10, "the call's work stops", ended).await;
    // Whatever the call's end would send has had the time to come.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = client.until_pong(2).await;
    assert!(answers(&before, CANCELLED).is_empty(), "{before:?}");
}

/// A server behind axum on a loopback port, and a raw client of the 2025-11-25 revision.
struct OverHttp {
    url: String,
    http: reqwest::Client,
}

impl OverHttp {
    async fn start(server: &McpServer) -> OverHttp {
        let mut config = StreamableHttpServerConfig::default();
        config.sse_keep_alive = Some(Duration::from_millis(200));
        let service = server.http_service(config);
        let app = axum::Router::new().nest_service("/mcp", service);
        let url = format!("{}/mcp", serve_on_loopback(app).await);
        OverHttp {
            url,
            http: reqwest::Client::new(),
        }
    }

    fn raw(&self) -> RawHttp<'_> {
        RawHttp {
            http: &self.http,
            url: &self.url,
            version: "2025-11-25",
            bearer: None,
        }
    }

    /// The JSON-RPC messages of an SSE body.
    fn messages(body: &str) -> Vec<Value> {
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .filter(|data| !data.is_empty())
            .map(|data| serde_json::from_str(data).expect("JSON"))
            .collect()
    }

    /// Pings in `session`: the ping's answer.
    async fn ping(&self, session: &str, id: u64) -> Value {
        let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        let response = self.raw().post(Some(session), &ping).await;
        let body = within(10, "the ping's answer", response.text())
            .await
            .expect("read");
        let messages = Self::messages(&body);
        let pong = messages.first().cloned().unwrap_or_else(|| {
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("no answer in {body:?}"))
        });
        assert_eq!(pong["id"], id, "{pong}");
        pong
    }
}

/// Cancels a `wait` call in a session declaring `capabilities` and asserts its stream ends
/// without an answer, its work stopped, and the session goes on.
async fn cancelled_in_a_session_is_not_answered(capabilities: Value) {
    let served = waiting(None);
    let http = OverHttp::start(&served.server).await;
    let session = http.raw().session(capabilities, "cancel-test").await;
    let started = served.started.notified();
    let call = http.raw().post(Some(&session), &wait_call(CANCELLED)).await;
    assert_eq!(call.status(), 200);
    within(10, "the call starts", started).await;

    let ended = served.ended.notified();
    let response = http.raw().post(Some(&session), &cancel(CANCELLED)).await;
    assert!(response.status().is_success(), "{}", response.status());
    within(10, "the call's work stops", ended).await;
    let body = within(10, "the call's stream ends", call.text())
        .await
        .expect("read");
    let messages = OverHttp::messages(&body);
    assert!(answers(&messages, CANCELLED).is_empty(), "{body:?}");
    assert_eq!(http.ping(&session, 2).await["result"], json!({}));
}

/// Through rmcp: a client that can be asked for input is served by rmcp's session.
#[tokio::test]
async fn a_call_cancelled_in_an_http_session_through_rmcp_is_stopped_and_not_answered() {
    cancelled_in_a_session_is_not_answered(json!({"elicitation": {}})).await;
}

/// Answered in the task of its HTTP request (`server/direct.rs`).
#[tokio::test]
async fn a_call_cancelled_in_an_http_session_answered_directly_is_stopped_and_not_answered() {
    cancelled_in_a_session_is_not_answered(json!({})).await;
}

/// A timeout is the server's own cut, not the client's: the client is told.
#[tokio::test]
async fn a_call_past_its_timeout_is_still_answered_in_an_http_session() {
    for capabilities in [json!({}), json!({"elicitation": {}})] {
        let served = waiting(Some(Duration::from_millis(200)));
        let http = OverHttp::start(&served.server).await;
        let session = http
            .raw()
            .session(capabilities.clone(), "cancel-test")
            .await;
        let call = http.raw().post(Some(&session), &wait_call(7)).await;
        let body = within(10, "the answer", call.text()).await.expect("read");
        let messages = OverHttp::messages(&body);
        let answer = answers(&messages, 7);
        assert_eq!(answer.len(), 1, "{capabilities}: {body:?}");
        assert_eq!(answer[0]["result"]["isError"], true, "{}", answer[0]);
    }
}

#[tokio::test]
async fn a_call_past_its_timeout_is_still_answered_over_stdio() {
    let served = waiting(Some(Duration::from_millis(200)));
    let mut client = Lined::start(served.server).await;
    client.send(&wait_call(7)).await;
    let answer = client.next().await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
}
