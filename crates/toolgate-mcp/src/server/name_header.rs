//! The `Mcp-Name` header of a request of 2026-07-28 (SEP-2243), checked against its body
//! before rmcp sees the request.
//!
//! From that revision on, a request of `tools/call` or `prompts/get` names in `Mcp-Name`
//! the `name` of its body, one of `resources/read`, `resources/subscribe` or
//! `resources/unsubscribe` its `uri`, and one of `tasks/get`, `tasks/update` or
//! `tasks/cancel` its `taskId`, so that what routes requests can do so without reading
//! bodies. rmcp refuses a request whose header names something else — `-32020` (header
//! mismatch), HTTP 400 — but its message repeats both values whole: a task id of a
//! megabyte comes back as it came, and one holding line breaks or terminal escapes with
//! them. The endpoint refuses such a request itself, with the same code, status and words,
//! each value cut to 64 characters and `…` and with those characters escaped
//! ([`shown_id`]), as toolgate repeats any id a caller sent.
//!
//! Only that mismatch is answered here: a request whose `Mcp-Method` header is missing or
//! names another method, whose `Mcp-Name` is given twice or is not text, or whose encoded
//! value (`=?base64?…?=`) does not decode, goes to rmcp, whose refusals reach the caller
//! escaped and cut too ([`super::refusal_words`]). A request without the header costs one
//! look-up in its headers.

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, ProtocolVersion};
use serde_json::Value;
use toolgate_core::error::shown_id;

use super::direct::PROTOCOL_VERSION;
use super::stateless::only;

const METHOD: &str = "mcp-method";
const NAME: &str = "mcp-name";

/// How a client writes a header value that must be encoded (SEP-2243): `=?base64?…?=`.
const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// The refusal of `message` when it is a request whose `Mcp-Name` header names another
/// value than its body: the request's id, as JSON, and the error; `None` for any other
/// message, and for one whose headers rmcp refuses for another reason.
pub(super) fn mismatch(
    headers: &http::HeaderMap,
    message: &ClientJsonRpcMessage,
) -> Option<(Value, ErrorData)> {
    if !headers.contains_key(NAME) {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    // rmcp checks the standard headers from the revision that brought them on, comparing
    // versions as it does.
    let version = headers.get(PROTOCOL_VERSION)?.to_str().ok()?;
    if version < ProtocolVersion::STANDARD_HEADERS.as_str() {
        return None;
    }
    let expected = named_in_body(&request.request)?;
    // rmcp looks at `Mcp-Method` first.
    if only(headers, METHOD)? != request.request.method() {
        return None;
    }
    let named = decoded(only(headers, NAME)?)?;
    if named == expected {
        return None;
    }
    let error = ErrorData::new(
        ErrorCode::HEADER_MISMATCH,
        format!(
            "Mcp-Name header `{}` does not match body value `{}`",
            shown_id(&named),
            shown_id(expected)
        ),
        None,
    );
    Some((request.id.clone().into_json_value(), error))
}

/// What `request`'s `Mcp-Name` header must name, for a method that has one.
fn named_in_body(request: &ClientRequest) -> Option<&str> {
    Some(match request {
        ClientRequest::CallToolRequest(r) => r.params.name.as_ref(),
        ClientRequest::GetPromptRequest(r) => &r.params.name,
        ClientRequest::ReadResourceRequest(r) => &r.params.uri,
        ClientRequest::SubscribeRequest(r) => &r.params.uri,
        ClientRequest::UnsubscribeRequest(r) => &r.params.uri,
        ClientRequest::GetTaskRequest(r) => &r.params.task_id,
        ClientRequest::UpdateTaskRequest(r) => &r.params.task_id,
        ClientRequest::CancelTaskRequest(r) => &r.params.task_id,
        _ => return None,
    })
}

/// A header's value as its client meant it: decoded when it is written `=?base64?…?=`;
/// `None` when that does not decode to text.
fn decoded(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some(encoded) = value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|inner| inner.strip_suffix(BASE64_SUFFIX))
    else {
        return Some(value.into());
    };
    let bytes = BASE64_STANDARD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok().map(Into::into)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(method: &str, params: Value) -> ClientJsonRpcMessage {
        let params = {
            let mut params = params;
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            });
            params
        };
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        serde_json::from_value(body).expect("a request")
    }

    fn headers(version: &str, method: &str, name: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(PROTOCOL_VERSION, version.parse().unwrap());
        headers.insert(METHOD, method.parse().unwrap());
        headers.insert(NAME, name.parse().unwrap());
        headers
    }

    #[test]
    fn a_task_id_the_header_does_not_name_is_refused_cut_and_escaped() {
        let id = format!("\u{1b}[2J{}", "t".repeat(5000));
        let get = message("tasks/get", json!({"taskId": id}));
        let (answered_to, error) =
            mismatch(&headers("2026-07-28", "tasks/get", "x"), &get).expect("refused");
        assert_eq!(answered_to, json!(7));
        assert_eq!(error.code, ErrorCode::HEADER_MISMATCH);
        let shown = format!("\\u{{1b}}[2J{}…", "t".repeat(60));
        assert_eq!(
            error.message,
            format!("Mcp-Name header `x` does not match body value `{shown}`")
        );
    }

    #[test]
    fn an_encoded_header_is_compared_decoded_and_shown_escaped() {
        let get = message("tasks/get", json!({"taskId": "t-1"}));
        let encoded = format!("=?base64?{}?=", BASE64_STANDARD.encode("t-1"));
        assert!(mismatch(&headers("2026-07-28", "tasks/get", &encoded), &get).is_none());
        let other = format!("=?base64?{}?=", BASE64_STANDARD.encode("t-1\n\u{202e}"));
        let (_, error) = mismatch(&headers("2026-07-28", "tasks/get", &other), &get).unwrap();
        assert!(
            error
                .message
                .starts_with("Mcp-Name header `t-1\\n\\u{202e}`"),
            "{}",
            error.message
        );
    }

    #[test]
    fn what_rmcp_refuses_for_another_reason_or_does_not_check_is_left_to_it() {
        let call = message("tools/call", json!({"name": "count", "arguments": {}}));
        // Matching: nothing to refuse.
        assert!(mismatch(&headers("2026-07-28", "tools/call", "count"), &call).is_none());
        // A revision without the standard headers.
        assert!(mismatch(&headers("2025-11-25", "tools/call", "other"), &call).is_none());
        // A method header naming another method: rmcp refuses that first.
        assert!(mismatch(&headers("2026-07-28", "tools/list", "other"), &call).is_none());
        // A value that does not decode.
        assert!(mismatch(&headers("2026-07-28", "tools/call", "=?base64?!?="), &call).is_none());
        // A method without a name.
        let list = message("tools/list", json!({}));
        assert!(mismatch(&headers("2026-07-28", "tools/list", "x"), &list).is_none());
    }

    #[test]
    fn a_tool_prompt_or_resource_the_header_does_not_name_is_refused() {
        for (method, params) in [
            ("tools/call", json!({"name": "count", "arguments": {}})),
            ("prompts/get", json!({"name": "count"})),
            ("resources/read", json!({"uri": "file:///count"})),
        ] {
            let request = message(method, params);
            let refused = mismatch(&headers("2026-07-28", method, "other"), &request);
            assert!(refused.is_some(), "{method}");
        }
    }
}
