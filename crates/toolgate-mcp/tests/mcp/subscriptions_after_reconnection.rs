//! A resource subscription outlives the upstream connection it was made on: when the
//! upstream forgets toolgate's session (it expired it, or restarted), toolgate connects
//! again by itself and subscribes the upstream again, without any caller's request, and
//! the updates the upstream sends then reach the subscriber.
//!
//! The upstream is an rmcp server over streamable HTTP on a loopback port, with one
//! resource, whose session manager the test keeps to close toolgate's sessions.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::within;
use rmcp::model::{
    ClientConfig, ListResourcesResult, PaginatedRequestParams, ResourceUpdatedNotificationParam,
    ServerConfig, SubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::mpsc;
use toolgate_mcp::{McpServer, UpstreamConfig};

/// The upstream's one resource.
const URI: &str = "kept://r";

/// An upstream that hands over the connection of each subscription it is sent.
#[derive(Clone)]
struct Upstream {
    subscribed: mpsc::UnboundedSender<Peer<RoleServer>>,
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
        Ok(ListResourcesResult::with_all_items(vec![
            rmcp::model::Resource::new(URI, URI),
        ]))
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _ = self.subscribed.send(context.peer);
        Ok(())
    }
}

/// A client of toolgate that hands over each resource update it is sent.
#[derive(Clone)]
struct Updates(mpsc::UnboundedSender<String>);

impl ClientHandler for Updates {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

#[tokio::test]
#[allow(deprecated)]
async fn a_subscription_is_made_again_by_itself_after_the_upstream_forgot_the_session() {
    let (subscribed, mut subscriptions) = mpsc::unbounded_channel();
    let upstream = Upstream { subscribed };
    let sessions = Arc::new(LocalSessionManager::default());
    let upstream_url = common::rmcp_upstream::serve_with(upstream, Arc::clone(&sessions)).await;

    let config = UpstreamConfig::http("kept", upstream_url).call_timeout(Duration::from_secs(20));
    let (_connected, pipeline) = common::imported(config).await;
    let gateway = McpServer::new(pipeline).http_service(StreamableHttpServerConfig::default());
    let url = format!(
        "{}/mcp",
        common::serve_on_loopback(axum::Router::new().nest_service("/mcp", gateway)).await
    );

    let (updated, mut updates) = mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_uri(url);
    let client = within(20, "HTTP handshake", Updates(updated).serve(transport))
        .await
        .expect("the MCP handshake succeeds");
    within(
        20,
        "subscribe",
        client.subscribe(SubscribeRequestParams::new(URI)),
    )
    .await
    .expect("the subscription");
    within(20, "the upstream's subscription", subscriptions.recv())
        .await
        .expect("the upstream is subscribed");

    // The upstream forgets every session of toolgate's (as on an expiry or a restart),
    // and with them the subscription.
    let ids: Vec<_> = sessions.sessions.read().await.keys().cloned().collect();
    assert!(!ids.is_empty(), "toolgate has a session with the upstream");
    for id in &ids {
        sessions
            .close_session(id)
            .await
            .expect("the session closes");
    }

    // Nobody asks toolgate anything: it subscribes the upstream again by itself.
    let again = within(
        20,
        "the upstream subscribed again on a new session",
        subscriptions.recv(),
    )
    .await
    .expect("the upstream is subscribed again");
    again
        .notify_resource_updated(ResourceUpdatedNotificationParam::new(URI))
        .await
        .expect("the update is sent");
    let uri = within(20, "the update after the new subscription", updates.recv()).await;
    assert_eq!(uri.as_deref(), Some(URI));

    let _ = client.cancel().await;
}
