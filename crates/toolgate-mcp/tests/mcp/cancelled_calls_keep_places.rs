//! A call its caller gives up keeps its place in the caller's share of an HTTP upstream
//! (`max_connections_per_caller`) while the upstream may still be running it: a caller
//! that starts calls and cancels them in a loop never has more than its share running at
//! the upstream, and a place held so is given back once the upstream finishes the call.
//! Against a real upstream on loopback that, as MCP allows, goes on with a call whose
//! client cancelled it or closed its connection — for a call toolgate sends from the
//! calling task and one it leaves to rmcp alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::hand_written::{event_stream, initialized, json_answer};
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore, oneshot};
use toolgate_core::{InvokeOptions, Pipeline, User};
use toolgate_mcp::UpstreamConfig;

/// A caller's share of the upstream's places, in these tests.
const SHARE: usize = 2;

/// A streamable-HTTP upstream at 2025-11-25 with one tool, `work` (`work_in_region`: the
/// same, with an argument sent in a header too, so that toolgate leaves its calls to
/// rmcp). A call runs until `finish` gives it a permit, whatever becomes of its caller:
/// `notifications/cancelled` is taken and ignored, and a connection closed under its
/// stream does not stop it. Then it is answered on its stream, which ends. Each call's
/// stream starts with a `ping` to toolgate, whose answer tells that toolgate reads the
/// stream.
struct Upstream {
    /// Calls started.
    started: AtomicUsize,
    /// Calls whose stream toolgate reads (it answered their stream's `ping`).
    read: AtomicUsize,
    /// Calls running now.
    running: AtomicUsize,
    /// The most calls running at once.
    most: AtomicUsize,
    /// Lets one running call finish per permit.
    finish: Semaphore,
    /// Notified when a call starts or finishes.
    changed: Notify,
}

impl Upstream {
    fn new() -> Self {
        Upstream {
            started: AtomicUsize::new(0),
            read: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            finish: Semaphore::new(0),
            changed: Notify::new(),
        }
    }

    /// Waits until `done` holds of the upstream.
    async fn until(&self, done: impl Fn(&Upstream) -> bool) {
        loop {
            let changed = self.changed.notified();
            if done(self) {
                return;
            }
            // A change notified between the check and here is not missed for long.
            let _ = tokio::time::timeout(Duration::from_millis(50), changed).await;
        }
    }

    fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    fn read(&self) -> usize {
        self.read.load(Ordering::SeqCst)
    }
}

async fn posted(State(upstream): State<Arc<Upstream>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => initialized(&id, "slow"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "work", "inputSchema": {"type": "object"}},
            {"name": "work_in_region", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}}},
        ]}})),
        "tools/call" => {
            // The work runs on its own: neither a cancellation nor a closed stream ends it.
            let (answer, answered) = oneshot::channel();
            let ping = json!({"jsonrpc": "2.0", "id": format!("ping-{id}"), "method": "ping"});
            tokio::spawn(run(Arc::clone(&upstream), id, answer));
            let answer = futures::stream::once(async move { answered.await.unwrap_or_default() });
            event_stream(
                futures::stream::once(async move { format!("data: {ping}\n\n") }).chain(answer),
            )
        }
        _ if message["result"].is_object() => {
            upstream.read.fetch_add(1, Ordering::SeqCst);
            upstream.changed.notify_waiters();
            StatusCode::ACCEPTED.into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// Runs call `id` until a permit to finish comes, then sends its answer as an SSE event.
async fn run(upstream: Arc<Upstream>, id: Value, answer: oneshot::Sender<String>) {
    upstream.started.fetch_add(1, Ordering::SeqCst);
    let now = upstream.running.fetch_add(1, Ordering::SeqCst) + 1;
    upstream.most.fetch_max(now, Ordering::SeqCst);
    upstream.changed.notify_waiters();
    upstream.finish.acquire().await.expect("open").forget();
    upstream.running.fetch_sub(1, Ordering::SeqCst);
    upstream.changed.notify_waiters();
    let result = json!({"jsonrpc": "2.0", "id": id, "result": {
        "content": [{"type": "text", "text": "worked"}]}});
    let _ = answer.send(format!("data: {result}\n\n"));
}

/// The upstream on loopback, imported: at most 8 requests in flight to it, [`SHARE`] of
/// them a caller's.
async fn start() -> (Arc<Upstream>, Arc<Pipeline>) {
    let upstream = Arc::new(Upstream::new());
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(posted).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(Arc::clone(&upstream));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("slow", url)
        .discover(false)
        .max_connections(8)
        .max_connections_per_caller(SHARE)
        .call_timeout(Duration::from_secs(120));
    let (_, pipeline) = imported(config).await;
    (upstream, Arc::new(pipeline))
}

/// A call of `tool` made as `user`, started.
fn call(pipeline: &Arc<Pipeline>, tool: &'static str, user: &str) -> tokio::task::JoinHandle<()> {
    let pipeline = Arc::clone(pipeline);
    let options = InvokeOptions::new().user(User::new(user));
    tokio::spawn(async move {
        let _ = pipeline
            .invoke(tool, json!({"region": "eu"}), options)
            .await;
    })
}

/// Ann starts a call of `tool` and cancels it — once toolgate reads its stream from the
/// upstream, or, when it is not sent, after a while — `TIMES` times in a row.
async fn start_and_cancel(upstream: &Upstream, pipeline: &Arc<Pipeline>, tool: &'static str) {
    // Long enough for a place let go two seconds after its cancel (as rmcp's stream of an
    // abandoned call was) to be taken again by a later call.
    const TIMES: usize = 8;
    for _ in 0..TIMES {
        let before = upstream.read();
        let started = call(pipeline, tool, "ann");
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            upstream.until(|u| u.read() > before),
        )
        .await;
        started.abort();
        let _ = started.await;
    }
}

/// Ann's loop of calls started and cancelled never has more than her share running at the
/// upstream; once the upstream finishes one of them, its place is hers again.
async fn cancelled_calls_keep_their_places_until_the_upstream_finishes(tool: &'static str) {
    let (upstream, pipeline) = start().await;
    start_and_cancel(&upstream, &pipeline, tool).await;
    let most = upstream.most.load(Ordering::SeqCst);
    assert!(
        most <= SHARE,
        "the upstream ran {most} of ann's calls at once, past her share of {SHARE}: her cancelled calls gave their places back while they still ran"
    );
    assert_eq!(
        upstream.started(),
        SHARE,
        "only the calls in her share were sent"
    );

    // Another caller is not held up by ann's cancelled calls.
    let bobs = call(&pipeline, tool, "bob");
    within(
        20,
        "bob's call to reach the upstream",
        upstream.until(|u| u.started() == SHARE + 1),
    )
    .await;

    // The upstream finishes one of ann's cancelled calls (or bob's): a place is given
    // back, and ann's next call reaches the upstream — long before the hold limit (the
    // call timeout, 120 s).
    upstream.finish.add_permits(1);
    let anns = call(&pipeline, tool, "ann");
    within(
        20,
        "ann's next call to reach the upstream once one of hers finished",
        upstream.until(|u| u.started() == SHARE + 2),
    )
    .await;
    upstream.finish.add_permits(100);
    within(20, "the last calls", async {
        let _ = bobs.await;
        let _ = anns.await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sent_from_the_calling_task_and_cancelled_keep_their_places_until_the_upstream_finishes()
 {
    cancelled_calls_keep_their_places_until_the_upstream_finishes("work").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sent_through_rmcp_and_cancelled_keep_their_places_until_the_upstream_finishes() {
    cancelled_calls_keep_their_places_until_the_upstream_finishes("work_in_region").await;
}
