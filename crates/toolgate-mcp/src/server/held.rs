//! The start of an SSE response held back until there is an event worth sending with it.
//!
//! rmcp opens the stream answering a `POST` of a 2025 session with a priming event (an event
//! id and `retry:` with empty data, SEP-1699) and hands the response out at once. The HTTP
//! server writes the headers and that event at once, and the answer later: two writes per
//! call, and at the client two reads and two wake-ups for one answer. Here the response is
//! held until its stream yields an event that is not a priming event — the answer, a
//! notification, a keep-alive comment — or ends, or the hold passes (the keep-alive
//! interval: a client waits no longer for the headers than it would for a sign of life).
//! The headers, the priming event and what followed then go out in one write; a stream
//! that ended by then goes out as a body of known length.
//!
//! The priming event loses nothing by waiting: it lets a client resume a stream it lost,
//! and toolgate takes a client that leaves for gone and cancels its call
//! ([`ClientDisconnected`](super::cancellation::ClientDisconnected)).

use std::convert::Infallible;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{FutureExt, StreamExt};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use serde::de::IgnoredAny;

/// How much of a stream is gathered before its headers go out, at most: a tool that sends a
/// flood of notifications at once streams them.
const MOST_HELD: usize = 64 * 1024;

/// `body`, an SSE stream, with its first events gathered as described in the module's
/// documentation, for at most `hold`. The stream of one request (`one_request`) ends with
/// its answer: gathered, the answer ends the body.
pub(super) async fn first_events(
    mut body: BoxBody<Bytes, Infallible>,
    hold: Duration,
    one_request: bool,
) -> BoxBody<Bytes, Infallible> {
    let mut held = BytesMut::new();
    // Where the last event gathered starts.
    let mut last;
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return then(held, None, body),
            Ok(None) => return ended(held),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(event) => {
                    last = held.len();
                    held.extend_from_slice(&event);
                    if !is_priming(&event) {
                        break;
                    }
                }
                Err(frame) => return then(held, Some(frame), body),
            },
        }
    }
    // What the stream has ready now goes out in the same write.
    while held.len() < MOST_HELD {
        match body.frame().now_or_never() {
            None => break,
            Some(None) => return ended(held),
            Some(Some(Ok(frame))) => match frame.into_data() {
                Ok(event) => {
                    last = held.len();
                    held.extend_from_slice(&event);
                }
                Err(frame) => return then(held, Some(frame), body),
            },
        }
    }
    // rmcp ends a request's stream once it has sent the answer, a moment later: the end
    // would be a write of its own.
    if one_request && is_answer(&held[last..]) {
        return ended(held);
    }
    then(held, None, body)
}

/// A body of `held`, then `next`, then the rest of `body`.
fn then(
    held: BytesMut,
    next: Option<Frame<Bytes>>,
    body: BoxBody<Bytes, Infallible>,
) -> BoxBody<Bytes, Infallible> {
    if held.is_empty() && next.is_none() {
        return body;
    }
    let first = (!held.is_empty()).then(|| Frame::data(held.freeze()));
    let frames = futures::stream::iter(first.into_iter().chain(next).map(Ok));
    BodyExt::boxed(StreamBody::new(frames.chain(BodyStream::new(body))))
}

/// A body of `held`, all there is: its length is known.
fn ended(held: BytesMut) -> BoxBody<Bytes, Infallible> {
    BodyExt::boxed(Full::new(held.freeze()))
}

/// Whether `event` carries a JSON-RPC answer: a `result` or an `error`, without a `method`.
fn is_answer(event: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Keys {
        method: Option<IgnoredAny>,
        result: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
    }
    let Some(data) = event
        .split(|b| *b == b'\n')
        .find_map(|line| line.strip_prefix(b"data:"))
    else {
        return false;
    };
    serde_json::from_slice::<Keys>(data)
        .is_ok_and(|keys| keys.method.is_none() && (keys.result.is_some() || keys.error.is_some()))
}

/// Whether `event` is a priming event: an event id and a `retry:` field with empty data,
/// nothing else.
fn is_priming(event: &[u8]) -> bool {
    let mut retry = false;
    for line in event.split(|b| *b == b'\n') {
        if let Some(data) = line.strip_prefix(b"data:") {
            if !data.iter().all(u8::is_ascii_whitespace) {
                return false;
            }
        } else if line.starts_with(b"retry:") {
            retry = true;
        } else if !(line.is_empty() || line.starts_with(b"id:")) {
            return false;
        }
    }
    retry
}

#[cfg(test)]
mod tests {
    use http_body::Body as _;

    use super::*;

    fn stream(events: &[&'static str]) -> BoxBody<Bytes, Infallible> {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = events
            .iter()
            .map(|event| Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
            .collect();
        BodyExt::boxed(StreamBody::new(futures::stream::iter(frames)))
    }

    const PRIMING: &str = "data: \nid: 0\nretry: 3000\n\n";
    const ANSWER: &str = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\nid: 1\n\n";

    #[test]
    fn only_an_id_and_retry_with_empty_data_is_a_priming_event() {
        assert!(is_priming(PRIMING.as_bytes()));
        assert!(is_priming(b"data:\nid: 0/0\nretry: 5000\n\n"));
        assert!(!is_priming(ANSWER.as_bytes()));
        assert!(!is_priming(b":\n\n"), "a keep-alive comment");
        assert!(!is_priming(b"data: \nid: 0\n\n"), "no retry field");
        assert!(!is_priming(b"event: x\ndata: \nretry: 1\n\n"));
    }

    #[tokio::test]
    async fn a_priming_event_and_the_answer_of_a_stream_that_ended_are_one_body_of_known_length() {
        let body = first_events(stream(&[PRIMING, ANSWER]), Duration::from_secs(5), true).await;
        let whole = PRIMING.len() + ANSWER.len();
        assert_eq!(body.size_hint().exact(), Some(whole as u64));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, format!("{PRIMING}{ANSWER}"));
    }

    #[tokio::test]
    async fn the_stream_of_one_request_ends_with_its_answer() {
        let open = || {
            let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
            for event in [PRIMING, ANSWER] {
                tx.unbounded_send(Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
                    .unwrap();
            }
            // The sender stays: rmcp has not ended the stream yet.
            (tx, BodyExt::boxed(StreamBody::new(rx)))
        };
        let (_tx, stream) = open();
        let body = first_events(stream, Duration::from_secs(5), true).await;
        let whole = PRIMING.len() + ANSWER.len();
        assert_eq!(body.size_hint().exact(), Some(whole as u64));
        let (_tx, stream) = open();
        let body = first_events(stream, Duration::from_secs(5), false).await;
        assert_eq!(body.size_hint().exact(), None, "not one request's stream");
    }

    #[test]
    fn an_answer_is_a_result_or_an_error_without_a_method() {
        assert!(is_answer(ANSWER.as_bytes()));
        assert!(is_answer(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"x\"}}\n\n"
        ));
        assert!(!is_answer(PRIMING.as_bytes()));
        assert!(!is_answer(
            b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n"
        ));
        assert!(!is_answer(b"data: {\"method\":\"x\",\"result\":1}\n\n"));
        assert!(!is_answer(b":\n\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_with_nothing_after_its_priming_event_goes_out_when_the_hold_passes() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
        tx.unbounded_send(Ok(Frame::data(Bytes::from_static(PRIMING.as_bytes()))))
            .unwrap();
        let held = first_events(
            BodyExt::boxed(StreamBody::new(rx)),
            Duration::from_secs(15),
            true,
        );
        let mut body = tokio::time::timeout(Duration::from_secs(16), held)
            .await
            .expect("the response goes out when the hold passes");
        assert_eq!(body.size_hint().exact(), None, "the stream goes on");
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, PRIMING);
        tx.unbounded_send(Ok(Frame::data(Bytes::from_static(ANSWER.as_bytes()))))
            .unwrap();
        drop(tx);
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, ANSWER);
    }

    #[tokio::test]
    async fn a_stream_that_does_not_open_with_a_priming_event_is_held_only_for_its_first_event() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
        let progress = "data: {\"method\":\"notifications/progress\"}\n\n";
        tx.unbounded_send(Ok(Frame::data(Bytes::from_static(progress.as_bytes()))))
            .unwrap();
        let mut body = first_events(
            BodyExt::boxed(StreamBody::new(rx)),
            Duration::from_secs(60),
            true,
        )
        .await;
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, progress);
        tx.unbounded_send(Ok(Frame::data(Bytes::from_static(ANSWER.as_bytes()))))
            .unwrap();
        drop(tx);
        assert_eq!(body.collect().await.unwrap().to_bytes(), ANSWER);
    }
}
