//! The bound on the requests one HTTP upstream has in flight
//! ([`UpstreamConfig::max_connections`](super::UpstreamConfig::max_connections)).
//!
//! Over HTTP/1 a request in flight holds a TCP connection of its own, from its POST until
//! its response's body (an SSE stream) is read to its end or dropped. Without a bound,
//! 2,000 callers of one upstream at once are 2,000 connections: the gateway's file
//! descriptors run out, and the upstream is flooded. Every POST of a JSON-RPC *request*
//! to the upstream takes a [`Place`] first and holds it, inside the response's stream,
//! until that stream is done with; a request past the bound waits, in FIFO order, for
//! one to be given back. One [`Places`] serves every link of the upstream: the shared
//! one and each caller's own (per-caller credentials), whose sessions differ but whose
//! host does not.
//!
//! What counts, and why:
//!
//! - a request's POST (`tools/call`, `initialize`, lists, reads…), whether toolgate
//!   sends it from the calling task ([`Direct`](super::direct::Direct)) or rmcp does;
//! - the GET that resumes a request's stream the upstream ended before its answer
//!   (`Last-Event-ID`, as an upstream that polls does, SEP-1699): the request is still in
//!   flight, and keeps its place from the stream that ended to the one that resumes it —
//!   [`Direct`](super::direct::Direct) holds it across its own resumes, and for rmcp's
//!   the place is kept with the ended stream's event id until the GET takes it over
//!   ([`request_streams`](super::request_streams)); it is given back when the call is
//!   over, or the connection is, if no resume takes it;
//! - not a POST of a notification or of an answer to the upstream's own request
//!   (sampling, elicitation): those are answered at once (202), and an answer must never
//!   wait behind the calls that are waiting for it — that would be a deadlock until their
//!   deadlines;
//! - not, when no place is free, rmcp's setting up again of a session the upstream forgot
//!   (404) and its sending again of the requests refused then: they stand in for requests
//!   whose places were just given back, and while rmcp recovers the session it sends
//!   nothing else, so the calls holding every other place wait on them — counting them
//!   would fail those calls (after rmcp's five seconds for the recovery, or at their
//!   deadlines);
//! - not the standalone stream (a GET without an event id; one per session, bounded with
//!   the sessions), which is long-lived and answers no request: it does not starve calls.
//!
//! A `tools/call` waits at most until its deadline, and then fails with [`Busy`], which
//! says so in words (503 `upstream_busy`, to try again); so does any other request of a
//! caller's — a list, a read, `prompts/get`, `resources/subscribe` and
//! `resources/unsubscribe` — which takes its place before it is sent ([`Seat`]). So does a
//! call whose connection is being made (a caller's own link's first `initialize`, a
//! reconnect) when the attempt runs out of time while a request of its own still waits
//! for a place ([`Waiting`]): the upstream is at its bound, not down, and the attempt is no
//! failed connection — the backoff does not grow with the load. A waiter that is dropped —
//! its caller gave up — leaves the queue and takes nothing with it. The cost of a call is
//! one semaphore acquire: no allocation, and no metric unless the call had to wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How many times a request to an upstream had to wait for a place, by upstream
/// (`server`): a counter that climbs says the upstream's `max_connections` is too low
/// for its load, or the upstream too slow for it.
pub const UPSTREAM_WAITS: &str = "toolgate_mcp_upstream_waits_total";

/// The places of one upstream's requests in flight; see the module.
pub(crate) struct Places {
    server: Arc<str>,
    max: usize,
    semaphore: Arc<Semaphore>,
}

/// A request's place among its upstream's requests in flight, given back when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    _permit: OwnedSemaphorePermit,
}

/// A request found its upstream with every place taken, and its deadline came before one
/// was given back.
#[derive(Debug, thiserror::Error)]
#[error(
    "MCP server `{server}` is sent at most {max} {} at once (its `max_connections`), and that many stayed in flight for as long as the call could wait ({waited:.1?}, up to its deadline). Try again, or raise the upstream's `max_connections`",
    if *.max == 1 { "request" } else { "requests" }
)]
pub(crate) struct Busy {
    pub server: Arc<str>,
    pub max: usize,
    pub waited: Duration,
}

impl Places {
    /// At most `max` requests in flight to `server` (at least one).
    pub(crate) fn new(server: &str, max: usize) -> Arc<Places> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Places {
            server: Arc::from(server),
            max,
            semaphore: Arc::new(Semaphore::new(max)),
        })
    }

    /// A place if one is free now, without waiting.
    pub(crate) fn try_take(&self) -> Option<Place> {
        let permit = Arc::clone(&self.semaphore).try_acquire_owned().ok()?;
        Some(Place { _permit: permit })
    }

    /// A place, waiting for one until `deadline` (without one: as long as it takes, or
    /// until the future is dropped).
    ///
    /// # Errors
    ///
    /// [`Busy`] when `deadline` comes first.
    pub(crate) async fn take(&self, deadline: Option<Instant>) -> Result<Place, Busy> {
        self.take_noted(deadline, None).await
    }

    /// A place, as [`take`](Self::take) without a deadline, `waiting` telling meanwhile
    /// that a request of its connection attempt waits for one.
    pub(crate) async fn take_for(&self, waiting: &Waiting) -> Option<Place> {
        self.take_noted(None, Some(waiting)).await.ok()
    }

    /// [`Busy`] for a connection attempt that waited `waited` for a place, in vain
    /// ([`Waiting`]).
    pub(crate) fn busy(&self, waited: Duration) -> Busy {
        Busy {
            server: Arc::clone(&self.server),
            max: self.max,
            waited,
        }
    }

    async fn take_noted(
        &self,
        deadline: Option<Instant>,
        waiting: Option<&Waiting>,
    ) -> Result<Place, Busy> {
        if let Some(place) = self.try_take() {
            return Ok(place);
        }
        // Noted only while queued, not while a free place is taken.
        let _queued = waiting.map(Waiting::queued);
        let started = Instant::now();
        metrics::counter!(UPSTREAM_WAITS, "server" => self.server.to_string()).increment(1);
        tracing::debug!(server = %self.server, max = self.max, "the MCP server has as many requests in flight as allowed (`max_connections`); the request waits for a place");
        let waiting = Arc::clone(&self.semaphore).acquire_owned();
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, waiting).await.ok(),
            None => Some(waiting.await),
        };
        // The semaphore is never closed: an error is as good as no place.
        match permit {
            Some(Ok(permit)) => Ok(Place { _permit: permit }),
            _ => {
                let busy = self.busy(started.elapsed());
                tracing::warn!(server = %self.server, max = self.max, "a call waited for a place among the MCP server's requests in flight until its deadline (`max_connections`)");
                Err(busy)
            }
        }
    }

    /// Places free now (for tests).
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.semaphore.available_permits()
    }
}

/// Whether a request of one connection attempt is queued for a place now: what tells an
/// attempt that ran out of time because every place was taken (503 `upstream_busy`, not
/// a failure of the upstream's) from one the upstream did not answer in time. Only a
/// request still waiting when the time runs out makes it so: one that got its place, even
/// late, was the upstream's to answer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    /// Whether a request of the attempt is queued for a place now.
    pub(crate) fn now(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }

    /// Notes a request queued, until the guard is dropped.
    fn queued(&self) -> Queued<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Queued(&self.0)
    }
}

/// A request of a [`Waiting`] queued for a place.
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a request other than a call (a list, a read, `prompts/get`, a subscription,
/// `tasks/*`…) sent through rmcp takes its place: from the calling task, before the
/// request is sent, and handed to the transport with it ([`Reserved`]), noted in a
/// [`Waiting`] of its own while it waits. At the request's deadline that tells one held up by the bound (503
/// `upstream_busy`, as a call is) from one the upstream did not answer in time: the
/// transport's own wait for a place notes the connection's requests together, and ends
/// at no deadline.
#[derive(Clone)]
pub(crate) struct Seat {
    places: Arc<Places>,
    waiting: Waiting,
}

impl Seat {
    /// A seat among `places` for one request (or the pages of one list, one at a time).
    pub(crate) fn new(places: Arc<Places>) -> Self {
        Seat {
            places,
            waiting: Waiting::default(),
        }
    }

    /// A place for the next request to send, waiting for one as long as it takes (its
    /// caller's deadline ends the wait, by dropping the future).
    pub(crate) async fn reserve(&self) -> Option<Reserved> {
        self.places.take_for(&self.waiting).await.map(Reserved::new)
    }

    /// Whether a request of the seat is queued for a place now.
    pub(crate) fn waiting(&self) -> bool {
        self.waiting.now()
    }
}

/// A place to be taken by the transport that POSTs a request for a call which took it
/// itself, within the call's deadline: carried in the request's extensions through rmcp
/// (which clones a request's message, extensions and all, hence the shared cell).
#[derive(Clone, Debug)]
pub(crate) struct Reserved(Arc<std::sync::Mutex<Option<Place>>>);

impl Reserved {
    pub(crate) fn new(place: Place) -> Self {
        Reserved(Arc::new(std::sync::Mutex::new(Some(place))))
    }

    /// The place, once: a second POST of the same request (rmcp sends it again after
    /// setting up an expired session) takes a place of its own.
    pub(crate) fn take(&self) -> Option<Place> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_is_busy_and_says_what_to_do() {
        let places = Places::new("crm", 2);
        let _held = (places.take(None).await, places.take(None).await);
        let deadline = Instant::now() + Duration::from_secs(2);
        let busy = places.take(Some(deadline)).await.expect_err("busy");
        let text = busy.to_string();
        assert!(text.contains("`crm`"), "{text}");
        assert!(
            text.contains("is sent at most 2 requests at once"),
            "{text}"
        );
        assert!(
            text.contains("raise the upstream's `max_connections`"),
            "{text}"
        );
        assert_eq!(busy.waited, Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_waiter_leaves_nothing_behind() {
        let places = Places::new("crm", 1);
        let held = places.take(None).await.expect("a place");
        // A waiter whose caller gave up, dropped while queued.
        let gave_up = tokio::time::timeout(Duration::from_millis(10), places.take(None)).await;
        assert!(gave_up.is_err());
        drop(held);
        assert_eq!(places.free(), 1);
        let next = places.take(Some(Instant::now())).await;
        assert!(next.is_ok(), "the next request proceeds");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_noted_waiting_only_while_it_is_queued() {
        let places = Places::new("crm", 1);
        let waiting = Waiting::default();
        let held = places.take_for(&waiting).await.expect("a place");
        assert!(!waiting.now(), "a free place is taken without waiting");
        let queued = places.take_for(&waiting);
        tokio::pin!(queued);
        assert!(futures::poll!(queued.as_mut()).is_pending());
        assert!(waiting.now());
        drop(held);
        assert!(queued.await.is_some());
        assert!(!waiting.now());
        // A waiter dropped while queued is no longer noted.
        let _held = places.take(None).await.expect("a place");
        let gave_up = tokio::time::timeout(Duration::from_millis(10), places.take_for(&waiting));
        assert!(gave_up.await.is_err());
        assert!(!waiting.now());
    }

    #[test]
    fn no_bound_below_one() {
        assert_eq!(Places::new("crm", 0).free(), 1);
    }
}
