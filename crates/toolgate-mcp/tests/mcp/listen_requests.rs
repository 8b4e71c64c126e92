//! `subscriptions/listen` (2026-07-28) through toolgate, which serves an upstream's
//! resources: the acknowledgment of a listen request tells the client its subscriptions
//! are established, so toolgate subscribes the upstream before it acknowledges — a client
//! that changes a resource as soon as it is acknowledged is told of the change — and a
//! request toolgate cannot subscribe is refused unacknowledged. An update the upstream
//! sends before the acknowledgment is held and follows it.
//!
//! The upstream is an rmcp server on a loopback port with one resource, `watched://x`,
//! whose `resources/subscribe` can be made slow, or send an update before it answers.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::within;
use rmcp::model::{
    ClientConfig, ListResourcesResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceUpdatedNotificationParam, ServerConfig, ServerNotification,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, Peer, RequestContext, RunningService, ServiceError,
    Subscription,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler};
use toolgate_core::Pipeline;
use toolgate_mcp::{McpServer, UpstreamConfig};

const WATCHED: &str = "watched://x";

/// An upstream with resource [`WATCHED`], which takes subscriptions to it.
#[derive(Clone, Default)]
struct Upstream {
    /// How long its `resources/subscribe` takes to answer.
    subscribe_takes: Duration,
    /// Whether it sends an update of the resource as soon as it is asked to subscribe,
    /// before it takes its time and answers.
    updates_at_once: bool,
    /// The connection subscribed to the resource, once its subscription is answered.
    subscriber: Arc<Mutex<Option<Peer<RoleServer>>>>,
}

impl Upstream {
    /// Tells its subscriber that the resource changed; false when nobody is subscribed.
    async fn update(&self) -> bool {
        let peer = self.subscriber.lock().unwrap().clone();
        let Some(peer) = peer else {
            return false;
        };
        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(WATCHED))
            .await
            .expect("the update is sent");
        true
    }

    /// Serves it over streamable HTTP on a loopback port; its `/mcp` URL.
    async fn serve(&self) -> String {
        common::rmcp_upstream::serve(self.clone()).await
    }
}

#[allow(deprecated)]
impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        common::rmcp_upstream::takes_subscriptions()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            WATCHED, WATCHED,
        )]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != WATCHED {
            let missing = format!("no resource {}", request.uri);
            return Err(ErrorData::resource_not_found(missing, None));
        }
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![ResourceContents::text("contents", WATCHED)],
        )))
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if self.updates_at_once {
            let update = ResourceUpdatedNotificationParam::new(WATCHED);
            let _ = context.peer.notify_resource_updated(update).await;
        }
        tokio::time::sleep(self.subscribe_takes).await;
        *self.subscriber.lock().unwrap() = Some(context.peer);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.subscriber.lock().unwrap() = None;
        Ok(())
    }
}

/// `upstream`, served, imported into a pipeline.
async fn imported(upstream: &Upstream) -> (toolgate_mcp::Upstream, Pipeline) {
    let config =
        UpstreamConfig::http("up", upstream.serve().await).call_timeout(Duration::from_secs(20));
    common::imported(config).await
}

/// How a client reaches toolgate.
#[derive(Clone, Copy, Debug)]
enum Front {
    /// Streamable HTTP, where the endpoint holds the acknowledgment back.
    Http,
    /// stdio (a pipe pair), where the connection subscribes before rmcp acknowledges.
    Stdio,
}

/// toolgate serving `upstream`'s resources through `front`: a 2026-07-28 client of it,
/// and the imported upstream (dropped, it disconnects).
async fn client_of(
    upstream: &Upstream,
    front: Front,
) -> (
    RunningService<RoleClient, ClientConfig>,
    toolgate_mcp::Upstream,
) {
    let (imported, pipeline) = imported(upstream).await;
    (client_with(pipeline, front).await, imported)
}

/// A 2026-07-28 client of toolgate serving `pipeline` through `front`.
async fn client_with(pipeline: Pipeline, front: Front) -> RunningService<RoleClient, ClientConfig> {
    let server = McpServer::new(pipeline);
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = ClientConfig::default();
    let connected = match front {
        Front::Http => {
            let service = server.http_service(StreamableHttpServerConfig::default());
            let app = axum::Router::new().nest_service("/mcp", service);
            let url = format!("{}/mcp", common::serve_on_loopback(app).await);
            let transport = StreamableHttpClientTransport::from_uri(url);
            within(
                20,
                "the handshake",
                client.serve_with_lifecycle(transport, lifecycle),
            )
            .await
        }
        Front::Stdio => {
            let (client_end, server_end) = tokio::io::duplex(64 * 1024);
            let (server_read, server_write) = tokio::io::split(server_end);
            tokio::spawn(async move { server.serve_io(server_read, server_write).await });
            let transport = tokio::io::split(client_end);
            within(
                20,
                "the handshake",
                client.serve_with_lifecycle(transport, lifecycle),
            )
            .await
        }
    };
    connected.expect("the client connects")
}

/// Listens to `uri` through toolgate; the subscription once acknowledged, or the error
/// the request was refused with.
async fn listen(
    client: &RunningService<RoleClient, ClientConfig>,
    uri: &str,
) -> Result<Subscription, ServiceError> {
    let mut filter = SubscriptionFilter::new();
    filter.resource_subscriptions = Some(vec![uri.to_owned()]);
    within(30, "the listen request", client.peer().listen(filter)).await
}

/// The URI of the next resource update on `subscription`, within 10 s.
async fn next_update(subscription: &mut Subscription) -> String {
    let next = within(
        10,
        "a resource update on the listen stream",
        subscription.next(),
    )
    .await;
    match next.expect("the stream carries only what was acknowledged") {
        None => panic!("the listen stream ended"),
        Some(ServerNotification::ResourceUpdatedNotification(update)) => update.params.uri,
        Some(other) => panic!("a resource update, not {other:?}"),
    }
}

#[tokio::test]
async fn a_listen_request_is_acknowledged_only_once_the_upstream_is_subscribed() {
    for front in [Front::Http, Front::Stdio] {
        // The upstream takes its time to subscribe: an acknowledgment sent before it
        // answers would reach the client while the upstream has nobody to tell of a change.
        let upstream = Upstream {
            subscribe_takes: Duration::from_millis(400),
            ..Upstream::default()
        };
        let (client, _imported) = client_of(&upstream, front).await;
        let mut subscription = listen(&client, WATCHED).await.expect("acknowledged");
        assert_eq!(
            subscription.acknowledged().resource_subscriptions,
            Some(vec![WATCHED.to_owned()]),
            "{front:?}"
        );
        // The resource changes as soon as the client is told it is watched.
        assert!(
            upstream.update().await,
            "{front:?}: the upstream was subscribed when toolgate acknowledged the listen request"
        );
        assert_eq!(next_update(&mut subscription).await, WATCHED, "{front:?}");
        client.cancel().await.expect("the client closes");
    }
}

#[tokio::test]
async fn an_update_the_upstream_sends_before_the_acknowledgment_follows_it() {
    for front in [Front::Http, Front::Stdio] {
        // The update reaches toolgate while the subscription is being made: before there
        // is an acknowledged stream to send it on.
        let upstream = Upstream {
            updates_at_once: true,
            subscribe_takes: Duration::from_millis(400),
            ..Upstream::default()
        };
        let (client, _imported) = client_of(&upstream, front).await;
        let mut subscription = listen(&client, WATCHED).await.expect("acknowledged");
        assert_eq!(next_update(&mut subscription).await, WATCHED, "{front:?}");
        client.cancel().await.expect("the client closes");
    }
}

#[tokio::test]
async fn a_listen_request_for_a_resource_no_upstream_has_is_refused_unacknowledged() {
    for front in [Front::Http, Front::Stdio] {
        let upstream = Upstream::default();
        let (client, _imported) = client_of(&upstream, front).await;
        // Acknowledged first, the client's `listen` would return a subscription whose
        // stream then ends in an error; refused first, it returns the error.
        let refused = match listen(&client, "missing://y").await {
            Err(ServiceError::McpError(error)) => error,
            Ok(subscription) => panic!(
                "{front:?}: acknowledged, honouring {:?}",
                subscription.acknowledged().resource_subscriptions
            ),
            Err(other) => panic!("{front:?}: a JSON-RPC error, not {other}"),
        };
        assert!(
            refused.message.contains("missing://y"),
            "{front:?}: the refusal names the resource: {}",
            refused.message
        );
        assert!(
            upstream.subscriber.lock().unwrap().is_none(),
            "{front:?}: nothing was subscribed upstream"
        );
        client.cancel().await.expect("the client closes");
    }
}

/// A listen request naming one URI a thousand times subscribes it through the pipeline
/// once (and once through each policy hook and audit), not a thousand times.
#[tokio::test]
async fn a_uri_named_many_times_in_one_listen_request_runs_through_the_pipeline_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let upstream = Upstream::default();
    let config =
        UpstreamConfig::http("up", upstream.serve().await).call_timeout(Duration::from_secs(20));
    let imported = within(30, "import", toolgate_mcp::Upstream::connect(config))
        .await
        .expect("imported");
    let mut tools = toolgate_core::registry::ToolRegistry::new();
    imported.register(&mut tools).expect("registered");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let pipeline = Pipeline::builder()
        .registry(tools)
        .hook(toolgate_core::hook::hook_fn(
            toolgate_core::Stage::WillAuthorize,
            move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(()).into()
            },
        ))
        .build()
        .expect("built");
    let client = client_with(pipeline, Front::Http).await;

    let mut filter = SubscriptionFilter::new();
    filter.resource_subscriptions = Some(vec![WATCHED.to_owned(); 1_000]);
    let subscription = within(30, "the listen request", client.peer().listen(filter))
        .await
        .expect("acknowledged");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "subscribed through the pipeline once"
    );
    drop(subscription);
    client.cancel().await.expect("the client closes");
}
