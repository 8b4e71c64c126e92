//! toolgate: every tool call of an AI agent through one ordered, hookable pipeline.
//!
//! This facade re-exports the workspace's crates; most programs only need the
//! [`prelude`]. See `toolgate_core` for the contract of the pipeline.
//!
//! ```
//! use toolgate::prelude::*;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut builder = Pipeline::builder();
//! builder.tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))?;
//! let pipeline = builder.build()?;
//! assert_eq!(pipeline.invoke("ping", json!(null), InvokeOptions::new()).await?, json!("pong"));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub use toolgate_agent as agent;
pub use toolgate_core as core;
pub use toolgate_hooks as hooks;

pub use toolgate_core::*;

/// The names most programs use.
pub mod prelude {
    pub use toolgate_core::{
        Control, FailureMode, Hook, HookFuture, HookOptions, HookResult, InvokeOptions, JsonTool,
        Next, Pipeline, PipelineBuilder, ResumeDecision, Scope, Stage, StageSet, Tool,
        ToolAnnotations, ToolDefinition, ToolError, ToolInvokeContext, TypeMapKey, User, hook,
        hook_fn, hook_fn_sync, tool_fn, tool_fn_with_context,
    };
}

/// The README's code, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
