//! What keeps the acknowledgment of a `subscriptions/listen` request from its client
//! until the request's resources are subscribed (see [`super::listen`]).

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, BodyStream, StreamBody};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::listen_stream::ListenStream;

/// A listen request whose resources are subscribed, or being subscribed.
#[derive(Clone)]
pub(super) struct Subscribed {
    /// Where the updates of its subscriptions go.
    pub(super) stream: ListenStream,
    /// Cancelled when one of its subscriptions is ended for the caller (a reload withdrew
    /// access to the resource).
    pub(super) ended: CancellationToken,
}

/// Where the handler of a listen request over streamable HTTP tells the endpoint whether
/// its resources are subscribed: carried in the request's extensions, decided once.
#[derive(Clone)]
pub(super) struct ListenGate(Arc<Mutex<Option<oneshot::Sender<bool>>>>);

/// What the endpoint waits on: `true` once the resources are subscribed, `false` when the
/// request was refused; an error when no handler decided (rmcp answered the request
/// without it).
pub(super) type ListenDecision = oneshot::Receiver<bool>;

impl ListenGate {
    /// A gate, and the decision the endpoint waits on.
    pub(super) fn new() -> (ListenGate, ListenDecision) {
        let (decide, decision) = oneshot::channel();
        (ListenGate(Arc::new(Mutex::new(Some(decide)))), decision)
    }

    /// Tells the endpoint whether the resources are `subscribed`; only the first word
    /// counts.
    pub(super) fn decide(&self, subscribed: bool) {
        let decide = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(decide) = decide {
            let _ = decide.send(subscribed);
        }
    }
}

/// How much of a listen request's stream is read ahead while its decision is awaited: the
/// acknowledgment, and the updates that followed it. Past this, the stream waits.
const MOST_READ_AHEAD: usize = 64 * 1024;

/// `body`, the SSE stream answering a listen request, once `decision` is known: as it
/// is when the resources are subscribed, or no handler decided; without its
/// acknowledgment when the request was refused (the stream then ends in the refusal).
/// While the decision is awaited, what the stream has is read ahead (at most
/// [`MOST_READ_AHEAD`]); a stream that ends meanwhile was answered without a decision.
pub(super) async fn acknowledged_once_subscribed(
    mut body: BoxBody<Bytes, Infallible>,
    mut decision: ListenDecision,
) -> BoxBody<Bytes, Infallible> {
    let mut read = Vec::new();
    let mut size = 0;
    let mut ended = false;
    let refused = loop {
        tokio::select! {
            decided = &mut decision => break decided == Ok(false),
            frame = body.frame(), if !ended && size < MOST_READ_AHEAD => match frame {
                Some(Ok(frame)) => {
                    size += frame.data_ref().map_or(0, Bytes::len);
                    read.push(frame);
                }
                None => ended = true,
            },
        }
        if ended {
            // Answered: a decision made along the way counts.
            break decision.try_recv() == Ok(false);
        }
    };
    let read = futures::stream::iter(read.into_iter().map(Ok));
    // What is left of the stream: nothing, when it ended.
    let rest = futures::stream::iter((!ended).then(|| BodyStream::new(body))).flatten();
    let stream = read.chain(rest);
    if !refused {
        return BodyExt::boxed(StreamBody::new(stream));
    }
    BodyExt::boxed(StreamBody::new(stream.filter(|frame| {
        let acknowledgment = frame
            .as_ref()
            .is_ok_and(|frame| frame.data_ref().is_some_and(|e| is_acknowledgment(e)));
        std::future::ready(!acknowledgment)
    })))
}

/// Whether SSE `event` carries a `notifications/subscriptions/acknowledged`.
fn is_acknowledgment(event: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
    }
    event
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .any(|data| {
            serde_json::from_slice::<Method>(data).is_ok_and(|m| {
                m.method.as_deref() == Some("notifications/subscriptions/acknowledged")
            })
        })
}

#[cfg(test)]
mod tests {
    use http_body::Frame;

    use super::*;

    const PRIMING: &str = "data: \nid: 0\nretry: 3000\n\n";
    const ACKNOWLEDGED: &str = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{\"notifications\":{}}}\n\n";
    const REFUSAL: &str =
        "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32600,\"message\":\"no\"}}\n\n";

    /// A body that yields `events` and then stays open.
    fn open_stream(events: &[&'static str]) -> BoxBody<Bytes, Infallible> {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = events
            .iter()
            .map(|event| Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
            .collect();
        let frames =
            futures::StreamExt::chain(futures::stream::iter(frames), futures::stream::pending());
        BodyExt::boxed(StreamBody::new(frames))
    }

    /// A body that yields `events` and ends.
    fn stream(events: &[&'static str]) -> BoxBody<Bytes, Infallible> {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = events
            .iter()
            .map(|event| Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
            .collect();
        BodyExt::boxed(StreamBody::new(futures::stream::iter(frames)))
    }

    /// The events a body yields before it ends or stalls.
    async fn events(mut body: BoxBody<Bytes, Infallible>) -> Vec<String> {
        let mut events = Vec::new();
        while let Ok(Some(Ok(frame))) =
            tokio::time::timeout(std::time::Duration::from_millis(50), body.frame()).await
        {
            let data = frame.into_data().expect("data");
            events.push(String::from_utf8(data.to_vec()).expect("UTF-8"));
        }
        events
    }

    #[tokio::test]
    async fn the_acknowledgment_waits_for_the_decision_and_then_goes_out_as_written() {
        let (gate, decision) = ListenGate::new();
        let held = tokio::spawn(acknowledged_once_subscribed(
            open_stream(&[PRIMING, ACKNOWLEDGED]),
            decision,
        ));
        tokio::task::yield_now().await;
        assert!(!held.is_finished(), "nothing goes out before the decision");
        gate.decide(true);
        gate.decide(false);
        let body = held.await.expect("the hold ends");
        assert_eq!(events(body).await, [PRIMING, ACKNOWLEDGED]);
    }

    #[tokio::test]
    async fn a_refused_request_goes_out_without_its_acknowledgment() {
        let (gate, decision) = ListenGate::new();
        gate.decide(false);
        let body =
            acknowledged_once_subscribed(stream(&[PRIMING, ACKNOWLEDGED, REFUSAL]), decision);
        assert_eq!(events(body.await).await, [PRIMING, REFUSAL]);
    }

    #[tokio::test]
    async fn a_stream_answered_without_a_decision_goes_out_as_it_is() {
        let (gate, decision) = ListenGate::new();
        drop(gate);
        let body = acknowledged_once_subscribed(stream(&[REFUSAL]), decision);
        assert_eq!(events(body.await).await, [REFUSAL]);
    }

    #[test]
    fn only_the_acknowledgment_reads_as_one() {
        assert!(is_acknowledgment(ACKNOWLEDGED.as_bytes()));
        assert!(!is_acknowledgment(PRIMING.as_bytes()));
        assert!(!is_acknowledgment(REFUSAL.as_bytes()));
    }
}
