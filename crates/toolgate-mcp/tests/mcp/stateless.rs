//! `tools/call` of the 2026-07-28 revision answered in the task of its HTTP request
//! (`server/stateless.rs`), next to the same calls through rmcp: the server in process,
//! behind axum on an ephemeral loopback port, driven by raw HTTP.
//!
//! Which way a call went shows in the task that ran its tool: a call answered in its
//! request's task runs its tool in the task that received the HTTP request (a middleware
//! in front of the endpoint notes that task for each request); rmcp runs it in a task of
//! its own.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::common::{wait_tool, within};
use rmcp::transport::StreamableHttpServerConfig;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolgate_core::tool::tool_fn;
use toolgate_core::{Pipeline, ToolError};
use toolgate_mcp::McpServer;

const VERSION: &str = "2026-07-28";

/// A server on loopback with the tools `task` (answers the id of the tokio task it runs
/// in), `fail` (a tool error) and `wait` (runs until its call is cancelled).
struct Served {
    url: String,
    http: reqwest::Client,
    /// The task that received each HTTP request, by its `x-call` header.
    received_in: Arc<Mutex<HashMap<String, String>>>,
    /// Notified when a `wait` call starts, and when it ends (cancelled or dropped).
    waiting: Arc<Notify>,
    ended: Arc<Notify>,
}

async fn serve(json_response: bool) -> Served {
    serve_until(json_response, CancellationToken::new()).await
}

/// [`serve`], with the host's shutdown token.
async fn serve_until(json_response: bool, shutdown: CancellationToken) -> Served {
    let (waiting, ended) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let pipeline = Pipeline::builder()
        .tool(tool_fn(
            "task",
            "The tokio task it runs in.",
            |_: ()| async { Ok::<_, ToolError>(tokio::task::try_id().map(|id| id.to_string())) },
        ))
        .tool(tool_fn("fail", "Fails.", |_: ()| async {
            Err::<String, _>(ToolError::execution("it failed, as it always does"))
        }))
        .tool(wait_tool(&waiting, &ended))
        .build()
        .expect("built");
    let mut config = StreamableHttpServerConfig::default();
    config.json_response = json_response;
    config.cancellation_token = shutdown;
    let service = McpServer::new(pipeline).http_service(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("bound"));
    let received_in = Arc::new(Mutex::new(HashMap::new()));
    let noted = Arc::clone(&received_in);
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                if let Some(call) = request.headers().get("x-call") {
                    let call = call.to_str().expect("ascii").to_owned();
                    let task = tokio::task::try_id().map(|id| id.to_string());
                    noted.lock().unwrap().insert(call, task.unwrap_or_default());
                }
                next.run(request)
            },
        ));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Served {
        url,
        http: reqwest::Client::new(),
        received_in,
        waiting,
        ended,
    }
}

/// A `tools/call` of `tool` as a 2026-07-28 client writes it, with `meta` added to its
/// `_meta` (the protocol version and capabilities are there already).
fn call(id: u64, tool: &str, meta: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "stateless-test", "version": "0"},
    }});
    for (key, value) in meta.as_object().expect("an object") {
        params["_meta"][key] = value.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// What came back for a call: the status, the content type and the JSON-RPC answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    message: Value,
}

impl Served {
    /// A `POST` of `body` with a 2026-07-28 client's headers and `extra` ones.
    fn request(&self, body: &Value, extra: &[(&str, &str)]) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", "tools/call");
        if let Some(name) = body["params"]["name"].as_str() {
            request = request.header("mcp-name", name);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request.body(body.to_string())
    }

    async fn post(&self, body: &Value, extra: &[(&str, &str)]) -> Answer {
        let response = within(10, "the answer", self.request(body, extra).send())
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_default();
        let text = within(10, "the body", response.text()).await.expect("read");
        let message = if content_type.starts_with("text/event-stream") {
            let data = last_event(&text).unwrap_or_else(|| panic!("an event: {text:?}"));
            serde_json::from_str(data).expect("JSON")
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer {
            status,
            content_type,
            message,
        }
    }

    /// Whether a call of the `task` tool with `meta` added ran in the task that received
    /// its HTTP request.
    async fn ran_where_received(&self, id: u64, meta: Value) -> bool {
        let key = id.to_string();
        let answer = self
            .post(&call(id, "task", meta), &[("x-call", &key)])
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let ran_in = answer.message["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("a task id: {answer:?}"))
            .to_owned();
        let received_in = self.received_in.lock().unwrap()[&key].clone();
        ran_in == received_in
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_can_only_be_answered_runs_in_the_task_of_its_http_request() {
    let served = serve(false).await;
    assert!(served.ran_where_received(1, json!({})).await);
    assert!(served.ran_where_received(2, json!({})).await);
    // A call with a progress token may be sent progress, and a client that declared
    // sampling may be asked for it: rmcp answers them, in tasks of its own.
    assert!(
        !served
            .ran_where_received(3, json!({"progressToken": "p"}))
            .await
    );
    let sampling = json!({"io.modelcontextprotocol/clientCapabilities": {"sampling": {}}});
    assert!(!served.ran_where_received(4, sampling).await);
    assert!(served.ran_where_received(5, json!({})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_here_are_the_answers_rmcp_gives() {
    for json_response in [false, true] {
        let served = serve(json_response).await;
        for tool in ["fail", "no-such-tool"] {
            let here = served.post(&call(1, tool, json!({})), &[]).await;
            let rmcp = served
                .post(&call(1, tool, json!({"progressToken": "p"})), &[])
                .await;
            assert_eq!(here.status, rmcp.status, "{tool}: {here:?} {rmcp:?}");
            assert_eq!(here.content_type, rmcp.content_type, "{tool}");
            assert_eq!(here.message, rmcp.message, "{tool}");
        }
        let ok = served.post(&call(1, "task", json!({})), &[]).await;
        assert_eq!(ok.status, 200);
        let expected = if json_response {
            "application/json"
        } else {
            "text/event-stream"
        };
        assert_eq!(ok.content_type, expected);
        assert_eq!(ok.message["id"], 1);
        assert_eq!(ok.message["result"]["isError"], false, "{ok:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rmcp_would_refuse_is_left_to_rmcp() {
    let served = serve(false).await;
    // A name header that does not name the tool: refused as a header mismatch (by the
    // endpoint as it reads the body, in rmcp's words).
    let mismatched = served
        .request(&call(1, "task", json!({})), &[])
        .header("mcp-name", "fail");
    let response = within(10, "the answer", mismatched.send())
        .await
        .expect("answered");
    assert_eq!(response.status(), 400);
    // Named twice (the request's own name header and another one): refused too.
    let answer = served
        .post(&call(2, "task", json!({})), &[("mcp-name", "task")])
        .await;
    assert_eq!(answer.status, 400, "{answer:?}");
    // No method header at 2026-07-28: refused.
    let without_method = served
        .http
        .post(&served.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", VERSION)
        .header("mcp-name", "task")
        .body(call(3, "task", json!({})).to_string());
    let response = within(10, "the answer", without_method.send())
        .await
        .expect("answered");
    assert_eq!(response.status(), 400);
    // The version in `_meta` differs from the header's: refused.
    let mut other_version = call(4, "task", json!({}));
    other_version["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
        json!("2025-11-25");
    let answer = served.post(&other_version, &[]).await;
    assert_eq!(answer.status, 400, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_cancels_its_call() {
    let served = serve(false).await;
    let request = served.request(&call(1, "wait", json!({})), &[]);
    let sent = tokio::spawn(async move { request.send().await });
    within(10, "the call to start", served.waiting.notified()).await;
    sent.abort();
    within(10, "the call to end", served.ended.notified()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_the_hosts_shutdown_is_told_to_call_again() {
    let shutdown = CancellationToken::new();
    let served = serve_until(false, shutdown.clone()).await;
    let request = served.request(&call(1, "wait", json!({})), &[]);
    let sent = tokio::spawn(async move { request.send().await });
    within(10, "the call to start", served.waiting.notified()).await;
    shutdown.cancel();
    let response = within(10, "the answer", sent)
        .await
        .expect("joined")
        .expect("answered");
    assert_eq!(response.status(), 503);
    let message: Value = serde_json::from_str(&response.text().await.expect("read")).expect("JSON");
    assert_eq!(message["id"], 1);
    assert_eq!(message["error"]["code"], -32603);
    let text = message["error"]["message"].as_str().expect("a message");
    assert!(text.contains("shutting down"), "{text}");
    within(10, "the call to end", served.ended.notified()).await;
}

/// The data of the last event of an SSE stream: the answer (progress notifications may
/// come before it).
fn last_event(stream: &str) -> Option<&str> {
    stream
        .lines()
        .rev()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| !data.is_empty())
}

/// The text of the one answer in `response` (a JSON body, or the last event of a stream).
async fn answered_text(response: reqwest::Response) -> String {
    let body = within(10, "the body", response.text()).await.expect("read");
    let data = last_event(&body).unwrap_or(&body);
    let message: Value = serde_json::from_str(data).expect("a JSON-RPC answer");
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text answer: {message}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_request_naming_another_client_s_session_runs_outside_it_and_leaves_it_whole() {
    let server = McpServer::new(common::counting().build().expect("built"));
    let service = server.http_service(StreamableHttpServerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("bound"));
    let app = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let count = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "count", "arguments": {}}})
    };

    // Ann's 2025 session: two calls, counted in it.
    let ann = common::RawHttp {
        http: &http,
        url: &url,
        version: "2025-06-18",
        bearer: None,
    };
    let session = ann.session(json!({}), "ann").await;
    for n in 1..=2 {
        let answer = answered_text(ann.post(Some(&session), &count(n)).await).await;
        assert_eq!(answer, n.to_string());
    }

    // Another client names Ann's session on a request of 2026-07-28, which belongs to no
    // session: its call is counted in a session of its own.
    let mut stateless = call(7, "count", json!({}));
    stateless["params"]["arguments"] = json!({});
    let response = within(
        10,
        "the answer",
        http.post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "count")
            .header("mcp-session-id", &session)
            .body(stateless.to_string())
            .send(),
    )
    .await
    .expect("the server answers");
    assert_eq!(answered_text(response).await, "1", "not Ann's third call");

    // Ann's session is as she left it, once that request's connection is gone too.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let answer = answered_text(ann.post(Some(&session), &count(3)).await).await;
    assert_eq!(answer, "3");
}
