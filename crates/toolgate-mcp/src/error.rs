//! The errors of setting up MCP serving and imports.

use toolgate_core::error::RegistryError;

/// Why serving or importing over MCP could not start.
///
/// Errors of individual tool calls are [`ToolError`](toolgate_core::ToolError)s; this
/// type is for wiring: a transport that cannot start, an upstream that cannot be
/// reached or listed, a name collision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The upstream server could not be started or reached.
    #[error(
        "cannot connect to MCP server `{server}`: {reason}; check its command or URL and that it is running"
    )]
    Connect {
        /// The upstream's configured name.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// The credential's environment variable is not set.
    #[error(
        "the credential for MCP server `{server}` is read from environment variable `{var}`, which is not set (or not valid Unicode): export it before starting"
    )]
    MissingCredential {
        /// The upstream's configured name.
        server: String,
        /// The environment variable.
        var: String,
    },
    /// The upstream did not answer `tools/list`.
    #[error("MCP server `{server}` did not list its tools: {reason}")]
    Discovery {
        /// The upstream's configured name.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// An imported tool has the name of a tool already registered.
    #[error(
        "tool `{tool}` of MCP server `{server}` has the name of a tool that is already registered: configure a prefix for this server (e.g. `{server}.`)"
    )]
    Collision {
        /// The upstream's configured name.
        server: String,
        /// The colliding name.
        tool: String,
    },
    /// An imported tool could not be registered for another reason (an invalid name).
    #[error("tool of MCP server `{server}` could not be registered: {source}")]
    Registry {
        /// The upstream's configured name.
        server: String,
        /// The registry's reason.
        #[source]
        source: RegistryError,
    },
    /// The configuration is inconsistent.
    #[error("invalid MCP configuration: {0}")]
    Config(String),
    /// Serving over a transport failed.
    #[error("MCP transport failed: {0}")]
    Transport(String),
}
