//! Pieces of a hand-written streamable-HTTP upstream (session `s1`), for tests that need an
//! upstream to answer what no SDK server would: another request's id, a stream that never
//! ends.

use std::convert::Infallible;

use axum::body::Body;
use axum::response::Response;
use futures::Stream;
use serde_json::{Value, json};

/// `message` as the JSON answer to a POST of session `s1`.
pub fn json_answer(message: Value) -> Response {
    Response::builder()
        .header("content-type", "application/json")
        .header("mcp-session-id", "s1")
        .body(Body::from(message.to_string()))
        .expect("a response")
}

/// `events` (each a whole SSE event, or nothing) as the event stream answering a POST of
/// session `s1`.
pub fn event_stream(events: impl Stream<Item = String> + Send + 'static) -> Response {
    use futures::StreamExt;
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("mcp-session-id", "s1")
        .body(Body::from_stream(events.map(Ok::<_, Infallible>)))
        .expect("a response")
}

/// The answer to `initialize` request `id` of a server named `name` at 2025-11-25, with
/// tools.
pub fn initialized(id: &Value, name: &str) -> Response {
    json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
        "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
        "serverInfo": {"name": name, "version": "1"}}}))
}
