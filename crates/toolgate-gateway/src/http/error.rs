//! Errors as JSON: `{"error": {"code", "message", "retry_after_ms"?, "violations"?}}` with
//! the right status and, for retry-afters, a `Retry-After` header.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use toolgate_agent::ResultError;
use toolgate_core::ToolError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ResultError,
}

impl ApiError {
    /// An error with its own status, code and message.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ResultError {
                code: code.to_owned(),
                message: message.into(),
                retry_after_ms: None,
                violations: Vec::new(),
            },
        }
    }

    /// 401: no valid API key.
    pub fn unauthenticated() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "send a valid API key as `Authorization: Bearer <key>`",
        )
    }
}

impl From<&ToolError> for ApiError {
    fn from(error: &ToolError) -> Self {
        ApiError {
            status: StatusCode::from_u16(error.status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body: ResultError::from(error),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.body.retry_after_ms;
        let status = self.status;
        let mut response = (status, Json(json!({ "error": self.body }))).into_response();
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the request may still be on its way: the connection cannot carry
            // another one.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(ms) = retry_after {
            // Whole seconds, rounded up: a client that waits this long is admitted.
            let seconds = ms.div_ceil(1000).max(1);
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}
