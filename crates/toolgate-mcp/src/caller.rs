//! The MCP request an invocation serves, handed to the tools it calls: an imported tool
//! relays its upstream's progress, sampling and elicitation to it.

use rmcp::RoleServer;
use rmcp::model::ProgressToken;
use rmcp::service::Peer;
use toolgate_core::TypeMapKey;

/// The caller of a `tools/call` that came in over MCP: its connection and the progress
/// token it asked for. [`McpServer`](crate::McpServer) provides it to every invocation
/// it starts (request scope, under [`CallerKey`]); an
/// [`ImportedTool`](crate::ImportedTool) relays to it what its upstream sends during the
/// call — `notifications/progress` with the caller's own token, and
/// `sampling/createMessage` and `elicitation/create` requests, answered by the caller.
#[derive(Clone, Debug)]
pub struct CallerRequest {
    /// The caller's connection.
    pub peer: Peer<RoleServer>,
    /// The caller's `_meta.progressToken`, when it asked for progress.
    pub progress_token: Option<ProgressToken>,
}

/// The request-scope provider key of [`CallerRequest`].
pub struct CallerKey;

impl TypeMapKey for CallerKey {
    type Value = CallerRequest;
}

impl CallerRequest {
    /// Whether the caller declared it can answer `sampling/createMessage`.
    pub fn can_sample(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some())
    }

    /// Whether the caller declared it can answer `elicitation/create`.
    pub fn can_elicit(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some())
    }
}
