//! Where cached results live: the [`CacheBackend`] trait and the in-memory [`MokaCache`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::CacheKey;

/// A cache backend failed. The cache treats a failed read as a miss and a failed write as
/// "not stored", and logs both: a cache outage slows calls down, it does not fail them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The backend could not be reached or answered with an error.
    #[error("cache backend `{backend}` failed ({reason}): check that it is reachable")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What went wrong.
        reason: String,
    },
}

/// Storage for cached results. Small and object-safe, so that a shared store (Redis) can
/// implement it: `get` and `put` under a [`CacheKey`], with a time to live per entry.
///
/// A backend must not return an entry after its TTL has passed.
pub trait CacheBackend: Send + Sync + 'static {
    /// The value stored under `key`, if any and not expired.
    fn get<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Result<Option<Value>, CacheError>>;

    /// Stores `value` under `key` for `ttl`.
    fn put<'a>(
        &'a self,
        key: &'a CacheKey,
        value: Value,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// Removes the entry under `key`.
    fn remove<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Result<(), CacheError>>;
}

#[derive(Clone)]
struct Entry {
    value: Arc<Value>,
    ttl: Duration,
    expires: tokio::time::Instant,
}

struct PerEntryTtl;

impl moka::Expiry<CacheKey, Entry> for PerEntryTtl {
    fn expire_after_create(
        &self,
        _key: &CacheKey,
        entry: &Entry,
        _created: std::time::Instant,
    ) -> Option<Duration> {
        Some(entry.ttl)
    }
}

/// The in-memory backend, on `moka`: bounded by entry count, TTL per entry.
///
/// Expiry is checked against tokio's clock (so tests with paused time see entries
/// expire), and moka drops expired entries from memory on its own schedule.
#[derive(Clone)]
pub struct MokaCache {
    entries: moka::future::Cache<CacheKey, Entry>,
}

impl Default for MokaCache {
    fn default() -> Self {
        MokaCache::new(10_000)
    }
}

impl MokaCache {
    /// A cache holding at most `max_entries` entries.
    pub fn new(max_entries: u64) -> Self {
        MokaCache {
            entries: moka::future::Cache::builder()
                .max_capacity(max_entries)
                .expire_after(PerEntryTtl)
                .build(),
        }
    }

    /// How many entries are held (approximate: moka settles counts lazily).
    pub fn entry_count(&self) -> u64 {
        self.entries.entry_count()
    }

    /// Every live entry's value (for tests and inspection).
    pub fn values(&self) -> Vec<Value> {
        let now = tokio::time::Instant::now();
        self.entries
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(_, e)| (*e.value).clone())
            .collect()
    }
}

impl CacheBackend for MokaCache {
    fn get<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Result<Option<Value>, CacheError>> {
        Box::pin(async move {
            match self.entries.get(key).await {
                Some(entry) if entry.expires > tokio::time::Instant::now() => {
                    Ok(Some((*entry.value).clone()))
                }
                Some(_) => {
                    self.entries.invalidate(key).await;
                    Ok(None)
                }
                None => Ok(None),
            }
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a CacheKey,
        value: Value,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            let entry = Entry {
                value: Arc::new(value),
                ttl,
                expires: tokio::time::Instant::now() + ttl,
            };
            self.entries.insert(key.clone(), entry).await;
            Ok(())
        })
    }

    fn remove<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(async move {
            self.entries.invalidate(key).await;
            Ok(())
        })
    }
}
