//! The toolgate kit for hook authors: recording hooks, scripted tools, capacity tracking
//! and stage-order assertions.
//!
//! A hook's contract is *when* it runs and *what the pipeline does with its outcome*. This
//! crate makes both cheap to test:
//!
//! * [`RecordingHook`] records every stage it is called at into a shared [`StageLog`], and
//!   can be told to [`Inject`] an outcome (respond, abort, retry-after, suspend, fail,
//!   panic, hang, delay) at any stage, or to call `next` 0, 1 or N times in
//!   `around_execute` ([`Around`]).
//! * [`ScriptedTool`] does what its script says on each call ([`Step`]) and counts calls.
//! * [`CapacityHook`] takes and gives back quota and permits through RAII guards kept in the
//!   context, with [`CapacityCounters`] to prove balance on every path.
//! * [`assert_stages`], [`assert_stages_of`] and [`assert_entries`] compare sequences and
//!   print a side-by-side diff when they differ.
//! * [`assert_stacks_twice`] proves that two stacked instances of a hook keep what each
//!   holds apart, and give everything back, on every path.
//! * [`TestPipeline`] wires it together in one expression.
//!
//! # Example: the full success path
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{InvokeOptions, Stage::*};
//! use toolgate_test::{assert_stages, ScriptedTool, TestPipeline};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let test = TestPipeline::new()
//!     .tool(ScriptedTool::returning("t", json!("done")))
//!     .recording("every_stage", |h| h);
//! let log = test.log();
//! let pipeline = test.build();
//!
//! let out = pipeline.invoke("t", json!({}), InvokeOptions::new()).await.unwrap();
//! assert_eq!(out, json!("done"));
//! assert_stages(&log, &[
//!     WillCreateInvokeContext, DidCreateInvokeContext, WillBindProviders,
//!     WillAuthorize, WillCheckConsent, WillCheckFeatureFlags,
//!     WillAcquireQuota, WillAcquireSemaphore,
//!     WillParseInput, WillValidateInput, WillNormalizeInput, WillRedactInput, WillInjectSecrets,
//!     WillReadCache, DidCacheMiss,
//!     AroundExecute, WillExecute, DidExecute,
//!     WillWriteCache, WillRedactOutput, WillValidateOutput, WillTransformOutput,
//!     WillAudit, DidAudit, OnMetrics,
//!     DidReleaseSemaphore, DidReleaseQuota,
//!     WillFinalizeInvoke,
//! ]);
//! # }
//! ```
#![deny(missing_docs)]

mod assert;
mod capacity;
mod harness;
mod inject;
mod log;
mod recording;
mod scripted;
mod stacking;

pub use assert::{assert_entries, assert_stages, assert_stages_of};
pub use capacity::{CapacityCounters, CapacityHook};
pub use harness::TestPipeline;
pub use inject::{Inject, PANIC_PAYLOAD};
pub use log::{Entry, StageLog};
pub use recording::{Around, RecordingHook};
pub use scripted::{ScriptedTool, Step};
pub use stacking::assert_stacks_twice;

/// The guide `docs/writing-hooks.md`, compiled and run as doctests so that it always
/// matches the real API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/writing-hooks.md")]
pub struct WritingHooksGuide;
