//! Errors as JSON: `{"error": {"code", "message", "retry_after_ms"?, "violations"?}}` with
//! the right status and, for retry-afters, a `Retry-After` header — the same
//! [`HttpError`](toolgate_http::HttpError) a host embedding a pipeline answers with.

pub use toolgate_http::HttpError as ApiError;
