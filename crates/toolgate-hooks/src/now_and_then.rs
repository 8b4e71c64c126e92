//! Log lines about a failure that repeats at every call, told now and then.
//!
//! While a shared backend (Redis) is away, every call that needs it fails the same way: a
//! line per call would flood the log at the call rate, during exactly the incident it is
//! read for. A policy's [`NowAndThen`] says the first failure at once, and then at most one
//! a [`TELL_EVERY`], with how many it did not say since; the rest go to `debug`.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a repeated failure is told, at most.
pub(crate) const TELL_EVERY: Duration = Duration::from_secs(10);

/// When a failure was last told, and how many came since; see the module.
#[derive(Debug, Default)]
pub(crate) struct NowAndThen {
    told: Mutex<Option<(Instant, u64)>>,
}

impl NowAndThen {
    /// Whether to tell of the failure that came now: `Some(n)`, with `n` failures untold
    /// since the last that was, when none was told in the last [`TELL_EVERY`]; else `None`
    /// (it is counted, to be said with the next one told).
    pub(crate) fn tell(&self) -> Option<u64> {
        self.tell_at(Instant::now())
    }

    fn tell_at(&self, now: Instant) -> Option<u64> {
        let mut told = self.told.lock().unwrap_or_else(PoisonError::into_inner);
        match *told {
            Some((at, untold)) if now.saturating_duration_since(at) < TELL_EVERY => {
                *told = Some((at, untold.saturating_add(1)));
                None
            }
            last => {
                *told = Some((now, 0));
                Some(last.map_or(0, |(_, untold)| untold))
            }
        }
    }
}

/// Logs that the backend `what` (`quota backend`…) of the policy `policy` failed with
/// `error`, and that the call was `refused` (fail closed) or let through — now and then
/// ([`NowAndThen::tell`]; the lines not told go to `debug`).
pub(crate) fn backend_failed(
    failures: &NowAndThen,
    policy: &str,
    what: &str,
    error: &dyn std::fmt::Display,
    refused: bool,
) {
    let Some(untold) = failures.tell() else {
        tracing::debug!(policy, %error, refused, "{what} failed again");
        return;
    };
    if refused {
        tracing::error!(policy, %error, untold_since_last = untold, "{what} failed; call refused (fail closed); told at most once every 10 s");
    } else {
        tracing::warn!(policy, %error, untold_since_last = untold, "{what} failed; call let through (fail open); told at most once every 10 s");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_at_every_call_is_told_once_an_interval_with_how_many_were_not() {
        let repeated = NowAndThen::default();
        let start = Instant::now();
        assert_eq!(
            repeated.tell_at(start),
            Some(0),
            "the first is told at once"
        );
        for ms in 1..=500 {
            let at = start + Duration::from_millis(ms);
            assert_eq!(repeated.tell_at(at), None);
        }
        assert_eq!(repeated.tell_at(start + TELL_EVERY), Some(500));
        assert_eq!(repeated.tell_at(start + TELL_EVERY), None);
    }
}
