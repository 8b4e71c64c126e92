//! A call through rmcp that its caller abandons is cancelled upstream
//! (`notifications/cancelled`), and its response stream — with the HTTP connection under
//! it, and the call's place among the upstream's requests in flight — is closed at the
//! call's deadline at the latest, even when the upstream ignores the cancellation and
//! never ends the stream: the upstream may be running the call until then, but it cannot
//! make toolgate hold a connection and a task for every call a caller walked away from
//! for longer than the call could have held them unabandoned — nor for as long as rmcp
//! takes to send the cancellations, one at a time, five seconds each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::hand_written::{event_stream, initialized, json_answer};
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_mcp::UpstreamConfig;

/// A streamable-HTTP upstream at 2025-11-25 with one tool, `hold`, whose argument goes in
/// a header (`x-mcp-header`), so that its calls go through rmcp. A call's response stream
/// never ends and carries nothing; `notifications/cancelled` is taken and ignored.
#[derive(Default)]
struct Upstream {
    /// Response streams of calls not yet dropped by the server: their connection is open.
    open: AtomicUsize,
    /// How many `notifications/cancelled` came.
    cancelled: AtomicUsize,
    /// Notified when a stream opens or closes, or a cancellation comes.
    changed: Notify,
    /// Whether a `notifications/cancelled` is never answered either.
    holds_cancellations: bool,
}

/// Counts a call's stream open while it lives.
struct Open(Arc<Upstream>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

async fn posted(State(upstream): State<Arc<Upstream>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => initialized(&id, "deaf"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "hold", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}}},
        ]}})),
        "tools/call" => {
            upstream.open.fetch_add(1, Ordering::SeqCst);
            upstream.changed.notify_waiters();
            let open = Open(Arc::clone(&upstream));
            event_stream(futures::stream::unfold(open, |open| async move {
                std::future::pending::<()>().await;
                Some((String::new(), open))
            }))
        }
        "notifications/cancelled" => {
            upstream.cancelled.fetch_add(1, Ordering::SeqCst);
            upstream.changed.notify_waiters();
            if upstream.holds_cancellations {
                std::future::pending::<()>().await;
            }
            StatusCode::ACCEPTED.into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

impl Upstream {
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
}

async fn start(holds_cancellations: bool) -> (Arc<Upstream>, Arc<Pipeline>) {
    start_bounded(holds_cancellations, toolgate_mcp::DEFAULT_MAX_CONNECTIONS).await
}

/// [`start`], at most `max_connections` requests in flight to the upstream.
async fn start_bounded(
    holds_cancellations: bool,
    max_connections: usize,
) -> (Arc<Upstream>, Arc<Pipeline>) {
    let upstream = Arc::new(Upstream {
        holds_cancellations,
        ..Upstream::default()
    });
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(posted).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(Arc::clone(&upstream));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("deaf", url)
        .discover(false)
        .max_connections(max_connections)
        .call_timeout(Duration::from_secs(120));
    let (_, pipeline) = imported(config).await;
    (upstream, Arc::new(pipeline))
}

/// The deadline of the calls [`abandon_calls`] makes: what their streams are held for at
/// most, as the upstream never says it stopped them (their places, longer).
const DEADLINE: Duration = Duration::from_secs(4);

/// Starts `calls` calls of `hold`, each with a deadline of [`DEADLINE`], and abandons them
/// once their streams are open.
async fn abandon_calls(upstream: &Upstream, pipeline: &Arc<Pipeline>, calls: usize) {
    let started: Vec<_> = (0..calls)
        .map(|_| {
            let pipeline = Arc::clone(pipeline);
            tokio::spawn(async move {
                let options = InvokeOptions::new().timeout(DEADLINE);
                let _ = pipeline
                    .invoke("hold", json!({"region": "eu"}), options)
                    .await;
            })
        })
        .collect();
    within(
        20,
        "the calls' streams open",
        upstream.until(|u| u.open.load(Ordering::SeqCst) == calls),
    )
    .await;
    for call in started {
        call.abort();
    }
}

#[tokio::test]
async fn an_abandoned_calls_stream_closes_by_its_deadline_once_its_cancellation_is_sent() {
    let (upstream, pipeline) = start(false).await;
    abandon_calls(&upstream, &pipeline, 3).await;
    within(
        20,
        "the cancellations reach the upstream",
        upstream.until(|u| u.cancelled.load(Ordering::SeqCst) == 3),
    )
    .await;
    within(
        20,
        "the abandoned calls' streams close",
        upstream.until(|u| u.open.load(Ordering::SeqCst) == 0),
    )
    .await;
}

/// rmcp sends one cancellation at a time and gives each five seconds: an upstream that
/// never answers them would have the last of `CALLS` streams held for `CALLS` × 5 s, and
/// a few hundred for half an hour. Each is closed at its call's deadline at the latest.
#[tokio::test]
async fn an_abandoned_calls_stream_closes_though_the_upstream_holds_its_cancellation() {
    const CALLS: usize = 6;
    let (upstream, pipeline) = start(true).await;
    abandon_calls(&upstream, &pipeline, CALLS).await;
    // Held by rmcp, 30 s; at their deadlines, 4 s (and slack for a loaded machine).
    within(
        15,
        "the abandoned calls' streams close",
        upstream.until(|u| u.open.load(Ordering::SeqCst) == 0),
    )
    .await;
}

/// The place an abandoned call held among the upstream's requests in flight
/// (`max_connections`) is kept after toolgate lets go of its stream at the call's
/// deadline: the upstream may still run the call (it held the cancellation), and a
/// caller's short deadline must not free places the upstream is still using. It is given
/// back at the upstream's `call_timeout` after the call was given up (unit tests of
/// `cancelled` and `places`, with paused time).
#[tokio::test]
async fn an_abandoned_calls_place_is_kept_after_its_stream_is_let_go() {
    const CALLS: usize = 6;
    let (upstream, pipeline) = start_bounded(true, CALLS).await;
    abandon_calls(&upstream, &pipeline, CALLS).await;
    within(
        15,
        "the abandoned calls' streams close",
        upstream.until(|u| u.open.load(Ordering::SeqCst) == 0),
    )
    .await;
    // Every place is still taken: a call waits for one until its deadline, unsent.
    let options = InvokeOptions::new().timeout(Duration::from_millis(500));
    let refused = within(
        10,
        "a call that waits",
        pipeline.invoke("hold", json!({"region": "eu"}), options),
    )
    .await
    .expect_err("no place while the abandoned calls may still run");
    assert_eq!(refused.code(), "upstream_busy", "{refused}");
    assert_eq!(upstream.open.load(Ordering::SeqCst), 0, "sent");
}
