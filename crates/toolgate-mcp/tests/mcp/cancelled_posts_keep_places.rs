//! A call its caller gives up while its POST is still under way — before the upstream's
//! answer's head comes — keeps its place in the caller's share of an HTTP upstream
//! (`max_connections_per_caller`) while the upstream may run it. One toolgate sends from
//! the calling task gives it back as soon as the upstream is known to be done: its answer
//! comes, or its connection closes — not at the call's hold limit (its deadline, two
//! minutes here). One left to rmcp, whose POST goes with the request given up, keeps it
//! until its hold limit (or until the upstream's connection closes); so does one given up
//! while rmcp resumes its stream (a GET with `Last-Event-ID`), before the resumed
//! stream's head comes. Against a real upstream on loopback that holds its answer's head until the test lets it go; every
//! step is told by the upstream or by a call's outcome, none by the clock.

use std::sync::Arc;
use std::time::Duration;

use crate::common::hand_written::{event_stream, initialized, json_answer};
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc, oneshot, watch};
use toolgate_core::{InvokeOptions, Pipeline, User};
use toolgate_mcp::UpstreamConfig;

/// A call that reached the upstream: answered when `answer` is sent.
type Arrived = oneshot::Sender<()>;

/// The upstream: each `tools/call` is told to the test, and answered (JSON) when the test
/// says so. It has three tools: `work`; `work_in_region`, the same with an argument sent
/// in a header too, so that toolgate leaves its calls to rmcp; and `polled_in_region`, as
/// `work_in_region` but whose stream the upstream ends at once (SEP-1699), with an event
/// id: the stream rmcp resumes from it ([`resumed`]) is what the test is told of.
async fn posted(State(calls): State<mpsc::UnboundedSender<Arrived>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => initialized(&id, "slow"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "work", "inputSchema": {"type": "object"}},
            {"name": "work_in_region", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}}},
            {"name": "polled_in_region", "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}}},
        ]}})),
        "tools/call" if message["params"]["name"] == "polled_in_region" => {
            let primed = format!("id: {id}\nretry: 10\ndata: \n\n");
            event_stream(futures::stream::iter([primed]))
        }
        "tools/call" => {
            let (answer, answered) = oneshot::channel();
            let _ = calls.send(answer);
            // Dropped unanswered when the connection closes.
            let _ = answered.await;
            json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": "worked"}]}}))
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// The resume of a `polled_in_region` call's stream (its event id is the call's id): told
/// to the test, and its head held until the test answers the call, which it then carries.
async fn resumed(
    State(calls): State<mpsc::UnboundedSender<Arrived>>,
    headers: HeaderMap,
) -> Response {
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let Some(id) = last.and_then(|last| serde_json::from_str::<Value>(last).ok()) else {
        // No standalone stream.
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    let (answer, answered) = oneshot::channel();
    let _ = calls.send(answer);
    let _ = answered.await;
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
        "content": [{"type": "text", "text": "worked"}]}});
    event_stream(futures::stream::iter([format!("data: {answer}\n\n")]))
}

/// Forwards every connection on a loopback port to `to`, until `cut` is told: then
/// every connection open is closed (new ones are forwarded still).
async fn forwarder(to: String, cut: watch::Receiver<u64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut cut = cut.clone();
            cut.mark_unchanged();
            let to = to.clone();
            tokio::spawn(async move {
                let mut outbound = TcpStream::connect(to).await.expect("the upstream");
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    _ = cut.changed() => {}
                }
            });
        }
    });
    url
}

struct Test {
    /// The tool Ann calls.
    tool: &'static str,
    pipeline: Arc<Pipeline>,
    /// The calls that reach the upstream, in order.
    calls: Mutex<mpsc::UnboundedReceiver<Arrived>>,
    /// Closes every connection to the upstream open now.
    cut: watch::Sender<u64>,
}

/// The upstream on loopback, behind a forwarder, imported: at most 8 requests in flight
/// to it, one of them a caller's; a call's deadline two minutes away. Ann calls `tool`.
async fn start(tool: &'static str) -> Test {
    start_with(tool, Duration::from_secs(120)).await
}

/// [`start`], the upstream's `call_timeout` — the hold limit of a call given up —
/// `call_timeout`.
async fn start_with(tool: &'static str, call_timeout: Duration) -> Test {
    let (calls_in, calls) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(posted).get(resumed))
        .with_state(calls_in);
    let upstream = serve_on_loopback(app).await;
    let (cut, cuts) = watch::channel(0);
    let url = forwarder(upstream.replace("http://", ""), cuts).await + "/mcp";
    let config = UpstreamConfig::http("slow", url)
        .discover(false)
        .max_connections(8)
        .max_connections_per_caller(1)
        .call_timeout(call_timeout);
    let (_, pipeline) = imported(config).await;
    Test {
        tool,
        pipeline: Arc::new(pipeline),
        calls: Mutex::new(calls),
        cut,
    }
}

impl Test {
    /// Ann's call of the test's tool, started, with `timeout`.
    fn call(&self, timeout: Duration) -> tokio::task::JoinHandle<Result<Value, String>> {
        let pipeline = Arc::clone(&self.pipeline);
        let options = InvokeOptions::new().user(User::new("ann")).timeout(timeout);
        let tool = self.tool;
        tokio::spawn(async move {
            pipeline
                .invoke(tool, json!({"region": "eu"}), options)
                .await
                .map_err(|e| e.to_string())
        })
    }

    /// The next call to reach the upstream (for `polled_in_region`, its stream's resume),
    /// its answer's head held.
    async fn arrived(&self) -> Arrived {
        within(
            20,
            "a call to reach the upstream",
            self.calls.lock().await.recv(),
        )
        .await
        .expect("the upstream runs")
    }

    /// Ann starts a call and gives it up once the upstream has its POST, before the
    /// answer's head: what answers it.
    async fn given_up_under_way(&self) -> Arrived {
        self.given_up_under_way_within(Duration::from_secs(120))
            .await
    }

    /// [`given_up_under_way`](Self::given_up_under_way), the call given up having had
    /// `timeout`: its hold limit that far from its start.
    async fn given_up_under_way_within(&self, timeout: Duration) -> Arrived {
        let given_up = self.call(timeout);
        let answer = self.arrived().await;
        given_up.abort();
        let _ = given_up.await;
        answer
    }

    /// Ann's share is still taken by the call given up: a call of hers waits for it
    /// until its deadline, and fails saying so, unsent.
    async fn share_still_taken(&self) {
        self.share_still_taken_for(Duration::from_millis(300)).await;
    }

    /// [`share_still_taken`](Self::share_still_taken), the call that waits having
    /// `timeout`.
    async fn share_still_taken_for(&self, timeout: Duration) {
        let refused = within(20, "a call that waits", self.call(timeout))
            .await
            .expect("ran");
        let error = refused.expect_err("no place in ann's share");
        assert!(
            error.contains("max_connections_per_caller"),
            "not refused for her share: {error}"
        );
        assert!(self.calls.lock().await.try_recv().is_err(), "never sent");
    }

    /// Ann's share is hers again: a call of hers reaches the upstream and is answered —
    /// at once, its deadline (60 s) coming long before the hold limit of a call given up
    /// with 120 s; or once that limit has passed, for one given up with less.
    async fn share_given_back(&self) {
        let next = self.call(Duration::from_secs(60));
        let _ = self.arrived().await.send(());
        let answered = within(60, "ann's next call", next).await.expect("ran");
        assert!(answered.is_ok(), "ann's next call: {answered:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_up_before_the_answers_head_keeps_its_place_until_the_answer_comes() {
    let test = start("work").await;
    let answer = test.given_up_under_way().await;
    test.share_still_taken().await;
    let _ = answer.send(());
    test.share_given_back().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_up_before_the_answers_head_keeps_its_place_until_its_connection_closes() {
    let test = start("work").await;
    let _answer = test.given_up_under_way().await;
    test.share_still_taken().await;
    test.cut.send_modify(|cuts| *cuts += 1);
    test.share_given_back().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_rmcp_given_up_before_the_answers_head_keeps_its_place_until_its_hold_limit()
{
    // Its hold limit (the upstream's `call_timeout` after it was given up) comes while
    // the upstream still holds its answer.
    let test = start_with("work_in_region", Duration::from_secs(6)).await;
    let _answer = test.given_up_under_way_within(Duration::from_secs(6)).await;
    test.share_still_taken_for(Duration::from_secs(3)).await;
    test.share_given_back().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_up_while_rmcp_resumes_its_stream_keeps_its_place_until_its_hold_limit() {
    let test = start_with("polled_in_region", Duration::from_secs(10)).await;
    let _answer = test
        .given_up_under_way_within(Duration::from_secs(10))
        .await;
    // Past the two seconds after the cancel that a place kept for a resume no resume took
    // is held (twice that), and short of the hold limit: still taken.
    test.share_still_taken_for(Duration::from_secs(4)).await;
    test.share_given_back().await;
}
