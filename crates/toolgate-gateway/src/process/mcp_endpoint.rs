//! The `/mcp` endpoint of the process: rmcp's streamable HTTP service and the table of
//! who opened each of its sessions, made for the first configuration that serves `/mcp`
//! and kept across reloads — a reload hands the endpoint the new configuration's server,
//! so that clients keep their sessions instead of initializing again.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use toolgate_mcp::rmcp::transport::StreamableHttpServerConfig;
use toolgate_mcp::rmcp::transport::streamable_http_server::session::local::SessionConfig as RmcpSessionConfig;
use toolgate_mcp::{McpHttpService, McpServer};

use super::mcp_sessions::McpSessions;
use crate::config::ServerConfig;

/// The endpoint, once a configuration serves `/mcp`. Cheap to clone: clones share it.
/// Read on every `/mcp` request without a lock; [`serve`](Self::serve) is called by one
/// reload at a time.
#[derive(Clone, Default)]
pub(crate) struct McpEndpoint(Arc<ArcSwapOption<Served>>);

/// The endpoint as it serves now.
pub(crate) struct Served {
    /// rmcp's service.
    pub service: McpHttpService,
    /// Who opened each of its sessions.
    pub sessions: Arc<McpSessions>,
}

impl McpEndpoint {
    /// Serves `server`, a configuration's MCP server (`None`: `/mcp` is off), under
    /// `settings`: on the endpoint made before, its sessions kept and the new session
    /// limits applied from the next session on; or on a new endpoint made with
    /// `settings`. Turning `/mcp` off ends the endpoint and its sessions.
    pub(crate) fn serve(&self, server: Option<&McpServer>, settings: &ServerConfig) {
        let Some(server) = server else {
            self.0.store(None);
            return;
        };
        match self.0.load_full() {
            Some(kept) => {
                kept.service.serve(server);
                kept.sessions.set_limits(settings.mcp_sessions);
            }
            None => {
                // rmcp's own expiry is only a net under the gateway's (see `McpSessions`):
                // it closes sessions that exchanged no message, open streams included.
                let mut sessions = RmcpSessionConfig::default();
                sessions.keep_alive = Some(
                    RmcpSessionConfig::DEFAULT_KEEP_ALIVE.max(settings.mcp_sessions.idle_timeout),
                );
                // Bodies over the limit are answered 413 by the endpoint, as on `/v1`.
                // Any `Host`: clients name the gateway by whatever reaches it (a DNS name,
                // a load balancer's), and rmcp's default lets in loopback names only. Pages
                // that rebind a name to the gateway are refused by their `Origin`
                // (`server.mcp_allowed_origins`, checked before this endpoint), and every
                // request needs a credential.
                let service = server.http_service_with_sessions(
                    StreamableHttpServerConfig::default()
                        .with_max_request_body_bytes(settings.body_limit.0)
                        .disable_allowed_hosts(),
                    sessions,
                );
                self.0.store(Some(Arc::new(Served {
                    sessions: McpSessions::start(settings.mcp_sessions, service.clone()),
                    service,
                })));
            }
        }
    }

    /// The endpoint, unless no configuration served `/mcp` yet or the one served now
    /// turned it off.
    pub(crate) fn served(&self) -> Option<Arc<Served>> {
        self.0.load_full()
    }
}
