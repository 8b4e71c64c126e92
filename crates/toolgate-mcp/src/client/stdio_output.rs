//! The messages a stdio upstream writes to its stdout, one a line, each read once.
//!
//! rmcp's transport reads each line as a message and drops one it cannot read: a call
//! whose answer that was waits out its whole deadline. Here a line is read the way rmcp
//! reads it ([`message::read`](super::message::read), which gives rmcp's message or rmcp's
//! error), once; only a line that fails is looked at again. When it is an answer naming
//! its request's `id`, that request is answered in its place with an error saying why
//! ([`unreadable`](super::unreadable)), logged and counted, and the connection goes on.
//! Any other line that does not read is what rmcp would make of it: a notification of a
//! method rmcp ignores is ignored; anything else is dropped and counted, and one that is
//! JSON but no message's shape is refused to the upstream as rmcp refuses it.

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::ErrorData;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::JsonRpcMessageCodec;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

use super::message;
use super::message_head::MAX_MESSAGE_BYTES;
use super::relay::Routes;
use super::unreadable::{CameOn, Unreadables};

/// The most of a line's buffer kept between messages: one message of megabytes does not
/// hold its megabytes for as long as the connection lasts.
const KEPT_LINE_CAPACITY: usize = 64 * 1024;

/// What comes next from the upstream.
pub(crate) enum Next {
    /// A message, read or answered in place of an answer that could not be.
    Message(RxJsonRpcMessage<RoleClient>),
    /// A line of JSON that is no message's shape: rmcp answers the upstream with this
    /// error (no `id`: it cannot be told).
    Refuse(TxJsonRpcMessage<RoleClient>),
}

/// The messages of the lines of `R`, a stdout whose lines are bounded
/// ([`BoundedLines`](super::stdio::BoundedLines)).
pub(crate) struct Messages<R> {
    read: BufReader<R>,
    /// The line read so far: kept across reads, so a read given up (the transport's
    /// receive is raced against sending) loses nothing.
    line: Vec<u8>,
    /// What becomes of a line that does not read: counted, and answered in place when
    /// it answers a request.
    unreadables: Unreadables,
}

impl<R: AsyncRead + Unpin> Messages<R> {
    pub(crate) fn new(read: R, routes: Arc<Routes>) -> Self {
        Messages {
            read: BufReader::new(read),
            line: Vec::new(),
            unreadables: Unreadables::new(routes),
        }
    }

    /// The next message; `None` at the end of the stream, or when it fails. Cancel safe.
    pub(crate) async fn next(&mut self) -> Option<Next> {
        loop {
            match self.read.read_until(b'\n', &mut self.line).await {
                Ok(_) if self.line.last() == Some(&b'\n') => {}
                // The end of the stream: what is left is no whole message.
                Ok(_) => return None,
                Err(e) => {
                    tracing::error!(server = %self.unreadables.routes().server(), "cannot read the MCP server's output: {e}");
                    return None;
                }
            }
            let next = self.decode();
            self.line.clear();
            // A long message's buffer is not kept for the connection's life.
            self.line.shrink_to(KEPT_LINE_CAPACITY);
            if let Some(next) = next {
                return Some(next);
            }
        }
    }

    /// The message of the line read, as rmcp reads it; or, when it does not read, what is
    /// to come in its place (`None`: nothing, it is dropped).
    fn decode(&self) -> Option<Next> {
        let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.is_empty() {
            return None;
        }
        let error = match std::str::from_utf8(line) {
            Ok(text) => match message::read(text) {
                Ok(message) => return Some(Next::Message(message)),
                Err(error) => Some(error),
            },
            Err(_) => None,
        };
        self.unreadable(line, error)
    }

    /// What comes in place of `line`, which did not read (`error`: why, when it was UTF-8).
    fn unreadable(&self, line: &[u8], error: Option<serde_json::Error>) -> Option<Next> {
        if self.line.len() >= MAX_MESSAGE_BYTES {
            // A line cut short at the limit by `BoundedLines`, which answered in its place
            // what it could and said so.
            return None;
        }
        // A notification of a method rmcp ignores, read as rmcp reads it, is ignored.
        let mut codec = JsonRpcMessageCodec::<RxJsonRpcMessage<RoleClient>>::default();
        if let Ok(None) = codec.decode_eof(&mut BytesMut::from(line)) {
            return None;
        }
        // The output carries the answers of all the upstream's requests.
        if let Some(answer) = self
            .unreadables
            .take(line, error.as_ref(), CameOn::Connection)
        {
            return Some(Next::Message(answer));
        }
        // rmcp refuses JSON that is no message's shape with an error without an `id`.
        error.filter(serde_json::Error::is_data).map(|_| {
            Next::Refuse(TxJsonRpcMessage::<RoleClient>::error(
                ErrorData::invalid_request("Invalid request", None),
                None,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use futures::FutureExt;
    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
    use rmcp::model::{JsonRpcMessage, RequestId};

    use super::*;
    use crate::client::relay::UNATTRIBUTED;
    use crate::client::unreadable;

    /// Counts the messages counted as unreadable ([`UNATTRIBUTED`], `kind` `unreadable`).
    #[derive(Default)]
    struct Unreadable(Arc<AtomicU64>);

    impl metrics::Recorder for Unreadable {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let unreadable = key
                .labels()
                .any(|label| label.key() == "kind" && label.value() == "unreadable");
            if key.name() == UNATTRIBUTED && unreadable {
                Counter::from_arc(Arc::clone(&self.0))
            } else {
                Counter::noop()
            }
        }

        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }

        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    /// Everything that comes of `text`'s lines, and how many were counted as unreadable.
    fn read_all(text: &[u8]) -> (Vec<Next>, u64) {
        let recorder = Unreadable::default();
        let read = metrics::with_local_recorder(&recorder, || {
            let mut messages = Messages::new(text, Arc::new(Routes::new("x")));
            let mut read = Vec::new();
            // The whole text is there: every read completes at once.
            while let Some(next) = messages.next().now_or_never().expect("read at once") {
                read.push(next);
            }
            read
        });
        (read, recorder.0.load(Ordering::SeqCst))
    }

    /// The id and the `why` of an error answered in place of an answer.
    fn answered_in_place(next: &Next) -> (Option<RequestId>, String) {
        let Next::Message(JsonRpcMessage::Error(error)) = next else {
            panic!("an error answered in place");
        };
        let why = unreadable::why_answered(&error.error).expect("why");
        (error.id.clone(), why.to_owned())
    }

    #[test]
    fn an_answer_that_cannot_be_read_is_answered_with_an_error_in_its_place_and_the_lines_after_it_pass()
     {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{{\"structuredContent\":{}{}}}}}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let text = [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"v":1e999}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":"two","result":{"content":[{"type":"text","text":"a\ud800b"}]}}"#,
            "\r\n",
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":"notint","message":{"obj":1}}}"#,
            "\n",
            &deep,
            r#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#,
            "\n",
        ]
        .concat();
        let (read, unreadable) = read_all(text.as_bytes());
        assert_eq!(
            read.len(),
            5,
            "four answered in place, and the answer after them"
        );
        let (id, why) = answered_in_place(&read[0]);
        assert_eq!(id, Some(RequestId::Number(1)));
        assert!(why.starts_with("a number too large to read"), "{why}");
        let (id, why) = answered_in_place(&read[1]);
        assert_eq!(id, Some(RequestId::String("two".into())));
        assert!(why.contains("half a UTF-16 surrogate pair"), "{why}");
        let (id, why) = answered_in_place(&read[2]);
        assert_eq!(id, Some(RequestId::Number(3)));
        assert_eq!(why, "`error.code` must be a whole number");
        let (id, why) = answered_in_place(&read[3]);
        assert_eq!(id, Some(RequestId::Number(4)));
        assert!(why.contains("nested 128 levels deep or more"), "{why}");
        assert!(
            matches!(&read[4], Next::Message(JsonRpcMessage::Response(r)) if r.id == RequestId::Number(5))
        );
        assert_eq!(unreadable, 4, "each counted");
    }

    #[test]
    fn a_message_that_cannot_be_read_and_answers_no_request_it_names_is_dropped_and_counted() {
        let text = [
            // A notification, an answer naming no id, and one naming it twice.
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1e999}}"#,
            r#"{"jsonrpc":"2.0","result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"v":1e999}}"#,
            "not json",
            // JSON of no message's shape: refused to the upstream, as rmcp refuses it.
            r#"{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#,
            "",
        ]
        .join("\n");
        let (read, unreadable) = read_all(text.as_bytes());
        assert_eq!(read.len(), 2, "the refusal and the answer");
        let Next::Refuse(JsonRpcMessage::Error(refusal)) = &read[0] else {
            panic!("a refusal");
        };
        assert_eq!(refusal.id, None);
        assert!(matches!(
            &read[1],
            Next::Message(JsonRpcMessage::Response(_))
        ));
        assert_eq!(unreadable, 5);
    }
}
