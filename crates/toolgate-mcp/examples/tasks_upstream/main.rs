//! An MCP server whose tools run as tasks (SEP-2663), over streamable HTTP on loopback: the
//! upstream the gateway relays tasks from in the conformance run (`tasks-*` scenarios
//! through the gateway) — see `fixture.rs` for its tools.
//!
//! ```sh
//! cargo run -p toolgate-mcp --example tasks_upstream -- 0   # prints "tasks listening on URL"
//! ```

mod fixture;

use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        None => 0,
        Some(raw) => raw.parse().map_err(|_| {
            format!("usage: tasks_upstream PORT (a whole number; 0 picks a free port), not {raw:?}")
        })?,
    };
    let upstream = fixture::TasksUpstream::default();
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("tasks listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
