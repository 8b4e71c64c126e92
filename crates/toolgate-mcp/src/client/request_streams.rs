//! The response streams of what rmcp sends on an HTTP connection, as
//! [`StreamTagging`](super::streams::StreamTagging) hands them to rmcp: each held only
//! while its call lives, and each resumed as the stream of the request it was.
//!
//! **Let go with the call.** rmcp reads a request's stream until the upstream ends it. When
//! a call is abandoned (its caller cancelled or went away, its deadline passed) toolgate
//! tells the upstream (`notifications/cancelled`), and rmcp stops reading; but at
//! 2025-11-25 it keeps the stream, and the HTTP connection under it, until the
//! cancellation's POST is answered — and it sends one cancellation at a time, each given
//! five seconds. An upstream that answers neither the cancellation nor the call would
//! have the streams of a few hundred abandoned calls held for half an hour. So the stream
//! of a `tools/call` is taken from rmcp [`LET_GO`] after its call is over, whoever still
//! holds it.
//!
//! **Its place kept while the upstream may run it.** The stream of a request given up
//! before its answer — let go so, or dropped by rmcp once its call is over — is not
//! closed: it holds the request's place, and is read to its end by toolgate (what comes on
//! it is dropped), since its answer or its end is what tells that the upstream is done
//! with the request; the place is given back then, or at the request's hold limit
//! ([`cancelled`](super::cancelled)), whichever comes first.
//!
//! **Resumed as its request's.** rmcp resumes a stream the upstream closed early with a GET
//! carrying the last event id it read (`Last-Event-ID`); the GET names no request, and the
//! only fact that says whose the resumed stream is is that event id. When a request's
//! stream ends before its answer, its last event id is kept here ([`Resumable`]) with the
//! request; the stream resumed from it is that request's, and carries only its answer —
//! as the stream it resumes did (an answer to another request is dropped and counted). A
//! resume from an event id no stream of toolgate's ended with (or two did) is nobody's:
//! every answer on it is dropped.
//!
//! **Its place kept for the resume.** A request's stream holds the request's place among
//! the upstream's requests in flight ([`places`](super::places)) while it is open. When it
//! ends before its answer, the place is kept with its last event id, not given back:
//! rmcp's GET that resumes it is the same request still in flight, and takes the place
//! over as it starts (given up while under way, the place is kept as a POST's is:
//! [`streams`](super::streams)); a GET that fails leaves it here again for rmcp's next
//! try. It is given back when the resumed stream is done with, or — no resume having
//! taken it — [`LET_GO`] after the call is over (a request without a call: once the wait
//! rmcp makes before it resumes, and [`LET_GO`] more, have passed), or with the
//! connection. A stream the upstream ended is taken as the upstream's word that it is done
//! with the request, unless rmcp resumes it.
//!
//! **No answers on the standalone stream.** The standalone stream (a GET with no event id,
//! and its resumes) is no request's: the protocol forbids a server to answer a request on
//! it, and rmcp would hand an answer read there to whichever request of the shared
//! connection has its id — another caller's call. Every answer on it (and every event that
//! may be one) is dropped and counted, as on the stream of a request it does not answer;
//! its notifications and requests pass.
//!
//! **Its own answer, read or failed.** rmcp skips a message it cannot read (at debug
//! level), so a request whose answer that was waits out its whole deadline. Every message
//! of a stream is read here as rmcp reads it first; one that does not read is dropped and
//! counted, and when it is a response naming the stream's own request, that request is
//! answered in its place with an error saying why, in words — the request fails at once,
//! as a `tools/call` toolgate sends itself does ([`unreadable`](super::unreadable)). One
//! naming another request is not that one's answer (the stream can be another caller's
//! call's), one naming none is not told to be this one's, and on the standalone stream
//! none answers anything.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use futures::{Stream, StreamExt};
use rmcp::model::RequestId;
use rmcp::transport::common::client_side_sse::{ExponentialBackoff, SseRetryPolicy};
use serde_json::Value;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::cancelled;
use super::places::Place;
use super::relay::{Dropped, RouteTicket};
use super::response_stream::{Carried, LET_GO, SseStream, carried};
use super::unreadable::{CameOn, Unreadables};

/// The longest wait before resuming a stream that an upstream's `retry:` is taken at, in
/// milliseconds: a longer one is cut to it. Resuming is cheap, and a call's time is
/// better spent trying again than asleep (`u64::MAX` would sleep past any deadline).
const MAX_SERVER_RETRY_MS: u64 = 30_000;

/// How long rmcp waits before it opens again a stream it lost — the standalone stream
/// among them — when the upstream named no `retry:`: doubling from one second, as rmcp
/// does, but never longer than [`MAX_SERVER_RETRY_MS`]. rmcp's own doubling has no bound,
/// so an upstream back after an outage of some minutes would be noticed an hour later, and
/// with it that it forgot the resource subscriptions it held (the standalone stream's
/// `GET` answered 404 is what tells).
pub(crate) fn reconnect_policy() -> Arc<dyn SseRetryPolicy> {
    let mut policy = ExponentialBackoff::default();
    policy.max_delay = Some(Duration::from_millis(MAX_SERVER_RETRY_MS));
    Arc::new(policy)
}

/// An upstream's `retry:` (milliseconds), cut to [`MAX_SERVER_RETRY_MS`].
pub(crate) fn capped_retry(millis: u64) -> u64 {
    millis.min(MAX_SERVER_RETRY_MS)
}

/// How many ended streams a connection remembers the last event id of, for their resume:
/// past it the oldest is forgotten (and a resume from it is nobody's).
const MAX_RESUMABLE: usize = 256;

/// Whose a stream is.
#[derive(Clone, PartialEq)]
pub(crate) enum Owner {
    /// The response stream of this request, or one resumed from it.
    Request(RequestId),
    /// The standalone stream (a GET without an event id), or one resumed from it: it
    /// answers no request, and every answer on it is dropped.
    Standalone,
    /// A resume toolgate cannot attribute: every answer on it is dropped.
    Nobody,
}

/// The streams of a connection that ended before their request's answer, by their last
/// event id, for rmcp's resume of them.
#[derive(Default)]
pub(crate) struct Resumable {
    ended: Mutex<VecDeque<Ended>>,
}

struct Ended {
    event_id: String,
    owner: Owner,
    ticket: Option<RouteTicket>,
    /// The request's place, until the stream resumed from `event_id` takes it.
    parked: Option<Parked>,
    /// The places of the requests whose streams ended at `event_id` too (an upstream that
    /// gave two streams the same id): no resume may take them — whose would it be? — but
    /// their requests are still in flight, so each is kept as [`Parked`] keeps one, and
    /// given back as it would be when no resume takes it.
    stranded: Vec<Parked>,
}

/// The place of a request whose stream ended before its answer, kept for the stream that
/// resumes it; given back by a task of its own if none does in time (see the module).
struct Parked {
    place: Arc<Mutex<Option<Place>>>,
    watch: AbortHandle,
}

impl Parked {
    /// Keeps `place` until it is taken, or the call of `ticket` has been over for
    /// [`LET_GO`]; without a call, for `retry` (what rmcp waits before it resumes; one
    /// second when the upstream named none, as rmcp's policy does) and [`LET_GO`] more.
    fn new(place: Place, ticket: Option<&RouteTicket>, retry: Option<Duration>) -> Self {
        let place = Arc::new(Mutex::new(Some(place)));
        let kept = Arc::downgrade(&place);
        let ticket = ticket.cloned();
        let watch = tokio::spawn(async move {
            match ticket {
                Some(ticket) => ticket.over().await,
                None => tokio::time::sleep(retry.unwrap_or(Duration::from_secs(1))).await,
            }
            tokio::time::sleep(LET_GO).await;
            if let Some(place) = kept.upgrade() {
                drop(place.lock().unwrap_or_else(PoisonError::into_inner).take());
            }
        })
        .abort_handle();
        Parked { place, watch }
    }

    fn take(&self) -> Option<Place> {
        self.place
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Resumable {
    /// Whose the stream resumed from `event_id` is, and the call it serves.
    pub(crate) fn owner(&self, event_id: &str) -> (Owner, Option<RouteTicket>) {
        let ended = self.lock();
        match ended.iter().find(|e| e.event_id == event_id) {
            Some(e) => (e.owner.clone(), e.ticket.clone()),
            None => (Owner::Nobody, None),
        }
    }

    /// The place kept for the stream resumed from `event_id` (see the module), once.
    pub(crate) fn take_place(&self, event_id: &str) -> Option<Place> {
        let mut ended = self.lock();
        let known = ended.iter_mut().find(|e| e.event_id == event_id)?;
        known.parked.take()?.take()
    }

    /// Remembers that a stream of `owner` ended at `event_id`, with `place`, its request's
    /// place, kept for its resume (which rmcp makes after `retry`, or its own wait) — or
    /// that a resume from `event_id` failed, the place it took kept for the next. An id
    /// two owners' streams ended at is nobody's: no resume takes their places, which are
    /// given back as if none came (their requests are still in flight meanwhile). The
    /// streams of calls that are over are forgotten.
    pub(crate) fn ended(
        &self,
        event_id: &str,
        owner: &Owner,
        ticket: Option<&RouteTicket>,
        place: Option<Place>,
        retry: Option<Duration>,
    ) {
        let parked = place.map(|place| Parked::new(place, ticket, retry));
        let mut ended = self.lock();
        ended.retain(|e| !e.ticket.as_ref().is_some_and(RouteTicket::is_over));
        if let Some(known) = ended.iter_mut().find(|e| e.event_id == event_id) {
            if known.owner != *owner {
                known.owner = Owner::Nobody;
                known.ticket = None;
                known
                    .stranded
                    .extend(known.parked.take().into_iter().chain(parked));
            } else if parked.is_some() {
                known.parked = parked;
            }
            return;
        }
        if ended.len() == MAX_RESUMABLE {
            ended.pop_front();
        }
        ended.push_back(Ended {
            event_id: event_id.to_owned(),
            owner: owner.clone(),
            ticket: ticket.cloned(),
            parked,
            stranded: Vec::new(),
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Ended>> {
        self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a [`RequestStream`] and the task that lets it go share.
#[derive(Default)]
struct Held {
    /// The stream; `None` once let go.
    stream: Option<SseStream>,
    /// The place of the stream's request, while it holds one: let go with the stream, or
    /// kept for its resume when it ends before its answer.
    place: Option<Place>,
    /// Who last waited on the stream: woken when it is let go, to read its end rather
    /// than wait for ever on a stream that is gone.
    waker: Option<Waker>,
    /// Whether the upstream is done with the request, as far as the stream tells: its
    /// answer came, or the stream ended. Until then, a request given up keeps its place
    /// ([`cancelled`](super::cancelled)).
    settled: bool,
    /// Whether the stream was let go by the task that watches the call: that task keeps
    /// the place of a request given up, and is not to be stopped with the stream.
    let_go: bool,
}

/// One response stream of `owner`, as the module says.
pub(crate) struct RequestStream {
    held: Arc<Mutex<Held>>,
    /// Lets the stream go once the call is over.
    watch: Option<AbortHandle>,
    owner: Owner,
    /// The request's id as answers carry it (for [`Owner::Request`]).
    origin: Option<Value>,
    ticket: Option<RouteTicket>,
    /// The last event id read (or resumed from): where a resume of it starts.
    last_event_id: Option<String>,
    /// The last wait before a resume the upstream named on it (`retry:`, capped).
    retry: Option<Duration>,
    /// Whether the request's answer came on it: nothing left to resume.
    answered: bool,
    resumable: Arc<Resumable>,
    /// What becomes of a message on it that does not read.
    unreadables: Arc<Unreadables>,
}

impl RequestStream {
    /// `stream`, of `owner` (resumed from `resumed_from`), for the call of `ticket`,
    /// holding `place` (see the module).
    pub(crate) fn new(
        stream: SseStream,
        owner: Owner,
        ticket: Option<RouteTicket>,
        resumed_from: Option<String>,
        place: Option<Place>,
        resumable: Arc<Resumable>,
        unreadables: Arc<Unreadables>,
    ) -> Self {
        let held = Arc::new(Mutex::new(Held {
            stream: Some(stream),
            place,
            waker: None,
            settled: false,
            let_go: false,
        }));
        let origin = match &owner {
            Owner::Request(id) => Some(id.clone().into_json_value()),
            _ => None,
        };
        let watch = ticket.clone().map(|ticket| {
            let held = Arc::downgrade(&held);
            let origin = origin.clone();
            tokio::spawn(async move {
                ticket.over().await;
                let given_up = Instant::now();
                tokio::time::sleep(LET_GO).await;
                let Some(held) = held.upgrade() else {
                    return;
                };
                let (stream, place, settled) = {
                    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
                    held.let_go = true;
                    if let Some(waker) = held.waker.take() {
                        waker.wake();
                    }
                    (held.stream.take(), held.place.take(), held.settled)
                };
                drop(held);
                if let (Some(stream), Some(place), false) = (stream, place, settled) {
                    let watched = cancelled::Watched::Stream(stream);
                    cancelled::keep(place, watched, origin, given_up).await;
                }
            })
            .abort_handle()
        });
        RequestStream {
            held,
            watch,
            owner,
            origin,
            ticket,
            last_event_id: resumed_from,
            retry: None,
            answered: false,
            resumable,
            unreadables,
        }
    }

    /// The stream ended (or failed) here: a resume of it is its owner's, and takes its
    /// place over.
    fn ended(&self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.settled = true;
        if self.answered {
            return;
        }
        if let Some(event_id) = &self.last_event_id {
            let place = held.place.take();
            drop(held);
            self.resumable.ended(
                event_id,
                &self.owner,
                self.ticket.as_ref(),
                place,
                self.retry,
            );
        }
    }

    /// What rmcp is to read of `data`, an event's data (`message`: of an event rmcp reads
    /// as a message): `data` as it is; nothing, when it is an answer that is not this
    /// stream's to carry (on a stream without an `origin`, the standalone stream or
    /// nobody's, any answer) or does not read; or, when the answer of this stream's
    /// request does not read, the error answered in its place (see the module). Notes the
    /// request's answer.
    fn screened(&mut self, data: String, message: bool) -> Option<String> {
        let carried = carried(&data);
        let own = match &carried {
            Carried::NoAnswer | Carried::Unreadable => false,
            Carried::AnswerTo(id) if self.origin.as_ref() == Some(id) => true,
            Carried::AnswerTo(_) => return self.dropped_answer(),
        };
        // rmcp reads no other event's data as a message, and skips blank data (an event
        // that primes the stream for its resumption).
        if !message || data.trim().is_empty() {
            if carried == Carried::Unreadable {
                return self.dropped_answer();
            }
            self.answered |= own;
            return Some(data);
        }
        let error = match super::message::read(&data) {
            // Read, but whose answer it may be cannot be told.
            Ok(_) if carried == Carried::Unreadable => return self.dropped_answer(),
            Ok(_) => {
                self.answered |= own;
                return Some(data);
            }
            Err(error) => error,
        };
        let came_on = match &self.owner {
            Owner::Request(id) => CameOn::StreamOf(id),
            Owner::Standalone | Owner::Nobody => CameOn::NoRequest,
        };
        let answer = self
            .unreadables
            .take(data.as_bytes(), Some(&error), came_on)?;
        self.answered = true;
        serde_json::to_string(&answer).ok()
    }

    /// Drops an answer that is not this stream's to carry, counted.
    fn dropped_answer(&self) -> Option<String> {
        self.unreadables.routes().dropped(Dropped::Answer);
        None
    }
}

impl Stream for RequestStream {
    type Item = Result<sse_stream::Sse, sse_stream::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = {
            let mut held = this.held.lock().unwrap_or_else(PoisonError::into_inner);
            let Held { stream, waker, .. } = &mut *held;
            // Let go: the call is over.
            let Some(stream) = stream.as_mut() else {
                return Poll::Ready(None);
            };
            let polled = stream.poll_next_unpin(cx);
            if polled.is_pending() && !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
            polled
        };
        match ready!(polled) {
            Some(Ok(mut event)) => {
                if event.id.is_some() {
                    this.last_event_id.clone_from(&event.id);
                }
                event.retry = event.retry.map(capped_retry);
                if let Some(retry) = event.retry {
                    this.retry = Some(Duration::from_millis(retry));
                }
                // Its id is still read by rmcp, which resumes from the last id it read.
                let message = matches!(event.event.as_deref(), None | Some("" | "message"));
                let answered = this.answered;
                event.data = event.data.and_then(|data| this.screened(data, message));
                if this.answered && !answered {
                    this.held
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .settled = true;
                }
                Poll::Ready(Some(Ok(event)))
            }
            Some(Err(e)) => {
                this.ended();
                Poll::Ready(Some(Err(e)))
            }
            None => {
                this.ended();
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.let_go {
            // The watch keeps the place of the request given up, if any.
            return;
        }
        if let Some(watch) = &self.watch {
            watch.abort();
        }
        // Dropped by rmcp once the call is over, before the upstream is done with the
        // request: the place is kept while it may still run it.
        let given_up = !held.settled && self.ticket.as_ref().is_some_and(RouteTicket::is_over);
        if given_up && let (Some(stream), Some(place)) = (held.stream.take(), held.place.take()) {
            let watched = cancelled::Watched::Stream(stream);
            cancelled::keep_in_task(place, watched, self.origin.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::places::Places;
    use super::super::relay::{Relay, Routes};
    use super::*;

    /// What becomes of the messages that do not read of a connection to `crm`.
    fn unreadables() -> Arc<Unreadables> {
        Arc::new(Unreadables::new(Arc::new(Routes::new("crm"))))
    }

    #[test]
    fn a_lost_stream_is_opened_again_at_least_every_thirty_seconds() {
        let policy = reconnect_policy();
        assert_eq!(policy.retry(0), Some(Duration::from_secs(1)));
        assert_eq!(policy.retry(3), Some(Duration::from_secs(8)));
        for tries in [5, 12, 40, usize::MAX] {
            assert_eq!(
                policy.retry(tries),
                Some(Duration::from_secs(30)),
                "{tries}"
            );
        }
    }

    #[test]
    fn only_an_answer_to_another_request_is_told_apart() {
        let origin = json!("toolgate-3");
        let answers_another = |data: &str, origin: &Value| match carried(data) {
            Carried::AnswerTo(id) => id != *origin,
            Carried::NoAnswer => false,
            Carried::Unreadable => panic!("{data} reads"),
        };
        let another = |message: Value| answers_another(&message.to_string(), &origin);
        assert!(another(json!({"jsonrpc": "2.0", "id": 2, "result": {}})));
        assert!(another(
            json!({"jsonrpc": "2.0", "id": "toolgate-4", "error": {"code": 1, "message": "x"}})
        ));
        assert!(!another(
            json!({"jsonrpc": "2.0", "id": "toolgate-3", "result": {}})
        ));
        // An error without an id, a request and a notification are no other request's answer.
        assert!(!another(
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": 1, "message": "x"}})
        ));
        assert!(!another(
            json!({"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage", "params": {"result": 1}})
        ));
        assert!(!another(
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}})
        ));
        // What may be an answer but does not read as one object cannot be told whose it is.
        for unreadable in [
            "{not json \"result\"",
            r#"[{"jsonrpc":"2.0","id":2,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","id":"toolgate-3","id":2,"result":{}}"#,
        ] {
            assert_eq!(carried(unreadable), Carried::Unreadable, "{unreadable}");
        }
        // Keys written with escapes are the same keys to rmcp.
        assert!(answers_another(
            r#"{"jsonrpc":"2.0","id":2,"\u0072esult":{}}"#,
            &origin
        ));
    }

    #[tokio::test]
    async fn on_a_requests_stream_only_its_own_answer_is_left_whole() {
        let event = |data: &str| {
            Ok(sse_stream::Sse {
                data: Some(data.to_owned()),
                ..Default::default()
            })
        };
        let events = futures::stream::iter([
            event(r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{}}"#),
            event(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#),
            event(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        ])
        .boxed();
        let routes = unreadables();
        let read: Vec<_> =
            RequestStream::new(events, request(1), None, None, None, Arc::default(), routes)
                .map(|event| event.expect("an event").data)
                .collect()
                .await;
        assert_eq!(read[0], None, "unreadable: whose it is cannot be told");
        assert_eq!(read[1], None, "another request's answer");
        assert!(read[2].is_some() && read[3].is_some(), "{read:?}");
    }

    #[tokio::test]
    async fn on_the_standalone_stream_no_answer_is_left_whole() {
        let events = [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"toolgate-1","error":{"code":1,"message":"x"}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}"#,
        ]
        .map(|data| {
            Ok(sse_stream::Sse {
                data: Some(data.to_owned()),
                ..Default::default()
            })
        });
        let routes = unreadables();
        let read: Vec<_> = RequestStream::new(
            futures::stream::iter(events).boxed(),
            Owner::Standalone,
            None,
            None,
            None,
            Arc::default(),
            routes,
        )
        .map(|event| event.expect("an event").data)
        .collect()
        .await;
        assert_eq!(read[..3], [None, None, None], "answers, or what may be one");
        assert!(read[3].is_some() && read[4].is_some(), "{read:?}");
    }

    /// The data rmcp is given of each of `events` on a stream of `owner`.
    async fn screened(events: &[&str], owner: Owner) -> Vec<Option<String>> {
        let events = events.iter().map(|data| {
            Ok(sse_stream::Sse {
                data: Some((*data).to_owned()),
                ..Default::default()
            })
        });
        RequestStream::new(
            futures::stream::iter(events.collect::<Vec<_>>()).boxed(),
            owner,
            None,
            None,
            None,
            Arc::default(),
            unreadables(),
        )
        .map(|event| event.expect("an event").data)
        .collect()
        .await
    }

    #[tokio::test]
    async fn only_a_requests_own_answer_that_cannot_be_read_is_answered_in_its_place() {
        let events = [
            // Another request's answer, a notification and text, none of which reads.
            r#"{"jsonrpc":"2.0","id":2,"result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1e999}}"#,
            "not json",
            // An answer naming no request.
            r#"{"jsonrpc":"2.0","result":{"v":1e999}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"v":1e999}}"#,
        ];
        let read = screened(&events, request(1)).await;
        assert_eq!(read[..4], [None, None, None, None], "{read:?}");
        let answer = read[4].as_deref().expect("an answer in place");
        let answer: rmcp::model::ServerJsonRpcMessage =
            serde_json::from_str(answer).expect("it reads");
        let rmcp::model::JsonRpcMessage::Error(error) = answer else {
            panic!("an error: {answer:?}");
        };
        assert_eq!(error.id, Some(RequestId::Number(1)));
        let why = super::super::unreadable::why_answered(&error.error).expect("why");
        assert!(why.starts_with("a number too large to read"), "{why}");
        // The standalone stream answers nothing.
        let read = screened(&events, Owner::Standalone).await;
        assert!(read.iter().all(Option::is_none), "{read:?}");
    }

    #[test]
    fn an_upstreams_retry_is_taken_up_to_a_bound() {
        assert_eq!(capped_retry(1_500), 1_500);
        assert_eq!(capped_retry(u64::MAX), MAX_SERVER_RETRY_MS);
        assert!(Duration::from_millis(capped_retry(u64::MAX)) <= Duration::from_secs(30));
    }

    fn request(n: i64) -> Owner {
        Owner::Request(RequestId::Number(n))
    }

    #[test]
    fn a_resume_is_the_streams_that_ended_at_its_event_id_and_only_that_ones() {
        let resumable = Resumable::default();
        resumable.ended("7", &request(1), None, None, None);
        resumable.ended("7", &request(1), None, None, None);
        resumable.ended("8", &Owner::Standalone, None, None, None);
        assert!(resumable.owner("7").0 == request(1));
        assert!(resumable.owner("8").0 == Owner::Standalone);
        // An id no stream ended at, or two streams did, is nobody's.
        assert!(resumable.owner("9").0 == Owner::Nobody);
        resumable.ended("7", &request(2), None, None, None);
        assert!(resumable.owner("7").0 == Owner::Nobody);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_let_go_while_read_ends_for_its_reader() {
        let (relay, ticket) = Relay::new(None);
        let never: SseStream = futures::stream::pending().boxed();
        let stream = RequestStream::new(
            never,
            request(1),
            Some(ticket),
            None,
            None,
            Arc::default(),
            unreadables(),
        );
        let reader = tokio::spawn(async move { stream.collect::<Vec<_>>().await.len() });
        tokio::task::yield_now().await;
        drop(relay);
        let read = tokio::time::timeout(LET_GO * 2, reader).await;
        assert_eq!(
            read.expect("the reader sees the end of the stream let go")
                .unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn a_request_holds_its_place_until_its_response_stream_is_dropped() {
        let places = Places::new("crm", 1, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let routes = unreadables();
        let never: SseStream = futures::stream::pending().boxed();
        let stream = RequestStream::new(
            never,
            request(1),
            None,
            None,
            Some(place),
            Arc::default(),
            routes,
        );
        // The headers are in, the body is not: the connection is still the request's.
        assert_eq!(places.free(), 0);
        drop(stream);
        assert_eq!(places.free(), 1);
    }

    /// A stream that sends one event with an id (and `retry`), then ends.
    fn ends_after_an_event(id: &str) -> SseStream {
        futures::stream::iter([Ok(sse_stream::Sse {
            id: Some(id.to_owned()),
            retry: Some(10),
            data: Some(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#.into()),
            ..Default::default()
        })])
        .boxed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_ended_before_its_answer_keeps_its_place_for_its_resume() {
        let places = Places::new("crm", 1, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let (relay, ticket) = Relay::new(None);
        let resumable = Arc::new(Resumable::default());
        let routes = unreadables();
        let stream = RequestStream::new(
            ends_after_an_event("e1"),
            request(1),
            Some(ticket.clone()),
            None,
            Some(place),
            Arc::clone(&resumable),
            Arc::clone(&routes),
        );
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        // Ended and dropped, without its answer: the request is still in flight.
        tokio::time::sleep(LET_GO * 10).await;
        assert_eq!(places.free(), 0, "the place is kept for the resume");
        let place = resumable.take_place("e1");
        assert!(place.is_some() && resumable.take_place("e1").is_none());
        // The resumed stream holds it, and ends before the answer too.
        let resumed = RequestStream::new(
            ends_after_an_event("e2"),
            request(1),
            Some(ticket),
            Some("e1".into()),
            place,
            Arc::clone(&resumable),
            routes,
        );
        assert_eq!(resumed.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(places.free(), 0);
        // Not resumed again, and the call is over: given back once it has been for LET_GO.
        drop(relay);
        tokio::time::sleep(LET_GO / 2).await;
        assert_eq!(places.free(), 0);
        tokio::time::sleep(LET_GO).await;
        assert_eq!(
            places.free(),
            1,
            "the place of a call that is over is given back"
        );
        assert!(resumable.take_place("e2").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_kept_place_of_a_request_without_a_call_is_given_back_if_no_resume_takes_it() {
        let places = Places::new("crm", 1, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let resumable = Arc::new(Resumable::default());
        let stream = RequestStream::new(
            ends_after_an_event("e1"),
            request(1),
            None,
            None,
            Some(place),
            Arc::clone(&resumable),
            unreadables(),
        );
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(places.free(), 0);
        // The upstream's `retry: 10`, then LET_GO.
        tokio::time::sleep(LET_GO + Duration::from_millis(20)).await;
        assert_eq!(places.free(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_stream_keeps_no_place_and_a_connection_gone_strands_none() {
        let places = Places::new("crm", 2, 2, Duration::from_secs(30));
        let resumable = Arc::new(Resumable::default());
        let routes = unreadables();
        let answered = futures::stream::iter([Ok(sse_stream::Sse {
            id: Some("e1".into()),
            data: Some(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into()),
            ..Default::default()
        })])
        .boxed();
        let place = places.take(None, None).await.ok();
        let stream = RequestStream::new(
            answered,
            request(1),
            None,
            None,
            place,
            Arc::clone(&resumable),
            Arc::clone(&routes),
        );
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(places.free(), 2, "answered: nothing to resume");
        let place = places.take(None, None).await.ok();
        let (_relay, ticket) = Relay::new(None);
        let stream = RequestStream::new(
            ends_after_an_event("e2"),
            request(2),
            Some(ticket),
            None,
            place,
            Arc::clone(&resumable),
            routes,
        );
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(places.free(), 1);
        // The connection, and what it kept, is gone.
        drop(resumable);
        assert_eq!(places.free(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn two_streams_ended_at_the_same_id_keep_their_places_until_their_calls_are_over() {
        let places = Places::new("crm", 2, 2, Duration::from_secs(30));
        let resumable = Arc::new(Resumable::default());
        let routes = unreadables();
        let mut relays = Vec::new();
        // An upstream that gives the streams of two requests the same last event id.
        for id in [1, 2] {
            let place = places.take(None, None).await.ok();
            let (relay, ticket) = Relay::new(None);
            relays.push(relay);
            let stream = RequestStream::new(
                ends_after_an_event("e1"),
                request(id),
                Some(ticket),
                None,
                place,
                Arc::clone(&resumable),
                Arc::clone(&routes),
            );
            assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        }
        assert!(resumable.owner("e1").0 == Owner::Nobody);
        assert!(resumable.take_place("e1").is_none(), "nobody's to take");
        // Both requests are still in flight: their places are not free for others.
        tokio::time::sleep(LET_GO * 10).await;
        assert_eq!(places.free(), 0);
        // Their calls over, given back as no resume came.
        drop(relays);
        tokio::time::sleep(LET_GO + Duration::from_millis(20)).await;
        assert_eq!(places.free(), 2);
    }

    /// A stream the test writes to (`data` events), open until the sender is dropped.
    fn written() -> (
        futures::channel::mpsc::UnboundedSender<Result<sse_stream::Sse, sse_stream::Error>>,
        SseStream,
    ) {
        let (sender, stream) = futures::channel::mpsc::unbounded();
        (sender, stream.boxed())
    }

    fn data(data: &str) -> Result<sse_stream::Sse, sse_stream::Error> {
        Ok(sse_stream::Sse {
            data: Some(data.to_owned()),
            ..Default::default()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_given_up_calls_stream_let_go_keeps_its_place_until_the_upstream_answers() {
        let places = Places::new("crm", 1, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let (relay, ticket) = Relay::new(None);
        let (upstream, stream) = written();
        let stream = RequestStream::new(
            stream,
            request(1),
            Some(ticket),
            None,
            Some(place),
            Arc::default(),
            unreadables(),
        );
        let reader = tokio::spawn(async move { stream.collect::<Vec<_>>().await.len() });
        // The call given up: rmcp's reader sees the stream end once it is let go…
        drop(relay);
        let read = tokio::time::timeout(LET_GO * 2, reader).await;
        assert_eq!(read.expect("let go").expect("joined"), 0);
        // …but the upstream may still run the request: its place is kept.
        tokio::time::sleep(LET_GO * 10).await;
        assert_eq!(places.free(), 0);
        upstream
            .unbounded_send(data(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            ))
            .expect("read");
        upstream
            .unbounded_send(data(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#))
            .expect("read");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(places.free(), 1, "answered: the upstream is done with it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_given_up_calls_stream_dropped_by_rmcp_keeps_its_place_until_it_ends() {
        let places = Places::new("crm", 1, 1, Duration::from_secs(30));
        let place = places.take(None, None).await.expect("a place");
        let (relay, ticket) = Relay::new(None);
        let (upstream, stream) = written();
        let stream = RequestStream::new(
            stream,
            request(1),
            Some(ticket),
            None,
            Some(place),
            Arc::default(),
            unreadables(),
        );
        drop(relay);
        // rmcp drops it once the cancellation is answered.
        drop(stream);
        tokio::time::sleep(LET_GO * 10).await;
        assert_eq!(places.free(), 0);
        drop(upstream);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(places.free(), 1, "the stream ended: given back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_given_up_calls_place_is_kept_until_the_hold_limit_even_past_its_connection() {
        let places = Places::new("crm", 2, 2, Duration::from_secs(30));
        let resumable = Arc::new(Resumable::default());
        let mut upstreams = Vec::new();
        for deadline in [None, Some(Instant::now() + Duration::from_secs(40))] {
            let place = places.take(None, deadline).await.expect("a place");
            let (relay, ticket) = Relay::new(None);
            let (upstream, stream) = written();
            upstreams.push(upstream);
            let stream = RequestStream::new(
                stream,
                request(1),
                Some(ticket),
                None,
                Some(place),
                Arc::clone(&resumable),
                unreadables(),
            );
            drop(relay);
            drop(stream);
        }
        // The connection goes (a reload drops the old configuration's): the upstream may
        // still run both requests.
        drop(resumable);
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert_eq!(
            places.free(),
            1,
            "the one without a deadline: given back at the upstream's call_timeout"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            places.free(),
            2,
            "the one with a later deadline: given back at it"
        );
    }

    #[test]
    fn the_ended_streams_remembered_are_bounded() {
        let resumable = Resumable::default();
        for n in 0..=MAX_RESUMABLE {
            resumable.ended(&n.to_string(), &request(1), None, None, None);
        }
        assert!(resumable.owner("0").0 == Owner::Nobody);
        assert!(resumable.owner(&MAX_RESUMABLE.to_string()).0 == request(1));
        assert_eq!(resumable.lock().len(), MAX_RESUMABLE);
    }
}
