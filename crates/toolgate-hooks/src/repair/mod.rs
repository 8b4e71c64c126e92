//! Normalization and argument repair: the mistakes language models often make, repaired
//! when the repair is unambiguous, each one recorded so it is visible.
//!
//! [`ArgumentRepair`] works from the tool's input JSON Schema, on two stages:
//!
//! * `will_parse_input` — **repairs**, before any check, so the checks (the schema check of
//!   [`Validation`](crate::validation::Validation) and the typed tool's serde + garde
//!   check) see the repaired input:
//!   * a number or boolean sent as a string (`"5"` where an integer is wanted; `"true"`
//!     where a boolean is) — only when the whole string is exactly that number or
//!     boolean: `"1.5"` for an integer, `"5 apples"` or `"yes"` are left alone;
//!   * an object or array sent as a JSON string (`"{\"a\":1}"`);
//!   * a single value where an array is wanted (`"x"` → `["x"]`; never `null`).
//! * `will_normalize_input` — **defaults**: a property that is missing and whose schema
//!   has a `default` gets it.
//!
//! Where the schema allows several types (`"type": ["string", "integer"]`, an `anyOf`
//! of two real alternatives), nothing is guessed: the value is left as sent and the
//! checks report it with its path. `null` alternatives (an optional field) do not count.
//!
//! A repaired input stays within the input depth limit: a JSON string can hold deeper
//! nesting than the input the pipeline checked, so a repair that would nest past it is
//! not made and the call is refused as deep input sent directly is (`input_too_deep`).
//! The limit is the pipeline's own
//! ([`ToolInvokeContext::input_limits`](toolgate_core::ToolInvokeContext::input_limits)).
//!
//! A [`Budget`](crate::budget::Budget) prices a call before the repair runs, and reads a
//! priced argument as the repair will leave it too, so a repair never makes a call cheaper.
//!
//! Every repair is appended to the invocation metadata under
//! [`REPAIRS_METADATA_KEY`] as `{"path": "limit", "kind": "string_to_number"}` — the
//! path and kind only, never the value.
//!
//! # Examples
//!
//! ```
//! use garde::Validate;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError};
//! use toolgate_hooks::repair::ArgumentRepair;
//!
//! #[derive(Deserialize, Validate, JsonSchema)]
//! struct Search {
//!     #[garde(length(min = 1))]
//!     tags: Vec<String>,
//!     #[garde(range(max = 50))]
//!     limit: u32,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pipeline = Pipeline::builder()
//!     .tool(tool_fn("search", "Searches by tag.", |s: Search| async move {
//!         Ok::<_, ToolError>(format!("{} x {}", s.tags.join(","), s.limit))
//!     }))
//!     .hook(ArgumentRepair::new())
//!     .build()?;
//!
//! let out = pipeline
//!     .invoke("search", json!({ "tags": "rust", "limit": "10" }), InvokeOptions::new())
//!     .await?;
//! assert_eq!(out, json!("rust x 10"));
//! # Ok(()) }
//! ```

mod defaults;
mod hook;
mod reading;
mod walk;

pub(crate) use reading::readings_at;

pub use defaults::fill_defaults;
pub use hook::{ArgumentRepair, ArgumentRepairBuilder, REPAIRS_METADATA_KEY};
pub use walk::{Repair, RepairKind, repair};
