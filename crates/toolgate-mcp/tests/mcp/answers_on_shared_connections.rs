//! An answer an upstream writes where it does not belong — on one call's response stream,
//! or as the JSON answer to one call's POST, with the id of another request on the shared
//! connection — answers nobody: it never reaches the call (and caller) whose id it names,
//! whether that call was sent from the calling task or through rmcp, and the call whose
//! stream carried it still gets its own answer, or a clear error. Nor does an answer on the
//! standalone stream, which answers no request: it is dropped and counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::common::hand_written::{event_stream, initialized, json_answer};
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_mcp::{UNATTRIBUTED, UpstreamConfig};

/// A streamable-HTTP upstream at 2025-11-25 with two tools: `hdr`, whose argument goes in a
/// header (`x-mcp-header`), so that its calls go through rmcp with rmcp's numeric ids, and
/// `steal`, sent from the calling task. A call of `hdr` without `mode` is the victim: it is
/// answered only when released. A call with `mode` `on_stream` writes the victim's answer
/// on its own stream, then its own answer; one with `mode` `as_json` answers its POST with
/// the victim's answer as JSON; one with `mode` `on_resume` sends one event with an id and
/// closes its stream, and writes the victim's answer, then its own, on the stream resumed
/// from that id (a GET with `Last-Event-ID`). With `steal_on_standalone`, the standalone
/// stream (a GET without `Last-Event-ID`) of every connection is opened, and carries a
/// forged answer to the victim once the victim is in flight; without it, the GET is
/// refused.
#[derive(Default)]
struct Upstream {
    steal_on_standalone: bool,
    /// How many standalone streams the forged answer was written on.
    stolen_on_standalone: AtomicU64,
    /// Whether the victim was let be answered after a forged answer: once.
    released_after_forgery: AtomicBool,
    victim: Mutex<Option<Value>>,
    /// The id of the call whose stream is to be resumed.
    resumed: Mutex<Option<Value>>,
    victim_arrived: Notify,
    release_victim: Notify,
}

fn event(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

fn answer(id: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})
}

fn sse(events: mpsc::Receiver<String>) -> Response {
    event_stream(futures::stream::unfold(events, |mut events| async move {
        let event = events.recv().await?;
        Some((event, events))
    }))
}

async fn posted(State(upstream): State<Arc<Upstream>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => initialized(&id, "wrong-ids"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "steal", "inputSchema": {"type": "object"}},
            {"name": "hdr", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}}},
        ]}})),
        "tools/call" => upstream.call(id, &message["params"]).await,
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

impl Upstream {
    async fn call(self: Arc<Self>, id: Value, params: &Value) -> Response {
        let (events, stream) = mpsc::channel(4);
        match params["arguments"]["mode"].as_str() {
            None => {
                *self.victim.lock().expect("victim") = Some(id.clone());
                self.victim_arrived.notify_waiters();
                tokio::spawn(async move {
                    self.release_victim.notified().await;
                    let _ = events
                        .send(event(&answer(&id, "the victim's own answer")))
                        .await;
                });
            }
            Some("as_json") => {
                let victim = self.victim().await;
                return json_answer(answer(&victim, "stolen"));
            }
            Some("on_resume") => {
                *self.resumed.lock().expect("resumed") = Some(id);
                let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                                 "params": {"level": "info", "data": "x"}});
                let _ = events
                    .send(format!("id: before-the-break\nretry: 10\n{}", event(&log)))
                    .await;
                // Dropping the sender ends the stream.
                return sse(stream);
            }
            Some(_) => {
                tokio::spawn(self.steal_then_answer(id, events));
            }
        }
        sse(stream)
    }

    /// The resumed stream of the call whose mode is `on_resume`, or the standalone stream.
    async fn resume(self: Arc<Self>, last_event_id: Option<&str>) -> Response {
        if last_event_id.is_none() && self.steal_on_standalone {
            let (events, stream) = mpsc::channel(4);
            tokio::spawn(self.steal_on_standalone(events));
            return sse(stream);
        }
        let resumed = self.resumed.lock().expect("resumed").clone();
        let (Some("before-the-break"), Some(id)) = (last_event_id, resumed) else {
            return StatusCode::METHOD_NOT_ALLOWED.into_response();
        };
        let (events, stream) = mpsc::channel(4);
        tokio::spawn(self.steal_then_answer(id, events));
        sse(stream)
    }

    /// Writes on `events`, the stream of the thief's call `id`, the victim's answer once the
    /// victim is in flight, then the thief's own; then lets the victim be answered.
    async fn steal_then_answer(self: Arc<Self>, id: Value, events: mpsc::Sender<String>) {
        let victim = self.victim().await;
        let _ = events.send(event(&answer(&victim, "stolen"))).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = events
            .send(event(&answer(&id, "the thief's own answer")))
            .await;
        self.release_victim.notify_waiters();
    }

    /// Writes on `events`, a standalone stream, a forged answer to the victim once the
    /// victim is in flight, then (the first to) lets the victim be answered on its own
    /// stream; keeps the standalone stream open. Which connection the victim was sent on
    /// is not known here: every connection's standalone stream carries the forgery.
    async fn steal_on_standalone(self: Arc<Self>, events: mpsc::Sender<String>) {
        let victim = self.victim().await;
        if events.send(event(&answer(&victim, "stolen"))).await.is_ok() {
            self.stolen_on_standalone.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !self.released_after_forgery.swap(true, Ordering::SeqCst) {
            self.release_victim.notify_waiters();
        }
        events.closed().await;
    }

    async fn victim(&self) -> Value {
        loop {
            if let Some(victim) = self.victim.lock().expect("victim").clone() {
                return victim;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn start() -> (Arc<Upstream>, Arc<Pipeline>) {
    serve(Upstream::default(), "wrong-ids").await
}

/// `upstream`, configured as `name`, and a pipeline with its tools.
async fn serve(upstream: Upstream, name: &str) -> (Arc<Upstream>, Arc<Pipeline>) {
    let upstream = Arc::new(upstream);
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(posted).get(
                |State(upstream): State<Arc<Upstream>>, headers: axum::http::HeaderMap| async move {
                    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
                    upstream.resume(last).await
                },
            ),
        )
        .with_state(Arc::clone(&upstream));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http(name, url)
        .discover(false)
        .call_timeout(Duration::from_secs(10));
    let (_, pipeline) = imported(config).await;
    (upstream, Arc::new(pipeline))
}

async fn call(pipeline: &Pipeline, tool: &str, arguments: Value) -> Result<String, String> {
    pipeline
        .invoke(tool, arguments, InvokeOptions::new())
        .await
        .map(|output| output.to_string())
        .map_err(|e| e.to_string())
}

/// Starts the victim (a call through rmcp), runs the thief (`tool` with `mode`) once the
/// victim is in flight, releases the victim; both outcomes.
async fn victim_and_thief(
    upstream: &Arc<Upstream>,
    pipeline: &Arc<Pipeline>,
    tool: &str,
    mode: &str,
) -> (Result<String, String>, Result<String, String>) {
    let victim = tokio::spawn({
        let pipeline = Arc::clone(pipeline);
        async move { call(&pipeline, "hdr", json!({"region": "eu"})).await }
    });
    within(10, "the victim's call", upstream.victim_arrived.notified()).await;
    let thief = within(
        20,
        "the thief's call",
        call(pipeline, tool, json!({"region": "us", "mode": mode})),
    )
    .await;
    upstream.release_victim.notify_waiters();
    let victim = within(20, "the victim's answer", victim)
        .await
        .expect("the victim's task");
    (victim, thief)
}

/// A victim's and a thief's call of `tool` on one connection, the upstream answering the
/// thief's as `mode` says: each gets its own answer, the victim's never going to the thief,
/// nor the stolen one to the victim.
async fn each_gets_its_own(tool: &str, mode: &str) {
    let (upstream, pipeline) = start().await;
    let (victim, thief) = victim_and_thief(&upstream, &pipeline, tool, mode).await;
    assert!(
        victim
            .as_ref()
            .is_ok_and(|v| v.contains("the victim's own")),
        "{tool}: {victim:?}"
    );
    assert!(
        thief.as_ref().is_ok_and(|t| t.contains("the thief's own")),
        "{tool}: {thief:?}"
    );
}

#[tokio::test]
async fn another_calls_answer_on_a_direct_calls_stream_reaches_neither() {
    each_gets_its_own("steal", "on_stream").await;
}

#[tokio::test]
async fn another_calls_answer_on_the_stream_of_a_call_through_rmcp_reaches_neither() {
    each_gets_its_own("hdr", "on_stream").await;
}

#[tokio::test]
async fn another_calls_answer_as_a_posts_json_answer_fails_only_that_post() {
    let (upstream, pipeline) = start().await;
    for tool in ["steal", "hdr"] {
        *upstream.victim.lock().expect("victim") = None;
        let (victim, thief) = victim_and_thief(&upstream, &pipeline, tool, "as_json").await;
        assert!(
            victim
                .as_ref()
                .is_ok_and(|v| v.contains("the victim's own")),
            "{tool}: {victim:?}"
        );
        let thief = thief.expect_err("the thief's call has no answer");
        assert!(
            thief.contains("MCP server `wrong-ids` answered with something other than"),
            "{tool}: {thief}"
        );
    }
    // The connection is still everyone's: later calls are answered.
    let (victim, thief) = victim_and_thief(&upstream, &pipeline, "steal", "on_stream").await;
    assert!(victim.is_ok() && thief.is_ok(), "{victim:?} {thief:?}");
}

#[tokio::test]
async fn another_calls_answer_on_a_resumed_stream_reaches_neither() {
    for tool in ["hdr", "steal"] {
        each_gets_its_own(tool, "on_resume").await;
    }
}

#[tokio::test]
async fn an_answer_on_the_standalone_stream_reaches_no_call_and_is_counted() {
    let dropped = dropped_answers();
    let upstream = Upstream {
        steal_on_standalone: true,
        ..Upstream::default()
    };
    let (upstream, pipeline) = serve(upstream, "standalone-thief").await;
    let victim = within(
        20,
        "the victim's answer",
        call(&pipeline, "hdr", json!({"region": "eu"})),
    )
    .await;
    assert!(
        victim
            .as_ref()
            .is_ok_and(|v| v.contains("the victim's own")),
        "{victim:?}"
    );
    let forged = upstream.stolen_on_standalone.load(Ordering::SeqCst);
    assert!(forged >= 1, "no standalone stream carried the forgery");
    assert_eq!(dropped.of("standalone-thief"), forged);
}

/// The answers dropped as no caller's ([`UNATTRIBUTED`], `kind` `answer`), by upstream: the
/// recorder of this test binary's metrics, installed on first use.
#[derive(Default)]
struct DroppedAnswers(Mutex<HashMap<String, Arc<AtomicU64>>>);

fn dropped_answers() -> &'static DroppedAnswers {
    static RECORDER: OnceLock<&'static DroppedAnswers> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static DroppedAnswers = Box::leak(Box::default());
        metrics::set_global_recorder(recorder).expect("no other recorder in this test binary");
        recorder
    })
}

impl DroppedAnswers {
    fn of(&self, server: &str) -> u64 {
        self.0
            .lock()
            .expect("counters")
            .get(server)
            .map_or(0, |count| count.load(Ordering::SeqCst))
    }
}

impl metrics::Recorder for DroppedAnswers {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let label = |name: &str| {
            key.labels()
                .find(|label| label.key() == name)
                .map(|label| label.value().to_owned())
        };
        match (key.name() == UNATTRIBUTED, label("kind"), label("server")) {
            (true, Some(kind), Some(server)) if kind == "answer" => {
                let mut counts = self.0.lock().expect("counters");
                Counter::from_arc(Arc::clone(counts.entry(server).or_default()))
            }
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
