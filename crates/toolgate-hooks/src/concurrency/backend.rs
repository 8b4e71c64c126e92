//! [`ConcurrencyBackend`]: where in-flight counts live (in memory by default, Redis later).

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;

/// One request for a concurrency permit.
#[derive(Clone, Copy, Debug)]
pub struct PermitRequest<'a> {
    /// The budget, already namespaced by the policy.
    pub key: &'a str,
    /// How many calls with this key may be in flight at once.
    pub limit: u32,
    /// How long to wait for a permit when none is free (zero: do not wait).
    pub wait: Duration,
}

/// A concurrency permit: an RAII guard held for the invocation. Dropping it gives the
/// permit back — on success, error, panic and cancellation alike.
pub struct Permit {
    _guard: Box<dyn Send + Sync>,
}

impl Permit {
    /// A permit that gives itself back when `guard` is dropped.
    pub fn new(guard: impl Send + Sync + 'static) -> Self {
        Permit {
            _guard: Box::new(guard),
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Permit")
    }
}

/// A concurrency backend could not decide.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConcurrencyBackendError {
    /// The backend tracks as many keys as it may.
    #[error(
        "the concurrency limiter tracks {max_keys} keys with calls in flight: raise `max_keys` or partition more coarsely"
    )]
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// The backend could not be reached or failed.
    #[error("the concurrency backend failed: {0}")]
    Unavailable(String),
}

/// Where in-flight counts live. [`InMemoryConcurrency`](super::InMemoryConcurrency) is
/// the default; a shared store (Redis leases) implements the same trait.
///
/// Object safe: the [`Concurrency`](super::Concurrency) hook holds an
/// `Arc<dyn ConcurrencyBackend>`.
pub trait ConcurrencyBackend: Send + Sync + 'static {
    /// A permit for `request.key`, waiting at most `request.wait`; `Ok(None)` when none
    /// became free in time.
    fn acquire<'a>(
        &'a self,
        request: PermitRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<Permit>, ConcurrencyBackendError>>;
}
