//! An invocation as the gateway answers it.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;
use serde_json::{Map, Value};
use toolgate_core::{Invocation, ToolError};

use crate::HttpError;

/// The answer of a call that returned, serialized from the invocation in place.
#[derive(Serialize)]
struct Answer<'a> {
    attempts: u32,
    duration_ms: f64,
    metadata: &'a Map<String, Value>,
    output: &'a Value,
}

/// The answer of a suspended call: where to resume it (keys in the order a JSON object of
/// them has always had).
#[derive(Serialize)]
struct Suspended<'a> {
    reason: &'a str,
    status: &'static str,
    suspension_id: &'a str,
}

/// An [`Invocation`] as the gateway's `POST /v1/tools/{name}/invoke` answers it:
///
/// - returned: 200 `{"attempts", "duration_ms", "metadata", "output"}`;
/// - suspended for approval: 202 `{"status": "suspended", "suspension_id", "reason"}`;
/// - failed: the [`HttpError`] of its [`ToolError`].
///
/// ```
/// use serde_json::json;
/// use toolgate_core::prelude::*;
/// use toolgate_http::invocation_response;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .build()?;
/// let invocation = pipeline.invoke_detailed("pong", json!(null), InvokeOptions::new()).await;
/// assert_eq!(invocation_response(&invocation).status(), 404);
/// # Ok(()) }
/// ```
pub fn invocation_response(invocation: &Invocation) -> Response {
    match &invocation.result {
        Ok(output) => Json(Answer {
            attempts: invocation.attempts,
            duration_ms: invocation.duration.as_secs_f64() * 1000.0,
            metadata: &invocation.metadata,
            output,
        })
        .into_response(),
        Err(ToolError::Suspended {
            suspension_id,
            reason,
        }) => (
            StatusCode::ACCEPTED,
            Json(Suspended {
                reason,
                status: "suspended",
                suspension_id,
            }),
        )
            .into_response(),
        Err(error) => HttpError::from(error).into_response(),
    }
}
