//! [`QuotaBackend`]: where rate-limit state lives (in memory by default, Redis later).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

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
/// the default; a shared store (Redis, a database) implements the same trait so that
/// replicas share budgets.
///
/// Object safe: the [`Quota`](super::Quota) hook holds an `Arc<dyn QuotaBackend>`. Write
/// `acquire` as an `async fn` under [`#[async_trait]`](crate::async_trait), re-exported
/// by this crate so that an implementer needs no dependency of their own; it turns the
/// method into a boxed future, one allocation per call.
///
/// # Examples
///
/// A fixed allowance per key that never refills (prepaid credits), kept in a map that
/// stands in for a database table. It ignores the rate and answers a spent budget with the
/// longest wait there is:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::quota::{
///     Quota, QuotaBackend, QuotaBackendError, QuotaDecision, QuotaLease, QuotaRequest, Rate,
/// };
///
/// struct Credits(Mutex<HashMap<String, u32>>);
///
/// #[async_trait]
/// impl QuotaBackend for Credits {
///     async fn acquire(
///         &self,
///         request: QuotaRequest<'_>,
///     ) -> Result<QuotaDecision, QuotaBackendError> {
///         let mut credits = self.0.lock().unwrap();
///         match credits.get_mut(request.key) {
///             Some(left) if *left > 0 => {
///                 *left -= 1;
///                 Ok(QuotaDecision::Granted(QuotaLease::settled()))
///             }
///             _ => Ok(QuotaDecision::Limited { retry_after: Duration::MAX }),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let credits = Arc::new(Credits(Mutex::new(HashMap::from([("ann".to_owned(), 1)]))));
/// let request = QuotaRequest { key: "ann", rate: Rate::per_minute(60)? };
/// assert!(matches!(credits.acquire(request).await?, QuotaDecision::Granted(_)));
/// assert!(matches!(credits.acquire(request).await?, QuotaDecision::Limited { .. }));
///
/// // The hook takes it like any other backend.
/// let quota = Quota::builder(Rate::per_minute(60)?).backend(credits).build();
/// # let _ = quota;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait QuotaBackend: Send + Sync + 'static {
    /// Takes one unit from `request.key`'s budget, or says how long until one comes back.
    async fn acquire(&self, request: QuotaRequest<'_>) -> Result<QuotaDecision, QuotaBackendError>;
}
