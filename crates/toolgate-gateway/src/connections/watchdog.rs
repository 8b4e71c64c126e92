//! The header and idle timeouts of one connection.
//!
//! hyper's own header timeout starts as soon as it waits for a request, so on a keep-alive
//! connection it is also the idle timeout, and the two could not differ. Here the two are
//! told apart by what the connection is doing:
//!
//! - **head**: bytes of a request arrived (or the connection just opened) and no request
//!   is being answered; the head must be complete within the header timeout;
//! - **busy**: a request is being answered; no deadline here (the body has its own, and
//!   a call its own);
//! - **idle**: the last answer was sent in full and nothing new arrived; the next request
//!   must start within the idle timeout.
//!
//! The socket ([`WatchedIo`]) notes when bytes arrive, the service notes when an answer
//! starts and ends ([`InFlight`]), and the [`Watchdog`], polled right after the
//! connection in the same task, turns that into a deadline. Nothing here wakes the task:
//! every change it looks at happens while the connection is being polled, and the
//! watchdog looks right after.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// No request has started since the last answer.
const NOT_STARTED: u64 = u64::MAX;

/// What the socket and the service of one connection tell its [`Watchdog`].
#[derive(Debug)]
pub(super) struct Activity {
    /// Requests whose answer has not been sent in full (or given up).
    in_flight: AtomicUsize,
    /// Answers sent in full (or given up) so far.
    answered: AtomicU64,
    /// The value of `answered` when bytes last arrived while no request was being
    /// answered, or [`NOT_STARTED`].
    started_after: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            answered: AtomicU64::new(0),
            started_after: AtomicU64::new(NOT_STARTED),
        })
    }
}

/// Held from the moment a request reaches the service until its answer's body has been
/// sent in full or dropped.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Activity>);

impl InFlight {
    pub(super) fn enter(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Relaxed);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.answered.fetch_add(1, Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A connection's socket that tells its [`Activity`] when a request starts to arrive.
#[derive(Debug)]
pub(super) struct WatchedIo {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl WatchedIo {
    pub(super) fn new(stream: TcpStream, activity: Arc<Activity>) -> WatchedIo {
        WatchedIo { stream, activity }
    }
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let activity = &self.activity;
        if buf.filled().len() > before && activity.in_flight.load(Relaxed) == 0 {
            activity
                .started_after
                .store(activity.answered.load(Relaxed), Relaxed);
        }
        polled
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Why a connection was closed by its [`Watchdog`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expired {
    /// A request's line and headers did not arrive in time.
    Header,
    /// No request came in time on a kept-alive connection.
    Idle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Head,
    Busy,
    Idle,
}

/// The header and idle deadlines of one connection (see the module's docs).
#[derive(Debug)]
pub(super) struct Watchdog {
    activity: Arc<Activity>,
    header_timeout: Duration,
    idle_timeout: Duration,
    phase: Phase,
    /// `activity.answered` when the phase was last decided.
    answered: u64,
    deadline: Instant,
    /// Set to fire at `armed`; never later than `deadline`. It is moved later only when it
    /// fires early, so a busy connection does not reset a timer on every request.
    sleep: Pin<Box<Sleep>>,
    armed: Instant,
}

impl Watchdog {
    /// The watchdog of a connection that has just opened: its first request's head must
    /// arrive within `header_timeout`.
    pub(super) fn new(
        activity: Arc<Activity>,
        header_timeout: Duration,
        idle_timeout: Duration,
    ) -> Watchdog {
        let deadline = Instant::now() + header_timeout;
        Watchdog {
            activity,
            header_timeout,
            idle_timeout,
            phase: Phase::Head,
            answered: 0,
            deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            armed: deadline,
        }
    }

    /// Looks at what the connection did since the last call; ready when its deadline has
    /// passed. Call it right after each poll of the connection, in the same task.
    pub(super) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        let activity = &self.activity;
        if activity.in_flight.load(Relaxed) > 0 {
            self.phase = Phase::Busy;
            return Poll::Pending;
        }
        let answered = activity.answered.load(Relaxed);
        if self.phase == Phase::Busy || answered != self.answered {
            self.answered = answered;
            self.phase = Phase::Idle;
            self.deadline = Instant::now() + self.idle_timeout;
        }
        if self.phase == Phase::Idle && activity.started_after.load(Relaxed) == answered {
            self.phase = Phase::Head;
            self.deadline = Instant::now() + self.header_timeout;
        }
        if self.deadline < self.armed {
            self.armed = self.deadline;
            self.sleep.as_mut().reset(self.deadline);
        }
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if Instant::now() >= self.deadline {
                return Poll::Ready(match self.phase {
                    Phase::Idle => Expired::Idle,
                    Phase::Head | Phase::Busy => Expired::Header,
                });
            }
            self.armed = self.deadline;
            self.sleep.as_mut().reset(self.deadline);
        }
    }
}
