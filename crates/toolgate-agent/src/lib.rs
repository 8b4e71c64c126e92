//! The agent-facing toolgate tool system.
//!
//! An agent loop hands a batch of tool calls its model planned to a [`ToolSystem`] and gets
//! back one [`ToolResult`] per call, in call order, ready to render into the model's next
//! request. Under it, every call runs through the toolgate pipeline, so hooks authorize,
//! rate-limit, validate, cache, retry, redact and audit agent calls like any other.
//!
//! * [`ToolSystem::execute_tools`] — a batch, sequential or parallel with a bound; tools
//!   enabled per thread through a [`StateManager`].
//! * [`ToolResult`] — the serde-stable result contract: `call_id`, `tool_name`, `status`
//!   (`success` | `error` | `suspended`), `output`, `error`, `metadata`.
//! * [`ExecutionMode`] — functional, blocking (a person completes the call), display.
//! * [`ToolSystem::resume`] — human-in-the-loop: approve, reject or complete a suspended
//!   call; suspensions wait in a [`SuspensionStore`] (in memory, or
//!   [`JsonFileSuspensionStore`] to survive a restart).
//! * [`Observation`]s — to [`ObservationSink`]s and a bounded broadcast stream.
//! * Result size limits — [`truncate_output`], 60,000 characters unless set per instance,
//!   thread or call.
//! * [`format`](mod@format) — tool definitions out and tool calls back in for OpenAI (chat completions
//!   and responses), Anthropic, Gemini and MCP.
//! * [`UsageStats`] — per tool counts and durations in a JSON file.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use garde::Validate;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//! use toolgate_agent::{format::openai, ExecuteOptions, InMemoryStateManager, ThreadConfig, ToolSystem};
//! use toolgate_core::{tool_fn, Pipeline, ToolError};
//!
//! #[derive(Deserialize, Serialize, Validate, JsonSchema)]
//! struct Weather {
//!     #[garde(length(min = 1, max = 80))]
//!     city: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("get_weather", "Current weather in a city.", |w: Weather| async move {
//!         Ok::<_, ToolError>(json!({ "city": w.city, "temp_c": 21 }))
//!     }));
//! let state = Arc::new(InMemoryStateManager::new());
//! state.set_config("thread-1", ThreadConfig::enabling(["get_weather"]));
//! let system = ToolSystem::builder(pipeline, state).build()?;
//!
//! // The model's assistant message, in OpenAI chat-completions format.
//! let message = json!({
//!     "role": "assistant",
//!     "content": null,
//!     "tool_calls": [{
//!         "id": "call_1", "type": "function",
//!         "function": { "name": "get_weather", "arguments": "{\"city\":\"Paris\"}" }
//!     }]
//! });
//! let calls = openai::parse_chat_tool_calls(&message)?;
//! let results = system.execute_tools("thread-1", calls, ExecuteOptions::new()).await;
//! let reply = openai::chat_tool_message(&results[0]);
//! assert_eq!(reply["tool_call_id"], "call_1");
//! assert_eq!(reply["content"], r#"{"city":"Paris","temp_c":21}"#);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod call;
pub mod format;
mod limit;
mod modes;
mod observe;
mod persist;
mod result;
mod state;
mod stats;
mod suspension;
mod system;

pub use call::{Arguments, MAX_CALL_ID_BYTES, ToolCall, UnusableCallId, check_call_id};
pub use limit::{DEFAULT_RESULT_MAX_CHARS, Truncation, truncate_output};
pub use modes::ExecutionMode;
pub use observe::{Observation, ObservationSink, ObservationStream, Observer};
pub use result::{ResultError, ResultMetadata, ToolResult, ToolStatus};
pub use state::{InMemoryStateManager, StateError, StateManager, ThreadConfig};
pub use stats::{StatsError, StatsSaver, ToolUsage, UsageStats};
pub use suspension::{
    FileStoreError, InMemorySuspensionStore, JsonFileSuspensionStore, SuspendedInvocation,
    SuspensionLimits, SuspensionStore, SuspensionStoreError, SuspensionTable,
};
pub use system::{
    Concurrency, ExecuteOptions, ResumeError, ResumeOptions, SystemBuildError, ToolSystem,
    ToolSystemBuilder, TraceId,
};
pub use toolgate_core::suspension::ResumeDecision;

/// Lets an implementer write the methods of [`StateManager`] and [`SuspensionStore`] as
/// `async fn`: put `#[async_trait]` on the `impl` block. Re-exported from the `async-trait`
/// crate, so a user of toolgate needs no dependency of their own.
pub use async_trait::async_trait;
