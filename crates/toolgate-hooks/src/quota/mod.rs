//! Quota (rate limiting) at `will_acquire_quota`: GCRA per user, tool, user and tool, or
//! any key.
//!
//! * [`Quota`] — the hook, built with [`Quota::builder`].
//! * [`Rate`] — how many calls per period, and the burst.
//! * [`QuotaBackend`] — where the state lives; [`InMemoryQuota`] (exact GCRA with
//!   `governor`, bounded memory) is the default, a shared store implements the same trait.
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
//! use toolgate_hooks::quota::{Quota, Rate};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
//!     .hook(Quota::builder(Rate::per_minute(2)?).build())
//!     .build()?;
//!
//! let alice = || InvokeOptions::new().user(User::new("alice"));
//! pipeline.invoke("ping", json!(null), alice()).await?;
//! pipeline.invoke("ping", json!(null), alice()).await?;
//! let err = pipeline.invoke("ping", json!(null), alice()).await.unwrap_err();
//! assert_eq!((err.code(), err.status()), ("rate_limited", 429));
//! // The second unit comes back after half a minute.
//! assert!(err.retry_after_delay().unwrap() > std::time::Duration::from_secs(29));
//! # Ok(()) }
//! ```

mod backend;
mod hook;
mod memory;
mod rate;

pub use backend::{QuotaBackend, QuotaBackendError, QuotaDecision, QuotaLease, QuotaRequest};
pub use hook::{OnBackendError, Quota, QuotaBuilder};
pub use memory::{InMemoryQuota, InMemoryQuotaBuilder};
pub use rate::{Rate, RateError};
