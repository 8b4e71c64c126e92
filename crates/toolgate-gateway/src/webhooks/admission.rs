//! Who may add an event to a webhook's queue: each caller up to a fair share of it (the
//! webhook's `caller_share`, [`CALLER_SHARE`] by default, counted by a
//! [`KeyedShare`](toolgate_hooks::concurrency::KeyedShare) per queue), and the events
//! refused, counted and told in the log once in a while ([`DropLog`]).
//!
//! A webhook's queue is shared by every caller of every tenant, and a caller makes events
//! at the pace of their own requests: parking a call and withdrawing it again costs one
//! user two requests and queues two events. Without a share, one user doing so in a loop
//! while the receiver is slow fills the queue, and the next caller's `suspension.waiting`
//! is dropped — their approvers are never told. With one, that user's own new events are
//! dropped past their share, and everyone else's still get in while the queue has room.

use std::time::Duration;

use tokio::time::Instant;

/// Events waiting to be sent to one webhook (each webhook has its own queue, so a
/// configuration holds at most this many per webhook); past it the newest is dropped for
/// that webhook only. One caller holds at most the webhook's `caller_share` of it
/// ([`CALLER_SHARE`] by default), which may not be more than this.
pub const QUEUE_CAPACITY: usize = 1024;

/// The most events one caller may hold in one webhook's queue at once — queued or being
/// delivered, retries included — unless the webhook's `caller_share` says otherwise
/// (`policies.approval.webhooks[i].caller_share`, from 1 to [`QUEUE_CAPACITY`]); past it
/// that caller's new events are dropped for that webhook (counted with
/// `reason="caller_share"`), while other callers' still get in.
///
/// A sixteenth of [`QUEUE_CAPACITY`] (64): sixteen callers flooding at once are needed to
/// fill a queue, and it is still far more than a person's calls leave undelivered while a
/// receiver keeps up — a webhook has [`IN_FLIGHT`](super::IN_FLIGHT) requests in progress,
/// so a share is only reached when the receiver has been slow or down for a while.
///
/// The caller of an event is the caller of its call (a user id in its tenant), whoever
/// caused it — the caller, an approver or the expiry: an approver decides a call once,
/// and a call expires once, so these events are as many as the calls their caller made.
pub const CALLER_SHARE: usize = QUEUE_CAPACITY / 16;

/// How often, at most, the events of one webhook dropped for one reason are told in the
/// log: the first at once, then one line per this time with how many were dropped since.
/// A flood of drops is counted in full in the metrics, never logged line by line.
pub const DROPS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// Why an event was not queued for a webhook, or not delivered: the `reason` of its
/// `dropped` count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dropped {
    /// Its caller holds their share of the queue already.
    CallerShare,
    /// The queue is full.
    QueueFull,
    /// The webhook's notifier was stopped (by a reload or shutdown) before it was
    /// delivered.
    Stopped,
}

impl Dropped {
    const ALL: [Dropped; 3] = [Dropped::CallerShare, Dropped::QueueFull, Dropped::Stopped];

    /// The `reason` label.
    pub(super) fn label(self) -> &'static str {
        match self {
            Dropped::CallerShare => "caller_share",
            Dropped::QueueFull => "queue_full",
            Dropped::Stopped => "stopped",
        }
    }

    /// What the log says.
    pub(super) fn why(self) -> &'static str {
        match self {
            Dropped::CallerShare => {
                "the webhook queue holds as many of this caller's events as one caller may: their new events are dropped for this webhook until some are delivered"
            }
            Dropped::QueueFull => {
                "the webhook queue is full: the event is dropped for this webhook"
            }
            Dropped::Stopped => {
                "the webhook notifier was stopped: the event is dropped for this webhook"
            }
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// When the drops of one webhook were last told in the log, and how many since, by reason.
#[derive(Default)]
pub(super) struct DropLog {
    told_at: [Option<Instant>; Dropped::ALL.len()],
    untold: [u64; Dropped::ALL.len()],
}

impl DropLog {
    /// Counts one drop for `reason` at `now`: how many to tell in the log now (this one
    /// and those not told since), or none within [`DROPS_LOGGED_EVERY`] of the last line.
    pub(super) fn dropped(&mut self, reason: Dropped, now: Instant) -> Option<u64> {
        let i = reason.index();
        self.untold[i] += 1;
        if self.told_at[i].is_some_and(|at| now.duration_since(at) < DROPS_LOGGED_EVERY) {
            return None;
        }
        self.told_at[i] = Some(now);
        Some(std::mem::take(&mut self.untold[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_told_once_per_window_with_how_many_were_dropped_since() {
        let mut log = DropLog::default();
        let start = Instant::now();

        assert_eq!(log.dropped(Dropped::CallerShare, start), Some(1));
        for _ in 0..99 {
            assert_eq!(log.dropped(Dropped::CallerShare, start), None);
        }
        assert_eq!(
            log.dropped(Dropped::QueueFull, start),
            Some(1),
            "each reason is told in its own window"
        );
        let later = start + DROPS_LOGGED_EVERY;
        assert_eq!(log.dropped(Dropped::CallerShare, later), Some(100));
        assert_eq!(log.dropped(Dropped::CallerShare, later), None);
    }
}
