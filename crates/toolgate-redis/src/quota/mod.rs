//! [`RedisQuota`]: one GCRA budget per key, shared by every replica.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use toolgate_hooks::async_trait;
use toolgate_hooks::quota::{
    InMemoryQuota, QuotaBackend, QuotaBackendError, QuotaDecision, QuotaLease, QuotaRequest, Rate,
};

use crate::keys;
use crate::link::{Failure, Link};
use crate::stats::{Counters, Outcome, UnavailableDecisions};

static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("gcra.lua")));

/// What [`RedisQuota`] decides when Redis gives no answer within the deadline.
///
/// Whatever the policy, the decision is counted
/// ([`RedisQuota::unavailable_decisions`] and the `toolgate_redis_unavailable_decisions_total`
/// counter).
///
/// # Examples
///
/// A replica whose Redis is away (nothing listens on port 1) keeps limiting calls with its
/// local fallback budget:
///
/// ```
/// use toolgate_hooks::quota::{QuotaBackend, QuotaDecision, QuotaRequest, Rate};
/// use toolgate_redis::{QuotaFailurePolicy, RedisConfig, RedisState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect_lazy("redis://127.0.0.1:1", RedisConfig::default())?;
/// let quota = state
///     .quota()
///     .on_unavailable(QuotaFailurePolicy::LocalFallback(Rate::per_minute(1)?));
/// let request = QuotaRequest { key: "ann", rate: Rate::per_minute(60)? };
///
/// assert!(matches!(quota.acquire(request).await?, QuotaDecision::Granted(_)));
/// assert!(matches!(quota.acquire(request).await?, QuotaDecision::Limited { .. }));
/// let counted = quota.unavailable_decisions();
/// assert_eq!((counted.fallback_granted, counted.fallback_refused), (1, 1));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaFailurePolicy {
    /// Answer [`QuotaBackendError::Unavailable`] (the default): the [`Quota`] hook refuses the
    /// call with `quota_unavailable` (503) — unless the hook itself was built with
    /// `OnBackendError::FailOpen`, which has the last word.
    ///
    /// [`Quota`]: toolgate_hooks::quota::Quota
    #[default]
    FailClosed,
    /// Grant the unit unchecked: an outage of Redis never refuses a call, and nothing
    /// limits calls while it lasts.
    FailOpen,
    /// Decide with a budget in this process at this rate (for every key), kept while Redis
    /// is away. With N replicas, up to N times this rate gets through: pick the shared rate
    /// divided by the replica count to stay close to the shared limit.
    LocalFallback(Rate),
}

/// The quota backend on Redis: exact GCRA, shared by every replica that uses the same Redis
/// and key prefix.
///
/// Each decision is one Lua script, run atomically by Redis on its own clock (`TIME`), so
/// replicas with skewed clocks agree, and however many replicas and callers ask at once, a
/// key never admits more than its burst plus one unit per emission interval. The algorithm
/// and the `retry_after` it answers are those of [`InMemoryQuota`] (to the microsecond:
/// Redis's clock has no finer grain). The key expires when its budget is full again.
///
/// Built by [`RedisState::quota`](crate::RedisState::quota); plug it into the
/// [`Quota`](toolgate_hooks::quota::Quota) hook.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use toolgate_hooks::quota::{Quota, Rate};
/// use toolgate_redis::{QuotaFailurePolicy, RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let backend = state
///     .quota()
///     .on_unavailable(QuotaFailurePolicy::LocalFallback(Rate::per_minute(20)?));
/// let hook = Quota::builder(Rate::per_minute(60)?)
///     .name("per-user")
///     .backend(Arc::new(backend))
///     .build();
/// # let _ = hook;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisQuota {
    link: Link,
    policy: QuotaFailurePolicy,
    fallback: InMemoryQuota,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for RedisQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQuota")
            .field("link", &self.link)
            .field("policy", &self.policy)
            .field("unavailable_decisions", &self.unavailable_decisions())
            .finish()
    }
}

impl RedisQuota {
    pub(crate) fn new(link: Link) -> Self {
        RedisQuota {
            link,
            policy: QuotaFailurePolicy::default(),
            fallback: InMemoryQuota::default(),
            counters: Arc::default(),
        }
    }

    /// The same backend with its own per-call deadline, in place of the state's
    /// [`deadline`](crate::RedisConfigBuilder::deadline): the longest each quota check may wait
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
    /// [`FailClosed`](QuotaFailurePolicy::FailClosed)).
    #[must_use]
    pub fn on_unavailable(mut self, policy: QuotaFailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> QuotaFailurePolicy {
        self.policy
    }

    /// The decisions this backend (and its clones) made without Redis.
    pub fn unavailable_decisions(&self) -> UnavailableDecisions {
        self.counters.snapshot()
    }

    /// The Redis key that holds the budget `key` (as the policy builds it, namespace
    /// included): `<prefix>:{<key>}:quota`, or `<prefix>:sha256:{<SHA-256 of the key>}:quota`
    /// for a key with a brace (or an empty one), so that every key keeps a hash tag of its own.
    pub fn redis_key(&self, key: &str) -> String {
        keys::quota(self.link.prefix(), key)
    }

    async fn decide(&self, request: QuotaRequest<'_>) -> Result<QuotaDecision, QuotaBackendError> {
        let interval =
            u64::try_from(request.rate.emission_interval().as_nanos()).unwrap_or(u64::MAX);
        let mut invocation = GCRA.prepare_invoke();
        invocation
            .key(self.redis_key(request.key))
            .arg(interval)
            .arg(request.rate.burst());
        let mut connection = self.link.connection();
        match self
            .link
            .within(invocation.invoke_async::<(u8, u64)>(&mut connection))
            .await
        {
            Ok((1, _)) => Ok(QuotaDecision::Granted(QuotaLease::settled())),
            Ok((_, wait)) => Ok(QuotaDecision::Limited {
                retry_after: Duration::from_nanos(wait),
            }),
            Err(failure) => self.without_redis(request, &failure).await,
        }
    }

    async fn without_redis(
        &self,
        request: QuotaRequest<'_>,
        failure: &Failure,
    ) -> Result<QuotaDecision, QuotaBackendError> {
        match self.policy {
            QuotaFailurePolicy::FailClosed => {
                self.counters.record("quota", Outcome::FailClosed);
                Err(QuotaBackendError::Unavailable(format!(
                    "{failure}; this backend fails closed"
                )))
            }
            QuotaFailurePolicy::FailOpen => {
                self.counters.record("quota", Outcome::FailOpen);
                tracing::debug!(key = request.key, %failure, "quota granted without Redis (fail open)");
                Ok(QuotaDecision::Granted(QuotaLease::settled()))
            }
            QuotaFailurePolicy::LocalFallback(rate) => {
                let local = QuotaRequest {
                    key: request.key,
                    rate,
                };
                let decision = self.fallback.acquire(local).await;
                let outcome = match &decision {
                    Ok(QuotaDecision::Granted(_)) => Outcome::FallbackGranted,
                    _ => Outcome::FallbackRefused,
                };
                self.counters.record("quota", outcome);
                decision
            }
        }
    }
}

#[async_trait]
impl QuotaBackend for RedisQuota {
    async fn acquire(&self, request: QuotaRequest<'_>) -> Result<QuotaDecision, QuotaBackendError> {
        self.decide(request).await
    }
}
