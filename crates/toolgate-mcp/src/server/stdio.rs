//! MCP served over a byte stream pair (stdin and stdout): every line the client writes is
//! checked before rmcp reads it, so that what rmcp cannot read is answered rather than
//! dropped — a client waits for the answer to each of its requests, and rmcp answers none
//! to a line it cannot read (or an `Invalid request` without the request's `id`, which
//! the client cannot match to its request).
//!
//! | the line | the answer |
//! |---|---|
//! | a JSON-RPC message rmcp reads | none here: the line goes to rmcp unchanged |
//! | over [`MAX_LINE_BYTES`] | `-32600` (`-32700` when its start is not JSON), with the `id` its start names, else null; the line is read past, never held whole |
//! | not JSON | `-32700` (parse error), `id` null |
//! | nested deeper than [`MAX_DEPTH`] levels | `-32600`, with its `id` if it has one |
//! | JSON, but not a JSON-RPC message rmcp reads (a batch among them) | `-32600`, with its `id` if it has one, saying what is wrong |
//! | an invalid notification (a `method`, no `id`) | none (JSON-RPC answers no notification): it is dropped and logged |
//! | a request whose `_meta` gives a log level or a progress token of the wrong kind (`request_meta.rs`) | `-32602` (invalid params), with its `id`, naming the key and what it takes; the request does not run |
//!
//! rmcp's output goes through here too, so that an answer of toolgate's never lands in the
//! middle of a line of rmcp's: one task writes to the client, whole lines only, copying
//! rmcp's lines through as they come (nothing is held whole).

use std::io;
use std::time::Duration;

use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use serde_json::Value;
// `duplex` and the `*Ext` traits are tokio's `io-util`, which rmcp's `transport-io`
// (serving over a byte stream at all) turns on.
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::json_scan::{members, skip_space, unrepresentable};

/// The longest line read from the client, its newline included: rmcp's own limit, so every
/// line passed on is one rmcp reads whole.
const MAX_LINE_BYTES: usize = DEFAULT_MAX_LINE_LENGTH;

/// How deep objects and arrays may nest in a message: as deep as serde_json reads (it
/// refuses the 128th level), so a message within it is one rmcp reads.
const MAX_DEPTH: usize = 127;

/// How much of the start of a line over the limit is kept, to find its `id` in.
const HEAD_BYTES: usize = 4096;

/// The size of the pipes between rmcp and the filter, and of each read from them.
const CHUNK_BYTES: usize = 64 * 1024;

/// Answers of toolgate's waiting to be written: a client that sends bad lines without
/// reading its answers is slowed down, not buffered for.
const ANSWERS_QUEUED: usize = 16;

/// How long the output may take to be written out once rmcp is done.
const DRAIN: Duration = Duration::from_secs(5);

/// JSON-RPC: the line is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the line is JSON but not a valid request.
const INVALID_REQUEST: i64 = -32600;

/// The filter between a client's byte streams and rmcp: the two tasks that read the
/// client's lines and write to it.
pub(super) struct LineFilter {
    reading: JoinHandle<()>,
    writing: JoinHandle<()>,
}

impl LineFilter {
    /// Starts filtering `read` (the client's lines) and `write` (to the client); the ends
    /// rmcp reads from and writes to.
    pub(super) fn start<R, W>(read: R, write: W) -> (Self, DuplexStream, DuplexStream)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (to_rmcp, rmcp_reads) = tokio::io::duplex(CHUNK_BYTES);
        let (rmcp_writes, from_rmcp) = tokio::io::duplex(CHUNK_BYTES);
        let (answers, answered) = mpsc::channel(ANSWERS_QUEUED);
        let reading = tokio::spawn(async move {
            if let Err(error) = read_lines(read, to_rmcp, answers).await {
                tracing::debug!("stdio: reading the client's messages ended: {error}");
            }
        });
        let writing = tokio::spawn(async move {
            if let Err(error) = write_lines(write, from_rmcp, answered).await {
                tracing::debug!("stdio: writing to the client ended: {error}");
            }
        });
        (LineFilter { reading, writing }, rmcp_reads, rmcp_writes)
    }

    /// Once rmcp is done with the connection: stops reading and waits (a little) until
    /// everything for the client is written.
    pub(super) async fn finish(self) {
        self.reading.abort();
        let _ = self.reading.await;
        let mut writing = self.writing;
        if tokio::time::timeout(DRAIN, &mut writing).await.is_err() {
            tracing::warn!("stdio: the output to the client did not drain; dropped");
            writing.abort();
        }
    }
}

/// Reads the client's lines from `read`: each line rmcp reads goes to `to_rmcp`
/// unchanged; each other line is answered through `answers` (or dropped, for a
/// notification).
async fn read_lines<R>(
    read: R,
    mut to_rmcp: DuplexStream,
    answers: mpsc::Sender<Vec<u8>>,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
{
    let mut read = BufReader::with_capacity(CHUNK_BYTES, read);
    let mut line = Vec::new();
    // The bytes skipped so far of a line over the limit being read past.
    let mut skipping: Option<u64> = None;
    loop {
        let available = read.fill_buf().await?;
        if available.is_empty() {
            if !line.is_empty() {
                tracing::debug!(
                    bytes = line.len(),
                    "stdio: the input ended in the middle of a line; it is dropped"
                );
            }
            return Ok(());
        }
        let newline = memchr::memchr(b'\n', available);
        let take = newline.map_or(available.len(), |at| at + 1);
        if let Some(skipped) = skipping.as_mut() {
            *skipped += take as u64;
            if newline.is_some() {
                tracing::warn!(
                    bytes = *skipped,
                    limit = MAX_LINE_BYTES,
                    "stdio: read past a message over the limit"
                );
                skipping = None;
            }
            read.consume(take);
            continue;
        }
        if line.len() + take > MAX_LINE_BYTES {
            let skipped = (line.len() + take) as u64;
            // What was held of the line is let go of, but for its start.
            let mut head = std::mem::take(&mut line);
            head.truncate(HEAD_BYTES);
            let more = HEAD_BYTES.saturating_sub(head.len()).min(take);
            head.extend_from_slice(&available[..more]);
            read.consume(take);
            // The answer goes out at once: the rest of the line may be long in coming.
            answer(&answers, oversized(&head)).await?;
            if newline.is_some() {
                tracing::warn!(
                    limit = MAX_LINE_BYTES,
                    "stdio: read past a message over the limit"
                );
            } else {
                skipping = Some(skipped);
            }
            continue;
        }
        line.extend_from_slice(&available[..take]);
        read.consume(take);
        if newline.is_none() {
            continue;
        }
        match check(&line) {
            Checked::Pass => to_rmcp.write_all(&line).await?,
            Checked::Skip => {}
            Checked::Answer(error) => answer(&answers, error).await?,
        }
        line.clear();
        // A long message does not keep its room for the rest of the session.
        line.shrink_to(CHUNK_BYTES);
    }
}

/// Queues `error` for the writer; fails once the writer is gone.
async fn answer(answers: &mpsc::Sender<Vec<u8>>, error: Refusal) -> io::Result<()> {
    answers.send(error.line()).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the output to the client is closed",
        )
    })
}

/// Writes to `out` rmcp's lines (from `from_rmcp`) and toolgate's answers, each whole.
async fn write_lines<W>(
    mut out: W,
    mut from_rmcp: DuplexStream,
    mut answers: mpsc::Receiver<Vec<u8>>,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let mut chunk = vec![0; CHUNK_BYTES];
    let (mut rmcp_open, mut answers_open) = (true, true);
    // Whether the last bytes of rmcp's written were not the end of a line.
    let mut mid_line = false;
    while rmcp_open || answers_open {
        let read = if answers_open && !mid_line {
            tokio::select! {
                answer = answers.recv() => {
                    match answer {
                        Some(line) => {
                            out.write_all(&line).await?;
                            out.flush().await?;
                        }
                        None => answers_open = false,
                    }
                    continue;
                }
                read = from_rmcp.read(&mut chunk), if rmcp_open => read?,
            }
        } else if rmcp_open {
            from_rmcp.read(&mut chunk).await?
        } else {
            // rmcp is done, and so is the reader: nothing more to write.
            break;
        };
        if read == 0 {
            rmcp_open = false;
            if mid_line {
                // rmcp ended mid-line: end the line, so that answers still to come are
                // lines of their own.
                out.write_all(b"\n").await?;
                mid_line = false;
            }
        } else {
            out.write_all(&chunk[..read]).await?;
            mid_line = chunk[read - 1] != b'\n';
        }
        out.flush().await?;
    }
    Ok(())
}

/// What to do with a whole line.
enum Checked {
    /// rmcp reads it: pass it on.
    Pass,
    /// Nothing to read or to answer.
    Skip,
    /// rmcp cannot read it: answer it.
    Answer(Refusal),
}

/// A JSON-RPC error for a line rmcp cannot read.
#[derive(Debug)]
struct Refusal {
    /// The message's `id` (a string or a number), or null when none can be read.
    id: Value,
    code: i64,
    message: String,
}

impl Refusal {
    fn new(id: Value, code: i64, message: impl Into<String>) -> Self {
        Refusal {
            id,
            code,
            message: message.into(),
        }
    }

    /// The error as a line of JSON, its members in the order JSON-RPC lists them.
    fn line(&self) -> Vec<u8> {
        let message = Value::String(self.message.clone());
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":{},\"message\":{message}}}}}\n",
            self.id, self.code
        )
        .into_bytes()
    }
}

/// `line` (its newline included) checked: whether rmcp reads it and, if not, the answer.
fn check(line: &[u8]) -> Checked {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    // rmcp reads past a byte order mark, as RFC 8259 allows.
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    if text.iter().all(u8::is_ascii_whitespace) {
        return Checked::Skip;
    }
    let error = match super::message::read(text) {
        Ok(message) => {
            return match super::request_meta::refusal_of(&message) {
                Some((id, error)) => Checked::Answer(Refusal::new(
                    id,
                    error.code.0.into(),
                    error.message.into_owned(),
                )),
                None => Checked::Pass,
            };
        }
        Err(error) => error,
    };
    if !error.is_data() {
        if nests_too_deep(text) {
            let top = TopLevel::scan(text);
            if top.is_notification() {
                tracing::warn!(
                    "stdio: dropped a notification nested deeper than {MAX_DEPTH} levels"
                );
                return Checked::Skip;
            }
            return Checked::Answer(Refusal::new(
                top.id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                format!(
                    "the message nests objects and arrays deeper than {MAX_DEPTH} levels: flatten it"
                ),
            ));
        }
        // JSON by its grammar, with a value no reader is bound to take (RFC 8259): said
        // as such, to the request it is, when the message is whole at its top level.
        let top = TopLevel::scan(text);
        if top.whole
            && let Some(reason) = unrepresentable(text)
        {
            if top.is_notification() {
                tracing::warn!("stdio: dropped a notification: {reason}");
                return Checked::Skip;
            }
            return Checked::Answer(Refusal::new(
                top.id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                reason,
            ));
        }
        return Checked::Answer(Refusal::new(
            Value::Null,
            PARSE_ERROR,
            format!("the message is not JSON ({error}): send one JSON-RPC message per line"),
        ));
    }
    // JSON (serde_json read it as far as rmcp's message type): read it as a value to say
    // what is wrong.
    let Ok(message) = serde_json::from_slice::<Value>(text) else {
        return Checked::Answer(Refusal::new(
            Value::Null,
            INVALID_REQUEST,
            "the message is not a valid JSON-RPC request, notification or response",
        ));
    };
    // A key named twice is toolgate's refusal (see `message`): said as such. A request
    // whose `id` is named twice has no id to answer to.
    let (reason, id_repeated) = match super::message::repeated_key(text) {
        Some(repeated) => (repeated.to_string(), super::message::is_id(&repeated)),
        // So is a whole number the message would not hold exactly — but for its `id`,
        // whose range JSON-RPC's reading says.
        None => match toolgate_core::json::check_whole_numbers(text) {
            Err(inexact) if !message["id"].is_f64() => (inexact.to_string(), false),
            _ => (
                super::message::what_is_wrong(&message, "send one message per line"),
                false,
            ),
        },
    };
    let Value::Object(fields) = &message else {
        return Checked::Answer(Refusal::new(Value::Null, INVALID_REQUEST, reason));
    };
    if fields.contains_key("method") && !fields.contains_key("id") {
        tracing::warn!("stdio: dropped an invalid notification: {reason}");
        return Checked::Skip;
    }
    let id = fields
        .get("id")
        .filter(|id| !id_repeated && super::message::is_request_id(id))
        .cloned()
        .unwrap_or(Value::Null);
    Checked::Answer(Refusal::new(id, INVALID_REQUEST, reason))
}

/// The answer to a line over the limit whose first bytes are `head`.
fn oversized(head: &[u8]) -> Refusal {
    let limit = format!(
        "the message is over the limit of {} MiB: send a smaller one",
        MAX_LINE_BYTES / (1024 * 1024)
    );
    let start = skip_space(head, 0);
    match head.get(start) {
        Some(b'{') => Refusal::new(
            TopLevel::scan(head).id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            limit,
        ),
        Some(b'[') => Refusal::new(Value::Null, INVALID_REQUEST, limit),
        _ => Refusal::new(
            Value::Null,
            PARSE_ERROR,
            format!("{limit} (and it is not JSON)"),
        ),
    }
}

/// Whether objects and arrays nest in `text` (outside strings) deeper than [`MAX_DEPTH`].
fn nests_too_deep(text: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in text {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// What the top level of a JSON object (or the start of one) says, read without reading
/// its values: only its `id` is read, and only when it is a string or a number.
#[derive(Debug, Default)]
struct TopLevel {
    /// The `id`, when it is one rmcp reads.
    id: Option<Value>,
    has_id: bool,
    has_method: bool,
    /// Whether the object was read to its closing brace.
    whole: bool,
}

impl TopLevel {
    /// The top level of the object `text` holds or starts with; what was read of it, when
    /// it is cut short or malformed.
    fn scan(text: &[u8]) -> TopLevel {
        let mut top = TopLevel::default();
        let Some(mut members) = members(text) else {
            return top;
        };
        for (key, value) in members.by_ref() {
            match (key, value) {
                (b"id", Some(value)) if !top.has_id => {
                    top.has_id = true;
                    top.id = serde_json::from_slice::<Value>(&text[value])
                        .ok()
                        .filter(super::message::is_request_id);
                }
                (b"method", Some(_)) => top.has_method = true,
                _ => {}
            }
        }
        top.whole = members.closed;
        top
    }

    /// Whether it is, as far as it can be told, a notification: a `method`, and no `id`
    /// in the whole object.
    fn is_notification(&self) -> bool {
        self.whole && self.has_method && !self.has_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answered(line: &str) -> Refusal {
        match check(format!("{line}\n").as_bytes()) {
            Checked::Answer(refusal) => refusal,
            Checked::Pass => panic!("{line}: passed to rmcp"),
            Checked::Skip => panic!("{line}: dropped"),
        }
    }

    #[test]
    fn an_answer_is_one_line_of_json_rpc() {
        let line = Refusal::new(json!("a\nb"), PARSE_ERROR, "say \"hi\"\n").line();
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":\"a\\nb\",\"error\":{\"code\":-32700,\"message\":\"say \\\"hi\\\"\\n\"}}\n"
        );
    }

    #[test]
    fn each_reason_names_what_rmcp_refuses() {
        let cases = [
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                Value::Null,
                "batches are not supported: send one message per line",
            ),
            (r#"[]"#, Value::Null, "batches are not supported"),
            (
                r#""ping""#,
                Value::Null,
                "a message must be a JSON object, not a string",
            ),
            (
                r#"{"id":1,"method":"ping"}"#,
                json!(1),
                "`jsonrpc` is missing",
            ),
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
                json!(3),
                "`jsonrpc` must be \"2.0\"",
            ),
            (
                r#"{"jsonrpc":2,"id":"a","method":"ping"}"#,
                json!("a"),
                "`jsonrpc` must be \"2.0\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                Value::Null,
                "`id` must be a string or a whole number, not a number with a fractional part",
            ),
            (
                r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}"#,
                Value::Null,
                "`id` is a number out of range: a numeric `id` must be a whole number from",
            ),
            (
                r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#,
                Value::Null,
                "`id` is a number out of range",
            ),
            (
                r#"{"jsonrpc":"2.0","id":-1e30,"method":"ping"}"#,
                Value::Null,
                "`id` is a number out of range",
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                Value::Null,
                "`id` must be a string or a whole number, not null",
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                Value::Null,
                "not an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"x"}"#,
                json!(2),
                "`params` must be an object, not a string",
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":[1]}"#,
                json!(2),
                "`params` must be an object, not an array",
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":7}"#,
                json!(2),
                "`method` must be a string, not a number",
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"ping","result":{}}"#,
                json!(2),
                "cannot have a `result` or an `error`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":5}}"#,
                json!(2),
                "`params._meta` must be an object, not a number",
            ),
            (r#"{"jsonrpc":"2.0","id":2}"#, json!(2), "no `method`"),
            (r#"{"jsonrpc":"2.0"}"#, Value::Null, "no `method`"),
            (
                r#"{"jsonrpc":"2.0","id":"r","result":{},"error":{"code":1,"message":"m"}}"#,
                json!("r"),
                "both a `result` and an `error`",
            ),
            (
                r#"{"jsonrpc":"2.0","result":{}}"#,
                Value::Null,
                "must have the `id` of its request",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"error":{"code":"x"}}"#,
                json!(4),
                "`error` must be an object with an integer `code`",
            ),
        ];
        for (line, id, reason) in cases {
            let refusal = answered(line);
            assert_eq!(refusal.code, INVALID_REQUEST, "{line}");
            assert_eq!(refusal.id, id, "{line}");
            assert!(
                refusal.message.contains(reason),
                "{line}: {:?} does not say {reason:?}",
                refusal.message
            );
        }
    }

    #[test]
    fn valid_messages_pass_and_invalid_notifications_are_dropped() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"a","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"some/custom","params":{"a":[1]}}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r",
        ] {
            assert!(
                matches!(check(format!("{line}\n").as_bytes()), Checked::Pass),
                "{line}"
            );
        }
        for line in [
            "",
            "  \r",
            r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
        ] {
            assert!(
                matches!(check(format!("{line}\n").as_bytes()), Checked::Skip),
                "{line}"
            );
        }
    }

    #[test]
    fn a_line_that_is_not_json_is_a_parse_error_with_a_null_id() {
        for line in [
            "hello world",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
            "{\"id\":1,",
        ] {
            let refusal = answered(line);
            assert_eq!(
                (refusal.code, &refusal.id),
                (PARSE_ERROR, &Value::Null),
                "{line}"
            );
            assert!(
                refusal.message.starts_with("the message is not JSON"),
                "{}",
                refusal.message
            );
        }
    }

    #[test]
    fn too_deep_a_message_is_answered_with_its_id_wherever_it_stands() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let before =
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"x":{deep}}}}}"#);
        let after = format!(
            r#"{{"jsonrpc":"2.0","method":"ping","params":{{"x":{deep},"s":"}}"}},"id":"z"}}"#
        );
        for (line, id) in [
            (before, json!(7)),
            (after, json!("z")),
            (deep.clone(), Value::Null),
        ] {
            let refusal = answered(&line);
            assert_eq!((refusal.code, &refusal.id), (INVALID_REQUEST, &id));
            assert!(
                refusal.message.contains("deeper than 127 levels"),
                "{}",
                refusal.message
            );
        }
        let notification =
            format!(r#"{{"jsonrpc":"2.0","method":"ping","params":{{"x":{deep}}}}}"#);
        assert!(matches!(check(notification.as_bytes()), Checked::Skip));
        // As deep as serde_json reads is not too deep.
        let fits = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{}{}}}}}"#,
            "[".repeat(MAX_DEPTH - 2),
            "]".repeat(MAX_DEPTH - 2)
        );
        assert!(matches!(check(fits.as_bytes()), Checked::Pass));
    }

    #[test]
    fn the_id_of_a_line_over_the_limit_is_read_from_its_start_when_it_names_it() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"text":"AAAA"#,
                json!(2),
                INVALID_REQUEST,
            ),
            (
                r#" { "id" : "a\"b" , "method":"x","params":{"#,
                json!("a\"b"),
                INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"tools/call","params":{"text":"AAAA"#,
                Value::Null,
                INVALID_REQUEST,
            ),
            (r#"{"params":{"id":5},"id":6"#, Value::Null, INVALID_REQUEST),
            (r#"{"params":{"id":5},"id":6,"#, json!(6), INVALID_REQUEST),
            (r#"[{"jsonrpc":"2.0","id":1"#, Value::Null, INVALID_REQUEST),
            ("XXXXXXXX", Value::Null, PARSE_ERROR),
        ];
        for (head, id, code) in cases {
            let refusal = oversized(head.as_bytes());
            assert_eq!((refusal.code, &refusal.id), (code, &id), "{head}");
            assert!(
                refusal.message.contains("over the limit of 16 MiB"),
                "{}",
                refusal.message
            );
        }
    }
}
