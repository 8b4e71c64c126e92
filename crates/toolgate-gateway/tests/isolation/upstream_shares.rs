//! One caller cannot take every place among an HTTP upstream's requests in flight: with
//! `max_connections: 4` (a caller's share: 2), bob floods the upstream with resource reads
//! and calls it holds, and alice's call (over `/mcp`) and her resource read (over `/v1`)
//! are still served at once, while bob's requests past his share wait for it and fail at
//! their deadline with 503 `upstream_share_used`, never reaching the upstream.
//!
//! The upstream is written with rmcp's server, served over streamable HTTP on loopback in
//! the test's process: it holds `hold` and reads of `held://x` until the test lets them
//! go, and answers `quick` and reads of `quick://x` at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::common::{
    Answer, Gateway, client, eventually, key, mcp_2026, metric, post_with, user_yaml,
};

/// The metric of requests that waited for their caller's share, by upstream.
const SHARE_WAITS: &str = "toolgate_mcp_upstream_share_waits_total";

/// The upstream: what it holds runs until `gate` gives it a permit, counted in `held`.
#[derive(Clone)]
struct Holding {
    gate: Arc<Semaphore>,
    held: Arc<AtomicUsize>,
    /// Requests of `hold` or `held://x` that reached it, ever.
    reached: Arc<AtomicUsize>,
}

impl Holding {
    fn new() -> Holding {
        Holding {
            gate: Arc::new(Semaphore::new(0)),
            held: Arc::default(),
            reached: Arc::default(),
        }
    }

    /// Runs until the test lets it go.
    async fn hold(&self) {
        self.reached.fetch_add(1, Ordering::SeqCst);
        self.held.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.expect("open").forget();
        self.held.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ServerHandler for Holding {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = Arc::new(
            json!({"type": "object"})
                .as_object()
                .expect("an object")
                .clone(),
        );
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "hold",
                "Runs until the test lets it go.",
                Arc::clone(&schema),
            ),
            Tool::new("quick", "Answers at once.", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "hold" {
            self.hold().await;
        }
        let text = format!("{} answered", request.name);
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("held://x", "held"),
            Resource::new("quick://x", "quick"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri == "held://x" {
            self.hold().await;
        }
        let contents = ResourceContents::text("contents", request.uri);
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![contents],
        )))
    }
}

/// Serves `upstream` over streamable HTTP on a free loopback port; its MCP endpoint.
async fn serve(upstream: Holding) -> String {
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// `tool` invoked over `/v1` as `user` with `input`, with a deadline of `timeout_ms` when
/// given (else the gateway's).
async fn invoke(
    gateway: &Gateway,
    user: &str,
    tool: &str,
    input: Value,
    timeout_ms: Option<&str>,
) -> Answer {
    let url = gateway.url(&format!("/v1/tools/{tool}/invoke"));
    let headers: &[(&str, &str)] = match &timeout_ms {
        Some(ms) => &[("x-toolgate-timeout-ms", ms)],
        None => &[],
    };
    post_with(&client(), &url, Some(&key(user)), &input, headers).await
}

/// A request past a caller's share, refused at its deadline: 503 `upstream_share_used`,
/// with `Retry-After`, in words that name the upstream, the share and its setting.
fn assert_share_used(answer: &Answer, what: &str) {
    assert_eq!(answer.status, 503, "{what}: {}", answer.body);
    assert_eq!(
        answer.error_code(),
        "upstream_share_used",
        "{what}: {}",
        answer.body
    );
    assert!(
        answer.header("retry-after").is_some(),
        "{what}: no Retry-After"
    );
    let message = answer.error_message();
    for words in [
        "you have 2 requests in flight to MCP server `slow`",
        "`max_connections_per_caller`",
        "try again when one has finished",
    ] {
        assert!(message.contains(words), "{what}: {words:?} in {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_flooding_an_upstream_holds_its_share_and_no_more_and_another_is_still_served() {
    let upstream = Holding::new();
    let url = serve(upstream.clone()).await;
    let users = format!("{}{}", user_yaml("alice", &[]), user_yaml("bob", &[]));
    let gateway = Gateway::start(&format!(
        "users:\n{users}upstreams:\n  - {{ name: slow, url: \"{url}\", prefix: slow_, max_connections: 4, call_timeout: 60s }}\n"
    ));
    let gateway = Arc::new(gateway);
    let resources = "resources.slow";

    // Bob's read and call, both held by the upstream: his whole share.
    let bobs = [
        ("slow_hold", json!({})),
        (resources, json!({"uri": "held://x"})),
    ]
    .map(|(tool, input)| {
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move { invoke(&gateway, "bob", tool, input, None).await })
    });
    eventually(
        "bob's two requests reach the upstream",
        Duration::from_secs(30),
        || {
            let held = upstream.held.load(Ordering::SeqCst);
            async move { held == 2 }
        },
    )
    .await;

    // Bob's next read and call wait for his share, holding none of the upstream's places.
    let past_share = [
        (resources, json!({"uri": "held://x"})),
        ("slow_hold", json!({})),
    ]
    .map(|(tool, input)| {
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move { invoke(&gateway, "bob", tool, input, Some("12000")).await })
    });

    // Each is queued for bob's share (or, were there no share, held by the upstream).
    eventually(
        "bob's next two requests are queued",
        Duration::from_secs(30),
        || {
            let gateway = Arc::clone(&gateway);
            let held = upstream.held.load(Ordering::SeqCst);
            async move {
                let metrics = gateway.metrics().await;
                let waits = metric(&metrics, SHARE_WAITS, &[("server", "slow")]);
                held as f64 + waits == 4.0
            }
        },
    )
    .await;

    // Alice is served meanwhile — a read over `/v1`, a call over `/mcp` — well before
    // bob's requests give up: were there no share, her read would wait for a place they
    // hold until its own deadline.
    let read = invoke(
        &gateway,
        "alice",
        resources,
        json!({"uri": "quick://x"}),
        Some("6000"),
    )
    .await;
    assert_eq!(read.status, 200, "alice's read is answered: {}", read.body);
    assert!(read.body.to_string().contains("quick://x"), "{}", read.body);
    let params = json!({"name": "slow_quick", "arguments": {}});
    let (status, answer) =
        mcp_2026(&gateway, "alice", "tools/call", Some("slow_quick"), params).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("quick answered")),
        "alice's call is answered: {answer}"
    );

    for (answer, what) in past_share
        .into_iter()
        .zip(["bob's third read", "bob's third call"])
    {
        let answer = answer.await.expect("joined");
        assert_share_used(&answer, what);
    }
    assert_eq!(
        upstream.reached.load(Ordering::SeqCst),
        2,
        "bob's requests past his share never reached the upstream"
    );

    // Let go, bob's first two are answered.
    upstream.gate.add_permits(2);
    for answer in bobs {
        let answer = answer.await.expect("joined");
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
}
