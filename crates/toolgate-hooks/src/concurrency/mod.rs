//! Concurrency caps at `will_acquire_semaphore` / `did_release_semaphore`: at most N calls
//! in flight per tool, per user, or per key, with an optional bounded wait.
//!
//! * [`Concurrency`] — the hook, built with [`Concurrency::builder`].
//! * [`ConcurrencyBackend`] — where counts live; [`InMemoryConcurrency`] (a tokio semaphore
//!   per key) is the default.
//! * [`KeyedShare`] — a cap per key that refuses instead of waiting, for what one client or
//!   caller may hold of a resource all share.
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError};
//! use toolgate_hooks::concurrency::Concurrency;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("slow", "Takes a while.", |_: ()| async {
//!         tokio::time::sleep(std::time::Duration::from_millis(20)).await;
//!         Ok::<_, ToolError>("done")
//!     }))
//!     .hook(Concurrency::builder(1)?.build())
//!     .build()?;
//!
//! let (a, b) = tokio::join!(
//!     pipeline.invoke("slow", json!(null), InvokeOptions::new()),
//!     pipeline.invoke("slow", json!(null), InvokeOptions::new()),
//! );
//! assert!(a.is_ok());
//! assert_eq!(b.unwrap_err().code(), "overloaded");
//! # Ok(()) }
//! ```

mod backend;
mod hook;
mod memory;
mod share;

pub use backend::{ConcurrencyBackend, ConcurrencyBackendError, Permit, PermitRequest};
pub use hook::{Concurrency, ConcurrencyBuilder, ConcurrencyConfigError, WhenFull};
pub use memory::InMemoryConcurrency;
pub use share::{KeyedShare, SharePlace};
