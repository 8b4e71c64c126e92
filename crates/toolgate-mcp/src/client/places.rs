//! The bound on the requests one HTTP upstream has in flight
//! ([`UpstreamConfig::max_connections`](super::UpstreamConfig::max_connections)), and each
//! caller's share of it
//! ([`max_connections_per_caller`](super::UpstreamConfig::max_connections_per_caller)).
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
//! its caller gave up — leaves the queue and takes nothing with it.
//!
//! # A caller's share
//!
//! The bound is the upstream's; without more, one caller — hundreds of calls, or lists and
//! reads, which nothing else caps — could hold every place, and every other caller of the
//! upstream would wait for it and fail at its deadline. So a request of an authenticated
//! caller ([`User::caller_key`], tenant and all) first takes a place in its caller's
//! share — at most `max_connections_per_caller` of the upstream's places — waiting for
//! one in FIFO order until the same deadline, and only then the upstream's place: a
//! request that waits for its caller's share holds none of the upstream's. Still waiting
//! at its deadline, it fails with [`ShareUsed`] (503 `upstream_share_used`), which tells
//! the caller that it is its own requests that hold it up, not the upstream's load. Both
//! are held by the [`Place`], and given back together. A request no caller makes — the
//! anonymous user's (a deployment without authentication), or one the gateway makes
//! itself (a reconnect's `initialize`, a subscription made again, rmcp's recovery of a
//! session) — takes no share.
//!
//! The callers' shares are counted in a table with an entry for each caller that holds
//! or awaits a place now, and no other: an entry is made by a caller's first request and
//! goes, under the table's lock, with the last [`Sharer`] of it — held by each request
//! that holds, awaits or may still take a place of the share — so neither a flood of
//! distinct callers nor a waiter dropped at any point leaves one behind. The table holds
//! at most one entry per request alive, as the requests themselves are bounded.
//!
//! What a request costs: one semaphore acquire for the upstream's place, no allocation,
//! and no metric unless it had to wait. A caller's request adds the table's lock twice
//! (finding its entry; giving the last hold of it back) and a second semaphore acquire;
//! when its caller has no other request alive, making the entry is two allocations (the
//! entry and its key), and a caller with a tenant allocates its key for the look-up too.
//! A share equal to the bound is no share: no entry is made.
//!
//! # A request given up
//!
//! A request its caller gives up before its answer — cancelled, gone, out of time — may
//! still be running at the upstream, which is told (`notifications/cancelled`) but need not
//! stop. Its [`Place`], in its caller's share and among the upstream's, is kept until the
//! upstream is known to be done with it (its answer or the end of its stream), at most
//! until the upstream's `call_timeout` after it was given up (or its deadline, if later):
//! the longest the upstream may run a request, which a caller cannot shorten with a short
//! deadline of its own, nor a reload by closing toolgate's connection
//! ([`cancelled`](super::cancelled)). Otherwise a caller that starts and cancels calls in
//! a loop would keep any number of them running at the upstream, past its share and the
//! bound. That holds whoever sends the request and wherever it is: a POST toolgate sends
//! is watched until its answer; one rmcp sends (lists, reads, `prompts/get`,
//! subscriptions, calls toolgate leaves to rmcp), given up before its answer's head, and
//! one given up while rmcp's GET that resumes its stream is under way, are dropped with
//! rmcp's future, and their places are kept until the hold limit. The cancel itself
//! returns at once; a request given up while it waits for a place was never sent, and
//! holds none.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use toolgate_core::User;

use super::response_stream::LET_GO;

/// How many times a request to an upstream had to wait for a place, by upstream
/// (`server`): a counter that climbs says the upstream's `max_connections` is too low
/// for its load, or the upstream too slow for it.
pub const UPSTREAM_WAITS: &str = "toolgate_mcp_upstream_waits_total";

/// How many times a caller's request to an upstream had to wait for a place in its
/// caller's share, by upstream (`server`; never by caller, whose ids are unbounded): a
/// counter that climbs says callers keep the upstream's `max_connections_per_caller` of
/// requests in flight.
pub const UPSTREAM_SHARE_WAITS: &str = "toolgate_mcp_upstream_share_waits_total";

/// The places of one upstream's requests in flight; see the module.
pub(crate) struct Places {
    server: Arc<str>,
    max: usize,
    /// The longest a place of a request without a deadline is kept after the request is
    /// given up (the upstream's `call_timeout`).
    hold: Duration,
    semaphore: Arc<Semaphore>,
    shares: Arc<Shares>,
}

/// A request's place among its upstream's requests in flight, and in its caller's share
/// when it has one: both given back when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    _permit: OwnedSemaphorePermit,
    _share: Option<SharePlace>,
    /// The request's deadline, if it has one.
    deadline: Option<Instant>,
    /// The upstream's `call_timeout`: how long the upstream may run a request.
    hold: Duration,
}

impl Place {
    /// When the place of a request given up at `given_up` before its answer is given back
    /// at the latest: the upstream's `call_timeout` after `given_up` — the longest the
    /// upstream may run a request, which a caller's own short deadline does not shorten
    /// (a caller that gave its calls a deadline of 50 ms would otherwise keep any number of
    /// them running) — or its deadline if later, and never sooner than [`LET_GO`] after
    /// `given_up`.
    pub(crate) fn held_until(&self, given_up: Instant) -> Instant {
        let limit = given_up + self.hold.max(LET_GO);
        self.deadline.map_or(limit, |deadline| deadline.max(limit))
    }

    /// When what is left of the answer to a request given up at `given_up` is let go —
    /// its stream dropped, its connection closed, which may tell the upstream to stop —
    /// at the latest: its deadline (without one, [`held_until`](Self::held_until)), never
    /// sooner than [`LET_GO`] after `given_up`. Its place is kept after, until
    /// [`held_until`](Self::held_until).
    pub(crate) fn answer_let_go_at(&self, given_up: Instant) -> Instant {
        match self.deadline {
            Some(deadline) => deadline.max(given_up + LET_GO),
            None => self.held_until(given_up),
        }
    }
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

/// A request found its caller holding its whole share of the upstream's places, and its
/// deadline came before one of the caller's requests gave one back.
#[derive(Debug, thiserror::Error)]
#[error(
    "you have {share} {} in flight to MCP server `{server}`, the most one caller may (its `max_connections_per_caller`), and none finished for as long as this one could wait ({waited:.1?}, up to its deadline); try again when one has finished, or ask an operator to raise it",
    if *.share == 1 { "request" } else { "requests" }
)]
pub(crate) struct ShareUsed {
    pub server: Arc<str>,
    pub share: usize,
    pub waited: Duration,
}

/// Why a request got no place by its deadline.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoPlace {
    /// The upstream's places were all taken.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The caller's share was all taken, by its own requests.
    #[error(transparent)]
    ShareUsed(#[from] ShareUsed),
}

impl Places {
    /// At most `max` requests in flight to `server` (at least one), at most `share` of
    /// them (at least one; `max` or more: no share) a caller's; the place of a request
    /// without a deadline kept at most `hold` (the upstream's `call_timeout`) after the
    /// request is given up unanswered.
    pub(crate) fn new(server: &str, max: usize, share: usize, hold: Duration) -> Arc<Places> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Places {
            server: Arc::from(server),
            max,
            hold,
            semaphore: Arc::new(Semaphore::new(max)),
            shares: Arc::new(Shares {
                share: share.clamp(1, max),
                table: Mutex::default(),
            }),
        })
    }

    /// The share `user`'s requests take their places in; `None` for the anonymous user
    /// (a request no caller made), or when a share is the whole bound.
    pub(crate) fn sharer(&self, user: &User) -> Option<Sharer> {
        // `ToolInvokeContext::user` is this one instance when the call names no user.
        let anonymous = std::ptr::eq(user, Arc::as_ptr(&User::anonymous()));
        if anonymous || self.shares.share >= self.max {
            return None;
        }
        Some(Shares::sharer(&self.shares, &user.caller_key()))
    }

    /// A place if one is free now, without waiting (and without a share: for a request
    /// the gateway makes itself).
    pub(crate) fn try_take(&self) -> Option<Place> {
        let permit = Arc::clone(&self.semaphore).try_acquire_owned().ok()?;
        Some(Place {
            _permit: permit,
            _share: None,
            deadline: None,
            hold: self.hold,
        })
    }

    /// A place — first in `sharer`'s share, when given — waiting for one until `deadline`
    /// (without one: as long as it takes, or until the future is dropped).
    ///
    /// # Errors
    ///
    /// [`NoPlace`] when `deadline` comes first: [`ShareUsed`] while the request still
    /// waits for its caller's share, [`Busy`] while it waits for the upstream's place.
    pub(crate) async fn take(
        &self,
        sharer: Option<&Sharer>,
        deadline: Option<Instant>,
    ) -> Result<Place, NoPlace> {
        self.take_noted(sharer, deadline, Noted::default()).await
    }

    /// A place, as [`take`](Self::take) without a deadline nor a share, `waiting` telling
    /// meanwhile that a request of its connection attempt waits for one.
    pub(crate) async fn take_for(&self, waiting: &Waiting) -> Option<Place> {
        let noted = Noted {
            upstream: Some(waiting),
            share: None,
        };
        self.take_noted(None, None, noted).await.ok()
    }

    /// [`Busy`] for a request that waited `waited` for a place, in vain.
    pub(crate) fn busy(&self, waited: Duration) -> Busy {
        Busy {
            server: Arc::clone(&self.server),
            max: self.max,
            waited,
        }
    }

    /// [`ShareUsed`] for a request that waited `waited` for a place in its caller's
    /// share, in vain.
    pub(crate) fn share_used(&self, waited: Duration) -> ShareUsed {
        ShareUsed {
            server: Arc::clone(&self.server),
            share: self.shares.share,
            waited,
        }
    }

    async fn take_noted(
        &self,
        sharer: Option<&Sharer>,
        deadline: Option<Instant>,
        noted: Noted<'_>,
    ) -> Result<Place, NoPlace> {
        // The share first: a request waiting for it holds none of the upstream's places.
        let share = match sharer {
            Some(sharer) => Some(self.take_share(sharer, deadline, noted.share).await?),
            None => None,
        };
        if let Ok(permit) = Arc::clone(&self.semaphore).try_acquire_owned() {
            return Ok(Place {
                _permit: permit,
                _share: share,
                deadline,
                hold: self.hold,
            });
        }
        // Noted only while queued, not while a free place is taken.
        let _queued = noted.upstream.map(Waiting::queued);
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
            Some(Ok(permit)) => Ok(Place {
                _permit: permit,
                _share: share,
                deadline,
                hold: self.hold,
            }),
            _ => {
                tracing::warn!(server = %self.server, max = self.max, "a call waited for a place among the MCP server's requests in flight until its deadline (`max_connections`)");
                Err(self.busy(started.elapsed()).into())
            }
        }
    }

    /// A place in `sharer`'s share, waiting for one until `deadline`, noted in `waiting`
    /// while queued.
    async fn take_share(
        &self,
        sharer: &Sharer,
        deadline: Option<Instant>,
        waiting: Option<&Waiting>,
    ) -> Result<SharePlace, ShareUsed> {
        let free = &sharer.entry.free;
        if let Ok(permit) = free.try_acquire() {
            permit.forget();
            return Ok(SharePlace(sharer.clone()));
        }
        let _queued = waiting.map(Waiting::queued);
        let started = Instant::now();
        let share = self.shares.share;
        metrics::counter!(UPSTREAM_SHARE_WAITS, "server" => self.server.to_string()).increment(1);
        tracing::debug!(server = %self.server, share, "a caller has as many requests in flight to the MCP server as one may (`max_connections_per_caller`); its request waits for one to finish");
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, free.acquire()).await.ok(),
            None => Some(free.acquire().await),
        };
        // Never closed, as the upstream's.
        match permit {
            Some(Ok(permit)) => {
                permit.forget();
                Ok(SharePlace(sharer.clone()))
            }
            _ => {
                tracing::warn!(server = %self.server, share, "a caller's request waited for a place in its share of the MCP server's requests in flight until its deadline (`max_connections_per_caller`)");
                Err(self.share_used(started.elapsed()))
            }
        }
    }

    /// Places free now (for tests).
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// The callers with an entry in the table now (for tests).
    #[cfg(test)]
    fn callers(&self) -> usize {
        self.shares.lock().len()
    }
}

/// The [`Waiting`]s a request is noted in while it waits: for its share, for the
/// upstream's place.
#[derive(Clone, Copy, Default)]
struct Noted<'a> {
    upstream: Option<&'a Waiting>,
    share: Option<&'a Waiting>,
}

/// The callers' shares of one upstream's places: an entry for each caller that holds or
/// awaits a place (see the module).
struct Shares {
    /// The places one caller may hold.
    share: usize,
    table: Mutex<HashSet<Entry>>,
}

impl Shares {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Entry>> {
        // The table is consistent between any two statements: a panic leaves it usable.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of the caller `key`, made if it has none, counted as held once more.
    fn sharer(shares: &Arc<Shares>, key: &str) -> Sharer {
        let mut table = shares.lock();
        let entry = match table.get(key) {
            Some(entry) => {
                entry.0.holders.fetch_add(1, Ordering::Relaxed);
                Arc::clone(&entry.0)
            }
            None => {
                let entry = Arc::new(Share {
                    key: Box::from(key),
                    free: Semaphore::new(shares.share),
                    holders: AtomicUsize::new(1),
                });
                table.insert(Entry(Arc::clone(&entry)));
                entry
            }
        };
        Sharer {
            shares: Arc::clone(shares),
            entry,
        }
    }
}

/// One caller's share: its free places, and how many [`Sharer`]s of it live.
#[derive(Debug)]
struct Share {
    key: Box<str>,
    free: Semaphore,
    /// Changed from 0 or to 0 only under the table's lock; the entry leaves the table as
    /// it comes to 0.
    holders: AtomicUsize,
}

/// A table entry, found by its caller's key.
struct Entry(Arc<Share>);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Entry {}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes: `Borrow<str>` requires it.
        self.0.key.hash(state);
    }
}

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

/// A hold on one caller's entry in the table of shares, by a request that holds, awaits
/// or may take a place in it: the entry lives while one does.
#[derive(Debug)]
pub(crate) struct Sharer {
    shares: Arc<Shares>,
    entry: Arc<Share>,
}

impl std::fmt::Debug for Shares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shares")
            .field("share", &self.share)
            .finish()
    }
}

impl Clone for Sharer {
    fn clone(&self) -> Self {
        // From a live hold: the count is 1 or more, and stays so meanwhile.
        self.entry.holders.fetch_add(1, Ordering::Relaxed);
        Sharer {
            shares: Arc::clone(&self.shares),
            entry: Arc::clone(&self.entry),
        }
    }
}

impl Drop for Sharer {
    fn drop(&mut self) {
        // Not the last hold: given back without the lock.
        let holders = &self.entry.holders;
        let mut now = holders.load(Ordering::Relaxed);
        while now > 1 {
            match holders.compare_exchange_weak(now, now - 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => now = actual,
            }
        }
        // Perhaps the last: under the lock, where no new hold of the entry is made.
        let mut table = self.shares.lock();
        if holders.fetch_sub(1, Ordering::AcqRel) == 1
            && table
                .get(&*self.entry.key)
                .is_some_and(|entry| Arc::ptr_eq(&entry.0, &self.entry))
        {
            table.remove(&*self.entry.key);
        }
    }
}

/// A place in a caller's share, given back when dropped (before its hold on the entry).
#[derive(Debug)]
struct SharePlace(Sharer);

impl Drop for SharePlace {
    fn drop(&mut self) {
        self.0.entry.free.add_permits(1);
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
/// request is sent — in its caller's share first, when it has one — and handed to the
/// transport with it ([`Reserved`]), noted while it waits. At the request's deadline that
/// tells one held up by its caller's share (503 `upstream_share_used`) or by the bound
/// (503 `upstream_busy`, as a call is) from one the upstream did not answer in time: the
/// transport's own wait for a place notes the connection's requests together, and ends
/// at no deadline.
#[derive(Clone)]
pub(crate) struct Seat {
    places: Arc<Places>,
    sharer: Option<Sharer>,
    /// The request's deadline: its place is held until then at least once it is given up.
    deadline: Option<Instant>,
    /// Its requests queued for the upstream's place.
    waiting: Waiting,
    /// Its requests queued for a place in the caller's share.
    waiting_share: Waiting,
}

impl Seat {
    /// A seat among `places` for one request (or the pages of one list, one at a time),
    /// in `sharer`'s share when given, whose caller waits for it until `deadline`.
    pub(crate) fn new(
        places: Arc<Places>,
        sharer: Option<Sharer>,
        deadline: Option<Instant>,
    ) -> Self {
        Seat {
            places,
            sharer,
            deadline,
            waiting: Waiting::default(),
            waiting_share: Waiting::default(),
        }
    }

    /// A place for the next request to send, waiting for one as long as it takes (its
    /// caller's deadline ends the wait, by dropping the future).
    pub(crate) async fn reserve(&self) -> Option<Reserved> {
        let noted = Noted {
            upstream: Some(&self.waiting),
            share: Some(&self.waiting_share),
        };
        let place = self.places.take_noted(self.sharer.as_ref(), None, noted);
        let mut place = place.await.ok()?;
        if let Some(deadline) = self.deadline {
            place.deadline = Some(deadline);
        }
        Some(Reserved::new(place))
    }

    /// Why a request of the seat, which has waited `waited`, is queued for a place now;
    /// `None` when none is.
    pub(crate) fn held_up(&self, waited: Duration) -> Option<NoPlace> {
        if self.waiting_share.now() {
            Some(self.places.share_used(waited).into())
        } else if self.waiting.now() {
            Some(self.places.busy(waited).into())
        } else {
            None
        }
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

    /// The upstream's `call_timeout` in these tests.
    const HOLD: Duration = Duration::from_secs(30);

    /// What a place costs without a share and in a caller's share, measured in one run
    /// (the caller has no other request alive, so its entry is made and dropped each time,
    /// the dearest case): `cargo test --release -p toolgate-mcp --lib place_cost --
    /// --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "a measurement, not a check: prints what a place costs"]
    async fn place_cost() {
        const ROUNDS: u32 = 500_000;
        let places = Places::new("crm", 256, 128, HOLD);
        let user = User::new("ann").with_tenant("acme");
        for _ in 0..3 {
            let started = std::time::Instant::now();
            for _ in 0..ROUNDS {
                drop(places.take(None, None).await);
            }
            let bare = started.elapsed() / ROUNDS;
            let started = std::time::Instant::now();
            for _ in 0..ROUNDS {
                let sharer = places.sharer(&user);
                drop(places.take(sharer.as_ref(), None).await);
            }
            let shared = started.elapsed() / ROUNDS;
            println!("a place: {bare:?} without a share, {shared:?} in the caller's share");
        }
    }

    /// A place for `sharer`'s request, now or never.
    async fn now(places: &Places, sharer: Option<&Sharer>) -> Result<Place, NoPlace> {
        places.take(sharer, Some(Instant::now())).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_is_busy_and_says_what_to_do() {
        let places = Places::new("crm", 2, 2, HOLD);
        let _held = (places.take(None, None).await, places.take(None, None).await);
        let deadline = Instant::now() + Duration::from_secs(2);
        let Err(NoPlace::Busy(busy)) = places.take(None, Some(deadline)).await else {
            panic!("busy");
        };
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
        let places = Places::new("crm", 1, 1, HOLD);
        let held = places.take(None, None).await.expect("a place");
        // A waiter whose caller gave up, dropped while queued.
        let gave_up = tokio::time::timeout(Duration::from_millis(10), places.take(None, None));
        assert!(gave_up.await.is_err());
        drop(held);
        assert_eq!(places.free(), 1);
        assert!(
            now(&places, None).await.is_ok(),
            "the next request proceeds"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_noted_waiting_only_while_it_is_queued() {
        let places = Places::new("crm", 1, 1, HOLD);
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
        let _held = places.take(None, None).await.expect("a place");
        let gave_up = tokio::time::timeout(Duration::from_millis(10), places.take_for(&waiting));
        assert!(gave_up.await.is_err());
        assert!(!waiting.now());
    }

    #[test]
    fn no_bound_below_one() {
        assert_eq!(Places::new("crm", 0, 0, HOLD).free(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_at_its_share_waits_for_it_to_its_deadline_while_another_caller_gets_a_place()
    {
        let places = Places::new("crm", 4, 2, HOLD);
        let bob = places.sharer(&User::new("bob")).expect("a share");
        let _bobs = (
            now(&places, Some(&bob)).await,
            now(&places, Some(&bob)).await,
        );
        assert_eq!(places.free(), 2);
        let deadline = Instant::now() + Duration::from_secs(2);
        let third = places.take(Some(&bob), Some(deadline));
        tokio::pin!(third);
        assert!(futures::poll!(third.as_mut()).is_pending());
        assert_eq!(
            places.free(),
            2,
            "a request waiting for its share holds no place"
        );
        let alice = places.sharer(&User::new("alice")).expect("a share");
        let alices = now(&places, Some(&alice)).await;
        assert!(alices.is_ok(), "another caller still gets a place");
        let Err(NoPlace::ShareUsed(used)) = third.await else {
            panic!("bob's share is used");
        };
        assert_eq!(used.waited, Duration::from_secs(2));
        assert_eq!(used.share, 2);
        // A tenant's `bob` is another caller.
        let acme_bob = places.sharer(&User::new("bob").with_tenant("acme"));
        assert!(now(&places, acme_bob.as_ref()).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_given_back_goes_to_the_callers_next_waiter_in_turn() {
        let places = Places::new("crm", 4, 1, HOLD);
        let bob = places.sharer(&User::new("bob")).expect("a share");
        let held = now(&places, Some(&bob)).await.expect("a place");
        let next = places.take(Some(&bob), None);
        tokio::pin!(next);
        assert!(futures::poll!(next.as_mut()).is_pending());
        drop(held);
        assert!(next.await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_share_waiter_leaves_nothing_behind() {
        let places = Places::new("crm", 2, 1, HOLD);
        let bob = places.sharer(&User::new("bob")).expect("a share");
        let held = now(&places, Some(&bob)).await.expect("a place");
        let gave_up =
            tokio::time::timeout(Duration::from_millis(10), places.take(Some(&bob), None));
        assert!(gave_up.await.is_err());
        drop((held, bob));
        assert_eq!(places.free(), 2);
        assert_eq!(places.callers(), 0, "no entry is left for bob");
        let bob = places.sharer(&User::new("bob"));
        assert!(
            now(&places, bob.as_ref()).await.is_ok(),
            "bob's next request proceeds"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_table_is_empty_once_many_distinct_callers_have_come_and_gone() {
        let places = Places::new("crm", 8, 2, HOLD);
        // A flood of distinct callers, each a request through a place and gone.
        for i in 0..10_000 {
            let sharer = places.sharer(&User::new(format!("user-{i}")));
            let place = now(&places, sharer.as_ref()).await.expect("a place");
            drop(sharer);
            assert_eq!(places.callers(), 1, "held by its place only");
            drop(place);
        }
        assert_eq!(places.callers(), 0);
        // Callers at once, some past their shares, given up at every point of their wait.
        let requests = (0..400).map(|i| {
            let places = Arc::clone(&places);
            tokio::spawn(async move {
                let sharer = places.sharer(&User::new(format!("user-{}", i % 40)));
                let deadline = Instant::now() + Duration::from_millis(i % 7);
                if let Ok(place) = places.take(sharer.as_ref(), Some(deadline)).await {
                    tokio::time::sleep(Duration::from_millis(i % 5)).await;
                    drop(place);
                }
            })
        });
        for request in futures::future::join_all(requests).await {
            request.expect("joined");
        }
        assert_eq!(places.callers(), 0);
        assert_eq!(places.free(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn the_share_error_says_whose_requests_hold_it_up_and_what_to_do() {
        let places = Places::new("crm", 4, 2, HOLD);
        let bob = places.sharer(&User::new("bob"));
        let _held = (
            now(&places, bob.as_ref()).await,
            now(&places, bob.as_ref()).await,
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        let used = places.take(bob.as_ref(), Some(deadline)).await;
        let text = used.expect_err("bob's share is used").to_string();
        for words in [
            "you have 2 requests in flight to MCP server `crm`, the most one caller may",
            "`max_connections_per_caller`",
            "3.0s",
            "try again when one has finished, or ask an operator to raise it",
        ] {
            assert!(text.contains(words), "{words:?} in {text}");
        }
        assert!(
            !text.contains("::") && !text.contains("ShareUsed"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_seat_tells_a_wait_for_the_callers_share_from_one_for_the_upstream() {
        let places = Places::new("crm", 2, 1, HOLD);
        let bob = places.sharer(&User::new("bob"));
        let seat = Seat::new(Arc::clone(&places), bob.clone(), None);
        let held = seat.reserve().await.expect("a place");
        assert!(seat.held_up(Duration::ZERO).is_none());
        {
            let queued = seat.reserve();
            tokio::pin!(queued);
            assert!(futures::poll!(queued.as_mut()).is_pending());
            assert!(matches!(
                seat.held_up(Duration::ZERO),
                Some(NoPlace::ShareUsed(_))
            ));
        }
        drop(held);
        // Alice's request finds the upstream full, not her share.
        let _others = now(&places, None).await.expect("a place");
        let _bobs = seat.reserve().await.expect("bob's place");
        let alice = Seat::new(
            Arc::clone(&places),
            places.sharer(&User::new("alice")),
            None,
        );
        let queued = alice.reserve();
        tokio::pin!(queued);
        assert!(futures::poll!(queued.as_mut()).is_pending());
        assert!(matches!(
            alice.held_up(Duration::ZERO),
            Some(NoPlace::Busy(_))
        ));
    }

    #[test]
    fn the_anonymous_user_and_a_share_of_the_whole_bound_take_no_share() {
        let places = Places::new("crm", 4, 2, HOLD);
        assert!(places.sharer(&User::anonymous()).is_none());
        assert!(places.sharer(&User::new("bob")).is_some());
        let unshared = Places::new("crm", 4, 4, HOLD);
        assert!(unshared.sharer(&User::new("bob")).is_none());
    }
}
