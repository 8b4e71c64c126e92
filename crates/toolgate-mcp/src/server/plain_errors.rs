//! rmcp's answers to a request that do not tell its caller what to do, made JSON-RPC errors
//! that do.
//!
//! | rmcp answers | the caller gets |
//! |---|---|
//! | an `MCP-Protocol-Version` header that is not visible ASCII: 400 in plain text, "Invalid MCP-Protocol-Version header encoding" | 400, `-32022` (unsupported protocol version) with the request's `id` (null without a body), saying the header must be visible ASCII text such as 2025-11-25, the revisions the server speaks in `data.supported` |
//! | a `ping` of 2026-07-28, a revision without it: 404, `-32601` (method not found), the message `ping` | the same status, code and `id`, in words naming the method and what to send instead |
//!
//! Every other answer is passed on as it is, and looked at no further than its status, its
//! type and, for a refused `ping`, its error's code.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode, ProtocolVersion};
use serde_json::{Value, json};

use super::refusal_words::in_memory;

/// rmcp's whole answer to an `MCP-Protocol-Version` header that is not visible ASCII.
const UNREADABLE_VERSION: &[u8] = b"Bad Request: Invalid MCP-Protocol-Version header encoding";

/// `body`, rmcp's answer of `head` to `message` (the request's JSON-RPC message, when it
/// had one), in words that say what to do when it is one of the answers the module lists,
/// and `true`; as it was otherwise, and `false`. `head` is changed to fit the new body.
/// The words are toolgate's own, and repeat nothing the caller sent: they are not cut
/// again ([`super::refusal_words`]).
pub(super) fn reworded(
    head: &mut http::response::Parts,
    body: BoxBody<Bytes, Infallible>,
    message: Option<&ClientJsonRpcMessage>,
) -> (BoxBody<Bytes, Infallible>, bool) {
    if head.status == StatusCode::BAD_REQUEST && !is_json(&head.headers) {
        let bytes = match in_memory(body) {
            Ok(bytes) => bytes,
            Err(body) => return (body, false),
        };
        if bytes.trim_ascii() != UNREADABLE_VERSION {
            return (Full::new(bytes).boxed(), false);
        }
        head.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        head.headers.remove(header::CONTENT_LENGTH);
        return (Full::new(unreadable_version(id_of(message))).boxed(), true);
    }
    if head.status == StatusCode::NOT_FOUND && is_json(&head.headers) && is_ping(message) {
        let bytes = match in_memory(body) {
            Ok(bytes) => bytes,
            Err(body) => return (body, false),
        };
        head.headers.remove(header::CONTENT_LENGTH);
        return match ping_not_found(&bytes) {
            Some(reworded) => (Full::new(Bytes::from(reworded)).boxed(), true),
            None => (Full::new(bytes).boxed(), false),
        };
    }
    (body, false)
}

/// The JSON-RPC error for a request (of `id`) whose `MCP-Protocol-Version` header is not
/// visible ASCII, and so names no revision.
fn unreadable_version(id: Value) -> Bytes {
    let supported: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect();
    let message = format!(
        "the `MCP-Protocol-Version` header must be visible ASCII text such as {}, and this one holds other bytes: send a revision this server speaks ({}) — in a session, the one `initialize` agreed on — or no header",
        ProtocolVersion::V_2025_11_25.as_str(),
        supported.join(", ")
    );
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": ErrorCode::UNSUPPORTED_PROTOCOL_VERSION.0,
            "message": message,
            "data": {"supported": supported},
        },
    });
    Bytes::from(answer.to_string())
}

/// rmcp's refusal `bytes` of a `ping` in the words of the module; `None` when it is not a
/// method not found.
fn ping_not_found(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut answer: Value = serde_json::from_slice(bytes).ok()?;
    let error = answer.get_mut("error")?;
    if error.get("code")?.as_i64()? != i64::from(ErrorCode::METHOD_NOT_FOUND.0) {
        return None;
    }
    error["message"] = Value::String(format!(
        "method `ping` is not part of MCP {} and later, the revision this request speaks: send `server/discover` to see that the server answers, or speak {} (in a session begun with `initialize`) to use `ping`",
        ProtocolVersion::V_2026_07_28.as_str(),
        ProtocolVersion::V_2025_11_25.as_str(),
    ));
    serde_json::to_vec(&answer).ok()
}

/// Whether `message` is a `ping` request.
fn is_ping(message: Option<&ClientJsonRpcMessage>) -> bool {
    matches!(
        message,
        Some(ClientJsonRpcMessage::Request(request))
            if matches!(request.request, ClientRequest::PingRequest(_))
    )
}

/// The id to answer `message` with: a request's, else null.
fn id_of(message: Option<&ClientJsonRpcMessage>) -> Value {
    match message {
        Some(ClientJsonRpcMessage::Request(request)) => request.id.clone().into_json_value(),
        _ => Value::Null,
    }
}

/// Whether `headers` say the answer is JSON.
fn is_json(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"))
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn answer(status: StatusCode, kind: Option<&str>, body: &[u8]) -> http::Response<Bytes> {
        let mut answer = http::Response::new(Bytes::copy_from_slice(body));
        *answer.status_mut() = status;
        if let Some(kind) = kind {
            answer
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_str(kind).unwrap());
        }
        answer
    }

    fn reword(
        answer: http::Response<Bytes>,
        message: Option<&ClientJsonRpcMessage>,
    ) -> (http::response::Parts, Bytes) {
        let (mut head, body) = answer.into_parts();
        let (body, _) = reworded(&mut head, Full::new(body).boxed(), message);
        let bytes = body
            .collect()
            .now_or_never()
            .expect("whole")
            .expect("read")
            .to_bytes();
        (head, bytes)
    }

    fn request(body: Value) -> ClientJsonRpcMessage {
        serde_json::from_value(body).expect("a message")
    }

    #[test]
    fn other_plain_refusals_and_other_not_found_answers_are_left_as_they_are() {
        let plain = answer(
            StatusCode::BAD_REQUEST,
            Some("text/plain"),
            b"Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01",
        );
        let (head, body) = reword(plain, None);
        assert_eq!(
            &body[..],
            b"Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01"
        );
        assert_eq!(head.headers[header::CONTENT_TYPE], "text/plain");

        // A method not found for another method than `ping` keeps its words.
        let not_found = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#;
        let list = request(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        let (_, body) = reword(
            answer(StatusCode::NOT_FOUND, Some("application/json"), not_found),
            Some(&list),
        );
        assert_eq!(&body[..], not_found);
    }

    #[test]
    fn an_unreadable_version_header_without_a_body_is_answered_with_a_null_id() {
        let plain = answer(StatusCode::BAD_REQUEST, None, UNREADABLE_VERSION);
        let (head, body) = reword(plain, None);
        assert_eq!(head.headers[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["id"], Value::Null);
        assert_eq!(body["error"]["code"], -32022);
    }
}
