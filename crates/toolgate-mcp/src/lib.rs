//! MCP for toolgate, on [`rmcp`]: serve a pipeline as an MCP server, and import the tools
//! of remote MCP servers as first-class tools.
//!
//! * [`McpServer`] serves a [`Pipeline`](toolgate_core::Pipeline) over stdio
//!   ([`McpServer::serve_stdio`]) or streamable HTTP ([`McpServer::http_service`], a tower
//!   service to mount in an axum router). `tools/list` shows each tool's schemas and
//!   annotations, filtered per principal by a [`ListFilter`]; every `tools/call` runs
//!   through the pipeline with the MCP session as the session scope. A client's
//!   `notifications/cancelled`, or an HTTP client that disconnects, cancels the
//!   invocation, and everything its hooks acquired is released. A host that shuts down
//!   cuts the calls still running with a [`HostShutdown`]: they are cancelled, and
//!   answered with an error result.
//! * [`Upstream`] connects to a remote MCP server (a stdio command or a streamable HTTP
//!   URL, with a credential read from an environment variable), discovers its tools and
//!   registers them in a pipeline builder as [`ImportedTool`]s with
//!   `source = mcp`, so the same hooks apply to them. Calls carry a deadline; a dead
//!   upstream is reconnected with backoff.
//!
//! How errors map (see `docs/mcp.md`): tool and policy errors become a `CallToolResult`
//! with `isError: true` and the error's message (a retry-after includes its delay);
//! protocol errors — an unknown tool, a request that is not a valid `tools/call` — are
//! JSON-RPC errors.
//!
//! # Example: serve a pipeline over streamable HTTP
//!
//! ```no_run
//! use serde_json::json;
//! use toolgate_core::{JsonTool, Pipeline, ToolError};
//! use toolgate_mcp::McpServer;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(JsonTool::new(
//!         "echo",
//!         "Returns its arguments.",
//!         json!({"type": "object"}),
//!         |input, _ctx| Box::pin(async move { Ok::<_, ToolError>(input.clone()) }),
//!     ))
//!     .build()?;
//! let server = McpServer::new(pipeline);
//!
//! let app = axum::Router::new().nest_service("/mcp", server.http_service(Default::default()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod caller;
mod client;
mod convert;
mod error;
mod json_scan;
mod listen_stream;
pub mod result;
mod server;
pub mod trace_context;

pub use caller::{
    CallerKey, CallerRequest, InputRound, MISSING_CAPABILITY, Refusal, ResourceCheck,
    UPSTREAM_TASK, UpstreamTask, UpstreamTaskSlot,
};
pub use client::{
    Backoff, CallerAccessToken, CallerCredentials, DEFAULT_MAX_CONNECTIONS, ImportedPrompt,
    ImportedResources, ImportedTasks, ImportedTool, MIN_GUESSED_SECRET_LEN, PROMPT_PREFIX,
    PROMPT_TAG, PerCaller, RESOURCES_PREFIX, RESOURCES_TAG, STDIO_PASSED_ENV,
    StaticCallerCredentials, TASKS_PREFIX, TASKS_TAG, UNATTRIBUTED, UPSTREAM_SHARE_WAITS,
    UPSTREAM_WAITS, Upstream, UpstreamBounds, UpstreamConfig, UpstreamTransport,
    is_credential_name, is_env_name, is_tool, per_caller,
};
pub use convert::{error_to_result, output_to_result, to_mcp_tool};
pub use error::McpError;
pub use listen_stream::ListenStream;
pub use server::{
    ClientDisconnected, DEFAULT_LISTENS_PER_USER, GuardedBody, HostShutdown, ListFilter,
    MAX_RELAYED_TASK_AGE, McpHttpService, McpServer, OnWithdrawal, RelayedTasks, Withdrawal,
};

pub use rmcp;
