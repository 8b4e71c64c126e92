//! Output limits: a maximum output size, and what happens over it.
//!
//! [`OutputLimit`] measures the output as serialized JSON at `will_transform_output`
//! (with a low priority, so after other transforms). Over the limit it either
//! **truncates** — a string output is cut on a character boundary; a structured output is
//! turned into its JSON text and cut — and appends a marker that says how much was cut:
//! `… [truncated 1234 bytes]`, noting `{"original_bytes", "returned_bytes"}` in the
//! metadata under [`TRUNCATION_METADATA_KEY`]; or **fails** the call with code
//! `output_too_large` (status 502).
//!
//! # Examples
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError};
//! use toolgate_hooks::output_limit::OutputLimit;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("dump", "Returns a lot.", |_: ()| async { Ok::<_, ToolError>("é".repeat(100)) }))
//!     .hook(OutputLimit::new().max_bytes(64))
//!     .build()?;
//!
//! let out = pipeline.invoke("dump", json!(null), InvokeOptions::new()).await?;
//! let text = out.as_str().unwrap();
//! assert!(text.len() <= 64);
//! assert_eq!(text, format!("{} [truncated 158 bytes]", "é".repeat(21)));
//! # Ok(()) }
//! ```

mod hook;

pub use hook::{OUTPUT_LIMIT_PRIORITY, OutputLimit, Overflow, TRUNCATION_METADATA_KEY};
