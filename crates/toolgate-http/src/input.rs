//! The request body as a tool's JSON arguments, with every refusal a JSON error.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;
use toolgate_core::json::JsonError;

use crate::HttpError;

/// How long [`JsonInput`] waits for the whole body when the request carries no
/// [`BodyTimeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`JsonInput`] waits for the whole request body: put one in the request's
/// extensions (`axum::Extension(BodyTimeout(…))` as a layer) to change the default of
/// [`DEFAULT_BODY_TIMEOUT`].
#[derive(Clone, Copy, Debug)]
pub struct BodyTimeout(pub Duration);

/// An axum extractor: the request body as a tool's JSON arguments.
///
/// Unlike axum's `Json`, whose refusals are plain text, every refusal is an [`HttpError`]
/// in the gateway's JSON body:
///
/// - 415 `unsupported_media_type` for a body not sent as JSON (`Content-Type:
///   application/json`, or another `application/…+json`);
/// - 415 `unsupported_content_encoding` for a compressed body (`Content-Encoding: gzip`,
///   say), with `Accept-Encoding: identity`: it is read only as sent;
/// - 413 `body_too_large` for a body over the route's limit (axum's `DefaultBodyLimit`,
///   2 MB unless you change it);
/// - 408 `body_timeout` for a body that did not arrive whole within its [`BodyTimeout`]
///   (30 seconds by default);
/// - 400 `bad_body` for a body that could not be read, and 400 `bad_json` for one that is
///   empty or not JSON (arrays and objects nested 128 levels deep or more, say: at most
///   127 levels are read), or that names a key twice in
///   one object (`{"path": "/etc/passwd", "path": "/tmp/x"}`): the message says which key
///   and where, and no reader downstream gets to pick a different one of its values.
///
/// A refusal sent before the body was read whole also closes the connection.
///
/// ```
/// use axum::{Router, extract::{Path, State}, response::Response, routing::post};
/// use toolgate_core::Pipeline;
/// use toolgate_http::{CallOptions, JsonInput, invocation_response};
///
/// async fn invoke(
///     State(pipeline): State<Pipeline>,
///     Path(tool): Path<String>,
///     call: CallOptions,
///     JsonInput(input): JsonInput,
/// ) -> Response {
///     invocation_response(&pipeline.invoke_detailed(&tool, input, call.options).await)
/// }
/// # let _: Router = Router::new()
/// #     .route("/tools/{tool}", post(invoke))
/// #     .with_state(Pipeline::builder().build().unwrap());
/// ```
#[derive(Debug)]
pub struct JsonInput(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonInput {
    type Rejection = HttpError;

    async fn from_request(request: Request, state: &S) -> Result<Self, HttpError> {
        let headers = request.headers();
        if let Some(coding) = content_coding(headers) {
            return Err(HttpError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_content_encoding",
                format!(
                    "the request body is marked `Content-Encoding: {coding}`, and it is read only as sent: send it uncompressed, without a `Content-Encoding` header"
                ),
            )
            .header(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"))
            .closing());
        }
        if !is_json(headers) {
            return Err(HttpError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the tool's arguments as JSON, with `Content-Type: application/json`",
            )
            .closing());
        }
        let wait = request
            .extensions()
            .get::<BodyTimeout>()
            .map_or(DEFAULT_BODY_TIMEOUT, |timeout| timeout.0);
        let bytes = match tokio::time::timeout(wait, Bytes::from_request(request, state)).await {
            Err(_) => {
                return Err(HttpError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body_timeout",
                    format!(
                        "the request body did not arrive whole within {} ms: send it at once",
                        wait.as_millis()
                    ),
                ));
            }
            Ok(Err(rejection)) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(HttpError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "the request body is over this server's limit: send less data",
                )
                .closing());
            }
            Ok(Err(_)) => {
                return Err(HttpError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    "the request body could not be read whole: send it again",
                )
                .closing());
            }
            Ok(Ok(bytes)) => bytes,
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                "the request body is empty: send the tool's arguments as JSON (`{}` or `null` when it takes none)",
            ));
        }
        toolgate_core::json::from_slice(&bytes)
            .map(JsonInput)
            .map_err(|error| match error {
                JsonError::RepeatedKey(repeated) => HttpError::repeated_key(&repeated),
                JsonError::InexactNumber(inexact) => HttpError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_json",
                    format!("the request body is refused: {inexact}"),
                ),
                other => HttpError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_json",
                    format!(
                        "the request body is not JSON: {}",
                        toolgate_core::error::in_json_words(&other.to_string())
                    ),
                ),
            })
    }
}

/// Whether the body is declared JSON: `application/json` or `application/…+json`, with
/// any parameters.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(kind) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = kind.split(';').next().unwrap_or("").trim();
    let Some((top, sub)) = essence.split_once('/') else {
        return false;
    };
    let sub = sub.to_ascii_lowercase();
    top.eq_ignore_ascii_case("application") && (sub == "json" || sub.ends_with("+json"))
}

/// The first content coding other than `identity` that `headers` name for the body, as
/// it may be quoted back to the client (at most 32 characters, printable ASCII): a body
/// that has one is not plain JSON, and [`JsonInput`] refuses it 415.
///
/// ```
/// use http::HeaderMap;
/// let mut headers = HeaderMap::new();
/// assert_eq!(toolgate_http::content_coding(&headers), None);
/// headers.insert("content-encoding", "identity, gzip".parse().unwrap());
/// assert_eq!(toolgate_http::content_coding(&headers).as_deref(), Some("gzip"));
/// ```
pub fn content_coding(headers: &HeaderMap) -> Option<String> {
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Some("(unreadable)".to_owned());
        };
        let coding = value
            .split(',')
            .map(str::trim)
            .find(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
        if let Some(coding) = coding {
            return Some(
                coding
                    .chars()
                    .filter(char::is_ascii_graphic)
                    .take(32)
                    .collect(),
            );
        }
    }
    None
}
