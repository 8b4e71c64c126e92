//! toolgate: every tool call of an AI agent through one ordered, hookable pipeline.
//!
//! This facade re-exports the workspace's crates as modules — [`core`] (the pipeline),
//! [`hooks`] (the built-in policies) and [`agent`] (the agent-facing tool system) — and
//! most programs only need the [`prelude`]. See `toolgate_core` for the contract of the
//! pipeline.
//!
//! ```
//! use toolgate::prelude::*;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
//!     .build()?;
//! assert_eq!(pipeline.invoke("ping", json!(null), InvokeOptions::new()).await?, json!("pong"));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub use toolgate_agent as agent;
pub use toolgate_core as core;
/// garde, the version toolgate checks tool inputs with. Its `Validate` derive names
/// `::garde`, so a crate deriving it also lists `garde = { version = "0.23", features =
/// ["derive"] }` (the README's `Cargo.toml` lines); the trait and rules are here.
pub use toolgate_core::external::garde;
/// schemars, the version toolgate describes inputs and outputs with. The derive works
/// without a dependency of your own: `#[schemars(crate = "toolgate::schemars")]`.
pub use toolgate_core::external::schemars;
pub use toolgate_hooks as hooks;
/// Embedding a pipeline in your own HTTP server (feature `http`): see `docs/embedding.md`.
#[cfg(feature = "http")]
pub use toolgate_http as http;

/// The names most programs use: `toolgate_core`'s prelude, and the annotations a tool's
/// owner declares (read-only, idempotent, …).
pub mod prelude {
    pub use toolgate_core::prelude::*;
    pub use toolgate_core::tool::ToolAnnotations;
}

/// The README's code, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The providers guide, `docs/providers.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/providers.md")]
pub struct ProvidersGuide;
