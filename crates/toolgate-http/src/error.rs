//! Errors as HTTP answers: `{"error": {"code", "message", "retry_after_ms"?, "violations"?}}`
//! with the error's status and, for retry-afters, a `Retry-After` header.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde::Serialize;
use toolgate_agent::ResultError;
use toolgate_core::ToolError;

/// An error answer: a status and the JSON error body clients of the gateway read.
///
/// Build one from a [`ToolError`] (its [`status`](ToolError::status), its
/// [`code`](ToolError::code), its message and, for [`ToolError::RetryAfter`], the delay),
/// or with [`new`](Self::new) for an error of your own route. As an axum
/// [`IntoResponse`], it answers with the status, the body and, when the error carries a
/// delay, `Retry-After` in whole seconds (rounded up). A 408 also closes the connection:
/// the rest of the request may still be on its way.
///
/// ```
/// use axum::response::IntoResponse;
/// use std::time::Duration;
/// use toolgate_core::ToolError;
/// use toolgate_http::HttpError;
///
/// let error = ToolError::retry_after(Duration::from_millis(1500), "too many calls");
/// let response = HttpError::from(&error).into_response();
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["retry-after"], "2");
/// ```
#[derive(Debug)]
pub struct HttpError {
    status: StatusCode,
    body: ResultError,
    /// Headers the answer carries besides its own (boxed: most errors have none, and an
    /// error is returned in many a `Result`).
    headers: Option<Box<HeaderMap>>,
}

/// The body on the wire: the error under `"error"`.
#[derive(Serialize)]
struct Body<'a> {
    error: &'a ResultError,
}

impl HttpError {
    /// An error with its own status, machine code and message (say what to do next).
    ///
    /// ```
    /// use http::StatusCode;
    /// use toolgate_http::HttpError;
    ///
    /// let error = HttpError::new(StatusCode::BAD_REQUEST, "unknown_format", "use json");
    /// assert_eq!(error.code(), "unknown_format");
    /// ```
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        HttpError {
            status,
            body: ResultError {
                code: code.to_owned(),
                message: message.into(),
                retry_after_ms: None,
                violations: Vec::new(),
                status: Some(status.as_u16()),
            },
            headers: None,
        }
    }

    /// 400 `bad_json` for a request body that names a key twice in one object, saying which
    /// key and where: what [`JsonInput`](crate::JsonInput) answers, and a host that reads
    /// its own bodies with [`toolgate_core::json`].
    ///
    /// ```
    /// use toolgate_core::json::{self, JsonError};
    /// use toolgate_http::HttpError;
    ///
    /// let Err(JsonError::RepeatedKey(repeated)) = json::from_str(r#"{"a": 1, "a": 2}"#) else {
    ///     panic!()
    /// };
    /// let error = HttpError::repeated_key(&repeated);
    /// assert_eq!(error.code(), "bad_json");
    /// assert_eq!(
    ///     error.body().message,
    ///     "the request body is refused: the key `a` appears twice in the top-level object: send each key once"
    /// );
    /// ```
    pub fn repeated_key(repeated: &toolgate_core::json::RepeatedKey) -> Self {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the request body is refused: {repeated}"),
        )
    }

    /// The same error, answered with this header too.
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.get_or_insert_default().insert(name, value);
        self
    }

    /// The same error, closing the connection: for an answer given before the request's
    /// body was read whole, which may still be on its way.
    pub(crate) fn closing(self) -> Self {
        self.header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// The same error, telling the client to wait `delay` before trying again: the body
    /// carries `retry_after_ms`, and the answer `Retry-After` in whole seconds, rounded up.
    /// A delay past [`MAX_RETRY_AFTER`](toolgate_core::error::MAX_RETRY_AFTER) (a day) is
    /// told as that.
    ///
    /// ```
    /// use std::time::Duration;
    /// use axum::response::IntoResponse;
    /// use http::StatusCode;
    /// use toolgate_http::HttpError;
    ///
    /// let error = HttpError::new(StatusCode::TOO_MANY_REQUESTS, "slow_down", "wait a little")
    ///     .retry_after(Duration::from_millis(2_500));
    /// assert_eq!(error.body().retry_after_ms, Some(2_500));
    /// assert_eq!(error.into_response().headers()["retry-after"], "3");
    /// ```
    #[must_use]
    pub fn retry_after(mut self, delay: std::time::Duration) -> Self {
        let delay = delay.min(toolgate_core::error::MAX_RETRY_AFTER);
        self.body.retry_after_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Its machine code, such as `rate_limited` or `invalid_input`.
    pub fn code(&self) -> &str {
        &self.body.code
    }

    /// The body, as [`ToolResult`](toolgate_agent::ToolResult)s carry it.
    pub fn body(&self) -> &ResultError {
        &self.body
    }
}

/// A [`ToolError`] with its own status; 500 for a refusal or retry-after whose hook chose
/// a status that is not an error's (a 200 would tell the client its call succeeded): the
/// status of its [`ResultError`], so that both answer a call alike.
impl From<&ToolError> for HttpError {
    fn from(error: &ToolError) -> Self {
        HttpError::from(&ResultError::from(error))
    }
}

/// The error of a [`ToolResult`](toolgate_agent::ToolResult) as its call would answer
/// it: with the [`status`](ResultError::status) it carries (which is never a success for
/// a refused call: 500 stands in for a hook's 200), or 500 for one read back from JSON,
/// which has none.
impl From<&ResultError> for HttpError {
    fn from(error: &ResultError) -> Self {
        let status = error
            .status
            .and_then(|status| StatusCode::from_u16(status).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = error.clone();
        body.status = Some(status.as_u16());
        HttpError {
            status,
            body,
            headers: None,
        }
    }
}

impl From<ToolError> for HttpError {
    fn from(error: ToolError) -> Self {
        HttpError::from(&error)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, Json(Body { error: &self.body })).into_response();
        if let Some(headers) = self.headers {
            response.headers_mut().extend(*headers);
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(ms) = self.body.retry_after_ms {
            // Whole seconds, rounded up: a client that waits this long is admitted. A body
            // made by hand or read back from JSON may ask for longer than any wait is told.
            let ms = ms.min(MAX_RETRY_AFTER_MS);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(ms.div_ceil(1000).max(1)),
            );
        }
        response
    }
}

/// [`MAX_RETRY_AFTER`](toolgate_core::error::MAX_RETRY_AFTER) in milliseconds.
const MAX_RETRY_AFTER_MS: u64 = toolgate_core::error::MAX_RETRY_AFTER.as_secs() * 1000;

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.body.message, self.body.code)
    }
}

impl std::error::Error for HttpError {}
