//! `current_time`: the current UTC time.

use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{Tool, ToolError, tool_fn};

/// The input of `current_time`: no arguments, as the empty object `{}` models send (a
/// unit input would be listed as `{"type": "null"}`, which no provider accepts).
#[derive(Deserialize, Serialize, garde::Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

/// What `current_time` returns.
#[derive(Deserialize, Serialize, JsonSchema)]
pub struct CurrentTime {
    /// RFC 3339, UTC, e.g. `2026-11-22T07:30:00Z`.
    pub utc: String,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

pub(super) fn tool() -> impl Tool {
    tool_fn(
        "current_time",
        "Returns the current UTC time as RFC 3339 text and as Unix milliseconds.",
        |_: NoArguments| async move {
            let now = SystemTime::now();
            let unix_ms = now
                .duration_since(UNIX_EPOCH)
                .map_err(|_| ToolError::execution("the system clock is before 1970"))?
                .as_millis() as u64;
            Ok::<_, ToolError>(CurrentTime {
                utc: humantime::format_rfc3339_seconds(now).to_string(),
                unix_ms,
            })
        },
    )
    // Not read-only in the cache's sense: equal inputs do not give equal outputs.
    .annotations(ToolAnnotations {
        read_only: false,
        idempotent: true,
        destructive: false,
        open_world: false,
    })
}
