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
//!
//! Three places read an upstream's messages — a stdio upstream's output
//! ([`stdio_output`](super::stdio_output)), the stream of a `tools/call` toolgate POSTs
//! itself ([`direct`](super::direct)), and the response streams of what rmcp sends over
//! HTTP ([`request_streams`](super::request_streams)) — and each hands a message that does
//! not read to [`Unreadables::take`], which counts it, tells of it and decides what comes
//! in its place. Only where it came on ([`CameOn`]) differs: a stdio upstream's output
//! carries the answers of all its requests, a request's stream only its own, and the
//! standalone stream none.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::time::Instant;

use super::message_head::scan_head;
use super::relay::{Dropped, Routes};

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

/// Where a message that does not read came on, which says whose answer it may be.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CameOn<'a> {
    /// A stdio upstream's output, which carries the answers of all its requests: it may
    /// answer any request it names.
    Connection,
    /// The response stream of request `id`, which carries that request's answer and no
    /// other: it may answer that request, and only when it names it. An answer naming
    /// another request is not that one's — a stream can be another caller's call's — and
    /// one naming none is not told to be this one's either: the stream carries the
    /// upstream's notifications and requests too, and one of those that does not read
    /// must not fail a call whose answer is still to come.
    StreamOf(&'a RequestId),
    /// A stream that is no request's (the standalone stream, or a resume whose stream
    /// cannot be told): it answers nothing.
    NoRequest,
}

/// How often an upstream's answers that cannot be read are warned of, at most.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What becomes of the messages of one upstream connection that do not read: each is
/// counted, and one that answers a request is answered in its place and warned of — at
/// most once per [`WARN_EVERY`] with how many more came since, the rest at `debug`, so an
/// upstream that writes thousands a second gets one warning, not thousands.
pub(crate) struct Unreadables {
    /// The upstream's channel, where they are counted.
    routes: Arc<Routes>,
    /// When an answer that could not be read was last warned of, and how many have come
    /// since.
    warned: Mutex<Option<(Instant, u64)>>,
}

impl Unreadables {
    /// The messages that do not read of a connection of the channel of `routes`.
    pub(crate) fn new(routes: Arc<Routes>) -> Self {
        Unreadables {
            routes,
            warned: Mutex::new(None),
        }
    }

    /// The upstream's channel, where what is dropped is counted.
    pub(crate) fn routes(&self) -> &Arc<Routes> {
        &self.routes
    }

    /// What comes in place of `text`, a message of the upstream that does not read
    /// (`error`: what reading it said; `None` when it is not UTF-8), which came on
    /// `came_on`: the error answer to the request it answers ([`in_place_of`]), when it
    /// is a response naming that request's id ([`answered`]) and `came_on` carries that
    /// request's answer; `None` when it is nobody's answer, and is dropped. Either way it
    /// is counted ([`Dropped::Unreadable`]).
    pub(crate) fn take(
        &self,
        text: &[u8],
        error: Option<&serde_json::Error>,
        came_on: CameOn<'_>,
    ) -> Option<ServerJsonRpcMessage> {
        let why = match error {
            Some(error) => why(text, error),
            None => "it is not UTF-8".to_owned(),
        };
        self.routes.dropped(Dropped::Unreadable);
        let id = answered(text).filter(|id| match came_on {
            CameOn::Connection => true,
            CameOn::StreamOf(own) => id == own,
            CameOn::NoRequest => false,
        });
        let Some(id) = id else {
            tracing::debug!(
                server = %self.routes.server(),
                why,
                "an MCP server sent a message that cannot be read, and is no answer to tell whose: dropped"
            );
            return None;
        };
        self.warn(&why);
        Some(in_place_of(id, &why))
    }

    /// Warns that the upstream answered with a message that cannot be read — once per
    /// [`WARN_EVERY`], saying how many more came since; the rest at `debug`.
    fn warn(&self, why: &str) {
        let now = Instant::now();
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        match *warned {
            Some((at, since)) if now.duration_since(at) < WARN_EVERY => {
                *warned = Some((at, since + 1));
                tracing::debug!(server = %self.routes.server(), why, "an MCP server answered a request with a message that cannot be read");
            }
            last => {
                *warned = Some((now, 0));
                tracing::warn!(
                    server = %self.routes.server(),
                    why,
                    more_since_last_warning = last.map_or(0, |(_, since)| since),
                    "an MCP server answered a request with a message that cannot be read: the request is answered with an error, the connection goes on"
                );
            }
        }
    }
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
        assert!(deep.contains("nested 128 levels deep or more"), "{deep}");
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

    /// What comes in place of `text`, which does not read, when it came on `came_on`.
    fn taken(unreadables: &Unreadables, text: &str, came_on: CameOn<'_>) -> Option<RequestId> {
        let error = serde_json::from_str::<ServerJsonRpcMessage>(text).unwrap_err();
        let answer = unreadables.take(text.as_bytes(), Some(&error), came_on)?;
        let JsonRpcMessage::Error(error) = answer else {
            panic!("an error answered in place: {answer:?}");
        };
        assert!(why_answered(&error.error).is_some());
        error.id
    }

    #[test]
    fn a_message_that_cannot_be_read_answers_only_a_request_whose_answers_come_where_it_came() {
        let unreadables = Unreadables::new(Arc::new(Routes::new("x")));
        let (seven, eight) = (RequestId::Number(7), RequestId::Number(8));
        let seventh = r#"{"jsonrpc":"2.0","id":7,"result":{"v":1e999}}"#;
        assert_eq!(
            taken(&unreadables, seventh, CameOn::Connection),
            Some(seven.clone())
        );
        assert_eq!(
            taken(&unreadables, seventh, CameOn::StreamOf(&seven)),
            Some(seven.clone())
        );
        // On another request's stream, or on one that is no request's: nobody's.
        assert_eq!(taken(&unreadables, seventh, CameOn::StreamOf(&eight)), None);
        assert_eq!(taken(&unreadables, seventh, CameOn::NoRequest), None);
        // Naming no request, on the request's own stream: not told to be its answer.
        let nameless = r#"{"jsonrpc":"2.0","result":{"v":1e999}}"#;
        assert_eq!(
            taken(&unreadables, nameless, CameOn::StreamOf(&seven)),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn answers_that_cannot_be_read_are_warned_of_once_an_interval_not_once_each() {
        let unreadables = Unreadables::new(Arc::new(Routes::new("x")));
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"v":1e999}}"#;
        for _ in 0..3 {
            assert!(taken(&unreadables, text, CameOn::Connection).is_some());
        }
        let (at, since) = unreadables.warned.lock().unwrap().expect("warned");
        assert_eq!(since, 2, "one warning; the two after it at debug");
        tokio::time::advance(WARN_EVERY).await;
        assert!(taken(&unreadables, text, CameOn::Connection).is_some());
        let (again, since) = unreadables.warned.lock().unwrap().expect("warned");
        assert!(again > at && since == 0, "warned again after an interval");
    }
}
