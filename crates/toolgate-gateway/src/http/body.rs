//! Request bodies: bounded, JSON, with clear errors.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;
use toolgate_core::json::JsonError;

// As `super::ApiError`, named where it is made: the console reads bodies here too.
use toolgate_http::HttpError as ApiError;

/// Whether a request comes with a body (a length that is not zero, or chunks).
pub(super) fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0")
}

/// `response`, marked `Connection: close` when the request it answers came with a body
/// that was not read.
pub(super) fn closing_if(has_body: bool, mut response: Response) -> Response {
    if has_body {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The 413 answer for a body over `server.body_limit`.
fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        "the request body is over the gateway's limit (`server.body_limit`; 16 KiB for signing in to the console): send less data",
    )
}

/// Answers at once, before any of its body is read, a request whose headers say its body
/// will be refused anyway:
/// - 415 `unsupported_content_encoding` for a body with a content coding (`Content-Encoding:
///   gzip`, say): the gateway reads bodies as sent, and would otherwise take compressed
///   bytes for malformed JSON, or read a body mislabelled as compressed as if it were not.
///   The answer carries `Accept-Encoding: identity`, as RFC 9110 asks;
/// - 413 `body_too_large` for a `Content-Length` over `limit`: waiting for a body that will
///   be refused anyway would hold the caller (and a connection) until
///   `server.body_timeout` — or, when the body never comes, answer a timeout instead of
///   the limit. `/mcp` is left to the MCP endpoint for this one, which answers it with a
///   JSON-RPC error.
///
/// The connection is closed after either answer, as the body may still be on its way.
pub async fn refuse_unreadable_bodies(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if has_body(headers)
        && let Some(coding) = toolgate_http::content_coding(headers)
    {
        let mut refused = ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_encoding",
            format!(
                "the request body is marked `Content-Encoding: {coding}`, and the gateway reads bodies only as sent: send it uncompressed, without a `Content-Encoding` header"
            ),
        )
        .into_response();
        refused.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        return closing_if(true, refused);
    }
    if request.uri().path() == "/mcp" {
        return next.run(request).await;
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return closing_if(true, too_large().into_response());
    }
    next.run(request).await
}

/// Parses a request body as JSON of type `T`, or answers 413 for a body over the limit, 408
/// for one that did not arrive in time, and 400 for one that is not the JSON expected
/// (naming where it went wrong) or that writes a whole number past those a value holds
/// exactly (naming it, as [`json_value`] does): serde_json would read it as the nearest
/// float into a `Value` field — an approver's output for a call they complete — and the
/// caller would get another number than the one sent.
pub fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = whole_body(body)?;
    // The common case, a body that parses, goes straight through serde_json; only a body
    // that does not is parsed again, tracking the path, to say where it went wrong.
    let read = serde_json::from_slice(&bytes).map_err(|error| explain::<T>(&bytes, error))?;
    toolgate_core::json::check_whole_numbers(&bytes).map_err(|inexact| refused(&inexact))?;
    Ok(read)
}

/// Parses a request body as any JSON value, as [`json_body`] does, but refusing an object
/// that names a key twice (400 `bad_json` naming the key and its object) and a whole
/// number past those a value holds exactly (400 `bad_json` naming it): the caller's
/// arguments and messages, which a policy and a tool must read alike, as sent.
pub fn json_value(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = whole_body(body)?;
    toolgate_core::json::from_slice(&bytes).map_err(|error| match error {
        JsonError::RepeatedKey(repeated) => ApiError::repeated_key(&repeated),
        JsonError::Malformed(error) => explain::<Value>(&bytes, error),
        other => refused(&other),
    })
}

/// The 400 answer for a body that is JSON but refused for what it holds.
fn refused(why: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_json",
        format!("the request body is refused: {why}"),
    )
}

/// A request body read whole, or 413 for a body over the limit, 408 for one that did not
/// arrive in time, and 400 for one that failed otherwise.
pub(crate) fn whole_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if let Some(timed_out) = body_timed_out(&rejection) {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                timed_out.to_string(),
            )
        } else if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_body", rejection.body_text())
        }
    })
}

/// The timeout in `error`'s chain of sources, when reading a body failed because it did not
/// arrive in time (`server.body_timeout`).
pub fn body_timed_out<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return Some(error);
        }
        next = error.source();
    }
    None
}

/// The 400 answer for a body that is not the JSON expected, naming where it went wrong: a
/// body that ends before its JSON does is told so (with where it was cut short), an empty
/// one too, in place of serde_json's "EOF while parsing".
#[cold]
fn explain<T: DeserializeOwned>(bytes: &[u8], error: serde_json::Error) -> ApiError {
    let bad = |at: String, e: serde_json::Error| {
        let message = if !e.is_eof() {
            format!(
                "the request body is not the JSON expected{at}: {}",
                toolgate_core::error::in_json_words(&e.to_string())
            )
        } else if bytes.trim_ascii().is_empty() {
            "the request body is empty: send the JSON expected".to_owned()
        } else {
            format!(
                "the request body ended before its JSON did{at} (line {}, column {}): send the whole JSON",
                e.line(),
                e.column()
            )
        };
        ApiError::new(StatusCode::BAD_REQUEST, "bad_json", message)
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(&mut deserializer) {
        Err(e) => {
            let at = named_path(e.path()).map_or_else(String::new, |path| format!(" at `{path}`"));
            bad(at, e.into_inner())
        }
        // The value parsed, so what failed is what follows it.
        Ok(_) => bad(String::new(), deserializer.end().err().unwrap_or(error)),
    }
}

/// Where in the body a value went wrong, as `serde_path_to_error` writes a path (`a.b[2]`),
/// up to the first place it could not name (the key of an object that was cut short, which
/// it writes `?`); `None` for the top level, or when not even the first step has a name.
fn named_path(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut named = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Unknown => break,
            Segment::Seq { index } => named.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !named.is_empty() {
                    named.push('.');
                }
                named.push_str(key);
            }
        }
    }
    (!named.is_empty()).then_some(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Call {
        a: u64,
        b: Option<Vec<Inner>>,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        c: u64,
    }

    fn message(error: ApiError) -> String {
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        assert_eq!(error.code(), "bad_json");
        error.body().message.clone()
    }

    fn typed(body: &str) -> String {
        message(
            json_body::<Call>(Ok(Bytes::copy_from_slice(body.as_bytes())))
                .err()
                .unwrap(),
        )
    }

    fn any(body: &str) -> String {
        message(json_value(Ok(Bytes::copy_from_slice(body.as_bytes()))).unwrap_err())
    }

    #[test]
    fn a_body_cut_short_is_told_so_without_a_placeholder_path() {
        for explain in [typed, any] {
            for body in [r#"{"a": 1"#, "{", r#"{"a": 1, "#, r#"{"a""#] {
                let told = explain(body);
                assert!(
                    told.starts_with("the request body ended before its JSON did ("),
                    "{body}: {told}"
                );
                assert!(
                    !told.contains('?') && !told.contains("EOF"),
                    "{body}: {told}"
                );
                assert!(told.ends_with("send the whole JSON"), "{body}: {told}");
            }
            let told = explain("");
            assert_eq!(told, "the request body is empty: send the JSON expected");
        }
    }

    #[test]
    fn a_body_cut_short_in_a_named_value_names_it() {
        assert_eq!(
            typed(r#"{"a":"#),
            "the request body ended before its JSON did at `a` (line 1, column 5): send the whole JSON"
        );
        let told = typed(r#"{"a": 1, "b": [{"c": 1}, {"c":"#);
        assert!(
            told.starts_with("the request body ended before its JSON did at `b[1].c` ("),
            "{told}"
        );
    }

    #[test]
    fn other_errors_keep_their_place_and_words() {
        assert_eq!(
            typed(r#"{"a": "x"}"#),
            "the request body is not the JSON expected at `a`: invalid type: string \"x\", expected a whole number, 0 or more at line 1 column 9"
        );
        assert_eq!(
            typed(r#"{"a": 1, "b": [{"c": -1}]}"#).split(':').next(),
            Some("the request body is not the JSON expected at `b[0].c`")
        );
        assert_eq!(
            typed(r#"{"a": 1}}"#),
            "the request body is not the JSON expected: trailing characters at line 1 column 9"
        );
    }
}
