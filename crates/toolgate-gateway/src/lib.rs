//! The toolgate gateway: the `toolgate` binary's library.
//!
//! One YAML file describes the tools (built-in and imported from upstream MCP servers),
//! the users and their API keys, and the policies; [`Gateway::build`] compiles it into a
//! pipeline, and [`serve`](serve::serve) puts an HTTP API, an MCP endpoint, health checks
//! and Prometheus metrics in front of it. See `docs/gateway.md` for every field.
//!
//! ```
//! use toolgate_gateway::config::parse;
//! use toolgate_gateway::state::SharedState;
//! use toolgate_gateway::Gateway;
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
//! let shared = SharedState::new(&config).await?;
//! let gateway = Gateway::build(config, &shared).await?;
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
pub mod builtin;
pub mod cli;
pub mod config;
pub mod connections;
pub mod drain;
pub mod extensions;
pub mod gateway;
pub mod http;
pub mod identity;
mod labels;
mod logging;
pub mod outcomes;
pub mod pins;
pub mod prometheus;
pub mod secrets;
pub mod serve;
pub mod state;
pub mod telemetry;
mod tools_state;
pub mod webhooks;

pub use extensions::Extensions;
pub use gateway::{Gateway, GatewayError};
