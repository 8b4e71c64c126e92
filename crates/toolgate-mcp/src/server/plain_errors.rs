//! rmcp's answers to a request that do not tell its caller what to do, made JSON-RPC errors
//! that do.
//!
//! | rmcp answers | the caller gets |
//! |---|---|
//! | an `MCP-Protocol-Version` header that is not visible ASCII: 400 in plain text, "Invalid MCP-Protocol-Version header encoding" | 400, `-32022` (unsupported protocol version) with the request's `id` (null without a body), saying the header must be visible ASCII text such as 2025-11-25, the revisions the server speaks in `data.supported` |
//! | an `MCP-Protocol-Version` header naming a revision the server does not speak: 400 in plain text, "Unsupported MCP-Protocol-Version: …" with the header's value whole | 400, `-32022` with the request's `id` (null without a body), naming the revisions to send; the value, cut to 64 characters and escaped, in the message and in `data.requested`, the revisions in `data.supported` |
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
use toolgate_core::error::shown_text;

use super::refusal_words::in_memory;

/// rmcp's whole answer to an `MCP-Protocol-Version` header that is not visible ASCII.
const UNREADABLE_VERSION: &[u8] = b"Bad Request: Invalid MCP-Protocol-Version header encoding";

/// How rmcp starts its answer to an `MCP-Protocol-Version` header naming a revision it does
/// not speak; the header's value follows, whole.
const UNSUPPORTED_VERSION: &[u8] = b"Bad Request: Unsupported MCP-Protocol-Version:";

/// The most characters of a header's value an answer repeats.
const SHOWN_HEADER_CHARS: usize = 64;

/// `body`, rmcp's answer of `head` to `message` (the request's JSON-RPC message, when it
/// had one), in words that say what to do when it is one of the answers the module lists,
/// and `true`; as it was otherwise, and `false`. `head` is changed to fit the new body.
/// The words are toolgate's own, and what they repeat of the request is cut and escaped
/// already: they are not cut again ([`super::refusal_words`]).
pub(super) fn reworded(
    head: &mut http::response::Parts,
    body: BoxBody<Bytes, Infallible>,
    message: Option<&ClientJsonRpcMessage>,
) -> (BoxBody<Bytes, Infallible>, bool) {
    let plain_refusal = head.status == StatusCode::BAD_REQUEST && !is_json(&head.headers);
    let refused_ping =
        head.status == StatusCode::NOT_FOUND && is_json(&head.headers) && is_ping(message);
    if !plain_refusal && !refused_ping {
        return (body, false);
    }
    let bytes = match in_memory(body) {
        Ok(bytes) => bytes,
        Err(body) => return (body, false),
    };
    let words = if plain_refusal {
        version_refusal(&bytes, message)
    } else {
        ping_not_found(&bytes)
    };
    let Some(words) = words else {
        return (Full::new(bytes).boxed(), false);
    };
    head.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    head.headers.remove(header::CONTENT_LENGTH);
    (Full::new(words).boxed(), true)
}

/// rmcp's plain refusal `bytes` of a request's `MCP-Protocol-Version` header, as the
/// JSON-RPC error answering `request`; `None` when it is another refusal.
fn version_refusal(bytes: &[u8], request: Option<&ClientJsonRpcMessage>) -> Option<Bytes> {
    let text = bytes.trim_ascii();
    let (message, requested) = if text == UNREADABLE_VERSION {
        let message = format!(
            "the `MCP-Protocol-Version` header must be visible ASCII text such as {}, and this one holds other bytes: send a revision this server speaks ({}) — in a session, the one `initialize` agreed on — or no header",
            ProtocolVersion::V_2025_11_25.as_str(),
            supported().join(", ")
        );
        (message, None)
    } else {
        let value = String::from_utf8_lossy(text.strip_prefix(UNSUPPORTED_VERSION)?);
        let requested = shown_text(value.trim(), SHOWN_HEADER_CHARS).into_owned();
        let message = format!(
            "the `MCP-Protocol-Version` header names `{requested}`, a revision of MCP this server does not speak: send one it speaks ({}) — in a session, the one `initialize` agreed on; on `initialize`, the one in `params.protocolVersion`, or no header",
            supported().join(", ")
        );
        (message, Some(requested))
    };
    let mut data = json!({"supported": supported()});
    if let Some(requested) = requested {
        data["requested"] = Value::String(requested);
    }
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id_of(request),
        "error": {
            "code": ErrorCode::UNSUPPORTED_PROTOCOL_VERSION.0,
            "message": message,
            "data": data,
        },
    });
    Some(Bytes::from(answer.to_string()))
}

/// The revisions of MCP the server speaks.
fn supported() -> Vec<&'static str> {
    ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect()
}

/// rmcp's refusal `bytes` of a `ping` in the words of the module; `None` when it is not a
/// method not found.
fn ping_not_found(bytes: &[u8]) -> Option<Bytes> {
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
    serde_json::to_vec(&answer).ok().map(Bytes::from)
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
            b"Bad Request: Session ID is required",
        );
        let (head, body) = reword(plain, None);
        assert_eq!(&body[..], b"Bad Request: Session ID is required");
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

    #[test]
    fn an_unsupported_version_is_answered_with_the_requests_id_and_the_versions_to_send() {
        let plain = answer(
            StatusCode::BAD_REQUEST,
            Some("text/plain; charset=utf-8"),
            b"Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01",
        );
        let list = request(json!({"jsonrpc": "2.0", "id": "seven", "method": "tools/list"}));
        let (head, body) = reword(plain, Some(&list));
        assert_eq!(head.status, StatusCode::BAD_REQUEST);
        assert_eq!(head.headers[header::CONTENT_TYPE], "application/json");
        let refusal: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(refusal["jsonrpc"], "2.0");
        assert_eq!(refusal["id"], "seven", "{refusal}");
        let error = &refusal["error"];
        assert_eq!(error["code"], -32022, "{refusal}");
        assert_eq!(error["data"]["requested"], "1999-01-01");
        let supported = error["data"]["supported"].as_array().unwrap();
        assert!(supported.contains(&"2025-11-25".into()), "{refusal}");
        assert!(supported.contains(&"2026-07-28".into()), "{refusal}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("`1999-01-01`"), "{message}");
        assert!(message.contains("send one it speaks"), "{message}");

        // Without a body there is no id to answer with.
        let plain = answer(
            StatusCode::BAD_REQUEST,
            None,
            b"Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01",
        );
        let (_, body) = reword(plain, None);
        let refusal: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(refusal["id"], Value::Null, "{refusal}");
    }

    #[test]
    fn an_unsupported_version_is_repeated_cut_and_escaped() {
        let long = format!(
            "Bad Request: Unsupported MCP-Protocol-Version: 1\u{202e}{}",
            "9".repeat(100)
        );
        let (_, body) = reword(answer(StatusCode::BAD_REQUEST, None, long.as_bytes()), None);
        let refusal: Value = serde_json::from_slice(&body).unwrap();
        let error = &refusal["error"];
        assert_eq!(
            error["data"]["requested"],
            format!("1\\u{{202e}}{}…", "9".repeat(62)),
            "cut to 64 characters and escaped"
        );
        assert!(!error["message"].as_str().unwrap().contains('\u{202e}'));

        // As long as a header can be: still the version's refusal.
        let longest = format!(
            "Bad Request: Unsupported MCP-Protocol-Version: 2026-07-28\t{}",
            "P".repeat(60_000)
        );
        let (_, body) = reword(
            answer(StatusCode::BAD_REQUEST, None, longest.as_bytes()),
            None,
        );
        let refusal: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(refusal["error"]["code"], -32022, "{refusal}");
        let requested = refusal["error"]["data"]["requested"].as_str().unwrap();
        assert!(requested.starts_with("2026-07-28\\tPPP"), "{requested}");
        assert!(body.len() < 2_000, "{} bytes", body.len());
    }
}
