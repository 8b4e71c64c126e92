//! `echo`: returns the text it is given.

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{Tool, ToolError, tool_fn};

/// The input and output of `echo`.
#[derive(Deserialize, Serialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoMessage {
    /// The text to return.
    #[garde(length(max = 100000))]
    pub text: String,
}

pub(super) fn tool() -> impl Tool {
    tool_fn(
        "echo",
        "Returns the text it is given, unchanged.",
        |input: EchoMessage| async move { Ok::<_, ToolError>(input) },
    )
    .annotations(ToolAnnotations::READ_ONLY)
}
