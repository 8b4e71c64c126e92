//! The bound on the requests in flight to one HTTP upstream
//! ([`UpstreamConfig::max_connections`]), against a real server on loopback that counts
//! the calls it is running and the TCP connections it accepts: a burst past the bound
//! waits its turn and is answered, a call still waiting at its deadline fails with 503
//! `upstream_busy` in words, and a waiting call its caller gave up on was never sent and
//! holds nothing — for the upstream's shared connection and its callers' own alike.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{imported, within};
use serde_json::json;
use tokio::sync::Semaphore;
use toolgate_core::secret::Secret;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_mcp::{McpServer, StaticCallerCredentials, UpstreamBounds, UpstreamConfig};

/// What the upstream saw.
#[derive(Default)]
struct Seen {
    /// TCP connections accepted.
    accepted: AtomicUsize,
    /// Calls running now.
    running: AtomicUsize,
    /// The most calls running at once.
    most: AtomicUsize,
    /// Calls started.
    started: AtomicUsize,
    /// HTTP POSTs received (every request, notification and answer).
    posts: AtomicUsize,
    /// Of those, the ones sent with bob's credentials.
    bobs_posts: AtomicUsize,
}

/// A call counted as running while it lives.
struct Running(Arc<Seen>);

impl Running {
    fn start(seen: &Arc<Seen>) -> Running {
        seen.started.fetch_add(1, Ordering::SeqCst);
        let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
        seen.most.fetch_max(now, Ordering::SeqCst);
        Running(Arc::clone(seen))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An upstream with `work` (runs `ms` milliseconds), `work_in_region` (the same, with an
/// argument sent in a header too: toolgate leaves such a call to rmcp's client), and
/// `hold` (runs until `gate` gives it a permit); its URL.
async fn upstream(seen: &Arc<Seen>, gate: &Arc<Semaphore>) -> String {
    let any = json!({"type": "object"});
    let in_region = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}});
    let work = |name: &str, schema: serde_json::Value| {
        let seen = Arc::clone(seen);
        JsonTool::new(name, "Works `ms` ms.", schema, move |input, _| {
            let running = Running::start(&seen);
            let ms = input["ms"].as_u64().unwrap_or(0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                drop(running);
                Ok::<_, ToolError>(json!({"text": "worked"}))
            })
        })
    };
    let hold = {
        let (seen, gate) = (Arc::clone(seen), Arc::clone(gate));
        JsonTool::new("hold", "Runs until released.", any.clone(), move |_, _| {
            let running = Running::start(&seen);
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                gate.acquire().await.expect("open").forget();
                drop(running);
                Ok::<_, ToolError>(json!({"text": "held"}))
            })
        })
    };
    let pipeline = Pipeline::builder()
        .tool(work("work", any.clone()))
        .tool(work("work_in_region", in_region))
        .tool(hold)
        .build()
        .expect("built");
    let config = rmcp::transport::StreamableHttpServerConfig::default();
    let counted = Arc::clone(seen);
    let app = axum::Router::new()
        .nest_service("/mcp", McpServer::new(pipeline).http_service(config))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                if request.method() == axum::http::Method::POST {
                    counted.posts.fetch_add(1, Ordering::SeqCst);
                    let bobs = request
                        .headers()
                        .get(axum::http::header::AUTHORIZATION)
                        .is_some_and(|value| value.as_bytes().ends_with(b"token-of-bob"));
                    if bobs {
                        counted.bobs_posts.fetch_add(1, Ordering::SeqCst);
                    }
                }
                next.run(request)
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("bound"));
    let seen = Arc::clone(seen);
    let listener = axum::serve::ListenerExt::tap_io(listener, move |_| {
        seen.accepted.fetch_add(1, Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The upstream at `url`, at most `max` requests in flight, imported into a pipeline.
async fn bounded(url: &str, max: usize) -> Pipeline {
    imported(bounded_config(url, max)).await.1
}

/// The upstream at `url`, at most `max` requests in flight.
fn bounded_config(url: &str, max: usize) -> UpstreamConfig {
    UpstreamConfig::http("bounded", url)
        .max_connections(max)
        .call_timeout(Duration::from_secs(30))
}

/// `config`, called as each caller with a token of their own (ann's and bob's): each
/// caller on a connection of their own.
fn as_ann_or_bob(config: UpstreamConfig) -> UpstreamConfig {
    config.credentials_per_caller(StaticCallerCredentials::new(
        ["ann", "bob"].map(|user| (user, Secret::new(format!("token-of-{user}")))),
    ))
}

/// A call made as `user`.
fn as_user(user: &str) -> InvokeOptions {
    InvokeOptions::new().user(User::new(user))
}

/// A call of `hold` made with `options`, once the upstream runs it: it holds the only
/// place of a bound of 1 until [`release`] lets it end.
async fn holding_the_place(
    pipeline: &Pipeline,
    seen: &Seen,
    options: InvokeOptions,
) -> tokio::task::JoinHandle<Result<serde_json::Value, ToolError>> {
    let held = tokio::spawn({
        let pipeline = pipeline.clone();
        async move { pipeline.invoke("hold", json!({}), options).await }
    });
    until_running(seen, 1).await;
    held
}

/// Lets the call of `hold` end, and checks it was answered.
async fn release(
    gate: &Semaphore,
    held: tokio::task::JoinHandle<Result<serde_json::Value, ToolError>>,
) {
    gate.add_permits(1);
    within(10, "the held call", held)
        .await
        .expect("joined")
        .expect("answered");
}

/// Waits until the upstream runs `calls` calls.
async fn until_running(seen: &Seen, calls: usize) {
    within(10, "the held call to start", async {
        while seen.running.load(Ordering::SeqCst) < calls {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_bound_waits_its_turn_and_is_answered() {
    burst_of("work", json!({"ms": 150})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_calls_sent_through_rmcp_is_bounded_too() {
    burst_of("work_in_region", json!({"ms": 150, "region": "eu"})).await;
}

/// 20 calls at once of `tool` with `arguments`, at most 4 in flight.
async fn burst_of(tool: &str, arguments: serde_json::Value) {
    let (seen, gate) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    let pipeline = bounded(&url, 4).await;
    let before = seen.accepted.load(Ordering::SeqCst);

    let calls = (0..20).map(|_| pipeline.invoke(tool, arguments.clone(), InvokeOptions::new()));
    let answers = within(60, "20 calls", futures::future::join_all(calls)).await;
    for answer in answers {
        answer.expect("every call is answered");
    }
    let most = seen.most.load(Ordering::SeqCst);
    assert!(
        most <= 4,
        "the upstream ran {most} calls at once; at most 4 requests may be in flight"
    );
    // Four connections carry the calls (rmcp's client and toolgate's pool theirs each);
    // another may open while one of them is still on its way back to its pool.
    let opened = seen.accepted.load(Ordering::SeqCst) - before;
    assert!(
        opened <= 6,
        "20 calls at most 4 at a time opened {opened} TCP connections to the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_waiting_at_its_deadline_is_told_the_upstream_is_busy() {
    let (seen, gate) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    let pipeline = bounded(&url, 1).await;
    let held = holding_the_place(&pipeline, &seen, InvokeOptions::new()).await;

    let options = InvokeOptions::new().timeout(Duration::from_millis(400));
    let e = within(
        10,
        "the waiting call",
        pipeline.invoke("work", json!({}), options),
    )
    .await
    .expect_err("no place before the deadline");
    assert_eq!((e.status(), e.code()), (503, "upstream_busy"), "{e}");
    assert!(matches!(e, ToolError::RetryAfter { .. }), "{e:?}");
    let text = e.to_string();
    for words in [
        "`bounded`",
        "is sent at most 1 request at once",
        "`max_connections`",
        "Try again",
    ] {
        assert!(text.contains(words), "`{words}` not in: {text}");
    }
    assert_eq!(
        seen.started.load(Ordering::SeqCst),
        1,
        "the waiting call was sent"
    );

    release(&gate, held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_given_up_is_never_sent_and_holds_no_place() {
    let (seen, gate) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    let pipeline = bounded(&url, 1).await;
    let held = holding_the_place(&pipeline, &seen, InvokeOptions::new()).await;

    // Its caller gives up while it waits: the future is dropped.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        pipeline.invoke("work", json!({}), InvokeOptions::new()),
    )
    .await;
    assert!(gave_up.is_err(), "the call waits for the held one");
    release(&gate, held).await;

    within(
        10,
        "the next call",
        pipeline.invoke("work", json!({}), InvokeOptions::new()),
    )
    .await
    .expect("the next call takes the place given back");
    // The call given up never reached the upstream: it waited, and left nothing behind.
    assert_eq!(seen.started.load(Ordering::SeqCst), 2);
    assert_eq!(seen.most.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_bound_of_0_is_refused_in_plain_words() {
    let config = UpstreamConfig::http("bounded", "http://127.0.0.1:1/mcp").max_connections(0);
    let e = toolgate_mcp::Upstream::connect(config)
        .await
        .expect_err("refused");
    assert!(matches!(e, toolgate_mcp::McpError::Config(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("`bounded`")
            && text.contains("`max_connections` is 0")
            && text.contains("at least 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_with_connections_of_their_own_share_the_upstreams_bound() {
    let (seen, gate) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    // Each caller may hold the whole bound: it is the upstream's bound that is shown.
    let config = as_ann_or_bob(bounded_config(&url, 2).max_connections_per_caller(2));
    let pipeline = imported(config).await.1;
    let held: Vec<_> = ["ann", "bob"]
        .map(|user| {
            let (pipeline, options) = (pipeline.clone(), as_user(user));
            tokio::spawn(async move { pipeline.invoke("hold", json!({}), options).await })
        })
        .into_iter()
        .collect();
    until_running(&seen, 2).await;

    // Ann's own connection has one request in flight; the upstream has two.
    let options = as_user("ann").timeout(Duration::from_millis(400));
    let e = within(
        10,
        "ann's second call",
        pipeline.invoke("work", json!({}), options),
    )
    .await
    .expect_err("no place before the deadline");
    assert_eq!((e.status(), e.code()), (503, "upstream_busy"), "{e}");

    gate.add_permits(2);
    for held in held {
        within(10, "a held call", held)
            .await
            .expect("joined")
            .expect("answered");
    }
}

/// A caller's first call finds every place taken by another caller's call: its own
/// connection is not made before the call's deadline. The attempt given up is over — it
/// does not stay queued for a place and, once one is given back, set up a session
/// nobody will use (ahead of the calls queued after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_attempt_given_up_while_every_place_is_taken_sends_nothing() {
    let (seen, gate) = (Arc::<Seen>::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    let config = as_ann_or_bob(bounded_config(&url, 1));
    let pipeline = imported(config).await.1;
    let held = holding_the_place(&pipeline, &seen, as_user("ann")).await;

    // Bob's connection waits for the place Ann's call holds, past his call's deadline.
    let options = as_user("bob").timeout(Duration::from_millis(400));
    within(
        10,
        "bob's call",
        pipeline.invoke("work", json!({}), options),
    )
    .await
    .expect_err("no place before the deadline");
    release(&gate, held).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Counted by bob's credentials: what Ann's own connection sends once her call ends is
    // hers.
    assert_eq!(
        seen.bobs_posts.load(Ordering::SeqCst),
        0,
        "bob's connection attempt, given up, still reached the upstream once a place was free"
    );
    // Bob's next call, with the place free, reaches it: the count sees his requests.
    within(
        10,
        "bob's next call",
        pipeline.invoke("work", json!({}), as_user("bob")),
    )
    .await
    .expect("answered");
    assert!(seen.bobs_posts.load(Ordering::SeqCst) > 0);
}

/// A caller's connection attempt that runs out of time because every place is taken is
/// told the upstream is busy (503 `upstream_busy`), not unavailable: the upstream is not
/// down, and the attempt is no failure — once a place is free, the caller's next call
/// connects at once, not after a backoff grown by the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_attempt_out_of_time_for_a_place_is_busy_and_no_failure() {
    let (seen, gate) = (Arc::<Seen>::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    // A failed attempt would keep the next one off for 30 s.
    let backoff = toolgate_mcp::Backoff {
        initial: Duration::from_secs(30),
        max: Duration::from_secs(30),
    };
    let config = as_ann_or_bob(bounded_config(&url, 1).backoff(backoff));
    let pipeline = imported(config).await.1;
    let held = holding_the_place(&pipeline, &seen, as_user("ann")).await;

    // Bob's own connection waits for the place Ann's call holds, past his call's deadline.
    let options = as_user("bob").timeout(Duration::from_millis(400));
    let e = within(
        10,
        "bob's call",
        pipeline.invoke("work", json!({}), options),
    )
    .await
    .expect_err("no place before the deadline");
    assert_eq!((e.status(), e.code()), (503, "upstream_busy"), "{e}");
    let text = e.to_string();
    for words in [
        "`bounded`",
        "is sent at most 1 request at once",
        "`max_connections`",
    ] {
        assert!(text.contains(words), "`{words}` not in: {text}");
    }

    release(&gate, held).await;
    within(
        10,
        "bob's next call",
        pipeline.invoke("work", json!({}), as_user("bob")),
    )
    .await
    .expect("bob's next call connects: the busy attempt was no failure");
}

/// Calls past the bound on an upstream that forgot the session (404): rmcp sets up a
/// new session and sends the refused requests again, and sends nothing else meanwhile.
/// The calls holding every place wait on that; were the new session's `initialize`, or a
/// request sent again, to wait for a place too, every call would fail — after rmcp's 5 s
/// for the recovery, or at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_bound_are_answered_after_the_upstream_forgot_the_session() {
    use toolgate_mcp::rmcp::transport::streamable_http_server::session::local::SessionConfig;
    let work = JsonTool::new(
        "work",
        "Works `ms` ms.",
        json!({"type": "object"}),
        |input, _| {
            let ms = input["ms"].as_u64().unwrap_or(0);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, ToolError>(json!({"text": "worked"}))
            })
        },
    );
    let pipeline = Pipeline::builder().tool(work).build().expect("built");
    // Sessions (2025-11-25) that end after 300 ms without a message.
    let mut sessions = SessionConfig::default();
    sessions.keep_alive = Some(Duration::from_millis(300));
    let config = rmcp::transport::StreamableHttpServerConfig::default();
    let app = axum::Router::new().nest_service(
        "/mcp",
        McpServer::new(pipeline).http_service_with_sessions(config, sessions),
    );
    let url = common::serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("bounded", url)
        .discover(false)
        .max_connections(1)
        .call_timeout(Duration::from_secs(20));
    let pipeline = imported(config).await.1;
    within(
        10,
        "a first call",
        pipeline.invoke("work", json!({}), InvokeOptions::new()),
    )
    .await
    .expect("answered");
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let started = std::time::Instant::now();
    let calls = (0..3).map(|_| pipeline.invoke("work", json!({"ms": 100}), InvokeOptions::new()));
    let answers = within(60, "3 calls", futures::future::join_all(calls)).await;
    for answer in answers {
        answer.expect("every call is answered on the new session");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the calls took {took:?}: a place was waited for behind the calls"
    );
}

/// What a polling upstream ([`polling`]) saw.
#[derive(Default)]
struct Streams {
    /// Request streams (a POST's, or one resumed by a GET) open now.
    open: AtomicUsize,
    /// The most open at once.
    most: AtomicUsize,
    /// Streams resumed.
    resumed: AtomicUsize,
    /// Calls, by the event id their stream ended at.
    calls: std::sync::Mutex<std::collections::HashMap<String, serde_json::Value>>,
}

/// A request stream of the upstream, counted open while its body lives.
fn counted(
    streams: &Arc<Streams>,
    events: impl futures::Stream<Item = String> + Send + 'static,
) -> axum::response::Response {
    use futures::StreamExt;
    struct Open(Arc<Streams>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let now = streams.open.fetch_add(1, Ordering::SeqCst) + 1;
    streams.most.fetch_max(now, Ordering::SeqCst);
    let open = Open(Arc::clone(streams));
    common::hand_written::event_stream(events.map(move |event| {
        let _open = &open;
        event
    }))
}

/// A streamable-HTTP upstream at 2025-11-25 (session `s1`) that polls (SEP-1699): the
/// stream of a `tools/call` of `hdr` (whose argument goes in a header, so that the call
/// goes through rmcp) carries one event with an id and `retry: 10`, and ends; the stream
/// resumed from that id (a GET with `Last-Event-ID`) answers 300 ms later, and ends.
async fn polling(streams: &Arc<Streams>) -> String {
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    use common::hand_written::{initialized, json_answer};
    use serde_json::Value;

    async fn posted(State(streams): State<Arc<Streams>>, body: String) -> axum::response::Response {
        let message: Value = serde_json::from_str(&body).expect("JSON");
        let id = message["id"].clone();
        match message["method"].as_str().unwrap_or_default() {
            "initialize" => initialized(&id, "polling"),
            "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "hdr", "inputSchema": {"type": "object", "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"}}}},
            ]}})),
            "tools/call" => {
                let event_id = format!("call-{id}");
                streams
                    .calls
                    .lock()
                    .expect("calls")
                    .insert(event_id.clone(), id);
                let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                                 "params": {"level": "info", "data": "working"}});
                let event = format!("id: {event_id}\nretry: 10\nevent: message\ndata: {log}\n\n");
                counted(&streams, futures::stream::iter([event]))
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }

    async fn resumed(
        State(streams): State<Arc<Streams>>,
        headers: HeaderMap,
    ) -> axum::response::Response {
        let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
        let Some(id) =
            last.and_then(|last| streams.calls.lock().expect("calls").get(last).cloned())
        else {
            // No standalone stream.
            return StatusCode::METHOD_NOT_ALLOWED.into_response();
        };
        streams.resumed.fetch_add(1, Ordering::SeqCst);
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": "polled"}]}});
        let events = futures::stream::once(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            format!("event: message\ndata: {answer}\n\n")
        });
        counted(&streams, events)
    }

    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(posted).get(resumed))
        .with_state(Arc::clone(streams));
    common::serve_on_loopback(app).await + "/mcp"
}

/// A call through rmcp whose stream the upstream ends before the answer, which it gives
/// on the stream rmcp resumes (a GET): the request is still in flight, and the resumed
/// stream holds its place — the upstream never has more request streams open than the
/// bound, and every call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_stream_holds_the_place_of_its_request() {
    let streams = Arc::<Streams>::default();
    let url = polling(&streams).await;
    let config = UpstreamConfig::http("polling", url)
        .discover(false)
        .max_connections(1)
        .call_timeout(Duration::from_secs(20));
    let pipeline = imported(config).await.1;

    let calls =
        (0..2).map(|_| pipeline.invoke("hdr", json!({"region": "eu"}), InvokeOptions::new()));
    let answers = within(30, "2 calls", futures::future::join_all(calls)).await;
    for answer in answers {
        let answer = answer.expect("every call is answered on its resumed stream");
        assert!(answer.to_string().contains("polled"), "{answer}");
    }
    assert_eq!(
        streams.resumed.load(Ordering::SeqCst),
        2,
        "each stream was resumed"
    );
    let most = streams.most.load(Ordering::SeqCst);
    assert_eq!(
        most, 1,
        "the upstream had {most} request streams open at once; at most 1 request may be in flight"
    );
}

/// An upstream written with rmcp's server that lists one resource, `held://x`, whose
/// read runs until `gate` gives it a permit (counted in `reading` while it runs).
#[derive(Clone)]
struct HeldResource {
    gate: Arc<Semaphore>,
    reading: Arc<AtomicUsize>,
}

const HELD: &str = "held://x";

impl rmcp::ServerHandler for HeldResource {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        common::rmcp_upstream::takes_subscriptions()
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
        Ok(rmcp::model::ListResourcesResult::with_all_items(vec![
            rmcp::model::Resource::new(HELD, HELD),
        ]))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        self.reading.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.expect("open").forget();
        self.reading.fetch_sub(1, Ordering::SeqCst);
        Ok(rmcp::model::ReadResourceResponse::Complete(
            rmcp::model::ReadResourceResult::new(vec![rmcp::model::ResourceContents::text(
                "contents",
                request.uri,
            )]),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_or_read_still_waiting_at_its_deadline_is_told_the_upstream_is_busy() {
    let upstream = HeldResource {
        gate: Arc::new(Semaphore::new(0)),
        reading: Arc::default(),
    };
    let url = common::rmcp_upstream::serve(upstream.clone()).await;
    let pipeline = bounded(&url, 1).await;
    let resources = "resources.bounded";
    // A read the upstream holds: the only place is taken.
    let held = tokio::spawn({
        let pipeline = pipeline.clone();
        async move {
            let input = json!({"uri": HELD});
            pipeline
                .invoke(resources, input, InvokeOptions::new())
                .await
        }
    });
    within(10, "the held read to start", async {
        while upstream.reading.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    for input in [json!({"list": "resources"}), json!({"uri": HELD})] {
        let options = InvokeOptions::new().timeout(Duration::from_millis(400));
        let e = within(
            10,
            "the waiting request",
            pipeline.invoke(resources, input.clone(), options),
        )
        .await
        .expect_err("no place before the deadline");
        assert_eq!(
            (e.status(), e.code()),
            (503, "upstream_busy"),
            "{input}: {e}"
        );
        assert!(matches!(e, ToolError::RetryAfter { .. }), "{input}: {e:?}");
        let text = e.to_string();
        for words in [
            "`bounded`",
            "is sent at most 1 request at once",
            "`max_connections`",
            "Try again",
        ] {
            assert!(text.contains(words), "{input}: `{words}` not in: {text}");
        }
    }
    assert_eq!(
        upstream.reading.load(Ordering::SeqCst),
        1,
        "a waiting read was sent"
    );

    upstream.gate.add_permits(1);
    within(10, "the held read", held)
        .await
        .expect("joined")
        .expect("answered");
    let listed = within(
        10,
        "a list once the place is free",
        pipeline.invoke(
            resources,
            json!({"list": "resources"}),
            InvokeOptions::new(),
        ),
    )
    .await
    .expect("listed");
    assert!(listed.to_string().contains(HELD), "{listed}");
}

#[tokio::test]
async fn a_share_per_caller_of_0_above_the_bound_or_on_a_stdio_server_is_refused_in_plain_words() {
    let http = || UpstreamConfig::http("bounded", "http://127.0.0.1:1/mcp");
    let stdio = UpstreamConfig::stdio("files", "mcp-files", ["--root", "/srv"]);
    for (config, words) in [
        (
            http().max_connections_per_caller(0),
            &[
                "`bounded`",
                "`max_connections_per_caller` is 0",
                "at least 1",
            ][..],
        ),
        (
            http().max_connections(4).max_connections_per_caller(5),
            &["`bounded`", "is 5, more than the 4 requests", "at most 4"][..],
        ),
        (
            stdio.max_connections_per_caller(2),
            &["`files`", "one pipe", "remove `max_connections_per_caller`"][..],
        ),
    ] {
        let e = toolgate_mcp::Upstream::connect(config)
            .await
            .expect_err("refused");
        assert!(matches!(e, toolgate_mcp::McpError::Config(_)), "{e:?}");
        let text = e.to_string();
        for words in words {
            assert!(text.contains(words), "`{words}` not in: {text}");
        }
        assert!(!text.contains("::"), "no Rust names: {text}");
    }
}

#[tokio::test]
async fn a_bound_on_a_stdio_server_is_refused_in_plain_words() {
    // The default's value too: set, it is set where no bound applies.
    for max in [8, toolgate_mcp::DEFAULT_MAX_CONNECTIONS] {
        let config =
            UpstreamConfig::stdio("files", "mcp-files", ["--root", "/srv"]).max_connections(max);
        let e = toolgate_mcp::Upstream::connect(config)
            .await
            .expect_err("refused");
        assert!(
            matches!(e, toolgate_mcp::McpError::Config(_)),
            "{max}: {e:?}"
        );
        let text = e.to_string();
        for words in ["`files`", "`max_connections`", "HTTP", "one pipe", "remove"] {
            assert!(text.contains(words), "{max}: `{words}` not in: {text}");
        }
        assert!(!text.contains("::"), "no Rust names: {text}");
    }
}

/// A streamable-HTTP upstream at 2025-11-25 (session `s1`, JSON answers) whose `job` is a
/// task (SEP-2663) polled every 800 ms that never ends (each call counted in `started`,
/// each `tasks/get` in `posts`), and whose `hold` runs, counted in `running`, until its
/// caller lets it go: an upstream that hands a task to a client that did not declare the
/// extension, as one not written with rmcp may.
async fn tasking(seen: &Arc<Seen>) -> String {
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use common::hand_written::{event_stream, initialized, json_answer};
    use rmcp::model::{
        CreateTaskResult, DetailedTask, GetTaskResult, ServerResult, Task, TaskPayload,
    };
    use serde_json::Value;

    fn task() -> Task {
        let mut task = Task::new(
            "task-1",
            Default::default(),
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00Z",
        );
        task.poll_interval_ms = Some(800);
        task
    }

    fn answer(id: &Value, result: ServerResult) -> axum::response::Response {
        let result = serde_json::to_value(result).expect("a result");
        json_answer(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    async fn posted(State(seen): State<Arc<Seen>>, body: String) -> axum::response::Response {
        let message: Value = serde_json::from_str(&body).expect("JSON");
        let id = message["id"].clone();
        match message["method"].as_str().unwrap_or_default() {
            "initialize" => initialized(&id, "tasking"),
            "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "job", "inputSchema": {"type": "object"}},
                {"name": "hold", "inputSchema": {"type": "object"}},
            ]}})),
            "tools/call" if message["params"]["name"] == "job" => {
                seen.started.fetch_add(1, Ordering::SeqCst);
                answer(
                    &id,
                    ServerResult::CreateTaskResult(CreateTaskResult::new(task())),
                )
            }
            "tools/call" => {
                let running = Running::start(&seen);
                event_stream(futures::stream::pending::<String>().map(move |event| {
                    let _running = &running;
                    event
                }))
            }
            "tasks/get" => {
                seen.posts.fetch_add(1, Ordering::SeqCst);
                let task = DetailedTask::new(task(), TaskPayload::Working);
                answer(&id, ServerResult::GetTaskResult(GetTaskResult::new(task)))
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }

    use futures::StreamExt;
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(posted).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(Arc::clone(seen));
    common::serve_on_loopback(app).await + "/mcp"
}

/// A call the upstream made a task of, polled by toolgate (for a caller that does not
/// take tasks), whose poll still waits for a place at the call's deadline: the call was
/// sent and its task ran, so it timed out — it is no busy upstream's call never sent,
/// which a caller may send again (503 `upstream_busy`, `RetryAfter`), running it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_polled_past_its_deadline_while_every_place_is_taken_is_a_timeout() {
    let seen = Arc::<Seen>::default();
    let url = tasking(&seen).await;
    let config = UpstreamConfig::http("tasking", url)
        .discover(false)
        .max_connections(1)
        .call_timeout(Duration::from_secs(30));
    let pipeline = imported(config).await.1;

    let job = tokio::spawn({
        let pipeline = pipeline.clone();
        async move {
            let options = InvokeOptions::new().timeout(Duration::from_millis(2_000));
            pipeline.invoke("job", json!({}), options).await
        }
    });
    within(10, "the job to be sent", async {
        while seen.started.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // The only place, taken once the job's task was handed back (before its first poll).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let held = tokio::spawn({
        let pipeline = pipeline.clone();
        async move {
            pipeline
                .invoke("hold", json!({}), InvokeOptions::new())
                .await
        }
    });
    until_running(&seen, 1).await;

    let e = within(10, "the job", job)
        .await
        .expect("joined")
        .expect_err("the task never ends");
    held.abort();
    assert_eq!(
        seen.posts.load(Ordering::SeqCst),
        0,
        "no poll found a place"
    );
    assert_ne!(e.code(), "upstream_busy", "{e:?}");
    assert!(matches!(e, ToolError::Timeout { .. }), "{e:?}");
}

/// An upstream written with rmcp's server that takes subscriptions to its one resource,
/// `held://x`: each list of its resources waits for a permit of `listing` (counted in
/// `lists` as it starts), each read runs until `gate` gives it a permit (counted in
/// `reading` while it runs), and each `resources/subscribe` and `resources/unsubscribe`
/// it is sent is recorded in `told`.
#[derive(Clone)]
struct WatchedResource {
    listing: Arc<Semaphore>,
    lists: Arc<AtomicUsize>,
    held: HeldResource,
    told: Arc<std::sync::Mutex<Vec<String>>>,
}

impl WatchedResource {
    /// Its lists answered at once (`listing` open) or not until let go (closed).
    fn new(listing_open: bool) -> WatchedResource {
        let permits = if listing_open { 1_000 } else { 0 };
        WatchedResource {
            listing: Arc::new(Semaphore::new(permits)),
            lists: Arc::default(),
            held: HeldResource {
                gate: Arc::new(Semaphore::new(0)),
                reading: Arc::default(),
            },
            told: Arc::default(),
        }
    }

    fn told(&self) -> Vec<String> {
        self.told.lock().unwrap().clone()
    }

    /// The upstream served on loopback, at most one request in flight to it, imported;
    /// toolgate serving it over MCP with `deadline` for each request made there, and a
    /// client of that (the session that subscribes); the pipeline too, for the read that
    /// holds the only place.
    async fn behind_toolgate(&self, deadline: Duration) -> (Pipeline, common::Client) {
        let url = common::rmcp_upstream::serve(self.clone()).await;
        let pipeline = bounded(&url, 1).await;
        let service = McpServer::new(pipeline.clone())
            .call_timeout(deadline)
            .http_service(rmcp::transport::StreamableHttpServerConfig::default());
        let app = axum::Router::new().nest_service("/mcp", service);
        let toolgate = format!("{}/mcp", common::serve_on_loopback(app).await);
        (pipeline, common::http_client(&toolgate, None, None).await)
    }

    /// A read of `held://x` made through `pipeline` (within the upstream's call timeout,
    /// 30 s), once the upstream runs it: it holds the only place until `gate` lets it
    /// end.
    async fn holding_the_place(
        &self,
        pipeline: &Pipeline,
    ) -> tokio::task::JoinHandle<Result<serde_json::Value, ToolError>> {
        let held = self.read_queued(pipeline);
        self.until_read().await;
        held
    }

    /// A read of `held://x` made through `pipeline`, started.
    fn read_queued(
        &self,
        pipeline: &Pipeline,
    ) -> tokio::task::JoinHandle<Result<serde_json::Value, ToolError>> {
        let pipeline = pipeline.clone();
        tokio::spawn(async move {
            let input = json!({"uri": HELD});
            pipeline
                .invoke("resources.bounded", input, InvokeOptions::new())
                .await
        })
    }

    /// Waits until the upstream runs a read.
    async fn until_read(&self) {
        within(10, "the held read to start", async {
            while self.held.reading.load(Ordering::SeqCst) < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    /// Lets the held read end, and checks it was answered.
    async fn release(&self, held: tokio::task::JoinHandle<Result<serde_json::Value, ToolError>>) {
        self.held.gate.add_permits(1);
        within(10, "the held read", held)
            .await
            .expect("joined")
            .expect("answered");
    }
}

#[allow(deprecated)]
impl rmcp::ServerHandler for WatchedResource {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        common::rmcp_upstream::takes_subscriptions()
    }

    async fn list_resources(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.listing.acquire().await.expect("open").forget();
        self.held.list_resources(request, context).await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        self.held.read_resource(request, context).await
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.told
            .lock()
            .unwrap()
            .push(format!("subscribe {}", request.uri));
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.told
            .lock()
            .unwrap()
            .push(format!("unsubscribe {}", request.uri));
        Ok(())
    }
}

/// Checks that `answer`, to a subscription or an unsubscription, is the upstream's bound
/// in words: 503 `upstream_busy`, naming the upstream and the bound, to try again.
fn busy(answer: Result<(), rmcp::service::ServiceError>) {
    let error = match answer {
        Err(rmcp::service::ServiceError::McpError(error)) => error,
        other => panic!("a JSON-RPC error, not {other:?}"),
    };
    let data = error.data.clone().unwrap_or_default();
    assert_eq!(
        (&data["code"], &data["status"]),
        (&json!("upstream_busy"), &json!(503)),
        "{error:?}"
    );
    for words in [
        "`bounded`",
        "is sent at most 1 request at once",
        "`max_connections`",
        "Try again",
    ] {
        assert!(error.message.contains(words), "`{words}` not in: {error:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn a_subscription_still_waiting_at_its_deadline_is_told_the_upstream_is_busy_and_never_sent()
{
    use rmcp::model::SubscribeRequestParams;
    let upstream = WatchedResource::new(false);
    let (pipeline, client) = upstream.behind_toolgate(Duration::from_secs(2)).await;

    // The subscription finds out that the upstream has the resource (a list, which takes
    // the only place); a read queues for the place meanwhile, and takes it next: the
    // subscription's own request is left waiting.
    let subscribing = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.subscribe(SubscribeRequestParams::new(HELD)).await }
    });
    within(10, "the list to start", async {
        while upstream.lists.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let held = upstream.read_queued(&pipeline);
    tokio::time::sleep(Duration::from_millis(200)).await;
    upstream.listing.add_permits(1_000);
    upstream.until_read().await;

    busy(
        within(10, "the subscription", subscribing)
            .await
            .expect("joined"),
    );

    // Once the place is free, nothing of the subscription given up is sent, and nothing
    // of it is left here: the session subscribes again, and is subscribed.
    upstream.release(held).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(upstream.told(), Vec::<String>::new(), "sent after all");
    within(
        10,
        "subscribe again",
        client.subscribe(SubscribeRequestParams::new(HELD)),
    )
    .await
    .expect("subscribed once the place is free");
    assert_eq!(upstream.told(), [format!("subscribe {HELD}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn an_unsubscription_still_waiting_at_its_deadline_is_told_the_upstream_is_busy_and_never_sent()
 {
    use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
    let upstream = WatchedResource::new(true);
    let (pipeline, client) = upstream.behind_toolgate(Duration::from_secs(2)).await;
    within(
        10,
        "subscribe",
        client.subscribe(SubscribeRequestParams::new(HELD)),
    )
    .await
    .expect("subscribed");
    let held = upstream.holding_the_place(&pipeline).await;

    let unsubscribing = client.unsubscribe(UnsubscribeRequestParams::new(HELD));
    busy(within(10, "the unsubscription", unsubscribing).await);

    upstream.release(held).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        upstream.told(),
        [format!("subscribe {HELD}")],
        "the unsubscription given up was sent after all"
    );
    // The session is unsubscribed here: it subscribes again, and the upstream, recorded
    // unsubscribed, is told again.
    within(
        10,
        "subscribe again",
        client.subscribe(SubscribeRequestParams::new(HELD)),
    )
    .await
    .expect("subscribed once the place is free");
    assert_eq!(upstream.told(), vec![format!("subscribe {HELD}"); 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_connected_again_with_the_same_bounds_shares_the_bound_of_the_one_before() {
    let (seen, gate) = (Arc::default(), Arc::new(Semaphore::new(0)));
    let url = upstream(&seen, &gate).await;
    // A host's reload: the old connection still carries a call, the new one takes the next.
    let bounds = UpstreamBounds::new();
    let old = imported(bounded_config(&url, 1).bounds(&bounds)).await.1;
    let held = holding_the_place(&old, &seen, InvokeOptions::new()).await;
    let new = imported(bounded_config(&url, 1).bounds(&bounds)).await.1;

    let options = InvokeOptions::new().timeout(Duration::from_millis(400));
    let e = within(10, "the new call", new.invoke("work", json!({}), options))
        .await
        .expect_err("the old connection's call holds the one place");
    assert_eq!((e.status(), e.code()), (503, "upstream_busy"), "{e}");
    assert_eq!(
        seen.started.load(Ordering::SeqCst),
        1,
        "the upstream was sent two calls at once past its bound of 1"
    );

    release(&gate, held).await;
    within(
        10,
        "the new call",
        new.invoke("work", json!({}), InvokeOptions::new()),
    )
    .await
    .expect("answered once the old call ended");
}
