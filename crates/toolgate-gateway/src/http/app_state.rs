//! What every request handler shares: the HTTP layer's view of the
//! [`Process`](crate::process::Process).

use std::sync::Arc;

use arc_swap::ArcSwap;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::drain::Drain;
use crate::gateway::Gateway;
use crate::process::{McpEndpoint, Process};

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The gateway of the current configuration; replaced on reload.
    pub current: Arc<ArcSwap<Gateway>>,
    /// The `/mcp` endpoint of the process, kept across reloads.
    pub(crate) mcp: McpEndpoint,
    /// Renders `/metrics`, when a Prometheus recorder is installed.
    pub metrics: Option<PrometheusHandle>,
    /// The drain for shutdown: once it starts, `/readyz` answers 503 so load balancers
    /// stop sending, and new calls are refused.
    pub drain: Drain,
}

impl AppState {
    /// What the handlers of `process` share, with its metrics and its drain.
    pub fn new(process: &Process, metrics: Option<PrometheusHandle>, drain: Drain) -> Self {
        AppState {
            current: process.serving(),
            mcp: process.mcp().clone(),
            metrics,
            drain,
        }
    }
}
