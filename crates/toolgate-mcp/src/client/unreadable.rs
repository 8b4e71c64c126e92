//! An upstream's message that does not read, and the answer toolgate gives in its place.
//!
//! rmcp drops a message it cannot read (at debug level), so a call whose answer it was
//! waits out its whole deadline, though the answer came. Such a message may be JSON whose
//! values no reader is bound to take (RFC 8259: a number too large for a 64-bit float,
//! half a UTF-16 surrogate pair), JSON nested deeper than is read, or a response of the
//! wrong shape (an error whose `code` is a string). When it is a response whose top-level
//! `id` it names once — read from its top-level keys without parsing it
//! ([`members`](crate::json_scan::members)) — that request alone is answered in its place
//! with an error saying why, in words ([`in_place_of`]): the call fails at once, and the
//! other calls on the connection go on. Anything else is nobody's answer, and is dropped
//! as before.
//!
//! This is the path of a message that failed to read, and only of those: a message is
//! read once, and scanned again only when that failed.

use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use serde_json::Value;

use super::message_head::scan_head;

/// The key of the `data` of an error toolgate answers in place of an answer that cannot
/// be read; its value says why, in words.
pub(crate) const UNREADABLE_ANSWER: &str = "io.toolgate/unreadableAnswer";

/// The request that `text`, a message that does not read, answers: `Some` when it is a
/// response (a `result` or an `error`, no `method`) whose top-level `id` it names once, a
/// string or a whole number.
pub(crate) fn answered(text: &[u8]) -> Option<RequestId> {
    let head = scan_head(text)?;
    if !head.response || head.method.is_some() {
        return None;
    }
    serde_json::from_value(head.id?).ok()
}

/// Why `text` does not read as a message, in words that repeat none of its content
/// (they go to logs and to the caller): `error` is what reading it said.
pub(crate) fn why(text: &[u8], error: &serde_json::Error) -> String {
    if error.is_data() {
        // JSON, but not of a message's shape: said by the field that is wrong.
        return serde_json::from_slice::<Value>(text)
            .map_or_else(|_| "it is not a JSON-RPC message".to_owned(), |m| shape(&m));
    }
    let said = error.to_string();
    if let Some(position) = said.strip_prefix("number out of range") {
        return format!(
            "a number too large to read{position}: numbers must be within the range of a 64-bit float, about ±1.8e308"
        );
    }
    toolgate_core::error::in_json_words(&said)
}

/// What is wrong with `message`, JSON rmcp does not read as a JSON-RPC message.
fn shape(message: &Value) -> String {
    let Value::Object(fields) = message else {
        return "a message must be a JSON object".into();
    };
    if fields.get("jsonrpc").is_none_or(|version| version != "2.0") {
        return "`jsonrpc` must be \"2.0\"".into();
    }
    if let Some(id) = fields.get("id")
        && serde_json::from_value::<RequestId>(id.clone()).is_err()
    {
        return "`id` must be a string or a whole number".into();
    }
    let error = match (fields.get("result"), fields.get("error")) {
        (Some(_), Some(_)) => {
            return "a response cannot have both a `result` and an `error`".into();
        }
        (None, Some(error)) => error,
        _ => return "it does not read as a JSON-RPC message".into(),
    };
    let Some(error) = error.as_object() else {
        return "`error` must be an object".into();
    };
    match error.get("code") {
        Some(code) if code.is_i64() || code.is_u64() => {
            if code.as_i64().and_then(|c| i32::try_from(c).ok()).is_none() {
                return "`error.code` must be a whole number from -2147483648 to 2147483647".into();
            }
        }
        _ => return "`error.code` must be a whole number".into(),
    }
    if !error.get("message").is_some_and(Value::is_string) {
        return "`error.message` must be a string".into();
    }
    "it does not read as a JSON-RPC error".into()
}

/// The error answer to request `id` in place of its answer, which could not be read
/// (`why`, in words).
pub(crate) fn in_place_of(id: RequestId, why: &str) -> ServerJsonRpcMessage {
    JsonRpcMessage::error(
        ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            format!("the answer cannot be read: {why}"),
            Some(serde_json::json!({ UNREADABLE_ANSWER: why })),
        ),
        Some(id),
    )
}

/// Why an error answered in place of an answer that could not be read says it could not
/// be: `None` when `e` is no such error.
pub(crate) fn why_answered(e: &ErrorData) -> Option<&str> {
    e.data.as_ref()?.get(UNREADABLE_ANSWER)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why `text` does not read as rmcp reads a server's message.
    fn why_not(text: &str) -> String {
        let error = serde_json::from_str::<ServerJsonRpcMessage>(text).unwrap_err();
        why(text.as_bytes(), &error)
    }

    #[test]
    fn why_a_message_does_not_read_is_said_in_words_without_its_content() {
        let number = why_not(r#"{"jsonrpc":"2.0","id":1,"result":{"v":1e999}}"#);
        assert!(number.starts_with("a number too large to read"), "{number}");
        assert!(!number.contains("999"), "{number}");
        let surrogate = why_not(r#"{"jsonrpc":"2.0","id":1,"result":{"t":"a\ud800b"}}"#);
        assert!(
            surrogate.contains("half a UTF-16 surrogate pair"),
            "{surrogate}"
        );
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"v":{}1{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let deep = why_not(&deep);
        assert!(deep.contains("nested more than 128 deep"), "{deep}");
        assert_eq!(
            why_not(r#"{"jsonrpc":"2.0","id":1,"error":{"code":"secret-x","message":"m"}}"#),
            "`error.code` must be a whole number"
        );
        assert_eq!(
            why_not(r#"{"jsonrpc":"2.0","id":1,"error":{"code":5000000000,"message":"m"}}"#),
            "`error.code` must be a whole number from -2147483648 to 2147483647"
        );
        assert_eq!(
            why_not(r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":{"secret":1}}}"#),
            "`error.message` must be a string"
        );
        assert_eq!(
            why_not(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#),
            "a response cannot have both a `result` and an `error`"
        );
        assert_eq!(
            why_not(r#"{"jsonrpc":"1.0","id":1,"result":{}}"#),
            "`jsonrpc` must be \"2.0\""
        );
    }

    #[test]
    fn only_a_response_naming_its_id_once_is_answered() {
        let answered = |text: &str| answered(text.as_bytes());
        assert_eq!(
            answered(r#"{"jsonrpc":"2.0","id":7,"result":{"v":1e999}}"#),
            Some(RequestId::Number(7))
        );
        assert_eq!(
            answered(r#"{"error":{"code":"x"},"id":"a-1","jsonrpc":"2.0"}"#),
            Some(RequestId::String("a-1".into()))
        );
        // Not responses, or whose id cannot be told.
        for text in [
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","result":{"id":3,"v":1e999}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#,
            "not json",
        ] {
            assert_eq!(answered(text), None, "{text}");
        }
    }

    #[test]
    fn the_answer_in_place_carries_the_id_and_why() {
        let answer = in_place_of(RequestId::Number(4), "a reason");
        let JsonRpcMessage::Error(error) = &answer else {
            panic!("an error: {answer:?}");
        };
        assert_eq!(error.id, Some(RequestId::Number(4)));
        assert_eq!(why_answered(&error.error), Some("a reason"));
    }
}
