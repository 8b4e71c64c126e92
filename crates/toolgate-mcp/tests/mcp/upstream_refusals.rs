//! An HTTP upstream that answers one call with a failure — an HTTP error status, or a body
//! that is not the call's JSON-RPC answer — fails that call alone. Its connection (here a
//! 2025-11-25 session) is shared by every caller of the upstream's tools: it stays, the
//! calls other callers have in flight on it go on, and no new session is opened. The
//! caller is told what the upstream answered, in words, and none of its body; a busy or
//! unavailable upstream's `Retry-After` is passed on.
//!
//! The upstream is toolgate's own MCP server on a loopback port, behind a layer that
//! answers a call with a failure when its arguments carry a marker (`refuse-413`,
//! `refuse-429-7`: the status, then `Retry-After`; `garble-text`, `garble-json`, `garble-sse`,
//! `huge-sse`; `break-sse`, a stream whose body breaks off after its head). Every
//! case runs on both ways a call goes out: from the calling task (`echo`) and through
//! rmcp's client (`echo_region`, whose argument goes in a header).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{imported, within};
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::Notify;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError};
use toolgate_mcp::{McpServer, UpstreamConfig};

/// What the upstream's layer echoes in every failure it answers with: it must not reach
/// the caller.
const BODY: &str = "upstream-body-text";

/// The upstream: its address, how many sessions were opened and deleted on it, and the
/// notifications of its `hold` tools.
struct RefusingUpstream {
    addr: SocketAddr,
    counts: Arc<Counts>,
    held: Arc<Notify>,
    released: Arc<Notify>,
    serving: tokio::task::JoinHandle<()>,
}

/// How many `initialize` requests and `DELETE`s of a session the upstream was sent.
#[derive(Default)]
struct Counts {
    initialized: AtomicUsize,
    deleted: AtomicUsize,
}

impl Drop for RefusingUpstream {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl RefusingUpstream {
    async fn start() -> RefusingUpstream {
        let held = Arc::new(Notify::new());
        let released = Arc::new(Notify::new());
        let text = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let with_region = json!({"type": "object", "properties": {
            "text": {"type": "string"},
            "region": {"type": "string", "x-mcp-header": "Region"}}});
        let hold = |name: &str, schema: Value| {
            let (held, released) = (Arc::clone(&held), Arc::clone(&released));
            JsonTool::new(name, "Answers once released.", schema, move |_, _| {
                let (held, released) = (Arc::clone(&held), Arc::clone(&released));
                Box::pin(async move {
                    held.notify_one();
                    released.notified().await;
                    Ok::<_, ToolError>(json!({"text": "held"}))
                })
            })
        };
        let echo = |name: &str, schema: Value| {
            JsonTool::new(name, "Echoes `text`.", schema, |input, _| {
                let text = input["text"].clone();
                Box::pin(async move { Ok::<_, ToolError>(json!({ "text": text })) })
            })
        };
        let pipeline = Pipeline::builder()
            .tool(echo("echo", text.clone()))
            .tool(echo("echo_region", with_region.clone()))
            .tool(hold("hold", with_region))
            .tool(hold("hold_here", text))
            .build()
            .expect("built");
        let config = rmcp::transport::StreamableHttpServerConfig::default();
        let counts = Arc::new(Counts::default());
        let app = axum::Router::new()
            .nest_service("/mcp", McpServer::new(pipeline).http_service(config))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&counts),
                refuse_marked,
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("bound");
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RefusingUpstream {
            addr,
            counts,
            held,
            released,
            serving,
        }
    }

    /// The upstream's tools, imported at 2025-11-25, in a pipeline without hooks; each
    /// called once, so that every session the calls go on is open.
    async fn import(&self) -> Pipeline {
        let config = UpstreamConfig::http("up", format!("http://{}/mcp", self.addr))
            .call_timeout(Duration::from_secs(20))
            .discover(false);
        let (_upstream, pipeline) = imported(config).await;
        answered(&pipeline).await;
        pipeline
    }

    fn sessions(&self) -> usize {
        self.counts.initialized.load(Ordering::SeqCst)
    }

    fn deleted(&self) -> usize {
        self.counts.deleted.load(Ordering::SeqCst)
    }
}

/// The upstream's layer: counts `initialize` and `DELETE`, and answers a request that
/// carries a marker with the failure it names instead of passing it on.
async fn refuse_marked(
    axum::extract::State(counts): axum::extract::State<Arc<Counts>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if parts.method == http::Method::DELETE {
        counts.deleted.fetch_add(1, Ordering::SeqCst);
    }
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .expect("a whole body");
    let text = String::from_utf8_lossy(&bytes);
    if text.contains(r#""method":"initialize""#) {
        counts.initialized.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(marked) = text.split("refuse-").nth(1) {
        let mut numbers = marked.split(['-', '"']);
        let status: u16 = numbers
            .next()
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let mut response = (
            StatusCode::from_u16(status).expect("a status"),
            [(header::CONTENT_TYPE, "text/plain")],
            format!("{BODY}: {text}"),
        )
            .into_response();
        if let Some(seconds) = numbers.next().filter(|s| s.parse::<u64>().is_ok()) {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(seconds).expect("digits"),
            );
        }
        return response;
    }
    if text.contains("garble-text") {
        return ([(header::CONTENT_TYPE, "text/plain")], BODY).into_response();
    }
    if text.contains("garble-sse") {
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            "not an event\n\n",
        )
            .into_response();
    }
    if text.contains("break-sse") {
        // The head, an event that is no message, and then the body fails: the server
        // cuts this response off (as a tool that raises while its stream is written does,
        // or a proxy's read timeout), its connection with it.
        let events = futures::stream::once(async { Ok(": started\n\n".to_owned()) }).chain(
            futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Err(std::io::Error::other(
                    "the tool failed while writing its stream",
                ))
            }),
        );
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(events),
        )
            .into_response();
    }
    if text.contains("huge-sse") {
        let event = format!("data: {}\n\n", "x".repeat(16 * 1024 * 1024 + 1));
        return ([(header::CONTENT_TYPE, "text/event-stream")], event).into_response();
    }
    if text.contains("garble-json") {
        return (
            [(header::CONTENT_TYPE, "application/json")],
            "{\"jsonrpc\": 2",
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The two ways a call goes out: from the calling task, and through rmcp's client.
const TOOLS: [&str; 2] = ["echo", "echo_region"];

async fn call(pipeline: &Pipeline, tool: &str, text: &str) -> Result<Value, ToolError> {
    within(
        30,
        "tools/call",
        pipeline.invoke(
            tool,
            json!({"text": text, "region": "eu"}),
            InvokeOptions::new(),
        ),
    )
    .await
}

/// Calls each of [`TOOLS`]: each must be answered.
async fn answered(pipeline: &Pipeline) {
    for tool in TOOLS {
        let answer = call(pipeline, tool, "answered").await.expect("answered");
        assert!(answer.to_string().contains("answered"), "{tool}: {answer}");
    }
}

/// Calls `tool` with `marker`: it must fail.
async fn refused(pipeline: &Pipeline, tool: &str, marker: &str) -> ToolError {
    let failed = call(pipeline, tool, marker).await;
    let e = failed.expect_err(&format!("{tool} with {marker} was refused upstream"));
    let message = e.caller_message();
    assert!(
        !message.contains(BODY),
        "{tool}, {marker}: the upstream's body reached the caller: {message}"
    );
    assert!(
        message.contains("MCP server `up`"),
        "{tool}, {marker}: the message names the upstream: {message}"
    );
    e
}

/// `e` is the error of a call whose stream rmcp saw end before the answer.
fn stream_ended(e: &ToolError) {
    assert_eq!((e.status(), e.code()), (503, "upstream_unavailable"), "{e}");
    assert!(
        e.caller_message()
            .contains("ended the request's stream before its answer"),
        "{e}"
    );
}

#[tokio::test]
async fn a_call_the_upstream_refuses_fails_alone_and_the_session_and_calls_in_flight_go_on() {
    let upstream = RefusingUpstream::start().await;
    let pipeline = Arc::new(upstream.import().await);
    let sessions = upstream.sessions();

    // Another caller's call, in flight on the session through rmcp's client.
    let holding = tokio::spawn({
        let pipeline = Arc::clone(&pipeline);
        async move { call(&pipeline, "hold", "").await }
    });
    within(20, "the held call starts", upstream.held.notified()).await;

    let mut refusals = Vec::new();
    for tool in TOOLS {
        for (marker, words) in [
            ("refuse-400", "refused the request (HTTP 400 Bad Request)"),
            (
                "refuse-413",
                "refused the request (HTTP 413 Payload Too Large)",
            ),
            (
                "refuse-405",
                "refused the request (HTTP 405 Method Not Allowed)",
            ),
        ] {
            refusals.push((tool, marker, words, refused(&pipeline, tool, marker).await));
        }
    }

    upstream.released.notify_one();
    let held = within(20, "the held call", holding).await.expect("joined");
    let held = held.expect("the other caller's call was answered");
    assert!(held.to_string().contains("held"), "{held}");
    for (tool, marker, words, e) in refusals {
        assert_eq!(
            (e.status(), e.code()),
            (502, "tool_error"),
            "{tool}, {marker}: {e}"
        );
        assert!(
            !e.is_retryable(),
            "{tool}, {marker}: the same call fails again"
        );
        assert!(e.caller_message().contains(words), "{tool}, {marker}: {e}");
    }
    answered(&pipeline).await;
    assert_eq!(
        upstream.sessions(),
        sessions,
        "the refusals opened no new session: the connection stayed"
    );
}

#[tokio::test]
async fn a_busy_or_unavailable_upstream_passes_its_retry_after_on_and_keeps_its_session() {
    let upstream = RefusingUpstream::start().await;
    let pipeline = upstream.import().await;
    let sessions = upstream.sessions();
    for tool in TOOLS {
        let e = refused(&pipeline, tool, "refuse-429-7").await;
        assert_eq!(
            (e.status(), e.code()),
            (503, "upstream_rate_limited"),
            "{tool}: {e}"
        );
        assert_eq!(
            e.retry_after_delay(),
            Some(Duration::from_secs(7)),
            "{tool}"
        );

        let e = refused(&pipeline, tool, "refuse-503-3").await;
        assert_eq!(
            (e.status(), e.code()),
            (503, "upstream_unavailable"),
            "{tool}: {e}"
        );
        assert_eq!(
            e.retry_after_delay(),
            Some(Duration::from_secs(3)),
            "{tool}"
        );

        // A wait of days is cut to five minutes.
        let e = refused(&pipeline, tool, "refuse-503-900000").await;
        assert_eq!(
            e.retry_after_delay(),
            Some(Duration::from_secs(300)),
            "{tool}"
        );

        // No Retry-After: toolgate's own wait before trying again.
        let e = refused(&pipeline, tool, "refuse-502").await;
        assert_eq!(
            (e.status(), e.code()),
            (503, "upstream_unavailable"),
            "{tool}: {e}"
        );
        assert!(
            e.retry_after_delay().is_some_and(|d| d > Duration::ZERO),
            "{tool}"
        );

        let e = refused(&pipeline, tool, "refuse-500").await;
        assert_eq!((e.status(), e.code()), (502, "tool_error"), "{tool}: {e}");
        assert!(e.is_retryable(), "{tool}: a server error may pass");
        assert!(
            e.caller_message()
                .contains("failed the request (HTTP 500 Internal Server Error)"),
            "{tool}: {e}"
        );
    }
    answered(&pipeline).await;
    assert_eq!(upstream.sessions(), sessions, "no new session was opened");
}

#[tokio::test]
async fn an_answer_that_is_not_json_rpc_fails_the_call_alone() {
    let upstream = RefusingUpstream::start().await;
    let pipeline = upstream.import().await;
    let sessions = upstream.sessions();
    for tool in TOOLS {
        for marker in ["garble-text", "garble-json", "garble-sse"] {
            let e = refused(&pipeline, tool, marker).await;
            if (tool, marker) == ("echo_region", "garble-sse") {
                // rmcp reports a call's stream that breaks off as if the connection had
                // closed, without the reason: the call fails as one whose stream ended
                // before its answer, and the connection, which did not close, stays.
                stream_ended(&e);
                continue;
            }
            assert_eq!(
                (e.status(), e.code()),
                (502, "tool_error"),
                "{tool}, {marker}: {e}"
            );
            assert!(
                e.caller_message()
                    .contains("answered with something other than a JSON-RPC answer"),
                "{tool}, {marker}: {e}"
            );
        }
    }
    answered(&pipeline).await;
    assert_eq!(upstream.sessions(), sessions, "no new session was opened");
}

#[tokio::test]
async fn an_answer_longer_than_toolgate_reads_fails_the_call_alone() {
    let upstream = RefusingUpstream::start().await;
    let pipeline = upstream.import().await;
    let sessions = upstream.sessions();
    for tool in TOOLS {
        let e = refused(&pipeline, tool, "huge-sse").await;
        if tool == "echo_region" {
            // As above: rmcp gives no reason, and the connection stays.
            stream_ended(&e);
            continue;
        }
        assert_eq!((e.status(), e.code()), (502, "tool_error"), "{tool}: {e}");
        assert!(
            e.caller_message()
                .contains("answered with more than toolgate reads"),
            "{tool}: {e}"
        );
    }
    answered(&pipeline).await;
    assert_eq!(upstream.sessions(), sessions, "no new session was opened");
}

#[tokio::test]
async fn a_call_whose_stream_breaks_off_fails_alone_and_the_session_and_calls_in_flight_go_on() {
    let upstream = RefusingUpstream::start().await;
    let pipeline = Arc::new(upstream.import().await);
    let sessions = upstream.sessions();

    // Other callers' calls, in flight on the shared session: one from the calling task,
    // one through rmcp's client.
    let mut holding = Vec::new();
    for tool in ["hold_here", "hold"] {
        holding.push(tokio::spawn({
            let pipeline = Arc::clone(&pipeline);
            async move { call(&pipeline, tool, "").await }
        }));
        within(20, "the held call starts", upstream.held.notified()).await;
    }

    for tool in TOOLS {
        let e = refused(&pipeline, tool, "break-sse").await;
        stream_ended(&e);
        assert!(e.is_retryable(), "{tool}: {e}");
    }

    for _ in &holding {
        upstream.released.notify_one();
    }
    for held in holding {
        let held = within(20, "the held call", held).await.expect("joined");
        let held = held.expect("the other caller's call was answered");
        assert!(held.to_string().contains("held"), "{held}");
    }
    answered(&pipeline).await;
    assert_eq!(upstream.deleted(), 0, "the session was not deleted");
    assert_eq!(
        upstream.sessions(),
        sessions,
        "the broken streams opened no new session: the connection stayed"
    );
}
