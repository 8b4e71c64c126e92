//! The body of a request to the streamable HTTP endpoint, read in full before rmcp sees
//! it, so that what is wrong with it gets the HTTP status that says so and a JSON-RPC
//! error (rmcp would answer 500 for a body that fails to arrive and 415 for one that does
//! not parse).
//!
//! | the body | the answer |
//! |---|---|
//! | over the limit (declared so in `Content-Length`: at once; or in chunks, once past it) | 413 with `Connection: close`, JSON-RPC `-32600` (invalid request) |
//! | did not arrive in time (an [`io::Error`] of kind `TimedOut` from the body) | 408 with `Connection: close`, `-32600` |
//! | failed to arrive otherwise | 400, `-32600` |
//! | not JSON (a `POST` of `application/json`) | 400, `-32700` (parse error) |
//! | JSON, but not a JSON-RPC message | 400, `-32600`, with the message's `id` if it has one |
//! | a request whose `_meta` gives a log level or a progress token of the wrong kind (`request_meta.rs`) | 400, `-32602` (invalid params), with the request's `id`, naming the key and what it takes |

use std::error::Error as StdError;
use std::io;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};

use super::cancellation::GuardedBody;

type BoxError = Box<dyn StdError + Send + Sync>;

/// JSON-RPC: the body is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the body is not a valid request.
const INVALID_REQUEST: i64 = -32600;

/// Reads the body of `request` (at most `limit` bytes) and, for a `POST` of JSON, checks
/// that it is a JSON-RPC message; the request with its body in memory and, for such a
/// `POST`, the message — or the answer saying what is wrong.
pub(super) async fn read<B>(
    request: http::Request<B>,
    limit: usize,
) -> Result<(http::Request<Full<Bytes>>, Option<ClientJsonRpcMessage>), http::Response<GuardedBody>>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    // A body whose declared length is over the limit is refused before it is waited for:
    // it would be refused anyway, and one that never comes would be answered a timeout.
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large(limit));
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return Err(unreadable(&*error, limit)),
    };
    let message = if parts.method == http::Method::POST && is_json(&parts.headers) {
        match super::message::read(&bytes) {
            Ok(message) => {
                if let Some((id, error)) = super::request_meta::refusal_of(&message) {
                    let (code, reason) = (error.code.0.into(), error.message.into_owned());
                    return Err(rejection(StatusCode::BAD_REQUEST, id, code, reason));
                }
                Some(message)
            }
            Err(error) => return Err(not_json_rpc(&bytes, &error)),
        }
    } else {
        None
    };
    Ok((http::Request::from_parts(parts, Full::new(bytes)), message))
}

/// The answer to a body that is not a JSON-RPC message: a parse error when it is not JSON,
/// an invalid request (with the request's id, when it has one) when it is.
fn not_json_rpc(bytes: &[u8], error: &serde_json::Error) -> http::Response<GuardedBody> {
    if !error.is_data() {
        // JSON by its grammar, with a value no reader is bound to take (RFC 8259): said
        // as such, with the request's id when the message is whole at its top level.
        if let Some(reason) = crate::json_scan::unrepresentable(bytes)
            && let Some((id, true)) = top_level_id(bytes)
        {
            return rejection(StatusCode::BAD_REQUEST, id, INVALID_REQUEST, reason);
        }
        return rejection(
            StatusCode::BAD_REQUEST,
            Value::Null,
            PARSE_ERROR,
            format!(
                "the body is not valid JSON: {}",
                toolgate_core::error::in_json_words(&error.to_string())
            ),
        );
    }
    // A key named twice is toolgate's refusal (see `message`), which its error says. A
    // request whose `id` is named twice has no id to answer to.
    let repeated = super::message::repeated_key(bytes);
    let id_repeated = repeated.as_ref().is_some_and(super::message::is_id);
    let message = serde_json::from_slice::<Value>(bytes).ok();
    // A whole number the message would not hold exactly is toolgate's refusal too — but
    // for its `id`, whose range JSON-RPC's reading says.
    let inexact = toolgate_core::json::check_whole_numbers(bytes).err();
    let id_inexact = message.as_ref().is_some_and(|m| m["id"].is_f64());
    let reason = match (&repeated, inexact, &message) {
        (None, Some(inexact), _) if !id_inexact => inexact.to_string(),
        (None, None, Some(message)) => {
            super::message::what_is_wrong(message, "send each message in a request of its own")
        }
        _ => error.to_string(),
    };
    let id = message
        .filter(|_| !id_repeated)
        .and_then(|message| message.get("id").cloned())
        // An id JSON-RPC allows, as sent: a string or a whole number (a fraction, or a
        // number too large to keep exactly, would come back changed).
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .unwrap_or(Value::Null);
    rejection(
        StatusCode::BAD_REQUEST,
        id,
        INVALID_REQUEST,
        format!(
            "the body is JSON but not a valid JSON-RPC request, notification or response: {reason}"
        ),
    )
}

/// The `id` of the JSON object `bytes` holds — a string or a whole number, as JSON-RPC
/// allows it, else null — and whether the object was read whole at its top level; `None`
/// when `bytes` holds no object.
fn top_level_id(bytes: &[u8]) -> Option<(Value, bool)> {
    let mut members = crate::json_scan::members(bytes)?;
    let mut id = Value::Null;
    for (key, value) in members.by_ref() {
        if key == b"id"
            && let Some(value) = value
        {
            id = serde_json::from_slice::<Value>(&bytes[value])
                .ok()
                .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
                .unwrap_or(Value::Null);
        }
    }
    Some((id, members.closed))
}

/// Whether the request says its body is JSON (rmcp answers 415 to any other).
fn is_json(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The answer to a body that could not be read in full.
fn unreadable(
    error: &(dyn StdError + Send + Sync + 'static),
    limit: usize,
) -> http::Response<GuardedBody> {
    if error.is::<http_body_util::LengthLimitError>() {
        return too_large(limit);
    }
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::TimedOut)
        {
            let mut answer = rejection(
                StatusCode::REQUEST_TIMEOUT,
                Value::Null,
                INVALID_REQUEST,
                format!("the request body did not arrive in time: {cause}"),
            );
            // The rest of the body may still be on its way: the connection cannot carry
            // another request.
            answer
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return answer;
        }
        source = cause.source();
    }
    rejection(
        StatusCode::BAD_REQUEST,
        Value::Null,
        INVALID_REQUEST,
        format!("the request body could not be read: {error}"),
    )
}

/// The answer to a body over `limit` bytes, with `Connection: close`: the rest of the body
/// (announced in `Content-Length`, or chunks past the limit) may still be on its way, so the
/// connection cannot carry another request.
fn too_large(limit: usize) -> http::Response<GuardedBody> {
    let mut answer = rejection(
        StatusCode::PAYLOAD_TOO_LARGE,
        Value::Null,
        INVALID_REQUEST,
        format!("the request body is over the limit of {limit} bytes: send a smaller message"),
    );
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// A JSON-RPC error answered with `status`; `id` is null when none could be read.
pub(super) fn rejection(
    status: StatusCode,
    id: Value,
    code: i64,
    message: String,
) -> http::Response<GuardedBody> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    });
    let mut answer = http::Response::new(GuardedBody::complete(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    const LIMIT: usize = 16;

    fn post<B>(body: B) -> http::Request<B> {
        http::Request::post("/mcp")
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap()
    }

    /// A body of `chunks` chunks of 10 bytes, its length not known ahead (as one sent with
    /// `Transfer-Encoding: chunked`).
    fn chunked(
        chunks: usize,
    ) -> StreamBody<impl futures::Stream<Item = Result<Frame<Bytes>, Infallible>>> {
        let frames = (0..chunks).map(|_| Ok(Frame::data(Bytes::from_static(b"[[[[[[[[[["))));
        StreamBody::new(futures::stream::iter(frames))
    }

    async fn assert_too_large_and_closing(answer: http::Response<GuardedBody>) {
        assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            answer
                .headers()
                .get(header::CONNECTION)
                .map(HeaderValue::as_bytes),
            Some(&b"close"[..]),
            "a 413 must close the connection: the rest of the body may still be coming"
        );
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], INVALID_REQUEST);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("over the limit of 16 bytes"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_chunked_body_over_the_limit_is_answered_413_closing_the_connection() {
        assert_eq!(chunked(2).size_hint().lower(), 0, "no length announced");
        let answer = read(post(chunked(2)), LIMIT).await.err().unwrap();
        assert_too_large_and_closing(answer).await;
    }

    #[tokio::test]
    async fn a_body_announced_over_the_limit_is_answered_413_closing_the_connection() {
        let answer = read(post(Full::new(Bytes::from(vec![b' '; LIMIT + 1]))), LIMIT)
            .await
            .err()
            .unwrap();
        assert_too_large_and_closing(answer).await;
    }

    #[tokio::test]
    async fn a_chunked_body_within_the_limit_is_read_whole() {
        // `[[[[…` is no JSON: a parse error, its whole body read, so the connection is kept.
        let answer = read(post(chunked(1)), LIMIT).await.err().unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
        assert!(answer.headers().get(header::CONNECTION).is_none());
    }

    #[tokio::test]
    async fn json_that_is_no_json_rpc_message_is_answered_with_what_is_wrong_and_its_id() {
        let cases = [
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
                Value::Null,
                "batches are not supported: send each message in a request of its own",
            ),
            (
                r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#,
                json!(7),
                "`jsonrpc` must be \"2.0\"",
            ),
            (
                r#"{"id":"a","method":"tools/list"}"#,
                json!("a"),
                "`jsonrpc` is missing",
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
                Value::Null,
                "`id` must be a string or a whole number, not an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":7}"#,
                json!(3),
                "`method` must be a string, not a number",
            ),
            (
                r#""tools/list""#,
                Value::Null,
                "a message must be a JSON object, not a string",
            ),
            // A key named twice is said as such, as before.
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"ping","method":"ping"}"#,
                json!(4),
                "`method`",
            ),
        ];
        for (body, id, reason) in cases {
            let answer = read(post(Full::new(Bytes::from(body))), 1 << 16)
                .await
                .err()
                .unwrap();
            assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{body}");
            let answer = answer.into_body().collect().await.unwrap().to_bytes();
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(answer["error"]["code"], INVALID_REQUEST, "{body}");
            assert_eq!(answer["id"], id, "{body}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(reason), "{body}: {message}");
            assert!(!message.contains("unrecognized"), "{body}: {message}");
        }
    }

    #[tokio::test]
    async fn json_nested_deeper_than_is_read_is_answered_in_words() {
        let body = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let answer = read(post(Full::new(Bytes::from(body))), 1 << 16)
            .await
            .err()
            .unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
        let answer = answer.into_body().collect().await.unwrap().to_bytes();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["error"]["code"], PARSE_ERROR);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("arrays and objects nested 128 levels deep or more"),
            "{message}"
        );
        assert!(!message.contains("recursion"), "{message}");
    }
}
