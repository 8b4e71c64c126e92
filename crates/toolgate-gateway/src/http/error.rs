//! Errors as JSON: `{"error": {"code", "message", "retry_after_ms"?, "violations"?}}` with
//! the right status and, for retry-afters, a `Retry-After` header — the same
//! [`HttpError`](toolgate_http::HttpError) a host embedding a pipeline answers with.

use axum::http::StatusCode;

pub use toolgate_http::HttpError as ApiError;

/// 401: no valid API key.
pub fn unauthenticated() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "send a valid API key as `Authorization: Bearer <key>`",
    )
}
