//! [`ConcurrencyBackend`]: where in-flight counts live (in memory by default, Redis later).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

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
/// `Arc<dyn ConcurrencyBackend>`. Write `acquire` as an `async fn` under
/// [`#[async_trait]`](crate::async_trait), re-exported by this crate so that an
/// implementer needs no dependency of their own.
///
/// # Examples
///
/// One pool of slots for every key, on a tokio semaphore (a stand-in for a connection
/// pool's own limit). The permit holds the semaphore's permit, so it is given back when
/// the invocation drops it:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use tokio::sync::Semaphore;
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::concurrency::{
///     Concurrency, ConcurrencyBackend, ConcurrencyBackendError, Permit, PermitRequest,
/// };
///
/// struct Pool(Arc<Semaphore>);
///
/// #[async_trait]
/// impl ConcurrencyBackend for Pool {
///     async fn acquire(
///         &self,
///         request: PermitRequest<'_>,
///     ) -> Result<Option<Permit>, ConcurrencyBackendError> {
///         let slot = tokio::time::timeout(request.wait, Arc::clone(&self.0).acquire_owned());
///         match slot.await {
///             Ok(Ok(permit)) => Ok(Some(Permit::new(permit))),
///             Ok(Err(closed)) => Err(ConcurrencyBackendError::Unavailable(closed.to_string())),
///             Err(_elapsed) => Ok(None),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = Arc::new(Pool(Arc::new(Semaphore::new(1))));
/// let request = PermitRequest { key: "search", limit: 1, wait: Duration::from_millis(10) };
/// let held = pool.acquire(request).await?;
/// assert!(held.is_some());
/// assert!(pool.acquire(request).await?.is_none(), "the only slot is taken");
/// drop(held);
/// assert!(pool.acquire(request).await?.is_some(), "and given back");
///
/// let hook = Concurrency::builder(1)?.backend(pool).build();
/// # let _ = hook;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait ConcurrencyBackend: Send + Sync + 'static {
    /// A permit for `request.key`, waiting at most `request.wait`; `Ok(None)` when none
    /// became free in time.
    async fn acquire(
        &self,
        request: PermitRequest<'_>,
    ) -> Result<Option<Permit>, ConcurrencyBackendError>;
}
