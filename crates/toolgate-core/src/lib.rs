//! The toolgate invocation pipeline.
//!
//! Every tool call runs through one ordered pipeline of lifecycle [stages](Stage). Hooks
//! plug into those stages to authorize, rate-limit, validate, cache, retry, redact, audit
//! and measure; a typed dependency-injection context, [`ToolInvokeContext`], gives them
//! what they need; and control outcomes ([`Control`]: respond, abort, retry-after,
//! suspend) short-circuit the pipeline in a way every path of which is a contract.
//!
//! * [`Tool`] — a typed tool (serde + garde + schemars input), or [`tool_fn`] from a closure,
//!   or [`JsonTool`] known only by its JSON Schema.
//! * [`Hook`] — a method per stage, `around_execute`, priority, filter; written under
//!   [`#[hook]`](hook), which derives the stages from the methods, or as a closure of one
//!   stage with [`hook_fn`].
//! * [`Pipeline`] — tools plus hooks compiled into per-tool plans; [`Pipeline::invoke`].
//! * Providers in three [scopes](Scope): request → session → global.
//! * [`SuspensionStore`] — where calls wait for a person, under [`SuspensionLimits`]
//!   (per-user and total caps, expiry); [`Pipeline::resume`] authorizes them again.
//!
//! # Example
//!
//! ```
//! use garde::Validate;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//! use toolgate_core::{hook, tool_fn, Hook, HookResult, InvokeOptions, Pipeline, ToolError,
//!     ToolInvokeContext, User};
//!
//! #[derive(Deserialize, Serialize, Validate, JsonSchema)]
//! struct Greet {
//!     #[garde(length(min = 1, max = 40))]
//!     name: String,
//! }
//!
//! /// Refuses callers without the `staff` role.
//! struct StaffOnly;
//!
//! #[hook]
//! impl Hook for StaffOnly {
//!     fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
//!         if !ctx.user().has_role("staff") {
//!             return ctx.abort("only staff may greet", "forbidden", 403);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut builder = Pipeline::builder();
//! builder.tool(tool_fn("greet", "Greets someone.", |g: Greet| async move {
//!     Ok::<_, ToolError>(format!("hello, {}", g.name))
//! }))?;
//! let pipeline = builder.hook(StaffOnly).build()?;
//!
//! let staff = InvokeOptions::new().user(User::new("ann").with_roles(["staff"]));
//! assert_eq!(pipeline.invoke("greet", json!({"name": "Bo"}), staff).await?, json!("hello, Bo"));
//!
//! let guest = InvokeOptions::new().user(User::new("guy"));
//! let err = pipeline.invoke("greet", json!({"name": "Bo"}), guest).await.unwrap_err();
//! assert_eq!((err.code(), err.status()), ("forbidden", 403));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

// `#[hook]` names this crate `::toolgate_core`, from its dependents and from inside it.
extern crate self as toolgate_core;

mod context;
mod control;
mod error;
mod hook;
mod hook_fn;
mod limits;
mod pipeline;
mod plan;
mod provider;
mod registry;
mod secret;
mod stage;
mod suspension;
mod tool;

pub use context::{Decision, HookTiming, RequestId, ToolInvokeContext, User};
pub use control::{Control, HookResult, SuspendRequest};
pub use error::{BuildError, InputViolation, InputViolations, RegistryError, ToolError};
pub use hook::{FailureMode, Hook, HookFuture, HookOptions, Next};
pub use hook_fn::{AsyncStage, FnHook, StageClosure, SyncStage, hook_fn, hook_fn_sync};
pub use limits::InputLimits;
pub use pipeline::{Invocation, InvokeOptions, Pipeline, PipelineBuilder};
pub use provider::{ProviderError, ProviderRequirement, Providers, Scope, SessionConfig};
pub use registry::{RegisteredTool, ToolRef, ToolRegistry};
pub use secret::{Secret, SecretSlot};
pub use stage::{STAGE_COUNT, Stage, StageSet};
pub use suspension::{
    InMemorySuspensionStore, ResumeDecision, SuspendedInvocation, SuspensionLimits,
    SuspensionStore, SuspensionStoreError, SuspensionTable,
};
pub use tool::{
    ErasedTool, FnTool, Handler, InputOnly, JsonTool, PreparedInput, Tool, ToolAnnotations,
    ToolDefinition, ToolSource, WithContext, parse_input, schema_for, tool_fn,
    tool_fn_with_context,
};
pub use toolgate_macros::hook;

/// Lets an implementer write the methods of this crate's async, object-safe traits (such as
/// [`SuspensionStore`]) as `async fn`: put `#[async_trait]` on the `impl` block. Re-exported
/// from the `async-trait` crate, so a user of toolgate needs no dependency of their own.
pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
pub use typemap_rev::{TypeMap, TypeMapKey};
