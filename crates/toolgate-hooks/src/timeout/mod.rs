//! Timeouts: a deadline per tool for execution (all attempts), or per attempt.
//!
//! The caller's own deadline ([`InvokeOptions::timeout`](toolgate_core::InvokeOptions::timeout))
//! is enforced by the pipeline; [`Timeout`] adds the tool owner's limits. A call past its
//! limit has its cancellation token fired (so a tool watching
//! [`cancellation`](toolgate_core::ToolInvokeContext::cancellation) stops) and fails with
//! [`ToolError::Timeout`](toolgate_core::ToolError::Timeout): code `timeout`, HTTP 504.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError};
//! use toolgate_hooks::timeout::Timeout;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("slow", "Takes a minute.", |_: ()| async {
//!         tokio::time::sleep(Duration::from_secs(60)).await;
//!         Ok::<_, ToolError>("done")
//!     }))
//!     .hook(Timeout::per_attempt(Duration::from_secs(5)).tool("slow", Duration::from_secs(2)))
//!     .build()?;
//!
//! let err = pipeline.invoke("slow", json!(null), InvokeOptions::new()).await.unwrap_err();
//! assert_eq!((err.code(), err.status()), ("timeout", 504));
//! assert_eq!(err.to_string(), "timed out after 2000 ms");
//! # Ok(()) }
//! ```

mod hook;

pub use hook::{Timeout, TimeoutScope};
