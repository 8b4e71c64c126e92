//! What toolgate reads from a request's `_meta`, checked as the request is read.
//!
//! rmcp refuses a 2026-07-28 request whose protocol version or client capabilities in
//! `_meta` are missing or malformed. Two more keys change what a caller is sent, and rmcp
//! reads each of them as absent when its value is of the wrong kind: a log level of
//! `"loud"` would leave the caller without the log messages it asked for, a progress
//! token of `true` without its progress, and nothing would tell it why. Such a request is
//! refused, `-32602` (invalid params) naming the key and what it takes, as
//! `logging/setLevel` with a level of `"loud"` is, and it does not run.
//!
//! The refusal is made where each transport reads a client's message, before anything
//! else sees it (`request_body.rs` over streamable HTTP, as rmcp answers a request whose
//! required `_meta` is malformed: 400; `stdio.rs` over stdio): the requests the HTTP
//! endpoint answers itself and those it hands to rmcp are checked alike.

use rmcp::model::{ClientJsonRpcMessage, ErrorData, GetMeta, RequestMetaObject};
use serde_json::Value;

use super::message::kind_of;
use super::params::level_problem;

/// The level of the log messages a 2026-07-28 caller wants during this request.
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The token the caller's progress notifications for this request are to carry.
const PROGRESS_TOKEN: &str = "progressToken";

/// The refusal of `message` when it is a request whose `_meta` gives a log level or a
/// progress token toolgate cannot act on: the request's id, as JSON, and the error.
pub(super) fn refusal_of(message: &ClientJsonRpcMessage) -> Option<(Value, ErrorData)> {
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    let error = refusal(request.request.method(), request.request.get_meta())?;
    Some((request.id.clone().into_json_value(), error))
}

/// The answer to a request of `method` whose `meta` gives a log level or a progress token
/// toolgate cannot act on; `None` when both are absent (or null) or usable.
fn refusal(method: &str, meta: &RequestMetaObject) -> Option<ErrorData> {
    let level = meta.get(LOG_LEVEL).filter(|level| !level.is_null());
    let problem = level
        .and_then(|level| level_problem(&format!("_meta[\"{LOG_LEVEL}\"]"), level))
        .map(|problem| format!("{problem}: send one of them, or leave it out for no log messages"))
        .or_else(|| progress_token_problem(meta.get(PROGRESS_TOKEN)?))?;
    Some(ErrorData::invalid_params(
        format!("malformed `{method}` request: {problem}"),
        None,
    ))
}

/// What is wrong with `token` as a progress token: rmcp takes a string or a whole number
/// that fits in 64 bits, and sends no progress for anything else.
fn progress_token_problem(token: &Value) -> Option<String> {
    let usable = match token {
        Value::Null | Value::String(_) => true,
        Value::Number(number) => number.is_i64(),
        _ => false,
    };
    (!usable).then(|| {
        let kind = match token {
            Value::Number(number) if number.is_u64() => "a number out of range",
            other => kind_of(other),
        };
        format!(
            "`_meta.{PROGRESS_TOKEN}` must be a string or a whole number from -9223372036854775808 to 9223372036854775807, not {kind}: send one, or leave it out for no progress notifications"
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(value: Value) -> RequestMetaObject {
        serde_json::from_value(value).expect("an object")
    }

    #[test]
    fn a_usable_or_absent_level_and_token_pass() {
        for usable in [
            json!({}),
            json!({LOG_LEVEL: "debug", PROGRESS_TOKEN: "p"}),
            json!({LOG_LEVEL: "emergency", PROGRESS_TOKEN: -7}),
            json!({LOG_LEVEL: null, PROGRESS_TOKEN: null}),
        ] {
            assert!(
                refusal("tools/call", &meta(usable.clone())).is_none(),
                "{usable}"
            );
        }
    }

    #[test]
    fn a_level_or_token_of_the_wrong_kind_is_named_with_what_to_send() {
        let cases = [
            (
                json!({LOG_LEVEL: "loud"}),
                "`_meta[\"io.modelcontextprotocol/logLevel\"]` must be one of debug, info, notice, warning, error, critical, alert, emergency, not \"loud\"",
            ),
            (json!({LOG_LEVEL: 3}), "logLevel\"]` must be one of debug"),
            (
                json!({PROGRESS_TOKEN: true}),
                "`_meta.progressToken` must be a string or a whole number",
            ),
            (
                json!({PROGRESS_TOKEN: 1.5}),
                "not a number with a fractional part",
            ),
            (
                json!({PROGRESS_TOKEN: u64::MAX}),
                "not a number out of range",
            ),
            (json!({PROGRESS_TOKEN: {}}), "not an object"),
        ];
        for (given, expected) in cases {
            let error = refusal("tools/call", &meta(given.clone())).expect("refused");
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(
                error
                    .message
                    .starts_with("malformed `tools/call` request: "),
                "{given}: {}",
                error.message
            );
            assert!(
                error.message.contains(expected),
                "{given}: {}",
                error.message
            );
        }
    }
}
