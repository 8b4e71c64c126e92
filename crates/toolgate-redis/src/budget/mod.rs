//! [`RedisBudget`]: budgets shared by every replica.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use toolgate_hooks::async_trait;
use toolgate_hooks::budget::{
    BudgetBackend, BudgetBackendError, BudgetDecision, BudgetRequest, BudgetState,
};

use crate::keys;
use crate::link::{Failure, Link, millis_at_least_one};
use crate::stats::{Counters, Outcome, UnavailableDecisions};

static BUDGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("budget.lua")));

/// How long Redis keeps the record of one charge (its window and cost, or that it was
/// cancelled): longer than a charge can sit unanswered in a connection or a slow Redis and
/// longer than every try to cancel it takes, so that a cancel finds the charge it gives
/// back and a charge that runs after its cancel finds the cancel; short, so that records
/// do not pile up (one small key per charge, gone 30 s later).
const CHARGE_RECORD_TTL: Duration = Duration::from_secs(30);

/// How many times a charge that got no answer in time is cancelled (or an adjust sent
/// again) before giving up.
const CANCEL_TRIES: u32 = 3;

/// The pause between two tries to cancel a charge (or to send an adjust again).
const CANCEL_PAUSE: Duration = Duration::from_millis(200);

/// The least time one try to cancel a charge waits for Redis: Redis was just slow, and
/// nobody waits for the cancel (it runs in the background), so it may take longer than a
/// charge. `CANCEL_TRIES` tries with their pauses stay well within `CHARGE_RECORD_TTL`.
const CANCEL_DEADLINE: Duration = Duration::from_secs(2);

/// The budget backend on Redis: exact across replicas.
///
/// A charge is one Lua script on one key (`<prefix>:{<policy key>}:budget`, a hash of the
/// window's end, its length and the units spent), run atomically on the Redis server's
/// clock: however many replicas charge one budget at once, the charged costs of a window
/// never pass its limit, and every replica sees the window change at the same instant. On a
/// cluster the key's hash tag keeps it in one slot. The key expires a day (or a window, when
/// longer) after its window ends, and never sooner than it did. A reload that changes the
/// window's length carries spending whose window overlaps the present one into it, so it
/// gives no fresh allowance (see `budget.lua`): a window made longer finds the spending of
/// a window that ended up to that long before, and a replica of a shorter window during a
/// rolling reload cannot cut short the spending of a longer one.
///
/// When Redis gives no answer within the deadline the charge fails with
/// [`BudgetBackendError::Unavailable`], and the [`Budget`] hook's `OnBackendError` decides
/// (fail closed by default); the decision is counted ([`RedisBudget::unavailable_decisions`]).
/// Such a charge may still run on Redis after the deadline, so it is cancelled in the
/// background (a few tries): its cost is given back if it was charged, and it charges
/// nothing if Redis runs it after the cancel. Each charge has an id for that, and Redis
/// keeps a small record of it for 30 s, in the budget key's hash slot.
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

    /// Cancels the charge whose record is `record` on budget `key`, in the background: a
    /// few tries, since Redis was just slow.
    fn cancel_in_background(&self, key: String, record: String, cost: u64) {
        let sent_key = key.clone();
        self.until_answered(
            move |link| {
                let (key, record) = (sent_key.clone(), record.clone());
                async move {
                    let given_back = cancel_once(&link, &key, &record).await?;
                    tracing::debug!(
                        budget = %key,
                        given_back,
                        "a budget charge that got no answer in time was cancelled"
                    );
                    Ok(())
                }
            },
            move |failure| {
                tracing::warn!(
                    budget = %key,
                    cost,
                    %failure,
                    "a budget charge that got no answer in time could not be cancelled; \
                     if Redis made it, its units stay spent until the budget's window \
                     ends (check that Redis answers in time)"
                );
            },
        );
    }

    /// Sends the adjust whose record is `record` again, in the background, until Redis
    /// answers (a few tries): the record makes it count once, however many arrive.
    fn adjust_in_background(&self, key: String, record: String, window_end_ms: u64, delta: i64) {
        let sent_key = key.clone();
        self.until_answered(
            move |link| {
                let (key, record) = (sent_key.clone(), record.clone());
                async move {
                    adjust_once(&link, &key, &record, window_end_ms, delta).await?;
                    Ok(())
                }
            },
            move |failure| {
                tracing::warn!(
                    budget = %key,
                    delta,
                    %failure,
                    "a budget correction (a refund or a reported cost) got no answer \
                     from Redis in time, even when sent again; if Redis never made it, \
                     the charged estimate stands until the budget's window ends \
                     (check that Redis answers in time)"
                );
            },
        );
    }

    /// Sends what `send` sends in a task of its own until Redis answers: at most
    /// [`CANCEL_TRIES`] times, [`CANCEL_PAUSE`] apart, each given [`CANCEL_DEADLINE`] at
    /// least; `gave_up` hears the last failure when none was answered.
    fn until_answered<Sent>(
        &self,
        send: impl Fn(Link) -> Sent + Send + 'static,
        gave_up: impl FnOnce(Failure) + Send + 'static,
    ) where
        Sent: Future<Output = Result<(), Failure>> + Send,
    {
        let link = (self.link).with_deadline(self.link.deadline().max(CANCEL_DEADLINE));
        tokio::spawn(async move {
            for attempt in 1..=CANCEL_TRIES {
                match send(link.clone()).await {
                    Ok(()) => return,
                    Err(failure) if attempt == CANCEL_TRIES => return gave_up(failure),
                    Err(_) => tokio::time::sleep(CANCEL_PAUSE).await,
                }
            }
        });
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
        let key = self.redis_key(request.key);
        let record = charge_record(&key, &self.link.unique_id());
        let mut invocation = BUDGET.prepare_invoke();
        invocation
            .key(&key)
            .key(&record)
            .arg("charge")
            .arg(request.cost)
            .arg(request.limit)
            .arg(request.window.millis())
            .arg(millis_at_least_one(CHARGE_RECORD_TTL));
        let mut connection = self.link.connection();
        let answer = self
            .link
            .within(invocation.invoke_async::<(u8, u64, u64, u64)>(&mut connection))
            .await;
        let (charged, used, window_end_ms, resets_in) = match answer {
            Ok(answer) => answer,
            Err(failure) => {
                // Redis may run the charge after all (it was slow, not gone): the caller
                // is told the call was not run, so the charge must cost nothing.
                self.cancel_in_background(key, record, request.cost);
                return Err(self.unavailable(failure));
            }
        };
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
    ) -> Result<Option<BudgetState>, BudgetBackendError> {
        let key = self.redis_key(key);
        let record = adjust_record(&key, &self.link.unique_id());
        let answer = adjust_once(&self.link, &key, &record, window_end_ms, delta).await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(failure) => {
                // A refund (a call whose tool never ran) or a reported cost must not be
                // lost to one slow answer: sent again in the background, made once.
                self.adjust_in_background(key, record, window_end_ms, delta);
                return Err(self.unavailable(failure));
            }
        };
        // The window the spending counts in now: after a reload carried it, the present
        // one, not the one that was charged.
        Ok(match answer[..] {
            [1, used, window_end_ms, resets_in] => Some(BudgetState {
                used,
                window_end_ms,
                resets_in: Duration::from_millis(resets_in),
            }),
            _ => None,
        })
    }
}

/// Sends the cancel of the charge whose record is `record` on the budget at `key`: whether
/// its cost was given back.
async fn cancel_once(link: &Link, key: &str, record: &str) -> Result<bool, Failure> {
    let mut invocation = BUDGET.prepare_invoke();
    invocation
        .key(key)
        .key(record)
        .arg("cancel")
        .arg(millis_at_least_one(CHARGE_RECORD_TTL));
    let mut connection = link.connection();
    let answer = link
        .within(invocation.invoke_async::<Vec<u64>>(&mut connection))
        .await?;
    Ok(answer.first() == Some(&1))
}

/// Sends one adjust of the budget at `key`, made once per `record`: `[1, used, end of the
/// window it counts in, ms until then]`, or `[0]` when the charged window is over.
async fn adjust_once(
    link: &Link,
    key: &str,
    record: &str,
    window_end_ms: u64,
    delta: i64,
) -> Result<Vec<u64>, Failure> {
    let mut invocation = BUDGET.prepare_invoke();
    invocation
        .key(key)
        .key(record)
        .arg("adjust")
        .arg(window_end_ms)
        .arg(delta)
        .arg(millis_at_least_one(CHARGE_RECORD_TTL));
    let mut connection = link.connection();
    link.within(invocation.invoke_async::<Vec<u64>>(&mut connection))
        .await
}

/// The key of the record of charge `id` on the budget at `key`: the budget key's hash tag,
/// so that both are in one slot of a cluster, and one script can use both.
fn charge_record(key: &str, id: &str) -> String {
    format!("{key}:c:{id}")
}

/// The key of the record of adjust `id` on the budget at `key`, in the same slot: it makes
/// an adjust sent again change the budget once.
fn adjust_record(key: &str, id: &str) -> String {
    format!("{key}:a:{id}")
}
