//! Feature flags at `will_check_feature_flags`: a tool, or every tool with a tag, can be
//! switched off through a flag provider.
//!
//! * [`FeatureFlags`] — the hook, built with [`FeatureFlags::builder`].
//! * [`FlagProvider`] — where flags come from; [`InMemoryFlags`] is the default.
//!
//! # Example
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError};
//! use toolgate_hooks::feature_flags::{FeatureFlags, InMemoryFlags};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let flags = InMemoryFlags::new();
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("search", "Searches.", |_: ()| async { Ok::<_, ToolError>("results") }))
//!     .hook(FeatureFlags::builder(flags.clone()).build())
//!     .build()?;
//!
//! assert!(pipeline.invoke("search", json!(null), InvokeOptions::new()).await.is_ok());
//! flags.set("tool.search", false);
//! let err = pipeline.invoke("search", json!(null), InvokeOptions::new()).await.unwrap_err();
//! assert_eq!((err.code(), err.status()), ("feature_disabled", 403));
//! # Ok(()) }
//! ```

mod backend;
mod hook;
mod memory;

pub use backend::{FlagError, FlagProvider};
pub use hook::{FeatureFlags, FeatureFlagsBuilder};
pub use memory::InMemoryFlags;
