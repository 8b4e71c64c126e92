//! Decisions made without Redis: counted on the backend (for tests and health pages) and
//! through the `metrics` facade (for dashboards).

use std::sync::atomic::{AtomicU64, Ordering};

/// The counter every backend increments for a decision it made without Redis.
pub const UNAVAILABLE_DECISIONS: &str = "toolgate_redis_unavailable_decisions_total";

/// How many decisions a backend made while Redis could not answer, by outcome.
///
/// The same counts go to the `metrics` facade as
/// `toolgate_redis_unavailable_decisions_total{backend, outcome}`, with `backend` one of
/// `quota`, `budget`, `concurrency`, `cache` and `outcome` one of `fail_open`, `fail_closed`,
/// `fallback_granted`, `fallback_refused` (quota and concurrency), `read_as_miss`,
/// `not_stored` (cache).
///
/// # Examples
///
/// ```
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), toolgate_redis::RedisError> {
/// let state = RedisState::connect_lazy("redis://127.0.0.1:6379", RedisConfig::default())?;
/// assert_eq!(state.quota().unavailable_decisions().total(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnavailableDecisions {
    /// Let through without a check (fail open).
    pub fail_open: u64,
    /// Refused, or handed to the hook as `Unavailable` (fail closed).
    pub fail_closed: u64,
    /// Granted by the local fallback budget.
    pub fallback_granted: u64,
    /// Refused by the local fallback budget.
    pub fallback_refused: u64,
}

impl UnavailableDecisions {
    /// Every decision made without Redis.
    pub fn total(&self) -> u64 {
        self.fail_open + self.fail_closed + self.fallback_granted + self.fallback_refused
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    FailOpen,
    FailClosed,
    FallbackGranted,
    FallbackRefused,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::FailOpen => "fail_open",
            Outcome::FailClosed => "fail_closed",
            Outcome::FallbackGranted => "fallback_granted",
            Outcome::FallbackRefused => "fallback_refused",
        }
    }
}

/// The counts of one backend.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    fallback_granted: AtomicU64,
    fallback_refused: AtomicU64,
}

impl Counters {
    pub(crate) fn record(&self, backend: &'static str, outcome: Outcome) {
        let cell = match outcome {
            Outcome::FailOpen => &self.fail_open,
            Outcome::FailClosed => &self.fail_closed,
            Outcome::FallbackGranted => &self.fallback_granted,
            Outcome::FallbackRefused => &self.fallback_refused,
        };
        cell.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(UNAVAILABLE_DECISIONS, "backend" => backend, "outcome" => outcome.label())
            .increment(1);
    }

    pub(crate) fn snapshot(&self) -> UnavailableDecisions {
        UnavailableDecisions {
            fail_open: self.fail_open.load(Ordering::Relaxed),
            fail_closed: self.fail_closed.load(Ordering::Relaxed),
            fallback_granted: self.fallback_granted.load(Ordering::Relaxed),
            fallback_refused: self.fallback_refused.load(Ordering::Relaxed),
        }
    }
}
