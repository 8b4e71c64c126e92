//! A caller's request other than `tools/call` — `resources/read`, `prompts/get` — that its
//! caller gives up is cancelled upstream (`notifications/cancelled`) and its response
//! stream let go — at the request's deadline at the latest, its place kept longer, until the
//! upstream's `call_timeout` — even when the upstream ignores the cancellation and never
//! ends the stream; another caller's request on the same connection goes on and is
//! answered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::hand_written::{event_stream, json_answer};
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_mcp::UpstreamConfig;

/// A streamable-HTTP upstream at 2025-11-25 with resources and one prompt, `slow`. A read
/// of `slow://kept` is answered once [`released`](Self::released); any other read, every
/// `prompts/get` and every `resources/list` (asked as `list <its id>`) gets a response
/// stream that never ends and carries nothing.
/// `notifications/cancelled` is recorded and ignored, and never answered if
/// `holds_cancellations`.
#[derive(Default)]
struct Upstream {
    /// The id of each read, prompt or list asked, by what it asked (its URI, `prompt`, or
    /// `list <its id>`).
    asked: Mutex<HashMap<String, Value>>,
    /// The ids of the requests whose response stream the server still holds open.
    open: Mutex<HashSet<String>>,
    /// The request ids that `notifications/cancelled` named.
    cancelled: Mutex<Vec<Value>>,
    /// Notified when a request is asked, a stream closes or a cancellation comes.
    changed: Notify,
    /// Lets the read of `slow://kept` be answered.
    released: CancellationToken,
    /// Whether a `notifications/cancelled` is never answered.
    holds_cancellations: bool,
}

/// Holds a request's stream open in [`Upstream::open`] while it lives.
struct Open(Arc<Upstream>, String);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.lock().unwrap().remove(&self.1);
        self.0.changed.notify_waiters();
    }
}

impl Upstream {
    /// Records request `id` as asking for `what`, its stream open.
    fn asked(self: &Arc<Self>, what: &str, id: &Value) -> Open {
        self.asked
            .lock()
            .unwrap()
            .insert(what.to_owned(), id.clone());
        self.open.lock().unwrap().insert(id.to_string());
        self.changed.notify_waiters();
        Open(Arc::clone(self), id.to_string())
    }

    /// The id of the request that asked for `what`, once asked.
    fn id_of(&self, what: &str) -> Option<Value> {
        self.asked.lock().unwrap().get(what).cloned()
    }

    /// The ids of the lists asked.
    fn lists(&self) -> Vec<Value> {
        let asked = self.asked.lock().unwrap();
        let lists = asked.iter().filter(|(what, _)| what.starts_with("list "));
        lists.map(|(_, id)| id.clone()).collect()
    }

    fn is_open(&self, id: &Value) -> bool {
        self.open.lock().unwrap().contains(&id.to_string())
    }

    fn was_cancelled(&self, id: &Value) -> bool {
        self.cancelled.lock().unwrap().contains(id)
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
}

/// A stream that stays open, holding `open`, until the server drops it.
fn never_ending(open: Open) -> Response {
    event_stream(futures::stream::unfold(open, |open| async move {
        std::future::pending::<()>().await;
        Some((String::new(), open))
    }))
}

async fn posted(State(upstream): State<Arc<Upstream>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
            "serverInfo": {"name": "deaf", "version": "1"}}})),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": []}})),
        "prompts/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "prompts": [{"name": "slow"}]}})),
        "resources/read" if message["params"]["uri"] == "slow://kept" => {
            let open = upstream.asked("slow://kept", &id);
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"contents": [
                {"uri": "slow://kept", "text": "kept"}]}});
            let released = upstream.released.clone();
            event_stream(futures::stream::once(async move {
                released.cancelled().await;
                drop(open);
                format!("event: message\ndata: {answer}\n\n")
            }))
        }
        "resources/read" => {
            let uri = message["params"]["uri"].as_str().unwrap_or_default();
            never_ending(upstream.asked(uri, &id))
        }
        "prompts/get" => never_ending(upstream.asked("prompt", &id)),
        "resources/list" => never_ending(upstream.asked(&format!("list {id}"), &id)),
        "notifications/cancelled" => {
            let named = message["params"]["requestId"].clone();
            upstream.cancelled.lock().unwrap().push(named);
            upstream.changed.notify_waiters();
            if upstream.holds_cancellations {
                std::future::pending::<()>().await;
            }
            StatusCode::ACCEPTED.into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

async fn start(holds_cancellations: bool) -> (Arc<Upstream>, Arc<Pipeline>) {
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
        .call_timeout(Duration::from_secs(120));
    let (_, pipeline) = imported(config).await;
    (upstream, Arc::new(pipeline))
}

/// The deadline of the requests given up here: the upstream never ends their streams, so
/// their places, and the streams, are held until it.
const DEADLINE: Duration = Duration::from_secs(4);

/// Starts a read of `slow://kept` by one caller, and `abandoned` by another (given up as
/// `give_up` has it, once its request is asked); checks that the abandoned request
/// (`what`, as [`Upstream::asked`] names it) is cancelled upstream and its stream closed,
/// and that the read of the first caller is answered all the same.
async fn abandon_beside_a_read_that_goes_on(
    what: &str,
    tool: &'static str,
    input: Value,
    give_up: GiveUp,
) {
    let (upstream, pipeline) = start(false).await;
    let kept = read_kept(&pipeline);
    let cancellation = CancellationToken::new();
    let abandoned = tokio::spawn({
        let pipeline = Arc::clone(&pipeline);
        let options = InvokeOptions::new()
            .cancellation(cancellation.clone())
            .timeout(DEADLINE);
        async move { pipeline.invoke(tool, input, options).await }
    });
    within(
        20,
        "both requests reach the upstream",
        upstream.until(|u| u.id_of("slow://kept").is_some() && u.id_of(what).is_some()),
    )
    .await;
    let (kept_id, abandoned_id) = (
        upstream.id_of("slow://kept").unwrap(),
        upstream.id_of(what).unwrap(),
    );
    match give_up {
        GiveUp::Cancel => {
            cancellation.cancel();
            let answer = within(20, "the cancelled invocation ends", abandoned).await;
            assert!(answer.unwrap().is_err(), "a cancelled invocation fails");
        }
        GiveUp::Drop => abandoned.abort(),
    }
    within(
        20,
        "the abandoned request is cancelled upstream",
        upstream.until(|u| u.was_cancelled(&abandoned_id)),
    )
    .await;
    within(
        20,
        "the abandoned request's stream closes",
        upstream.until(|u| !u.is_open(&abandoned_id)),
    )
    .await;
    assert!(
        upstream.is_open(&kept_id) && !upstream.was_cancelled(&kept_id),
        "the other caller's read goes on"
    );
    upstream.released.cancel();
    let read = within(20, "the other caller's read is answered", kept)
        .await
        .unwrap()
        .expect("the other caller's read");
    assert_eq!(read["contents"][0]["text"], "kept", "{read}");
}

/// Starts a read of `slow://kept`, answered once the upstream is released.
fn read_kept(
    pipeline: &Arc<Pipeline>,
) -> tokio::task::JoinHandle<Result<Value, toolgate_core::ToolError>> {
    let pipeline = Arc::clone(pipeline);
    tokio::spawn(async move {
        let input = json!({"uri": "slow://kept"});
        pipeline
            .invoke("resources.deaf", input, InvokeOptions::new())
            .await
    })
}

/// How the caller of the abandoned request gives it up.
enum GiveUp {
    /// The invocation's cancellation token is cancelled.
    Cancel,
    /// The invocation's future is dropped.
    Drop,
}

#[tokio::test]
async fn a_cancelled_resource_read_is_cancelled_upstream_and_its_stream_closed() {
    abandon_beside_a_read_that_goes_on(
        "slow://abandoned",
        "resources.deaf",
        json!({"uri": "slow://abandoned"}),
        GiveUp::Cancel,
    )
    .await;
}

#[tokio::test]
async fn a_dropped_resource_read_is_cancelled_upstream_and_its_stream_closed() {
    abandon_beside_a_read_that_goes_on(
        "slow://abandoned",
        "resources.deaf",
        json!({"uri": "slow://abandoned"}),
        GiveUp::Drop,
    )
    .await;
}

#[tokio::test]
async fn a_cancelled_prompt_is_cancelled_upstream_and_its_stream_closed() {
    abandon_beside_a_read_that_goes_on("prompt", "prompt.slow", json!({}), GiveUp::Cancel).await;
}

/// rmcp lets a request's stream go once its cancellation is sent, but sends one
/// cancellation at a time and gives each five seconds: an upstream that never answers
/// them would have the last of `READS` abandoned reads' streams held for `READS` × 5 s
/// (a few hundred for half an hour). Each is let go a grace after its caller went away.
#[tokio::test]
async fn abandoned_reads_streams_close_though_the_upstream_holds_their_cancellations() {
    const READS: usize = 6;
    let (upstream, pipeline) = start(true).await;
    let kept = read_kept(&pipeline);
    let uri = |n: usize| format!("slow://abandoned/{n}");
    let abandoned: Vec<_> = (0..READS)
        .map(|n| {
            let pipeline = Arc::clone(&pipeline);
            let input = json!({"uri": uri(n)});
            tokio::spawn(async move {
                let options = InvokeOptions::new().timeout(DEADLINE);
                let _ = pipeline.invoke("resources.deaf", input, options).await;
            })
        })
        .collect();
    within(
        20,
        "every read reaches the upstream",
        upstream.until(|u| {
            (0..READS).all(|n| u.id_of(&uri(n)).is_some()) && u.id_of("slow://kept").is_some()
        }),
    )
    .await;
    let ids: Vec<_> = (0..READS)
        .map(|n| upstream.id_of(&uri(n)).unwrap())
        .collect();
    for read in abandoned {
        read.abort();
    }
    within(
        20,
        "a cancellation reaches the upstream",
        upstream.until(|u| ids.iter().any(|id| u.was_cancelled(id))),
    )
    .await;
    // Held by rmcp, 30 s; at their deadlines, 4 s (and slack for a loaded machine).
    within(
        15,
        "the abandoned reads' streams close",
        upstream.until(|u| ids.iter().all(|id| !u.is_open(id))),
    )
    .await;
    let kept_id = upstream.id_of("slow://kept").unwrap();
    assert!(
        upstream.is_open(&kept_id) && !upstream.was_cancelled(&kept_id),
        "the other caller's read goes on"
    );
    upstream.released.cancel();
    let read = within(20, "the other caller's read is answered", kept)
        .await
        .unwrap()
        .expect("the other caller's read");
    assert_eq!(read["contents"][0]["text"], "kept", "{read}");
}

/// Lists, like reads, are cancelled upstream and their streams let go a grace after their
/// caller went away, though the upstream holds the cancellations (rmcp's own lists let
/// each go only once its cancellation is sent, one at a time, five seconds each).
#[tokio::test]
async fn abandoned_lists_streams_close_though_the_upstream_holds_their_cancellations() {
    const LISTS: usize = 6;
    let (upstream, pipeline) = start(true).await;
    let kept = read_kept(&pipeline);
    let abandoned: Vec<_> = (0..LISTS)
        .map(|_| {
            let pipeline = Arc::clone(&pipeline);
            tokio::spawn(async move {
                let input = json!({"list": "resources"});
                let options = InvokeOptions::new().timeout(DEADLINE);
                let _ = pipeline.invoke("resources.deaf", input, options).await;
            })
        })
        .collect();
    within(
        20,
        "every list and the read reach the upstream",
        upstream.until(|u| u.lists().len() == LISTS && u.id_of("slow://kept").is_some()),
    )
    .await;
    let ids = upstream.lists();
    for list in abandoned {
        list.abort();
    }
    within(
        20,
        "a cancellation reaches the upstream",
        upstream.until(|u| ids.iter().any(|id| u.was_cancelled(id))),
    )
    .await;
    // Held by rmcp, 30 s; at their deadlines, 4 s (and slack for a loaded machine).
    within(
        15,
        "the abandoned lists' streams close",
        upstream.until(|u| ids.iter().all(|id| !u.is_open(id))),
    )
    .await;
    let kept_id = upstream.id_of("slow://kept").unwrap();
    assert!(
        upstream.is_open(&kept_id) && !upstream.was_cancelled(&kept_id),
        "the other caller's read goes on"
    );
    upstream.released.cancel();
    let read = within(20, "the other caller's read is answered", kept)
        .await
        .unwrap()
        .expect("the other caller's read");
    assert_eq!(read["contents"][0]["text"], "kept", "{read}");
}
