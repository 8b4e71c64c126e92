//! [`InMemoryQuota`]: GCRA per key with `governor`, bounded in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use governor::RateLimiter;
use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::ShrinkableKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed, StateStore};

use super::{QuotaBackend, QuotaBackendError, QuotaDecision, QuotaLease, QuotaRequest, Rate};

/// Reads tokio's clock, so that rate limits follow paused time in tests.
#[derive(Clone, Copy, Debug)]
struct TokioClock {
    anchor: tokio::time::Instant,
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(tokio::time::Instant::now().saturating_duration_since(self.anchor))
    }
}

/// The per-key GCRA states of one rate: governor's own atomic cell per key, in a map we
/// can bound.
#[derive(Clone, Default)]
struct KeyStates(Arc<DashMap<String, InMemoryState>>);

impl StateStore for KeyStates {
    type Key = String;

    fn measure_and_replace<T, F, E>(&self, key: &String, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        if let Some(state) = self.0.get(key) {
            return state.measure_and_replace(&NotKeyed::NonKey, f);
        }
        let state = self.0.entry(key.clone()).or_default();
        state.measure_and_replace(&NotKeyed::NonKey, f)
    }
}

/// The theoretical arrival time a key's cell holds, if any, read without changing it: the
/// closure refuses and hands the value out.
fn arrival(state: &InMemoryState) -> Option<Nanos> {
    state
        .measure_and_replace(&NotKeyed::NonKey, Err::<((), Nanos), Option<Nanos>>)
        .err()
        .flatten()
}

impl ShrinkableKeyedStateStore<String> for KeyStates {
    fn retain_recent(&self, drop_below: Nanos) {
        self.0
            .retain(|_, state| arrival(state).is_some_and(|t| t > drop_below));
    }

    fn shrink_to_fit(&self) {
        self.0.shrink_to_fit();
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct Table {
    limiter: RateLimiter<String, KeyStates, TokioClock, NoOpMiddleware<Nanos>>,
    states: KeyStates,
    /// When the limiter started, on the clock: its states' arrival times count from it.
    start: Nanos,
}

struct Inner {
    tables: DashMap<Rate, Arc<Table>>,
    clock: TokioClock,
    max_keys: usize,
    sweep_interval: Duration,
    /// When the last sweep ran, in nanoseconds on `clock`.
    last_sweep: AtomicU64,
    in_use: Arc<AtomicUsize>,
}

/// The default quota backend: exact GCRA per key ([`governor`]), in this process.
///
/// Memory stays bounded under a flood of distinct keys: keys whose budget has fully come
/// back are swept every `sweep_interval` (and at once when the cap is reached), and at most
/// `max_keys` keys are tracked. A new key past the cap, with none idle, gets
/// [`QuotaBackendError::Full`], which the [`Quota`](super::Quota) hook refuses (fail
/// closed) or lets through (fail open), as configured.
///
/// Time is tokio's clock, so tests with paused time control rate limits exactly.
///
/// ```
/// use std::time::Duration;
/// use toolgate_hooks::quota::InMemoryQuota;
///
/// let backend = InMemoryQuota::builder()
///     .max_keys(50_000)
///     .sweep_interval(Duration::from_secs(30))
///     .build();
/// assert_eq!(backend.key_count(), 0);
/// ```
#[derive(Clone)]
pub struct InMemoryQuota {
    inner: Arc<Inner>,
}

/// Builds an [`InMemoryQuota`].
#[derive(Clone, Debug)]
pub struct InMemoryQuotaBuilder {
    max_keys: usize,
    sweep_interval: Duration,
}

impl InMemoryQuotaBuilder {
    /// The most keys tracked at once (default 100 000).
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How often idle keys are swept (default 10 s).
    #[must_use]
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// The backend.
    pub fn build(self) -> InMemoryQuota {
        InMemoryQuota {
            inner: Arc::new(Inner {
                tables: DashMap::new(),
                clock: TokioClock {
                    anchor: tokio::time::Instant::now(),
                },
                max_keys: self.max_keys,
                sweep_interval: self.sweep_interval,
                last_sweep: AtomicU64::new(0),
                in_use: Arc::new(AtomicUsize::new(0)),
            }),
        }
    }
}

impl Default for InMemoryQuota {
    fn default() -> Self {
        InMemoryQuota::builder().build()
    }
}

impl std::fmt::Debug for InMemoryQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryQuota")
            .field("keys", &self.key_count())
            .field("in_use", &self.in_use())
            .field("max_keys", &self.inner.max_keys)
            .finish()
    }
}

impl InMemoryQuota {
    /// A builder with the defaults: 100 000 keys, a sweep every 10 s.
    pub fn builder() -> InMemoryQuotaBuilder {
        InMemoryQuotaBuilder {
            max_keys: 100_000,
            sweep_interval: Duration::from_secs(10),
        }
    }

    /// How many keys are tracked now.
    pub fn key_count(&self) -> usize {
        self.inner.tables.iter().map(|t| t.states.0.len()).sum()
    }

    /// How many granted units invocations hold right now (leases not yet released).
    /// Zero whenever no invocation is between `will_acquire_quota` and
    /// `did_release_quota`.
    pub fn in_use(&self) -> usize {
        self.inner.in_use.load(Ordering::Acquire)
    }

    /// Drops every key whose budget has fully come back.
    pub fn sweep(&self) {
        let now = self.inner.clock.now();
        self.inner
            .last_sweep
            .store(now.as_u64().max(1), Ordering::Relaxed);
        for table in self.inner.tables.iter() {
            table.limiter.retain_recent();
            table.limiter.shrink_to_fit();
        }
    }

    /// Sweeps if `gap` has passed since the last sweep; only one caller sweeps.
    fn sweep_if_due(&self, gap: Duration) {
        let now = self.inner.clock.now().as_u64();
        let last = self.inner.last_sweep.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX);
        if due
            && self
                .inner
                .last_sweep
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.sweep();
        }
    }

    fn table(&self, rate: Rate) -> Arc<Table> {
        if let Some(table) = self.inner.tables.get(&rate) {
            return Arc::clone(&table);
        }
        let table = self.inner.tables.entry(rate).or_insert_with(|| {
            let states = KeyStates::default();
            // The limiter reads its start from the clock as it is made, within a moment
            // of this reading.
            let start = self.inner.clock.now();
            Arc::new(Table {
                limiter: RateLimiter::new(rate.to_governor(), states.clone(), self.inner.clock),
                states,
                start,
            })
        });
        Arc::clone(&table)
    }

    /// Moves `key`'s state to `table` (of `rate`) from the table of another rate, if one
    /// has it: the policy whose key it is now limits at `rate` (a reload changed its
    /// rate). Its theoretical arrival time moves as it is, so that what the key spent
    /// still counts at the new rate — lowering a limit in the middle of abuse must not
    /// hand every caller a full budget — as it does on Redis, which keeps one state per
    /// key whatever the rate.
    fn carry_over(&self, table: &Table, rate: Rate, key: &str) {
        if self.inner.tables.len() < 2 {
            return;
        }
        let others: Vec<Arc<Table>> = self
            .inner
            .tables
            .iter()
            .filter(|other| *other.key() != rate)
            .map(|other| Arc::clone(other.value()))
            .collect();
        for other in others {
            let Some((_, state)) = other.states.0.remove(key) else {
                continue;
            };
            let Some(tat) = arrival(&state) else {
                continue;
            };
            let at = (other.start.as_u64().saturating_add(tat.as_u64()))
                .saturating_sub(table.start.as_u64());
            let moved = InMemoryState::default();
            let _ = moved
                .measure_and_replace(&NotKeyed::NonKey, |_| Ok::<_, ()>(((), Nanos::from(at))));
            table.states.0.entry(key.to_owned()).or_insert(moved);
            return;
        }
    }

    fn decide(&self, request: QuotaRequest<'_>) -> Result<QuotaDecision, QuotaBackendError> {
        self.sweep_if_due(self.inner.sweep_interval);
        let table = self.table(request.rate);
        let key = request.key.to_owned();
        let new = !table.states.0.contains_key(&key) && {
            self.carry_over(&table, request.rate, &key);
            !table.states.0.contains_key(&key)
        };
        if new && self.key_count() >= self.inner.max_keys {
            // Under a flood the sweep itself must not become the work: at most one per
            // second, or per sweep interval when that is shorter.
            self.sweep_if_due(self.inner.sweep_interval.min(Duration::from_secs(1)));
            if self.key_count() >= self.inner.max_keys {
                return Err(QuotaBackendError::Full {
                    max_keys: self.inner.max_keys,
                });
            }
        }
        match table.limiter.check_key(&key) {
            Ok(_) => {
                let in_use = Arc::clone(&self.inner.in_use);
                in_use.fetch_add(1, Ordering::AcqRel);
                Ok(QuotaDecision::Granted(QuotaLease::new(move || {
                    in_use.fetch_sub(1, Ordering::AcqRel);
                })))
            }
            Err(not_until) => Ok(QuotaDecision::Limited {
                retry_after: not_until.wait_time_from(self.inner.clock.now()),
            }),
        }
    }
}

#[async_trait]
impl QuotaBackend for InMemoryQuota {
    async fn acquire(&self, request: QuotaRequest<'_>) -> Result<QuotaDecision, QuotaBackendError> {
        self.decide(request)
    }
}
