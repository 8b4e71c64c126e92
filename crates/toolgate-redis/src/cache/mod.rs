//! [`RedisCache`]: the result cache shared by every replica.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{AsyncCommands, Script};
use serde_json::Value;
use tokio::time::Instant;
use toolgate_hooks::async_trait;
use toolgate_hooks::cache::{CacheBackend, CacheError, CacheKey};

use crate::RedisConfig;
use crate::keys;
use crate::link::{Failure, Link, millis_at_least_one};
use crate::stats::UNAVAILABLE_DECISIONS;

static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("claim.lua")));
static FILL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fill.lua")));
static CHARGE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("charge.lua")));

/// The counter of results too large to cache (not stored; the call itself succeeded).
pub const CACHE_OVERSIZE: &str = "toolgate_redis_cache_oversize_total";

/// The counter of results not stored because their caller had written
/// [`cache_max_bytes_per_caller`](crate::RedisConfigBuilder::cache_max_bytes_per_caller)
/// this window (the call itself succeeded).
pub const CACHE_OVER_CALLER_BOUND: &str = "toolgate_redis_cache_over_caller_bound_total";

/// The first and the longest pause between two looks while another replica fills an entry.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// What a [`RedisCache`] has counted.
///
/// # Examples
///
/// A cache whose Redis is away (nothing listens on port 1) reads as a miss, within the
/// deadline, and counts it:
///
/// ```
/// use serde_json::json;
/// use toolgate_core::tool::ToolDefinition;
/// use toolgate_hooks::cache::{cache_key, CacheBackend, KeyScope};
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect_lazy("redis://127.0.0.1:1", RedisConfig::default())?;
/// let cache = state.cache();
/// let tool: ToolDefinition = serde_json::from_value(
///     json!({"name": "weather", "description": "", "version": "1", "input_schema": {}}),
/// )?;
/// let key = cache_key(&tool, &KeyScope::User("ann".into()), &json!({"city": "Oslo"}));
/// assert!(cache.get(&key).await.is_err()); // the hook serves it as a miss
/// assert_eq!(cache.stats().unavailable_reads, 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Reads Redis did not answer (served as misses: the tool ran).
    pub unavailable_reads: u64,
    /// Writes Redis did not answer (the result was not stored).
    pub unavailable_writes: u64,
    /// Results larger than the cap, not stored.
    pub oversize_skipped: u64,
    /// Results not stored because their caller had written
    /// [`cache_max_bytes_per_caller`](crate::RedisConfigBuilder::cache_max_bytes_per_caller)
    /// this window.
    pub over_caller_bound: u64,
    /// Misses that waited for another replica filling the same entry.
    pub fill_waits: u64,
}

#[derive(Debug, Default)]
struct Counters {
    unavailable_reads: AtomicU64,
    unavailable_writes: AtomicU64,
    oversize_skipped: AtomicU64,
    over_caller_bound: AtomicU64,
    fill_waits: AtomicU64,
}

/// The cache backend on Redis, for the [`ResultCache`](toolgate_hooks::cache::ResultCache)
/// hook: what one replica computed, the others serve.
///
/// * Entries live under their [`CacheKey`] (`toolgate:<tool>:<sha256>`, which already scopes
///   them by tool, tool version, caller and canonical input; another
///   [key prefix](crate::RedisConfigBuilder::key_prefix) replaces `toolgate`), written with
///   `SET … PX <ttl>`: Redis expires them, never the reader.
/// * Values are the result's JSON, at most
///   [`cache_max_value_bytes`](crate::RedisConfigBuilder::cache_max_value_bytes): a larger
///   result is not stored and is counted ([`CacheStats::oversize_skipped`]); the call
///   succeeds all the same.
/// * What one caller makes Redis hold is bounded: at most
///   [`cache_max_bytes_per_caller`](crate::RedisConfigBuilder::cache_max_bytes_per_caller)
///   (16 MiB) of entries written per
///   [window](crate::RedisConfigBuilder::cache_caller_window) (5 minutes), counted under
///   a key per caller — the one the hook passes to [`put_for`](CacheBackend::put_for),
///   whose call stored the entry (a user id in its tenant), whatever the entry's scope: a
///   result shared by a tenant or by everyone is charged to the caller who stored it, so
///   that one caller's flood cannot use up the share of others. A result past it is not stored and is counted
///   ([`CacheStats::over_caller_bound`]); the call succeeds all the same. So one caller's
///   flood of distinct calls cannot fill the Redis that holds everyone's quotas, budgets,
///   leases and sessions. A plain [`put`](CacheBackend::put), which says no caller, is
///   not counted.
/// * A read or write Redis does not answer within the deadline is an error, which the hook
///   treats as a miss or as "not stored": a Redis outage makes calls run their tools, it
///   does not fail them.
/// * With the [fill lock](crate::RedisConfigBuilder::cache_fill_wait) on, a miss claims the
///   entry (`SET … NX PX`); the same miss on another replica (or another `RedisCache`)
///   waits, polling, for the value instead of running the tool, until the claim is given
///   back or its wait is over. Inside one replica the hook already runs concurrent
///   identical misses once.
///
/// Built by [`RedisState::cache`](crate::RedisState::cache).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use toolgate_hooks::cache::ResultCache;
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RedisConfig::builder()
///     .cache_fill_wait(Some(Duration::from_secs(5)))
///     .build();
/// let state = RedisState::connect("redis://127.0.0.1:6379", config).await?;
/// let cache = ResultCache::builder()
///     .backend(state.cache())
///     .ttl(Duration::from_secs(60))
///     .build();
/// # let _ = cache;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisCache {
    link: Link,
    owner: Arc<str>,
    max_value_bytes: usize,
    /// What one caller may write per window; 0: no bound.
    max_bytes_per_caller: u64,
    caller_window: Duration,
    fill_wait: Option<Duration>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache")
            .field("link", &self.link)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("max_bytes_per_caller", &self.max_bytes_per_caller)
            .field("caller_window", &self.caller_window)
            .field("fill_wait", &self.fill_wait)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RedisCache {
    pub(crate) fn new(link: Link, config: &RedisConfig) -> Self {
        RedisCache {
            owner: link.unique_id().into(),
            link,
            max_value_bytes: config.cache_max_value_bytes,
            max_bytes_per_caller: config.cache_max_bytes_per_caller,
            caller_window: config.cache_caller_window,
            fill_wait: config.cache_fill_wait,
            counters: Arc::default(),
        }
    }

    /// The same backend with its own per-call deadline, in place of the state's
    /// [`deadline`](crate::RedisConfigBuilder::deadline): the longest each cache read and write may wait
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

    /// What this backend (and its clones) counted.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        CacheStats {
            unavailable_reads: c.unavailable_reads.load(Ordering::Relaxed),
            unavailable_writes: c.unavailable_writes.load(Ordering::Relaxed),
            oversize_skipped: c.oversize_skipped.load(Ordering::Relaxed),
            over_caller_bound: c.over_caller_bound.load(Ordering::Relaxed),
            fill_waits: c.fill_waits.load(Ordering::Relaxed),
        }
    }

    /// The Redis key of the entry `key`.
    pub fn redis_key(&self, key: &CacheKey) -> String {
        keys::cache_entry(self.link.prefix(), key)
    }

    fn unavailable(&self, outcome: &'static str, failure: &Failure) -> CacheError {
        let cell = if outcome == "read_as_miss" {
            &self.counters.unavailable_reads
        } else {
            &self.counters.unavailable_writes
        };
        cell.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(UNAVAILABLE_DECISIONS, "backend" => "cache", "outcome" => outcome)
            .increment(1);
        CacheError::Backend {
            backend: "redis".into(),
            reason: failure.to_string(),
        }
    }

    fn parse(entry: &str, text: &str) -> Result<Option<Value>, CacheError> {
        serde_json::from_str(text)
            .map(Some)
            .map_err(|error| CacheError::Backend {
                backend: "redis".into(),
                reason: format!(
                    "entry `{entry}` is not JSON ({error}); another program writes under the toolgate prefix: give it its own prefix"
                ),
            })
    }

    async fn read(&self, key: &CacheKey) -> Result<Option<Value>, CacheError> {
        let entry = self.redis_key(key);
        let lock = self
            .fill_wait
            .and_then(|wait| Some((wait, keys::fill_lock(self.link.prefix(), &entry)?)));
        let Some((wait, lock)) = lock else {
            let mut connection = self.link.connection();
            return match self
                .link
                .within(connection.get::<_, Option<String>>(&entry))
                .await
            {
                Ok(Some(text)) => Self::parse(&entry, &text),
                Ok(None) => Ok(None),
                Err(failure) => Err(self.unavailable("read_as_miss", &failure)),
            };
        };
        let give_up = Instant::now() + wait;
        let mut pause = POLL_FIRST;
        let mut waited = false;
        loop {
            let mut invocation = CLAIM.prepare_invoke();
            invocation
                .key(&entry)
                .key(&lock)
                .arg(&*self.owner)
                .arg(millis_at_least_one(wait));
            let mut connection = self.link.connection();
            let answer = self
                .link
                .within(invocation.invoke_async::<(u8, String)>(&mut connection))
                .await;
            match answer {
                Ok((1, text)) => return Self::parse(&entry, &text),
                Ok((2, _)) => return Ok(None),
                Ok(_) => {}
                Err(failure) => return Err(self.unavailable("read_as_miss", &failure)),
            }
            if !waited {
                waited = true;
                self.counters.fill_waits.fetch_add(1, Ordering::Relaxed);
            }
            let now = Instant::now();
            if now >= give_up {
                tracing::debug!(%entry, "another replica is still filling this entry; running the tool here too");
                return Ok(None);
            }
            let jittered = pause.mul_f64(0.5 + fastrand::f64());
            tokio::time::sleep(jittered.min(give_up - now)).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }

    /// The Redis key under which the bytes `caller` (a
    /// [`caller_key`](toolgate_core::User::caller_key)) wrote this window are counted.
    pub fn caller_bytes_key(&self, caller: &str) -> String {
        keys::cache_caller_bytes(self.link.prefix(), caller)
    }

    /// Counts `bytes` against `caller`'s bound, if they fit in it: `false` when the entry
    /// is not to be stored.
    async fn charge(&self, entry: &str, caller: &str, bytes: u64) -> Result<bool, Failure> {
        let counter = self.caller_bytes_key(caller);
        let mut invocation = CHARGE.prepare_invoke();
        invocation
            .key(&counter)
            .arg(bytes)
            .arg(self.max_bytes_per_caller)
            .arg(millis_at_least_one(self.caller_window));
        let mut connection = self.link.connection();
        let (fits, used) = self
            .link
            .within(invocation.invoke_async::<(u8, u64)>(&mut connection))
            .await?;
        if fits == 1 {
            return Ok(true);
        }
        self.counters
            .over_caller_bound
            .fetch_add(1, Ordering::Relaxed);
        metrics::counter!(CACHE_OVER_CALLER_BOUND).increment(1);
        tracing::debug!(
            %entry,
            bytes,
            written = used,
            max = self.max_bytes_per_caller,
            "the caller has written its share of the cache this window; result not stored"
        );
        Ok(false)
    }

    async fn write(
        &self,
        key: &CacheKey,
        caller: Option<&str>,
        value: Value,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let entry = self.redis_key(key);
        let lock = self
            .fill_wait
            .and_then(|_| keys::fill_lock(self.link.prefix(), &entry));
        let mut text = value.to_string();
        let mut skip = false;
        if text.len() > self.max_value_bytes {
            self.counters
                .oversize_skipped
                .fetch_add(1, Ordering::Relaxed);
            metrics::counter!(CACHE_OVERSIZE).increment(1);
            tracing::debug!(
                %entry,
                bytes = text.len(),
                max = self.max_value_bytes,
                "result too large to cache; not stored"
            );
            skip = true;
        } else if let Some(caller) = caller.filter(|_| self.max_bytes_per_caller > 0) {
            // Two calls, not one script: the count and the entry are in different slots.
            let bytes = (text.len() + entry.len()) as u64;
            skip = !self
                .charge(&entry, caller, bytes)
                .await
                .map_err(|failure| self.unavailable("not_stored", &failure))?;
        }
        if skip {
            if lock.is_none() {
                return Ok(());
            }
            // Still give the fill claim back, so other replicas stop waiting.
            text.clear();
        }
        let mut connection = self.link.connection();
        let ttl_ms = millis_at_least_one(ttl);
        let stored = if let Some(lock) = lock {
            let mut invocation = FILL.prepare_invoke();
            invocation
                .key(&entry)
                .key(lock)
                .arg(&*self.owner)
                .arg(&text)
                .arg(ttl_ms);
            self.link
                .within(invocation.invoke_async::<u8>(&mut connection))
                .await
                .map(drop)
        } else {
            self.link
                .within(connection.pset_ex::<_, _, ()>(&entry, &text, ttl_ms))
                .await
        };
        stored.map_err(|failure| self.unavailable("not_stored", &failure))
    }
}

#[async_trait]
impl CacheBackend for RedisCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<Value>, CacheError> {
        self.read(key).await
    }

    async fn put(&self, key: &CacheKey, value: Value, ttl: Duration) -> Result<(), CacheError> {
        self.write(key, None, value, ttl).await
    }

    async fn put_for(
        &self,
        key: &CacheKey,
        caller: &str,
        value: Value,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.write(key, Some(caller), value, ttl).await
    }

    async fn remove(&self, key: &CacheKey) -> Result<(), CacheError> {
        let entry = self.redis_key(key);
        let mut connection = self.link.connection();
        self.link
            .within(connection.del::<_, ()>(&entry))
            .await
            .map_err(|failure| CacheError::Backend {
                backend: "redis".into(),
                reason: failure.to_string(),
            })
    }
}
