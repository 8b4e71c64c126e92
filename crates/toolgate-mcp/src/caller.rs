//! The MCP request an invocation serves, handed to the tools it calls: an imported tool
//! relays its upstream's progress, sampling and elicitation to it.

// Logging is deprecated by SEP-2577 for the 2026-07-28 revision; clients on 2025-11-25 still
// set a level and expect `notifications/message`.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, ProgressToken};
use rmcp::service::Peer;
use toolgate_core::TypeMapKey;

/// The caller of a `tools/call` that came in over MCP: its connection and the progress
/// token it asked for. [`McpServer`](crate::McpServer) provides it to every invocation
/// it starts (request scope, under [`CallerKey`]); an
/// [`ImportedTool`](crate::ImportedTool) relays to it what its upstream sends during the
/// call — `notifications/progress` with the caller's own token, `notifications/message`
/// at or above the level the caller set, and `sampling/createMessage` and
/// `elicitation/create` requests, answered by the caller.
#[derive(Clone, Debug)]
pub struct CallerRequest {
    /// The caller's connection.
    pub peer: Peer<RoleServer>,
    /// The caller's `_meta.progressToken`, when it asked for progress.
    pub progress_token: Option<ProgressToken>,
    /// The level the caller set with `logging/setLevel`; `None`: it gets no log messages.
    pub log_level: Option<LoggingLevel>,
    /// The caller's MCP session (what its resource subscriptions belong to).
    pub session_id: Arc<str>,
}

/// The request-scope provider key of [`CallerRequest`].
pub struct CallerKey;

impl TypeMapKey for CallerKey {
    type Value = CallerRequest;
}

impl CallerRequest {
    /// Whether a log message at `level` is for this caller.
    pub fn wants_log(&self, level: LoggingLevel) -> bool {
        self.log_level
            .is_some_and(|wanted| severity(level) >= severity(wanted))
    }

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

/// The rank of a level, from `debug` (0) to `emergency` (7).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
