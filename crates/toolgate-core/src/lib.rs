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
//!   [`#[hook]`](macro@hook), which derives the stages from the methods, or as a closure of one
//!   stage with [`hook_fn`](hook::hook_fn).
//! * [`Pipeline`] — tools plus hooks compiled into per-tool plans; [`Pipeline::invoke`].
//! * Providers in three [scopes](provider::Scope): request → session → global.
//! * [`SuspensionStore`](suspension::SuspensionStore) — where calls wait for a person, under [`SuspensionLimits`](suspension::SuspensionLimits)
//!   (per-user and total caps, expiry); [`Pipeline::resume`] authorizes them again.
//!
//! # Where things are
//!
//! The root holds the names nearly every program uses; [`prelude`] brings them in at once.
//! The rest lives in modules named for DESIGN.md's vocabulary:
//!
//! | module | what |
//! |---|---|
//! | [`tool`] | [`Tool`], [`tool_fn`], [`JsonTool`], the erased form, definitions |
//! | [`hook`](mod@hook) | [`Hook`], [`Next`], hook futures, registrations and failure modes, closure hooks |
//! | [`context`] | [`ToolInvokeContext`] and what it records; [`User`] |
//! | [`control`] | [`Control`] outcomes and [`HookResult`] |
//! | [`pipeline`] | [`Pipeline`], [`PipelineBuilder`], [`InvokeOptions`], input limits |
//! | [`provider`] | providers and their scopes |
//! | [`stage`] | [`Stage`] and stage sets |
//! | [`suspension`] | waiting calls, their stores and limits |
//! | [`approval`] | what an approval is bound to: the call's binding and its canonical digest |
//! | [`registry`] | the tool registry and typed handles |
//! | [`secret`] | secrets that never print |
//! | [`json`] | JSON read strictly: an object that names a key twice is refused |
//! | [`error`] | every error type |
//! | [`file`](mod@file) | a text file the operator names, read with bounds |
//! | [`external`] | the types of other crates that appear in this one's API |
//!
//! # Example
//!
//! ```
//! use garde::Validate;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//! use toolgate_core::prelude::*;
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
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("greet", "Greets someone.", |g: Greet| async move {
//!         Ok::<_, ToolError>(format!("hello, {}", g.name))
//!     }))
//!     .hook(StaffOnly)
//!     .build()?;
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

pub mod approval;
pub mod context;
pub mod control;
mod definition;
pub mod error;
pub mod file;
pub mod hook;
pub mod json;
mod limits;
pub mod pipeline;
mod plan;
mod prepared;
mod progress;
pub mod provider;
mod random;
pub mod registry;
pub mod secret;
pub mod stage;
pub mod suspension;
pub mod tool;
mod user;

pub use context::{ToolInvokeContext, User};
pub use control::{Control, HookResult};
pub use error::ToolError;
pub use hook::{Hook, Next};
pub use pipeline::{Invocation, InvokeOptions, Pipeline, PipelineBuilder, SPAN_TARGET, SpanValues};
pub use stage::Stage;
pub use tool::{JsonTool, Tool, tool_fn};
/// Writes a hook's `stages()` (and `required_providers()`) from its stage methods, and lets
/// them be written as plain or `async fn`s: see [`Hook`].
pub use toolgate_macros::hook;
pub use user::CallerId;

/// `__stage_methods!(callback)` expands to `callback! { method => Variant, … }` with every
/// stage method that takes only the context, in pipeline order: for a hook that writes one
/// method per stage (the test kit's recording hook) without spelling the stage list again.
#[doc(hidden)]
pub use toolgate_macros::__stage_methods;

/// The names a hook author or a pipeline's owner uses most: `use toolgate_core::prelude::*;`.
pub mod prelude {
    pub use crate::context::{ToolInvokeContext, User};
    pub use crate::control::{Control, HookResult};
    pub use crate::error::ToolError;
    pub use crate::hook::{
        FailureMode, Hook, HookFuture, HookRegistration, Interest, Next, hook_fn, hook_fn_sync,
    };
    pub use crate::pipeline::{Invocation, InvokeOptions, Pipeline, PipelineBuilder};
    pub use crate::provider::Scope;
    pub use crate::stage::{Stage, StageSet};
    pub use crate::tool::{
        JsonTool, Tool, ToolAnnotations, ToolDefinition, tool_fn, tool_fn_with_context,
    };
    pub use toolgate_macros::hook;
    pub use typemap_rev::TypeMapKey;
}

/// The types and macros of other crates that appear in toolgate's API, re-exported so that
/// a user needs no dependency of their own — and named here so that nobody mistakes them
/// for toolgate's own: their semver is their crates'.
pub mod external {
    /// Lets an implementer write the methods of toolgate's async, object-safe traits (such
    /// as [`SuspensionStore`](crate::suspension::SuspensionStore)) as `async fn`: put
    /// `#[async_trait]` on the `impl` block. From the `async-trait` crate.
    pub use async_trait::async_trait;
    /// Validation of a tool's input ([`Validate`](garde::Validate)), the version toolgate
    /// uses. The `Validate` derive macro names `::garde` in the code it writes, so a crate
    /// that derives it also needs `garde = { version = "0.23", features = ["derive"] }` of
    /// its own (Cargo then picks this same version).
    pub use garde;
    /// JSON Schema of a tool's input and output ([`JsonSchema`](schemars::JsonSchema)), the
    /// version toolgate uses. Its derive works through this path with
    /// `#[schemars(crate = "toolgate_core::external::schemars")]` on the type.
    pub use schemars;
    /// How a caller cancels an invocation ([`InvokeOptions::cancellation`](crate::InvokeOptions::cancellation)).
    /// From `tokio-util`.
    pub use tokio_util::sync::CancellationToken;
    /// The key of a provider or a scratchpad entry: a type with the value type it stores.
    /// From `typemap_rev`.
    pub use typemap_rev::{TypeMap, TypeMapKey};
}
