//! [`QuotaBackend`]: where rate-limit state lives (in memory by default, Redis later).

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;

use super::Rate;

/// One request for a quota unit.
#[derive(Clone, Copy, Debug)]
pub struct QuotaRequest<'a> {
    /// The budget to charge, already namespaced by the policy.
    pub key: &'a str,
    /// The rate the budget follows.
    pub rate: Rate,
}

/// What a backend answers.
#[derive(Debug)]
pub enum QuotaDecision {
    /// A unit was taken. Hold the lease until the invocation ends.
    Granted(QuotaLease),
    /// The budget is spent: the next unit comes back after `retry_after`.
    Limited {
        /// The exact wait until a call with this key would be granted.
        retry_after: Duration,
    },
}

/// Proof that a unit was taken, held by the invocation until `did_release_quota` (or until
/// the context is dropped). A rate-limit unit is spent either way — dropping the lease
/// settles it, it does not refund it — but backends use the lease to count the units that
/// invocations hold right now ([`InMemoryQuota::in_use`](super::InMemoryQuota::in_use)).
pub struct QuotaLease {
    on_release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl QuotaLease {
    /// A lease that runs `on_release` exactly once, when it is released or dropped.
    pub fn new(on_release: impl FnOnce() + Send + Sync + 'static) -> Self {
        QuotaLease {
            on_release: Some(Box::new(on_release)),
        }
    }

    /// A lease with nothing to do on release (for backends that keep no in-use count).
    pub fn settled() -> Self {
        QuotaLease { on_release: None }
    }
}

impl Drop for QuotaLease {
    fn drop(&mut self) {
        if let Some(release) = self.on_release.take() {
            release();
        }
    }
}

impl fmt::Debug for QuotaLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaLease")
            .field("held", &self.on_release.is_some())
            .finish()
    }
}

/// A quota backend could not decide.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaBackendError {
    /// The backend tracks as many keys as it may, none of them idle.
    #[error(
        "the rate limiter tracks {max_keys} keys, none idle: raise `max_keys` or partition more coarsely"
    )]
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// The backend could not be reached or failed.
    #[error("the rate-limit backend failed: {0}")]
    Unavailable(String),
}

/// Where rate-limit state lives. The in-memory [`InMemoryQuota`](super::InMemoryQuota) is
/// the default; a shared store (Redis) implements the same trait so that replicas share
/// budgets.
///
/// Object safe: the [`Quota`](super::Quota) hook holds an `Arc<dyn QuotaBackend>`.
pub trait QuotaBackend: Send + Sync + 'static {
    /// Takes one unit from `request.key`'s budget, or says how long until one comes back.
    fn acquire<'a>(
        &'a self,
        request: QuotaRequest<'a>,
    ) -> BoxFuture<'a, Result<QuotaDecision, QuotaBackendError>>;
}
