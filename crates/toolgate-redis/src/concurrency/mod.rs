//! [`RedisConcurrency`]: a concurrency cap across replicas, on leases that expire.

mod lease;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use tokio::runtime::Handle;
use tokio::time::Instant;
use toolgate_hooks::async_trait;
use toolgate_hooks::concurrency::{
    ConcurrencyBackend, ConcurrencyBackendError, InMemoryConcurrency, Permit, PermitRequest,
};

pub use lease::LEASES_LOST;
use lease::{Lease, LeaseId};

use crate::keys;
use crate::link::{Failure, Link, millis_at_least_one};
use crate::stats::{Counters, Outcome, UnavailableDecisions};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));

/// The first and the longest pause between two tries while a caller waits for a permit.
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(50);

/// What [`RedisConcurrency`] decides when Redis gives no answer within the deadline.
///
/// Whatever the policy, the decision is counted
/// ([`RedisConcurrency::unavailable_decisions`] and the
/// `toolgate_redis_unavailable_decisions_total` counter).
///
/// # Examples
///
/// Failing closed (the default), a replica whose Redis is away (nothing listens on port 1)
/// answers `Unavailable` within the deadline, and the hook refuses the call:
///
/// ```
/// use std::time::Duration;
/// use toolgate_hooks::concurrency::{ConcurrencyBackend, ConcurrencyBackendError, PermitRequest};
/// use toolgate_redis::{ConcurrencyFailurePolicy, RedisConfig, RedisState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect_lazy("redis://127.0.0.1:1", RedisConfig::default())?;
/// let cap = state.concurrency();
/// assert_eq!(cap.failure_policy(), ConcurrencyFailurePolicy::FailClosed);
///
/// let request = PermitRequest { key: "k", limit: 4, wait: Duration::ZERO };
/// let started = std::time::Instant::now();
/// let answer = cap.acquire(request).await;
/// assert!(matches!(answer, Err(ConcurrencyBackendError::Unavailable(_))));
/// assert!(started.elapsed() < Duration::from_secs(1)); // the 100 ms deadline, not longer
/// assert_eq!(cap.unavailable_decisions().fail_closed, 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConcurrencyFailurePolicy {
    /// Answer [`ConcurrencyBackendError::Unavailable`] (the default): the
    /// [`Concurrency`](toolgate_hooks::concurrency::Concurrency) hook refuses the call
    /// (`overloaded`, 503) — unless the hook itself was built with
    /// `OnBackendError::FailOpen`, which has the last word.
    #[default]
    FailClosed,
    /// Give a permit unchecked: nothing caps calls while Redis is away.
    FailOpen,
    /// Cap calls in this process at `limit` per key while Redis is away (a tokio semaphore
    /// per key, [`InMemoryConcurrency`]). With N replicas, up to N × `limit` calls run.
    LocalFallback {
        /// Calls in flight per key in this process.
        limit: u32,
    },
}

/// The concurrency backend on Redis: at most `limit` calls in flight per key across every
/// replica, on leases that expire.
///
/// * A permit is a lease in a sorted set per key (member: lease id, score: expiry on the
///   Redis server's clock). Taking one is one Lua script: drop expired leases, count, add.
/// * While held, a lease is renewed every third of the lease TTL by a background task; a
///   replica that dies stops renewing, and its leases expire within one TTL
///   ([`RedisConfigBuilder::lease_ttl`](crate::RedisConfigBuilder::lease_ttl), 30 s by
///   default).
/// * Dropping the permit — the call ended, however it ended, its future dropped included —
///   stops the renewal and releases the lease on the runtime that acquired it. Without a
///   runtime to run on, the lease simply expires.
/// * A caller with a wait polls with a short, jittered, growing pause (5 to 50 ms) until a
///   lease frees up or the wait is over.
///
/// Built by [`RedisState::concurrency`](crate::RedisState::concurrency).
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use toolgate_hooks::concurrency::Concurrency;
/// use toolgate_redis::{ConcurrencyFailurePolicy, RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RedisConfig::builder().lease_ttl(Duration::from_secs(10)).build();
/// let state = RedisState::connect("redis://127.0.0.1:6379", config).await?;
/// let backend = state
///     .concurrency()
///     .on_unavailable(ConcurrencyFailurePolicy::LocalFallback { limit: 2 });
/// let hook = Concurrency::builder(8)?
///     .wait(Duration::from_millis(500))
///     .backend(Arc::new(backend))
///     .build();
/// # let _ = hook;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisConcurrency {
    link: Link,
    lease_ttl: Duration,
    policy: ConcurrencyFailurePolicy,
    fallback: InMemoryConcurrency,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for RedisConcurrency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConcurrency")
            .field("link", &self.link)
            .field("lease_ttl", &self.lease_ttl)
            .field("policy", &self.policy)
            .field("unavailable_decisions", &self.unavailable_decisions())
            .finish()
    }
}

/// The lease an acquisition tries to take. If the acquisition ends without a definite
/// answer (a timeout, an error, or its future dropped while Redis was deciding), the lease
/// may be in the set anyway: it is released.
struct Attempt<'a> {
    link: &'a Link,
    lease: Option<LeaseId>,
    uncertain: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let (true, Some(lease)) = (self.uncertain, self.lease.take()) {
            lease.release_on(self.link, Handle::try_current().ok().as_ref());
        }
    }
}

impl RedisConcurrency {
    pub(crate) fn new(link: Link, lease_ttl: Duration) -> Self {
        RedisConcurrency {
            link,
            lease_ttl,
            policy: ConcurrencyFailurePolicy::default(),
            fallback: InMemoryConcurrency::default(),
            counters: Arc::default(),
        }
    }

    /// The same backend with its own per-call deadline, in place of the state's
    /// [`deadline`](crate::RedisConfigBuilder::deadline): the longest each acquire, release and lease renewal may wait
    /// for Redis before the backend decides without it. Give a policy that can afford to
    /// wait a longer one than a policy on the hot path; a zero deadline is taken as 1 ms.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.link = self.link.with_deadline(deadline);
        self
    }

    /// The per-call deadline.
    pub fn call_deadline(&self) -> Duration {
        self.link.deadline()
    }

    /// The same backend with another failure policy (default
    /// [`FailClosed`](ConcurrencyFailurePolicy::FailClosed)).
    #[must_use]
    pub fn on_unavailable(mut self, policy: ConcurrencyFailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> ConcurrencyFailurePolicy {
        self.policy
    }

    /// The decisions this backend (and its clones) made without Redis.
    pub fn unavailable_decisions(&self) -> UnavailableDecisions {
        self.counters.snapshot()
    }

    /// The permits held in this process by the local fallback.
    pub fn fallback_in_flight(&self) -> usize {
        self.fallback.in_flight()
    }

    /// The Redis key that holds the leases of `key` (as the policy builds it, namespace
    /// included): `<prefix>:{<key>}:leases`, or `<prefix>:sha256:{<SHA-256 of the key>}:leases`
    /// for a key with a brace (or an empty one), so that every key keeps a hash tag of its own.
    pub fn redis_key(&self, key: &str) -> String {
        keys::leases(self.link.prefix(), key)
    }

    async fn acquire_lease(
        &self,
        request: PermitRequest<'_>,
    ) -> Result<Option<Permit>, ConcurrencyBackendError> {
        let give_up = Instant::now() + request.wait;
        let mut attempt = Attempt {
            link: &self.link,
            lease: Some(LeaseId {
                set: self.redis_key(request.key),
                id: self.link.unique_id(),
            }),
            uncertain: false,
        };
        let ttl_ms = millis_at_least_one(self.lease_ttl);
        let mut pause = POLL_FIRST;
        loop {
            let Some(lease) = attempt.lease.as_ref() else {
                unreachable!("the lease is taken only on success")
            };
            let mut invocation = ACQUIRE.prepare_invoke();
            invocation
                .key(&lease.set)
                .arg(&lease.id)
                .arg(request.limit)
                .arg(ttl_ms);
            let mut connection = self.link.connection();
            attempt.uncertain = true;
            let answer = self
                .link
                .within(invocation.invoke_async::<u8>(&mut connection))
                .await;
            match answer {
                Ok(1) => {
                    let lease = attempt.lease.take().expect("checked above");
                    let held = Lease::hold(self.link.clone(), lease, self.lease_ttl);
                    return Ok(Some(Permit::new(held)));
                }
                Ok(_) => attempt.uncertain = false,
                Err(failure) => {
                    let wait = give_up.saturating_duration_since(Instant::now());
                    return self.without_redis(request, wait, &failure).await;
                }
            }
            let now = Instant::now();
            if now >= give_up {
                return Ok(None);
            }
            // Jitter spreads callers that wait for the same key, so a freed lease is not
            // met by all of them at once.
            let jittered = pause.mul_f64(0.5 + fastrand::f64());
            tokio::time::sleep(jittered.min(give_up - now)).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }

    async fn without_redis(
        &self,
        request: PermitRequest<'_>,
        wait: Duration,
        failure: &Failure,
    ) -> Result<Option<Permit>, ConcurrencyBackendError> {
        match self.policy {
            ConcurrencyFailurePolicy::FailClosed => {
                self.counters.record("concurrency", Outcome::FailClosed);
                Err(ConcurrencyBackendError::Unavailable(format!(
                    "{failure}; this backend fails closed"
                )))
            }
            ConcurrencyFailurePolicy::FailOpen => {
                self.counters.record("concurrency", Outcome::FailOpen);
                tracing::debug!(key = request.key, %failure, "permit given without Redis (fail open)");
                Ok(Some(Permit::new(())))
            }
            ConcurrencyFailurePolicy::LocalFallback { limit } => {
                let local = PermitRequest {
                    key: request.key,
                    limit,
                    wait,
                };
                let decision = self.fallback.acquire(local).await;
                let outcome = match &decision {
                    Ok(Some(_)) => Outcome::FallbackGranted,
                    _ => Outcome::FallbackRefused,
                };
                self.counters.record("concurrency", outcome);
                decision
            }
        }
    }
}

#[async_trait]
impl ConcurrencyBackend for RedisConcurrency {
    async fn acquire(
        &self,
        request: PermitRequest<'_>,
    ) -> Result<Option<Permit>, ConcurrencyBackendError> {
        self.acquire_lease(request).await
    }
}
