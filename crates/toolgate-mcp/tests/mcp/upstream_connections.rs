//! The TCP connections toolgate opens to a streamable-HTTP upstream (the demo server in a
//! child process), counted by a relay in front of it: calls go on kept-alive connections,
//! a connection the server closed is not used again, a call is sent from the task that
//! makes it (its own request id on the wire), not handed to rmcp's client worker, and an
//! MCP caller that can answer none of the upstream's requests is relayed on a connection
//! that declares none.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{self, HttpDemo, RawHttp, imported, within};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_mcp::{McpServer, UpstreamConfig};

/// The bytes a relay keeps of one direction, all its connections together.
type Kept = Arc<Mutex<Vec<u8>>>;

/// A TCP relay on a loopback port in front of an upstream: it counts the connections it
/// accepts, pipes their bytes both ways (keeping what goes to the upstream), and can
/// close every connection it holds, as a server that closes its idle connections does.
struct CountingRelay {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// Every byte sent to the upstream, all connections together.
    sent: Kept,
    /// Every byte the upstream sent back, all connections together.
    received: Kept,
    /// Cancelled to close the connections accepted so far; replaced for the next ones.
    close: Arc<Mutex<CancellationToken>>,
    accepting: JoinHandle<()>,
}

impl CountingRelay {
    async fn start(upstream: String) -> CountingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("bound");
        let accepted = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let close = Arc::new(Mutex::new(CancellationToken::new()));
        let accepting = tokio::spawn({
            let (accepted, close) = (Arc::clone(&accepted), Arc::clone(&close));
            let (sent, received) = (Arc::clone(&sent), Arc::clone(&received));
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let closed = close.lock().expect("not poisoned").clone();
                    let upstream = upstream.clone();
                    let copies = (Arc::clone(&sent), Arc::clone(&received));
                    tokio::spawn(async move {
                        let Ok(outbound) = TcpStream::connect(&upstream).await else {
                            return;
                        };
                        tokio::select! {
                            _ = pipe(inbound, outbound, copies) => {}
                            _ = closed.cancelled() => {}
                        }
                    });
                }
            }
        });
        CountingRelay {
            addr,
            accepted,
            sent,
            received,
            close,
            accepting,
        }
    }

    /// What was sent to the upstream so far, as text.
    fn sent(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().expect("not poisoned")).into_owned()
    }

    /// What the upstream sent back so far, as text.
    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().expect("not poisoned")).into_owned()
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Connections accepted so far.
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes every connection accepted so far, both ways.
    fn close_all(&self) {
        let mut close = self.close.lock().expect("not poisoned");
        close.cancel();
        *close = CancellationToken::new();
    }
}

/// Pipes `inbound` to `outbound` and back until both directions end, keeping a copy of
/// what goes to `outbound` in `sent` and of what comes back in `received`.
async fn pipe(inbound: TcpStream, outbound: TcpStream, (sent, received): (Kept, Kept)) {
    let (from_client, to_client) = inbound.into_split();
    let (from_upstream, to_upstream) = outbound.into_split();
    tokio::join!(
        copy_keeping(from_client, to_upstream, sent),
        copy_keeping(from_upstream, to_client, received)
    );
}

/// Copies `from` to `to` until either ends, keeping a copy in `kept`, then shuts `to`.
async fn copy_keeping(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    kept: Kept,
) {
    let mut buffer = vec![0; 16 * 1024];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        kept.lock()
            .expect("not poisoned")
            .extend_from_slice(&buffer[..n]);
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Drop for CountingRelay {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// The demo server's tools imported through `relay`, in a pipeline without hooks.
async fn pipeline_through(relay: &CountingRelay) -> Pipeline {
    pipeline_through_with(relay, true).await
}

/// [`pipeline_through`], asking the upstream for 2026-07-28 first (`discover`), or speaking
/// only 2025-11-25 to it.
async fn pipeline_through_with(relay: &CountingRelay, discover: bool) -> Pipeline {
    let config = UpstreamConfig::http("demo", relay.url())
        .call_timeout(Duration::from_secs(20))
        .discover(discover);
    imported(config).await.1
}

/// Calls `echo` `calls` times, one after another; every call must be answered.
async fn echo_in_sequence(pipeline: &Pipeline, calls: usize) {
    for i in 0..calls {
        let text = format!("call {i}");
        let output = within(
            30,
            "tools/call",
            pipeline.invoke("echo", json!({ "text": text }), InvokeOptions::new()),
        )
        .await
        .unwrap_or_else(|e| panic!("call {i} failed: {e}"));
        assert!(
            output.to_string().contains(&text),
            "call {i} was answered with {output}"
        );
    }
}

#[tokio::test]
async fn sequential_calls_to_an_http_upstream_reuse_one_connection() {
    let demo = HttpDemo::start("127.0.0.1:0", &[("TOOLGATE_DEMO_RATE", "1000")]).await;
    let relay = CountingRelay::start(demo.addr()).await;
    let pipeline = pipeline_through(&relay).await;
    echo_in_sequence(&pipeline, 1).await;

    let before = relay.accepted();
    echo_in_sequence(&pipeline, 100).await;
    let opened = relay.accepted() - before;
    // One connection carries the calls, another now and then: rmcp reads a response's
    // stream to its end in a task of its own, which may not have run when the next call
    // starts — on a loaded machine, for one call in ten (11 of 100 seen in a CI run
    // beside builds; 1 or 2 on a quiet machine). Without kept-alive connections this is
    // 100, one per call.
    assert!(
        opened <= 25,
        "100 sequential calls opened {opened} TCP connections to the upstream; kept-alive connections should carry them"
    );
}

#[tokio::test]
async fn a_connection_the_upstream_closed_is_not_used_again() {
    let demo = HttpDemo::start("127.0.0.1:0", &[("TOOLGATE_DEMO_RATE", "1000")]).await;
    let relay = CountingRelay::start(demo.addr()).await;
    let pipeline = pipeline_through(&relay).await;
    echo_in_sequence(&pipeline, 10).await;

    relay.close_all();
    // A server closes an idle connection some time before the next request, not at the
    // instant it is sent: give toolgate's side the moment it takes to see the close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = relay.accepted();
    echo_in_sequence(&pipeline, 50).await;
    let opened = relay.accepted() - before;
    // The new connections: the call's, another now and then (as above: up to one call in
    // ten on a loaded machine), and rmcp's stream for server messages (a GET), which it
    // opens again. Without kept-alive connections this is 50 or more.
    assert!(
        opened <= 15,
        "50 calls after the upstream closed its connections opened {opened} new ones; a fresh kept-alive connection should carry them"
    );
}

#[tokio::test]
async fn a_call_is_sent_from_the_calling_task_with_its_own_request_id() {
    let demo = HttpDemo::start("127.0.0.1:0", &[("TOOLGATE_DEMO_RATE", "1000")]).await;
    let relay = CountingRelay::start(demo.addr()).await;
    let pipeline = pipeline_through(&relay).await;
    echo_in_sequence(&pipeline, 20).await;

    // rmcp numbers its requests; a call toolgate sends itself is `toolgate-N`. The import
    // POSTed `tools/list` through rmcp, which is what every later call is sent with, so
    // none of the 20 goes through rmcp's client worker.
    let sent = relay.sent();
    let calls = sent.matches(r#""method":"tools/call""#).count();
    let direct = sent.matches(r#""id":"toolgate-"#).count();
    assert_eq!(calls, 20, "every call reached the upstream once");
    assert_eq!(
        direct, 20,
        "{direct} of 20 calls were sent from the calling task; the rest went through rmcp's client worker"
    );
}

/// toolgate's MCP server, importing the demo server through `relay` (`discover`: as in
/// [`pipeline_through_with`]), on a loopback port: its `/mcp` URL.
async fn gateway_through(relay: &CountingRelay, discover: bool) -> String {
    let pipeline = pipeline_through_with(relay, discover).await;
    let service = McpServer::new(pipeline).http_service(Default::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("bound"));
    let app = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A caller of the 2025 revisions speaking to `url` over plain HTTP, in a session of its
/// own.
struct Caller {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl Caller {
    /// A new session at `url`, declaring `capabilities`.
    async fn start(url: &str, capabilities: serde_json::Value) -> Caller {
        let mut caller = Caller {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: String::new(),
        };
        let name = "upstream-connections-test";
        caller.session = caller.raw().session(capabilities, name).await;
        caller
    }

    fn raw(&self) -> RawHttp<'_> {
        RawHttp {
            http: &self.http,
            url: &self.url,
            version: "2025-06-18",
            bearer: None,
        }
    }

    /// Calls `echo` with `text` and reads the whole answer, which must carry `text`.
    async fn echo(&self, id: u64, text: &str) {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}}});
        let response = self.raw().post(Some(&self.session), &body).await;
        assert!(response.status().is_success(), "{}", response.status());
        let answer = within(30, "the answer", response.text())
            .await
            .expect("read");
        assert!(answer.contains(text), "the call was answered with {answer}");
    }
}

/// What `relay` carried each way while `echo` of `text` ran, after a first call set up
/// the caller's connection upstream.
async fn second_call(relay: &CountingRelay, caller: &Caller, text: &str) -> (String, String) {
    caller.echo(1, "set-up").await;
    let (sent, received) = (relay.sent().len(), relay.received().len());
    caller.echo(2, text).await;
    (
        relay.sent()[sent..].to_owned(),
        relay.received()[received..].to_owned(),
    )
}

#[tokio::test]
async fn a_caller_that_can_answer_no_request_is_relayed_on_a_connection_that_asks_for_none() {
    callers_are_relayed_on_connections_that_declare_what_they_can_answer(true).await;
}

#[tokio::test]
async fn the_same_holds_for_an_upstream_spoken_to_only_at_2025_11_25() {
    callers_are_relayed_on_connections_that_declare_what_they_can_answer(false).await;
}

/// A plain caller's calls and a sampling caller's, through toolgate to the demo server
/// (`discover`: as in [`pipeline_through_with`]), each on a connection that declares what
/// its callers can answer.
async fn callers_are_relayed_on_connections_that_declare_what_they_can_answer(discover: bool) {
    let demo = HttpDemo::start("127.0.0.1:0", &[("TOOLGATE_DEMO_RATE", "1000")]).await;
    let relay = CountingRelay::start(demo.addr()).await;
    let url = gateway_through(&relay, discover).await;

    // A caller that declared nothing: the upstream is told, at the `initialize` of the
    // connection its call goes on, that its client can answer nothing either, and the
    // call carries no progress token the caller did not ask for. So the upstream (the
    // demo, on toolgate's own server) answers it in its request's task: no priming event.
    let plain = Caller::start(&url, json!({})).await;
    let (sent, received) = second_call(&relay, &plain, "from a plain caller").await;
    assert!(
        sent.contains("from a plain caller") && !sent.contains("progressToken"),
        "the call went upstream with a progress token nobody asked for:\n{sent}"
    );
    assert!(
        received.contains("from a plain caller") && !received.contains("retry:"),
        "the upstream answered the plain caller's call through its session worker (a priming event came first):\n{received}"
    );
    // Each request's body follows its headers, and the next request follows the body.
    let initialize = |sent: &str| -> Vec<serde_json::Value> {
        sent.split("\r\n\r\n")
            .filter_map(|body| {
                let mut messages = serde_json::Deserializer::from_str(body).into_iter();
                messages.next()?.ok()
            })
            .filter(|message: &serde_json::Value| message["method"] == "initialize")
            .map(|message| message["params"]["capabilities"].clone())
            .collect()
    };
    let declared = initialize(&relay.sent());
    assert!(
        declared.iter().any(|c| c.get("sampling").is_none()),
        "no connection upstream was set up declaring nothing: {declared:?}"
    );

    // A caller that can be asked for a sample goes on a connection that declares it, so
    // the upstream can ask, and it answers through its session worker, which can.
    let asks = Caller::start(&url, json!({"sampling": {}})).await;
    let (_, received) = second_call(&relay, &asks, "from a sampling caller").await;
    assert!(
        received.contains("from a sampling caller") && received.contains("retry:"),
        "the sampling caller's call was not answered on a connection that can be asked for input:\n{received}"
    );
    let declared = initialize(&relay.sent());
    assert!(
        declared.iter().any(|c| c.get("sampling").is_some()),
        "no connection upstream declared sampling for the caller who can answer it: {declared:?}"
    );
}

/// The upstreams [`proxied_calls_child`] calls, separated by blanks: set only in the
/// process [`calls_go_through_the_proxy_the_environment_names_unless_no_proxy_exempts_the_host`]
/// starts.
const PROXIED_CHILD: &str = "TOOLGATE_TEST_PROXIED_UPSTREAMS";

/// Calls `echo` on each upstream named in [`PROXIED_CHILD`]; nothing without it. Run in
/// a process of its own, whose proxy settings are in its environment from its start.
#[tokio::test]
#[ignore = "run by calls_go_through_the_proxy_the_environment_names_unless_no_proxy_exempts_the_host, in a process of its own"]
async fn proxied_calls_child() {
    let Ok(urls) = std::env::var(PROXIED_CHILD) else {
        return;
    };
    for url in urls.split(' ') {
        let config = UpstreamConfig::http("demo", url).call_timeout(Duration::from_secs(20));
        let (_upstream, pipeline) = imported(config).await;
        echo_in_sequence(&pipeline, 3).await;
    }
}

#[tokio::test]
async fn calls_go_through_the_proxy_the_environment_names_unless_no_proxy_exempts_the_host() {
    let demo = HttpDemo::start("127.0.0.1:0", &[("TOOLGATE_DEMO_RATE", "1000")]).await;
    // A TCP relay to the upstream serves as the proxy: a proxied request reaches it whole,
    // its target in absolute form ("POST http://127.0.0.1:…/mcp"), which the upstream's
    // HTTP server reads as it reads its own path.
    let proxy = CountingRelay::start(demo.addr()).await;
    let port = demo.addr().rsplit(':').next().expect("a port").to_owned();
    let proxied = format!("http://127.0.0.1:{port}/mcp");
    let exempt = format!("http://localhost:{port}/mcp");
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("this test"));
    child
        .arg("--exact")
        .arg(common::test_name(module_path!(), "proxied_calls_child"))
        .args(["--ignored", "--nocapture"])
        .env(PROXIED_CHILD, format!("{proxied} {exempt}"))
        .env("HTTP_PROXY", format!("http://{}", proxy.addr))
        .env("NO_PROXY", "localhost");
    for name in ["http_proxy", "no_proxy", "ALL_PROXY", "all_proxy"] {
        child.env_remove(name);
    }
    let status = within(90, "the child's calls", child.status())
        .await
        .expect("the child runs");
    assert!(status.success(), "the calls in the child failed: {status}");

    let sent = proxy.sent();
    assert!(
        sent.contains(&format!("POST {proxied} HTTP/1.1")),
        "the upstream the proxy serves was called through it: {sent}"
    );
    assert_eq!(
        sent.matches(r#""method":"tools/call""#).count(),
        3,
        "its three calls, and no other, went through the proxy: {sent}"
    );
    assert!(
        !sent.contains("localhost"),
        "the upstream NO_PROXY exempts was called directly: {sent}"
    );
}
