//! The toolgate gateway: the `toolgate` binary's library.
//!
//! One YAML file describes the tools (built-in and imported from upstream MCP servers),
//! the users and their API keys, and the policies; a [`Process`] compiles it into a
//! [`Gateway`] (a pipeline) and serves it, a reload swapping in the gateway of the new
//! file, and `toolgate serve` ([`cli`]) puts an HTTP API, an MCP endpoint, health checks and
//! Prometheus metrics in front of it. See `docs/gateway.md` for every field, and
//! `docs/architecture.md` for the layers.
//!
//! ```
//! use toolgate_gateway::config::parse;
//! use toolgate_gateway::{Extensions, Process};
//! use toolgate_core::{InvokeOptions, User};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = parse(r#"
//! tools:
//!   builtin: [calculator]
//! policies:
//!   authorization:
//!     rules:
//!       - { effect: allow, roles: [analyst], tools: [calculator] }
//! "#)?;
//! let process = Process::start(config, Extensions::new()).await?;
//! let gateway = process.current();
//!
//! let analyst = User::new("ana").with_roles(["analyst"]);
//! let out = gateway.pipeline()
//!     .invoke("calculator", json!({"expression": "6 * 7"}), InvokeOptions::new().user(analyst))
//!     .await?;
//! assert_eq!(out["result"], 42);
//!
//! let denied = gateway.pipeline()
//!     .invoke("calculator", json!({"expression": "1"}), InvokeOptions::new().user(User::new("eve")))
//!     .await;
//! assert_eq!(denied.unwrap_err().status(), 403);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod auth;
pub(crate) mod builtin;
pub mod cli;
pub mod config;
pub(crate) mod connections;
pub(crate) mod console;
pub(crate) mod drain;
pub(crate) mod extensions;
pub(crate) mod gateway;
pub(crate) mod http;
pub mod identity;
mod labels;
mod logging;
pub(crate) mod outcomes;
pub(crate) mod pins;
pub(crate) mod policy_test;
pub(crate) mod process;
pub(crate) mod prometheus;
pub(crate) mod secrets;
pub(crate) mod serve;
pub(crate) mod state;
pub(crate) mod telemetry;
mod tools_state;
pub mod webhooks;

pub use extensions::Extensions;
pub use gateway::{Gateway, GatewayError, StagePlan};
pub use process::Process;
