//! MCP's own headers, each at most once in a request.
//!
//! `Mcp-Session-Id`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Last-Event-Id` and
//! each `Mcp-Param-*` header hold one value. A request that sends one of them twice is
//! refused: rmcp reads the first value, and a proxy or a firewall in front of the server
//! may read the last, so the two would act on different sessions, revisions or methods. The
//! answer is 400 with `-32600` (invalid request) and the request's id, naming the header.
//!
//! A request without any repeated header — nearly every one — costs two counts of its
//! header map.

use http::{HeaderMap, HeaderName, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use serde_json::Value;
use toolgate_core::error::shown_id;

use super::cancellation::GuardedBody;
use super::request_body::rejection;

/// The headers of MCP's streamable HTTP transport that hold one value, as the specification
/// spells them.
const SINGLE: [&str; 5] = [
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Last-Event-Id",
];

/// The prefix of the headers that mirror a request's parameters (2026-07-28 on).
const PARAM_PREFIX: &str = "mcp-param-";

/// The refusal of a request whose `headers` hold one of MCP's single-valued headers more
/// than once; `None` when none is repeated. `message` is the request's JSON-RPC message,
/// when it had one: its id is the answer's.
pub(super) fn refusal(
    headers: &HeaderMap,
    message: Option<&ClientJsonRpcMessage>,
) -> Option<http::Response<GuardedBody>> {
    // No name is there twice: nothing to look at.
    if headers.len() == headers.keys_len() {
        return None;
    }
    let repeated = SINGLE
        .iter()
        .find(|name| is_repeated(headers, name))
        .map(|name| (*name).to_owned())
        .or_else(|| {
            headers
                .keys()
                .map(HeaderName::as_str)
                .find(|name| name.starts_with(PARAM_PREFIX) && is_repeated(headers, name))
                .map(param_header)
        })?;
    let id = match message {
        Some(ClientJsonRpcMessage::Request(request)) => request.id.clone().into_json_value(),
        _ => Value::Null,
    };
    let count = headers.get_all(repeated.as_str()).iter().count();
    Some(rejection(
        StatusCode::BAD_REQUEST,
        id,
        i64::from(ErrorCode::INVALID_REQUEST.0),
        format!(
            "the `{}` header is sent {count} times, and it holds one value: send it once",
            shown_id(&repeated)
        ),
    ))
}

/// Whether `headers` hold `name` more than once.
fn is_repeated(headers: &HeaderMap, name: &str) -> bool {
    headers.get_all(name).iter().nth(1).is_some()
}

/// A `Mcp-Param-*` header's name, lowercase as HTTP/1 and HTTP/2 hand it over, spelled as
/// the specification does.
fn param_header(name: &str) -> String {
    format!("Mcp-Param-{}", &name[PARAM_PREFIX.len()..])
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use http_body_util::BodyExt;
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    async fn answer(response: http::Response<GuardedBody>) -> (StatusCode, Value) {
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    fn call() -> ClientJsonRpcMessage {
        serde_json::from_value(json!({
            "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_session_id_sent_twice_is_refused_with_the_requests_id() {
        let repeated = headers(&[
            ("mcp-session-id", "alices-session"),
            ("mcp-session-id", "bobs-session"),
        ]);
        let refused = refusal(&repeated, Some(&call())).expect("refused");
        let (status, answer) = answer(refused).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(answer["id"], 9, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`Mcp-Session-Id` header is sent 2 times"),
            "{message}"
        );
        assert!(message.contains("send it once"), "{message}");
        assert!(!message.contains("bobs-session"), "{message}");
    }

    #[tokio::test]
    async fn each_single_valued_header_sent_twice_is_refused_even_with_one_value_twice() {
        for name in [
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "last-event-id",
        ] {
            let mut repeated = HeaderMap::new();
            repeated.append(name, HeaderValue::from_static("2025-11-25"));
            repeated.append(name, HeaderValue::from_static("2025-11-25"));
            let refused = refusal(&repeated, None).unwrap_or_else(|| panic!("{name}"));
            let (_, answer) = answer(refused).await;
            assert_eq!(answer["id"], Value::Null, "{answer}");
            let message = answer["error"]["message"].as_str().unwrap().to_lowercase();
            assert!(message.contains(&format!("`{name}`")), "{message}");
        }
    }

    #[tokio::test]
    async fn a_parameter_header_sent_twice_is_refused_by_its_name() {
        let repeated = headers(&[
            ("mcp-param-region", "eu"),
            ("mcp-param-region", "us"),
            ("mcp-param-other", "x"),
        ]);
        let (_, answer) = answer(refusal(&repeated, None).expect("refused")).await;
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`Mcp-Param-region` header is sent 2 times"),
            "{message}"
        );
    }

    #[test]
    fn other_repeated_headers_and_single_mcp_headers_pass() {
        let fine = headers(&[
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
            ("mcp-session-id", "one"),
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-param-region", "eu"),
        ]);
        assert!(refusal(&fine, Some(&call())).is_none());
        assert!(refusal(&HeaderMap::new(), None).is_none());
    }
}
