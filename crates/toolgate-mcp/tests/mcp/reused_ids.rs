//! A request id reused in a streamable HTTP session while its request is in flight: MCP
//! forbids it, and rmcp routes a session's answers by id, so the second request got the
//! first one's answer and the first one's stream never ended. The endpoint refuses such a
//! request (400, `-32600`, naming the id) on either path — a `tools/call` answered in the
//! HTTP request's task, and everything that goes through rmcp — and frees the id once its
//! request is answered or its client left. The server in process, on an ephemeral loopback
//! port, driven by raw HTTP.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, RawHttp, within};
use rmcp::transport::StreamableHttpServerConfig;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};
use toolgate_core::{JsonTool, Pipeline, ToolError};
use toolgate_mcp::McpServer;

const VERSION: &str = "2025-06-18";

/// A server on loopback whose `slow` tool runs until `gate` gives it a permit, then
/// answers `slow result tag=<tag>`.
struct Served {
    url: String,
    /// Notified when a `slow` call starts.
    started: Arc<Notify>,
    gate: Arc<Semaphore>,
    http: reqwest::Client,
}

async fn serve() -> Served {
    let started = Arc::new(Notify::new());
    let gate = Arc::new(Semaphore::new(0));
    let slow = {
        let (started, gate) = (Arc::clone(&started), Arc::clone(&gate));
        JsonTool::new(
            "slow",
            "Runs until released; answers its tag.",
            json!({"type": "object"}),
            move |input, _| {
                let (started, gate) = (Arc::clone(&started), Arc::clone(&gate));
                let tag = input["tag"].as_str().unwrap_or_default().to_owned();
                Box::pin(async move {
                    started.notify_one();
                    gate.acquire().await.expect("open").forget();
                    Ok::<_, ToolError>(json!({"text": format!("slow result tag={tag}")}))
                })
            },
        )
    };
    let pipeline = Pipeline::builder().tool(slow).build().expect("built");
    let mut config = StreamableHttpServerConfig::default();
    // A client that left is noticed at the next write: a comment every half second.
    config.sse_keep_alive = Some(Duration::from_millis(500));
    let service = McpServer::new(pipeline).http_service(config);
    let app = axum::Router::new().nest_service("/mcp", service);
    let url = format!("{}/mcp", common::serve_on_loopback(app).await);
    Served {
        url,
        started,
        gate,
        http: reqwest::Client::new(),
    }
}

impl Served {
    fn raw(&self) -> RawHttp<'_> {
        RawHttp {
            http: &self.http,
            url: &self.url,
            version: VERSION,
            bearer: None,
        }
    }

    async fn post(&self, session: &str, body: &Value) -> reqwest::Response {
        self.raw().post(Some(session), body).await
    }

    /// Starts a `slow` call with `id` and `tag` (through rmcp when `progress`: a progress
    /// token goes to the call's own stream, rmcp's), once it runs; its response.
    async fn start_slow(&self, session: &str, id: Value, tag: &str, progress: bool) -> Started {
        let mut params = json!({"name": "slow", "arguments": {"tag": tag}});
        if progress {
            params["_meta"] = json!({"progressToken": format!("p-{tag}")});
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let started = self.started.notified();
        let request = self.raw().request(Some(session), &body).send();
        let response = tokio::spawn(request);
        within(10, "the slow call starts", started).await;
        Started(response)
    }
}

/// A request sent, whose headers may still be on their way (a call answered in its own
/// task sends them at its first keep-alive comment).
struct Started(tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>);

impl Started {
    /// The whole body of its answer: the stream must end.
    async fn answer(self) -> String {
        let response = within(10, "the headers", self.0)
            .await
            .expect("joined")
            .expect("answered");
        assert_eq!(response.status(), 200);
        within(10, "the stream ends", response.text())
            .await
            .expect("read")
    }
}

/// Asserts `response` refuses a request with id `7` that is in flight.
async fn assert_refused(response: reqwest::Response, what: &str) {
    assert_eq!(response.status(), 400, "{what}");
    let body: Value = within(10, "the refusal", response.json())
        .await
        .expect("JSON");
    assert_eq!(body["id"], 7, "{what}: {body}");
    assert_eq!(body["error"]["code"], -32600, "{what}: {body}");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("id `7` is still in flight in this session")
            && message.contains("give each request its own id"),
        "{what}: {message}"
    );
}

fn call(id: Value, tag: &str, progress: bool) -> Value {
    let mut params = json!({"name": "slow", "arguments": {"tag": tag}});
    if progress {
        params["_meta"] = json!({"progressToken": format!("p-{tag}")});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

fn list(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

#[tokio::test]
async fn a_request_with_the_id_of_one_in_flight_is_refused_and_the_first_is_answered() {
    let server = serve().await;
    // The first call through rmcp (where the answers were crossed), then answered in its
    // request's task.
    for first_through_rmcp in [true, false] {
        let session = server.raw().session(json!({}), "reused-ids").await;
        let first = server
            .start_slow(&session, json!(7), "FIRST", first_through_rmcp)
            .await;

        // Whichever way the second would go: answered in its task, through rmcp (a
        // progress token), or another method (rmcp's).
        for (second, what) in [
            (list(json!(7)), "tools/list"),
            (call(json!(7), "SECOND", true), "a call through rmcp"),
            (
                call(json!(7), "SECOND", false),
                "a call answered in its task",
            ),
        ] {
            let what = format!("{what}, first through rmcp: {first_through_rmcp}");
            assert_refused(server.post(&session, &second).await, &what).await;
        }
        // The string "7" is another id.
        let other = server.post(&session, &list(json!("7"))).await;
        assert_eq!(other.status(), 200);
        let other = within(10, "tools/list", other.text()).await.expect("read");
        assert!(other.contains(r#""id":"7""#), "{other}");

        // The first is answered, with its own result, and its stream ends.
        server.gate.add_permits(1);
        let answer = first.answer().await;
        assert!(answer.contains("slow result tag=FIRST"), "{answer}");
        assert!(answer.contains(r#""id":7"#), "{answer}");

        // Its id is free again, whichever way the next request goes.
        for progress in [false, true] {
            let again = server
                .start_slow(&session, json!(7), "AGAIN", progress)
                .await;
            server.gate.add_permits(1);
            let answer = again.answer().await;
            assert!(answer.contains("slow result tag=AGAIN"), "{answer}");
        }
        let again = server.post(&session, &list(json!(7))).await;
        assert_eq!(again.status(), 200);
        let again = within(10, "tools/list", again.text()).await.expect("read");
        assert!(again.contains(r#""id":7"#), "{again}");
    }
}

#[tokio::test]
async fn an_id_is_the_sessions_own() {
    let server = serve().await;
    let one = server.raw().session(json!({}), "reused-ids").await;
    let two = server.raw().session(json!({}), "reused-ids").await;
    let first = server.start_slow(&one, json!(7), "ONE", false).await;
    let other = server.post(&two, &list(json!(7))).await;
    assert_eq!(other.status(), 200, "another session's id 7 is another id");
    within(10, "tools/list", other.text()).await.expect("read");
    server.gate.add_permits(1);
    assert!(first.answer().await.contains("slow result tag=ONE"));
}

#[tokio::test]
async fn a_request_its_client_left_frees_its_id() {
    let server = serve().await;
    for through_rmcp in [false, true] {
        let session = server.raw().session(json!({}), "reused-ids").await;
        // The client leaves: it drops its request and its connections.
        let leaving = reqwest::Client::new();
        let body = call(json!(7), "LEFT", through_rmcp);
        let started = server.started.notified();
        let request = RawHttp {
            http: &leaving,
            url: &server.url,
            version: VERSION,
            bearer: None,
        }
        .request(Some(&session), &body)
        .send();
        let request = tokio::spawn(request);
        within(10, "the slow call starts", started).await;
        assert_refused(server.post(&session, &list(json!(7))).await, "in flight").await;
        request.abort();
        drop(leaving);

        // Free once the server noticed (at its next keep-alive comment at the latest).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let response = server.post(&session, &list(json!(7))).await;
            if response.status() == 200 {
                break;
            }
            assert_eq!(response.status(), 400);
            assert!(
                tokio::time::Instant::now() < deadline,
                "id 7 still taken 10 s after its client left (through rmcp: {through_rmcp})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
