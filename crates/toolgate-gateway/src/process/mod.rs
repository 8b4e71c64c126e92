//! The process layer: what is built once and lives as long as the process, under the
//! configurations it serves one after the other.
//!
//! The gateway has one layer per lifetime, bottom up: [`config`](crate::config) (plain
//! data) → this layer → the [`Gateway`] of one configuration, built from a configuration
//! and this layer → [`http`](crate::http). A [`Process`] holds the policy state
//! ([`SharedState`]), the `/mcp` endpoint with who opened each of its sessions, the
//! identity provider's keys and your own hooks, and the gateway it serves now. A reload
//! builds a new [`Gateway`] on it and swaps it in: nothing is carried from the old
//! gateway to the new one.

mod mcp_endpoint;
pub(crate) mod mcp_sessions;

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;
use toolgate_hooks::secrets::Scrubber;

use crate::config::{Config, TelemetryConfig};
use crate::extensions::Extensions;
use crate::gateway::{BuildOn, Gateway, GatewayError};
use crate::identity::KeyCache;
use crate::state::{SharedState, suspension_limits};

pub(crate) use mcp_endpoint::McpEndpoint;

/// The gateway's process: built once, it serves one configuration at a time.
pub struct Process {
    /// The gateway of the configuration served now; replaced on reload.
    current: Arc<ArcSwap<Gateway>>,
    /// The policy state; replaced only when a configuration names another state backend
    /// or statistics file. Locked for a whole reload, so that reloads do not interleave.
    shared: Mutex<SharedState>,
    /// The `/mcp` endpoint and its sessions.
    mcp: McpEndpoint,
    /// The identity provider's keys.
    keys: KeyCache,
    /// Hooks of your own beside the configured policies, in every configuration.
    extensions: Extensions,
    /// The `telemetry` section the process started with: its exporter runs, with its
    /// credentials, until the process ends, whatever a reload says.
    exporting: Option<TelemetryConfig>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("current", &self.current.load())
            .finish_non_exhaustive()
    }
}

impl Process {
    /// Opens the policy state for `config`, builds its gateway with `extensions` beside
    /// the configured policies, and serves it.
    ///
    /// # Errors
    ///
    /// [`GatewayError`] saying which part of the configuration could not be used.
    pub async fn start(config: Config, extensions: Extensions) -> Result<Process, GatewayError> {
        // Before anything can log: the log lines of a failed start are scrubbed too.
        crate::logging::scrub_secrets(crate::secrets::scrubber(&config));
        let shared = SharedState::new(&config).await?;
        let exporting = config.telemetry.clone();
        let keys = KeyCache::default();
        let on = BuildOn {
            shared: &shared,
            keys: &keys,
            extensions: &extensions,
        };
        let gateway = Arc::new(Gateway::build(config, &on).await?);
        let process = Process {
            current: Arc::new(ArcSwap::new(Arc::clone(&gateway))),
            shared: Mutex::new(shared),
            mcp: McpEndpoint::default(),
            keys,
            extensions,
            exporting,
        };
        process.serve(&gateway, &*process.shared.lock().await);
        Ok(process)
    }

    /// Builds the gateway of `config` on this process and swaps it in; calls in flight
    /// finish on the gateway they started on. When it cannot be built, the one served
    /// now goes on.
    ///
    /// # Errors
    ///
    /// [`GatewayError`] saying which part of the configuration could not be used.
    pub async fn reload(&self, config: Config) -> Result<(), GatewayError> {
        let mut shared = self.shared.lock().await;
        let next = shared.for_reload(&config).await?;
        let on = BuildOn {
            shared: &next,
            keys: &self.keys,
            extensions: &self.extensions,
        };
        let gateway = Arc::new(Gateway::build(config, &on).await?);
        // The exporter started with the process still holds its credentials, and logs
        // its URL when an export fails: they stay scrubbed after a reload that changed them.
        let mut held = crate::secrets::held(&gateway.config);
        held.extend(
            self.exporting
                .iter()
                .flat_map(crate::secrets::exporter_held),
        );
        crate::logging::scrub_secrets(Scrubber::for_secrets(&held));
        self.serve(&gateway, &next);
        *shared = next;
        let old = self.current.swap(Arc::clone(&gateway));
        if old.config.console.is_some() && gateway.config.console.is_none() {
            // Turned off: its sessions end, and do not come back when it is turned on.
            gateway.console_sessions.end_all();
        }
        gateway.hand_over_subscriptions(&old).await;
        Ok(())
    }

    /// Points what the process keeps at `gateway`: the `/mcp` endpoint serves its MCP
    /// server, and calls suspended from now on get its bounds (calls waiting already keep
    /// their expiry).
    fn serve(&self, gateway: &Gateway, shared: &SharedState) {
        self.mcp.serve(gateway.mcp.as_ref(), &gateway.config.server);
        shared
            .suspensions
            .set_limits(suspension_limits(&gateway.config));
    }

    /// The gateway of the configuration served now.
    pub fn current(&self) -> Arc<Gateway> {
        self.current.load_full()
    }

    /// The policy state the current configuration runs on.
    pub(crate) async fn shared(&self) -> SharedState {
        self.shared.lock().await.clone()
    }

    /// The current gateway, as the HTTP layer reads it on each request.
    pub(crate) fn serving(&self) -> Arc<ArcSwap<Gateway>> {
        Arc::clone(&self.current)
    }

    /// The `telemetry` section the process started with, which its exporter follows.
    pub(crate) fn exporting(&self) -> Option<&TelemetryConfig> {
        self.exporting.as_ref()
    }

    /// The `/mcp` endpoint.
    pub(crate) fn mcp(&self) -> &McpEndpoint {
        &self.mcp
    }
}
