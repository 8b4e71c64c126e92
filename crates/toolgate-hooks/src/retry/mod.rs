//! Retry as an `around_execute` wrapper: exponential backoff with full jitter, a retry
//! budget, retryable errors only, idempotent tools only.
//!
//! * [`Retry`] — the hook, built with [`Retry::builder`].
//! * [`RetryBudget`] — the share of calls that may be retried.
//!
//! The pipeline runs `on_retry` before every attempt after the first and `on_give_up` when
//! execution fails after more than one attempt; [`ToolInvokeContext::attempt`](toolgate_core::ToolInvokeContext::attempt)
//! counts attempts.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError};
//! use toolgate_core::tool::ToolAnnotations;
//! use toolgate_hooks::retry::Retry;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let calls = Arc::new(AtomicU32::new(0));
//! let seen = Arc::clone(&calls);
//! let retry = Retry::builder().max_attempts(3).base_delay(Duration::from_millis(50)).build()?;
//! let pipeline = Pipeline::builder()
//!     .tool(
//!         tool_fn("flaky", "Fails once, then works.", move |_: ()| {
//!             let n = seen.fetch_add(1, Ordering::SeqCst);
//!             async move {
//!                 if n == 0 { Err(ToolError::transient("upstream hiccup")) } else { Ok("ok") }
//!             }
//!         })
//!         .annotations(ToolAnnotations::READ_ONLY),
//!     )
//!     .hook(retry)
//!     .build()?;
//!
//! assert_eq!(pipeline.invoke("flaky", json!(null), InvokeOptions::new()).await?, json!("ok"));
//! assert_eq!(calls.load(Ordering::SeqCst), 2);
//! # Ok(()) }
//! ```

mod budget;
mod hook;

pub use budget::RetryBudget;
pub use hook::{Retry, RetryBuilder, RetryConfigError};
