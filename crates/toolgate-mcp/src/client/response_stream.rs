//! A request's response stream: its type as rmcp's HTTP client hands it over, what each of
//! its events carries to the request, and how long it is held after its call is over.
//! Below [`request_streams`](super::request_streams), [`places`](super::places) and
//! [`cancelled`](super::cancelled), which all read it.

use std::time::Duration;

use serde::de::IgnoredAny;
use serde_json::Value;

/// A response stream as rmcp's HTTP client hands it over.
pub(crate) type SseStream =
    futures::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>;

/// What an event's data is to the request whose stream carries it.
#[derive(Debug, PartialEq)]
pub(crate) enum Carried {
    /// No answer with an id: a notification, a request, an error without an id.
    NoAnswer,
    /// A JSON-RPC answer (response or error) to the request with this id.
    AnswerTo(Value),
    /// Something that may be an answer but does not read as one JSON-RPC object (a batch
    /// array, an object naming a key twice, text that is not JSON): whose it is cannot be
    /// told, and rmcp might still read an answer out of it.
    Unreadable,
}

/// What `data`, an event of a response stream, carries.
pub(crate) fn carried(data: &str) -> Carried {
    #[derive(serde::Deserialize)]
    struct Keys {
        id: Option<Value>,
        method: Option<IgnoredAny>,
        result: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
    }
    // Most events are notifications: only what could be an answer is read (a key written
    // with escapes, `"\u0072esult"`, could be one too).
    if !(data.contains("\"result\"") || data.contains("\"error\"") || data.contains("\\u")) {
        return Carried::NoAnswer;
    }
    let Ok(keys) = serde_json::from_str::<Keys>(data) else {
        return Carried::Unreadable;
    };
    match keys.id {
        Some(id) if keys.method.is_none() && (keys.result.is_some() || keys.error.is_some()) => {
            Carried::AnswerTo(id)
        }
        _ => Carried::NoAnswer,
    }
}

/// How long a call's stream is still held after the call is over: the time the upstream
/// has to honour the cancellation (and end the stream itself) before toolgate closes the
/// connection under it; also time enough for rmcp to POST the cancellation first.
pub(crate) const LET_GO: Duration = Duration::from_secs(2);
