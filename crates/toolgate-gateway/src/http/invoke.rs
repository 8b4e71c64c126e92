//! `GET /v1/tools` and `POST /v1/tools/{name}/invoke`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_agent::ToolResult;
use toolgate_agent::format::{anthropic, gemini, mcp, openai};
use toolgate_core::{InvokeOptions, RequestId, ToolError};

use super::body::json_body;
use super::{ApiError, Caller, request_timeout};

/// `?format=` of a listing.
#[derive(Deserialize)]
pub struct ListQuery {
    format: Option<String>,
}

/// The tools the caller may call, in the format asked for.
pub async fn list_tools(
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let tools = caller.gateway.visible_tools(&caller.user);
    let listed = match query.format.as_deref().unwrap_or("toolgate") {
        "toolgate" => json!({ "tools": tools }),
        "openai" => openai::chat_tools(&tools),
        "openai_responses" => openai::responses_tools(&tools),
        "anthropic" => anthropic::tools(&tools),
        "gemini" => gemini::tools(&tools),
        "mcp" => mcp::tools_list(&tools),
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "unknown_format",
                format!(
                    "unknown format `{other}`: use toolgate, openai, openai_responses, anthropic, gemini or mcp"
                ),
            ));
        }
    };
    Ok(Json(listed))
}

/// One call. The body is the tool's arguments; `x-session-id`, `x-request-id` and
/// `x-toolgate-timeout-ms` are optional headers.
pub async fn invoke(
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let input: Value = match json_body(body) {
        Ok(input) => input,
        Err(error) => return error.into_response(),
    };
    let request_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| RequestId::generate().to_string());
    let mut options = InvokeOptions::new()
        .user(caller.user.clone())
        .request_id(request_id.clone())
        .timeout(request_timeout(&caller.gateway, &headers));
    if let Some(session) = headers.get("x-session-id").and_then(|v| v.to_str().ok()) {
        options = options.session(session);
    }
    let invocation = caller
        .gateway
        .pipeline()
        .invoke_detailed(&name, input, options)
        .await;
    if let Some(stats) = caller.gateway.system.stats() {
        let mut result = match &invocation.result {
            Ok(output) => ToolResult::success(&request_id, &name, output.clone()),
            Err(error) => ToolResult::error(&request_id, &name, error),
        };
        result.metadata.duration_ms = invocation.duration.as_millis() as u64;
        result.metadata.attempts = invocation.attempts;
        stats.record(&result);
    }
    let mut response = match invocation.result {
        Ok(output) => Json(json!({
            "output": output,
            "metadata": invocation.metadata,
            "attempts": invocation.attempts,
            "duration_ms": invocation.duration.as_secs_f64() * 1000.0,
        }))
        .into_response(),
        Err(ToolError::Suspended {
            suspension_id,
            reason,
        }) => (
            StatusCode::ACCEPTED,
            Json(json!({
                "status": "suspended",
                "suspension_id": suspension_id,
                "reason": reason,
            })),
        )
            .into_response(),
        Err(error) => ApiError::from(&error).into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}
