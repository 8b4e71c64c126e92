//! Validation: keep bad input out and check what comes back.
//!
//! [`Validation`] is one hook on three stages:
//!
//! * `will_parse_input` — per-pipeline [`InputLimits`](toolgate_core::pipeline::InputLimits) (size and
//!   nesting depth) stricter than the pipeline's own, when configured;
//! * `will_validate_input` — the input checked against the tool's JSON Schema with the
//!   `jsonschema` crate, every failing field reported with its path
//!   (`items[0].name: the value is not of type "string"`). Typed tools are also parsed with
//!   serde and checked with garde by the core right after this stage, so their garde
//!   messages and paths still apply; the schema check is what guards tools known only by a
//!   schema (remote MCP tools, [`JsonTool`](toolgate_core::JsonTool)s);
//! * `will_validate_output` — the output checked against the tool's output schema, when it
//!   declares one.
//!
//! Compiled schemas are cached per tool and version, so a schema is compiled once.
//! Messages never quote the offending value: it may be personal data.
//!
//! # Examples
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError};
//! use toolgate_hooks::validation::{SchemaCheck, Validation};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let schema = json!({
//!     "type": "object",
//!     "properties": { "city": { "type": "string" }, "days": { "type": "integer", "maximum": 14 } },
//!     "required": ["city"]
//! });
//! let forecast = JsonTool::new("forecast", "Weather forecast.", schema, |input, _| {
//!     Box::pin(async move { Ok::<_, ToolError>(json!({ "city": input["city"] })) })
//! });
//! let pipeline = Pipeline::builder()
//!     .tool(forecast)
//!     .hook(Validation::builder().schema_check(SchemaCheck::All).build())
//!     .build()?;
//!
//! let err = pipeline
//!     .invoke("forecast", json!({ "days": 30 }), InvokeOptions::new())
//!     .await
//!     .unwrap_err();
//! let ToolError::InvalidInput(violations) = &err else { panic!("{err}") };
//! let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
//! assert_eq!(paths, ["city", "days"]);
//! # Ok(()) }
//! ```

mod hook;
mod schema;

pub use hook::{SchemaCheck, Validation, ValidationBuilder};
pub use schema::{SchemaCache, violations_for};
