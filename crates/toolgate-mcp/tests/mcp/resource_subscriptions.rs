//! `resources/subscribe` through toolgate, which serves the resources of several upstreams:
//! a subscription goes to the upstream that has the resource and supports subscriptions,
//! whatever comes before it in the configuration. An upstream that did not declare
//! `resources.subscribe` is sent no subscription (it would answer "method not found" and
//! keep the caller from the upstreams after it); one that supports subscriptions but does
//! not have the resource is sent no subscription to it either. A resource no upstream that
//! supports subscriptions has is refused in plain words. Updates reach the session that
//! subscribed, and no other.
//!
//! The upstreams are rmcp servers on loopback ports, in configuration order: `aplain`
//! (resources, no subscriptions; has `plain://a`), `bother` (subscriptions; has
//! `other://b`) and `cwatched` (subscriptions; has `watched://x`). Each records the
//! resource requests it is sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::within;
use rmcp::model::{
    ClientConfig, ErrorCode, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceUpdatedNotificationParam, ResourcesCapability, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::Notify;
use toolgate_core::Pipeline;
use toolgate_core::registry::ToolRegistry;
use toolgate_mcp::{McpServer, UpstreamConfig};

/// An upstream with one resource, which records what it is asked about resources.
#[derive(Clone)]
struct Upstream {
    /// The one resource it has.
    has: &'static str,
    /// Whether it declares `resources.subscribe`.
    subscriptions: bool,
    /// `METHOD URI` of each resource request it was sent (`list *` for a list).
    asked: Arc<Mutex<Vec<String>>>,
    /// The session subscribed to its resource, for updates.
    subscriber: Arc<Mutex<Option<Peer<RoleServer>>>>,
}

impl Upstream {
    fn new(has: &'static str, subscriptions: bool) -> Upstream {
        Upstream {
            has,
            subscriptions,
            asked: Arc::default(),
            subscriber: Arc::default(),
        }
    }

    fn record(&self, method: &str, uri: &str) {
        self.asked.lock().unwrap().push(format!("{method} {uri}"));
    }

    /// The resource requests it was sent that name `uri`.
    fn asked_about(&self, uri: &str) -> Vec<String> {
        let asked = self.asked.lock().unwrap();
        asked
            .iter()
            .filter(|a| a.ends_with(&format!(" {uri}")))
            .cloned()
            .collect()
    }

    /// Every resource request it was sent.
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    /// Tells its subscriber that its resource changed.
    async fn update(&self) {
        let peer = self.subscriber.lock().unwrap().clone();
        let peer = peer.expect("someone subscribed");
        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(self.has))
            .await
            .expect("the update is sent");
    }

    /// Serves it over streamable HTTP on a loopback port; its `/mcp` URL.
    async fn serve(&self) -> String {
        let upstream = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(upstream.clone()),
            LocalSessionManager::default().into(),
            StreamableHttpServerConfig::default(),
        );
        serve(axum::Router::new().nest_service("/mcp", service)).await
    }
}

#[allow(deprecated)]
impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        // No tools: `tools/list` answers an empty list.
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        let mut resources = ResourcesCapability::default();
        resources.subscribe = self.subscriptions.then_some(true);
        capabilities.resources = Some(resources);
        ServerConfig::new(capabilities)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.record("list", "*");
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            self.has, self.has,
        )]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.record("read", &request.uri);
        if request.uri != self.has {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![ResourceContents::text("contents", self.has)],
        )))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.record("subscribe", &request.uri);
        if !self.subscriptions {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "Method not found",
                None,
            ));
        }
        *self.subscriber.lock().unwrap() = Some(context.peer);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.record("unsubscribe", &request.uri);
        Ok(())
    }
}

/// Serves `app` on a loopback port; its `/mcp` URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/mcp")
}

/// The three upstreams, and toolgate serving their resources: its `/mcp` URL.
struct Federation {
    plain: Upstream,
    other: Upstream,
    watched: Upstream,
    url: String,
    _upstreams: Vec<toolgate_mcp::Upstream>,
}

impl Federation {
    async fn start() -> Federation {
        let plain = Upstream::new("plain://a", false);
        let other = Upstream::new("other://b", true);
        let watched = Upstream::new("watched://x", true);
        let mut tools = ToolRegistry::new();
        let mut upstreams = Vec::new();
        for (name, upstream) in [
            ("aplain", &plain),
            ("bother", &other),
            ("cwatched", &watched),
        ] {
            let config = UpstreamConfig::http(name, upstream.serve().await)
                .call_timeout(Duration::from_secs(20));
            let connected = within(30, "import", toolgate_mcp::Upstream::connect(config))
                .await
                .expect("imported");
            connected.register(&mut tools).expect("registered");
            upstreams.push(connected);
        }
        let pipeline = Pipeline::builder().registry(tools).build().expect("built");
        let service = McpServer::new(pipeline).http_service(StreamableHttpServerConfig::default());
        let url = serve(axum::Router::new().nest_service("/mcp", service)).await;
        Federation {
            plain,
            other,
            watched,
            url,
            _upstreams: upstreams,
        }
    }

    /// A client of toolgate that records the resource updates it is sent.
    async fn client(&self) -> (RunningService<RoleClient, Updates>, Updates) {
        let updates = Updates::default();
        let transport = StreamableHttpClientTransport::from_uri(self.url.clone());
        let client = within(20, "HTTP handshake", updates.clone().serve(transport))
            .await
            .expect("the MCP handshake succeeds");
        (client, updates)
    }
}

/// A client that records the URIs of the resource updates it is sent.
#[derive(Clone, Default)]
struct Updates {
    seen: Arc<Mutex<Vec<String>>>,
    arrived: Arc<Notify>,
}

impl Updates {
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl ClientHandler for Updates {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.lock().unwrap().push(params.uri);
        self.arrived.notify_one();
    }
}

/// The JSON-RPC error of a request that failed.
fn refusal(answer: Result<(), ServiceError>) -> ErrorData {
    match answer {
        Err(ServiceError::McpError(error)) => error,
        other => panic!("a JSON-RPC error, not {other:?}"),
    }
}

#[tokio::test]
#[allow(deprecated)]
async fn a_subscription_reaches_the_upstream_that_has_the_resource_past_one_without_subscriptions_and_one_without_the_resource()
 {
    let federation = Federation::start().await;
    let (client, updates) = federation.client().await;
    let (bystander, bystander_updates) = federation.client().await;

    within(
        20,
        "subscribe",
        client.subscribe(SubscribeRequestParams::new("watched://x")),
    )
    .await
    .expect("the subscription is taken");

    assert_eq!(
        federation.plain.asked(),
        Vec::<String>::new(),
        "an upstream that takes no subscriptions is sent nothing"
    );
    assert_eq!(
        federation.other.asked_about("watched://x"),
        Vec::<String>::new(),
        "an upstream that does not list the resource is not asked about it, since another lists it"
    );
    assert_eq!(
        federation.watched.asked_about("watched://x"),
        ["subscribe watched://x"],
        "the upstream that lists the resource is subscribed, and not asked to read it"
    );
    // Each upstream that takes subscriptions was listed once, up to the one that lists
    // the resource; the one that takes none not at all.
    assert_eq!(federation.other.asked(), ["list *"]);
    assert_eq!(
        federation.watched.asked(),
        ["list *", "subscribe watched://x"]
    );

    federation.watched.update().await;
    within(10, "the update", async {
        while updates.seen().is_empty() {
            updates.arrived.notified().await;
        }
    })
    .await;
    assert_eq!(updates.seen(), ["watched://x"]);
    // A session that did not subscribe hears nothing of it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bystander_updates.seen(), Vec::<String>::new());

    within(
        20,
        "unsubscribe",
        client.unsubscribe(UnsubscribeRequestParams::new("watched://x")),
    )
    .await
    .expect("the unsubscription is taken");
    assert_eq!(
        federation.watched.asked_about("watched://x"),
        ["subscribe watched://x", "unsubscribe watched://x"]
    );
    assert_eq!(federation.plain.asked(), Vec::<String>::new());
    assert_eq!(
        federation.other.asked_about("watched://x"),
        Vec::<String>::new(),
        "an upstream that does not list the resource is not asked about it"
    );

    let _ = client.cancel().await;
    let _ = bystander.cancel().await;
}

#[tokio::test]
#[allow(deprecated)]
async fn a_resource_no_upstream_with_subscriptions_has_is_refused_in_plain_words() {
    let federation = Federation::start().await;
    let (client, _) = federation.client().await;

    // `plain://a` is the resource of the upstream without subscriptions; `nowhere://z`
    // nobody's.
    for uri in ["plain://a", "nowhere://z"] {
        let refused = refusal(
            within(
                20,
                "subscribe",
                client.subscribe(SubscribeRequestParams::new(uri)),
            )
            .await,
        );
        assert_eq!(
            refused.code,
            ErrorCode::RESOURCE_NOT_FOUND,
            "{uri}: {refused:?}"
        );
        assert!(
            refused
                .message
                .contains(&format!("`{uri}` cannot be subscribed to"))
                && refused.message.contains("supports resource subscriptions"),
            "{uri}: {}",
            refused.message
        );
        for upstream in [&federation.plain, &federation.other, &federation.watched] {
            assert!(
                !upstream.asked().iter().any(|a| a.starts_with("subscribe")),
                "{uri}: {:?}",
                upstream.asked()
            );
        }
    }
    assert_eq!(federation.plain.asked(), Vec::<String>::new());

    // Unsubscribing from what the session is not subscribed to asks nobody.
    within(
        20,
        "unsubscribe",
        client.unsubscribe(UnsubscribeRequestParams::new("watched://x")),
    )
    .await
    .expect("nothing to do");
    for upstream in [&federation.plain, &federation.other, &federation.watched] {
        assert!(
            !upstream
                .asked()
                .iter()
                .any(|a| a.starts_with("unsubscribe")),
            "{:?}",
            upstream.asked()
        );
    }

    let _ = client.cancel().await;
}
