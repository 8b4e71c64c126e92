//! Pieces of an upstream written with rmcp's server, for tests of what toolgate does with
//! an upstream that takes resource subscriptions.

use rmcp::ServerHandler;
use rmcp::model::{ResourcesCapability, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

/// What an upstream that takes resource subscriptions declares: tools (it may list none)
/// and resources, with `subscribe`.
pub fn takes_subscriptions() -> ServerConfig {
    let mut capabilities = ServerCapabilities::builder().enable_tools().build();
    let mut resources = ResourcesCapability::default();
    resources.subscribe = Some(true);
    capabilities.resources = Some(resources);
    ServerConfig::new(capabilities)
}

/// Serves `handler` (a clone per session) over streamable HTTP on a loopback port, its
/// sessions kept by `sessions`; its `/mcp` URL.
pub async fn serve_with<H>(handler: H, sessions: std::sync::Arc<LocalSessionManager>) -> String
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        sessions,
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    format!("{}/mcp", super::serve_on_loopback(app).await)
}

/// [`serve_with`] sessions of its own.
pub async fn serve<H>(handler: H) -> String
where
    H: ServerHandler + Clone + Send + Sync + 'static,
{
    serve_with(handler, std::sync::Arc::default()).await
}
