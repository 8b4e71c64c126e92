//! `sleep`: waits, for trying out timeouts, drains and approvals.

use std::time::Duration;

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::tool::tool_fn_with_context;
use toolgate_core::{Tool, ToolError, ToolInvokeContext};

/// The input of `sleep`.
#[derive(Deserialize, Serialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepInput {
    /// How long to wait, in milliseconds (at most 10 minutes).
    #[garde(range(max = 600000))]
    pub ms: u64,
}

/// What `sleep` returns.
#[derive(Deserialize, Serialize, JsonSchema)]
pub struct Slept {
    /// How long it waited, in milliseconds.
    pub slept_ms: u64,
}

pub(super) fn tool() -> impl Tool {
    tool_fn_with_context(
        "sleep",
        "Waits the given number of milliseconds, then answers. For testing timeouts and approvals.",
        |input: SleepInput, ctx: &ToolInvokeContext| {
            Box::pin(async move {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(input.ms)) => {
                        Ok::<_, ToolError>(Slept { slept_ms: input.ms })
                    }
                    () = ctx.cancellation().cancelled() => Err(ToolError::Cancelled),
                }
            })
        },
    )
}
