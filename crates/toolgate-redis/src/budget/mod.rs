//! [`RedisBudget`]: budgets shared by every replica.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use toolgate_hooks::async_trait;
use toolgate_hooks::budget::{
    BudgetBackend, BudgetBackendError, BudgetDecision, BudgetRequest, BudgetState,
};

use crate::keys;
use crate::link::Link;
use crate::stats::{Counters, Outcome, UnavailableDecisions};

static BUDGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("budget.lua")));

/// The budget backend on Redis: exact across replicas.
///
/// A charge is one Lua script on one key (`<prefix>:{<policy key>}:budget`, a hash of the
/// window's end and the units spent), run atomically on the Redis server's clock: however
/// many replicas charge one budget at once, the charged costs of a window never pass its
/// limit, and every replica sees the window change at the same instant. On a cluster the
/// key's hash tag keeps it in one slot. The key expires when its window ends.
///
/// When Redis gives no answer within the deadline the charge fails with
/// [`BudgetBackendError::Unavailable`], and the [`Budget`] hook's `OnBackendError` decides
/// (fail closed by default); the decision is counted ([`RedisBudget::unavailable_decisions`]).
///
/// Built by [`RedisState::budget`](crate::RedisState::budget).
///
/// [`Budget`]: toolgate_hooks::budget::Budget
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use toolgate_hooks::budget::{Budget, Window};
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let hook = Budget::builder(1000, Window::day())
///     .name("daily")
///     .backend(Arc::new(state.budget()))
///     .build();
/// # let _ = hook;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBudget {
    link: Link,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for RedisBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBudget")
            .field("link", &self.link)
            .field("unavailable_decisions", &self.unavailable_decisions())
            .finish()
    }
}

impl RedisBudget {
    pub(crate) fn new(link: Link) -> Self {
        RedisBudget {
            link,
            counters: Arc::default(),
        }
    }

    /// The same backend with its own per-call deadline, in place of the state's
    /// [`deadline`](crate::RedisConfigBuilder::deadline); a zero deadline is taken as 1 ms.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.link = self.link.with_deadline(deadline);
        self
    }

    /// The charges this backend (and its clones) could not make because Redis did not
    /// answer in time (counted as `fail_closed`: the hook decides what they mean).
    pub fn unavailable_decisions(&self) -> UnavailableDecisions {
        self.counters.snapshot()
    }

    /// The Redis key that holds the budget `key` (as the policy builds it, namespace
    /// included): `<prefix>:{<key>}:budget`, or `<prefix>:sha256:{<SHA-256 of the key>}:budget`
    /// for a key with a brace (or an empty one), so that every key keeps a hash tag of its own.
    pub fn redis_key(&self, key: &str) -> String {
        keys::budget(self.link.prefix(), key)
    }

    fn unavailable(&self, failure: impl std::fmt::Display) -> BudgetBackendError {
        self.counters.record("budget", Outcome::FailClosed);
        BudgetBackendError::Unavailable(failure.to_string())
    }
}

#[async_trait]
impl BudgetBackend for RedisBudget {
    async fn charge(
        &self,
        request: BudgetRequest<'_>,
    ) -> Result<BudgetDecision, BudgetBackendError> {
        let mut invocation = BUDGET.prepare_invoke();
        invocation
            .key(self.redis_key(request.key))
            .arg("charge")
            .arg(request.cost)
            .arg(request.limit)
            .arg(request.window.millis());
        let mut connection = self.link.connection();
        let (charged, used, window_end_ms, resets_in) = self
            .link
            .within(invocation.invoke_async::<(u8, u64, u64, u64)>(&mut connection))
            .await
            .map_err(|failure| self.unavailable(failure))?;
        let state = BudgetState {
            used,
            window_end_ms,
            resets_in: Duration::from_millis(resets_in),
        };
        Ok(if charged == 1 {
            BudgetDecision::Charged(state)
        } else {
            BudgetDecision::Refused(state)
        })
    }

    async fn adjust(
        &self,
        key: &str,
        window_end_ms: u64,
        delta: i64,
    ) -> Result<Option<u64>, BudgetBackendError> {
        let mut invocation = BUDGET.prepare_invoke();
        invocation
            .key(self.redis_key(key))
            .arg("adjust")
            .arg(window_end_ms)
            .arg(delta);
        let mut connection = self.link.connection();
        let answer = self
            .link
            .within(invocation.invoke_async::<Vec<u64>>(&mut connection))
            .await
            .map_err(|failure| self.unavailable(failure))?;
        Ok(match answer[..] {
            [1, used] => Some(used),
            _ => None,
        })
    }
}
