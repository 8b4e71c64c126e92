//! rmcp's refusals of a request, in words that repeat what a caller sent cut and escaped.
//!
//! rmcp checks the standard headers of 2026-07-28 against the request's body (`Mcp-Method`
//! against its method, `MCP-Protocol-Version` against the version its `_meta` names, an
//! `Mcp-Param-*` against the argument it names) and refuses a mismatch with `-32020`, its
//! message repeating both values whole: a header of 50,000 characters, or a version of a
//! megabyte in the body, comes back as it came, line breaks and terminal escapes included;
//! so does its refusal of an `Mcp-Name` header that names another tool, prompt, resource or
//! task than the body (both values, the header's decoded when it was `=?base64?…?=`). Every
//! refusal rmcp answers with a JSON-RPC error passes through [`cut`], which escapes what
//! hides in its message (control characters, line breaks, marks that turn text around) and
//! cuts it to [`MOST_CHARS`] characters. A message that needs neither is left as it is.

use std::convert::Infallible;

use bytes::Bytes;
use futures::FutureExt;
use http_body::Body;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use toolgate_core::error::shown_text;

/// The most characters of a refusal's message repeated: room for rmcp's words and two
/// values each cut as toolgate cuts an id.
const MOST_CHARS: usize = 256;

/// Whether an answer of `status` with `headers` may be one of rmcp's refusals of a request
/// as sent: a 4xx in JSON.
pub(super) fn may_repeat_the_request(status: http::StatusCode, headers: &http::HeaderMap) -> bool {
    status.is_client_error()
        && headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/json"))
}

/// `body`, a refusal rmcp wrote, with its JSON-RPC error's message escaped and cut where it
/// needs to be; as it was when it is not such a refusal, or not whole in memory.
pub(super) fn cut(body: BoxBody<Bytes, Infallible>) -> BoxBody<Bytes, Infallible> {
    let bytes = match in_memory(body) {
        Ok(bytes) => bytes,
        Err(body) => return body,
    };
    let reworded = reworded(&bytes).map_or(bytes, Bytes::from);
    Full::new(reworded).boxed()
}

/// The bytes of `body` when it is whole in memory, as rmcp's refusals are (of a known size,
/// ready at once) — whatever their size, since reading them costs no wait and no memory
/// they do not hold already; `body` itself when it is not.
pub(super) fn in_memory(
    body: BoxBody<Bytes, Infallible>,
) -> Result<Bytes, BoxBody<Bytes, Infallible>> {
    if body.size_hint().exact().is_none() {
        return Err(body);
    }
    match body.collect().now_or_never() {
        Some(Ok(collected)) => Ok(collected.to_bytes()),
        // Not ready at once after all: nothing of it can be passed on.
        None => Ok(Bytes::new()),
    }
}

/// The refusal `bytes` with its message escaped and cut, when it needed to be.
fn reworded(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut refusal: Value = serde_json::from_slice(bytes).ok()?;
    let message = refusal.get_mut("error")?.get_mut("message")?;
    let said = message.as_str()?;
    let shown = shown_text(said, MOST_CHARS);
    if shown == said {
        return None;
    }
    *message = Value::String(shown.into_owned());
    serde_json::to_vec(&refusal).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(value: &Value) -> BoxBody<Bytes, Infallible> {
        Full::new(Bytes::from(value.to_string())).boxed()
    }

    fn read(body: BoxBody<Bytes, Infallible>) -> Value {
        let bytes = body
            .collect()
            .now_or_never()
            .expect("whole")
            .expect("read")
            .to_bytes();
        serde_json::from_slice(&bytes).expect("JSON")
    }

    #[test]
    fn a_refusal_repeating_a_long_hostile_value_is_cut_and_escaped() {
        let sent = format!("tools/list\n\u{1b}[2J\u{202e}{}", "M".repeat(50_000));
        let refusal = json!({
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": -32020,
                "message": format!("Mcp-Method header `{sent}` does not match body method `tools/list`"),
            },
        });

        let answered = read(cut(body(&refusal)));

        let message = answered["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Mcp-Method header `tools/list\\n\\u{1b}[2J\\u{202e}MMM"),
            "{message}"
        );
        assert!(message.ends_with('…'), "{message}");
        assert!(message.chars().count() < 300, "{}", message.len());
        assert_eq!(answered["error"]["code"], -32020);
        assert_eq!(answered["id"], 7);
    }

    #[test]
    fn a_refusal_of_more_than_sixteen_mebibytes_is_cut_too() {
        // A host may take request bodies larger than rmcp's default limit, and a task id as
        // large as the body.
        let id = "t".repeat(17 * 1024 * 1024);
        let refusal = json!({
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": -32020,
                "message": format!("Mcp-Name header `x` does not match body value `{id}`"),
            },
        });

        let answered = read(cut(body(&refusal)));

        let message = answered["error"]["message"].as_str().unwrap();
        assert!(
            message.chars().count() <= MOST_CHARS + 1,
            "{}",
            message.len()
        );
        assert!(message.ends_with("ttt…"), "{}", &message[..80]);
    }

    #[test]
    fn a_refusal_in_plain_words_is_left_as_it_is() {
        let refusal = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32600, "message": "Mcp-Method header is required"},
        });

        assert_eq!(read(cut(body(&refusal))), refusal);
    }
}
