//! Where cached results live: the [`CacheBackend`] trait and the in-memory [`MokaCache`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
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
///
/// Write the methods as `async fn` under [`#[async_trait]`](crate::async_trait),
/// re-exported by this crate so that an implementer needs no dependency of their own.
///
/// # Examples
///
/// Entries in a map with their expiry, standing in for a table with a TTL column, behind
/// a [`ResultCache`](super::ResultCache):
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use std::time::{Duration, Instant};
///
/// use serde_json::{json, Value};
/// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
/// use toolgate_core::tool::ToolAnnotations;
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::cache::{CacheBackend, CacheError, CacheKey, ResultCache};
///
/// #[derive(Default)]
/// struct Table(Mutex<HashMap<CacheKey, (Value, Instant)>>);
///
/// #[async_trait]
/// impl CacheBackend for Table {
///     async fn get(&self, key: &CacheKey) -> Result<Option<Value>, CacheError> {
///         let mut rows = self.0.lock().unwrap();
///         match rows.get(key) {
///             Some((value, expires)) if *expires > Instant::now() => Ok(Some(value.clone())),
///             Some(_) => {
///                 rows.remove(key);
///                 Ok(None)
///             }
///             None => Ok(None),
///         }
///     }
///
///     async fn put(&self, key: &CacheKey, value: Value, ttl: Duration) -> Result<(), CacheError> {
///         let expires = Instant::now() + ttl;
///         self.0.lock().unwrap().insert(key.clone(), (value, expires));
///         Ok(())
///     }
///
///     async fn remove(&self, key: &CacheKey) -> Result<(), CacheError> {
///         self.0.lock().unwrap().remove(key);
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let table = Arc::new(Table::default());
/// let cache = ResultCache::builder().shared_backend(table.clone()).build();
/// let pipeline = Pipeline::builder()
///     .tool(
///         tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") })
///             .annotations(ToolAnnotations::READ_ONLY),
///     )
///     .hook(cache)
///     .build()?;
///
/// pipeline.invoke("ping", json!(null), InvokeOptions::new().user(User::new("ann"))).await?;
/// assert_eq!(table.0.lock().unwrap().len(), 1, "the result is stored in the table");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait CacheBackend: Send + Sync + 'static {
    /// The value stored under `key`, if any and not expired.
    async fn get(&self, key: &CacheKey) -> Result<Option<Value>, CacheError>;

    /// Stores `value` under `key` for `ttl`.
    async fn put(&self, key: &CacheKey, value: Value, ttl: Duration) -> Result<(), CacheError>;

    /// Removes the entry under `key`.
    async fn remove(&self, key: &CacheKey) -> Result<(), CacheError>;
}

#[derive(Clone)]
struct Entry {
    value: Arc<Value>,
    ttl: Duration,
    /// `None`: a TTL too long for the clock to add (`Duration::MAX`), which never ends.
    expires: Option<tokio::time::Instant>,
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
            .filter(|(_, e)| e.expires.is_none_or(|at| at > now))
            .map(|(_, e)| (*e.value).clone())
            .collect()
    }
}

#[async_trait]
impl CacheBackend for MokaCache {
    async fn get(&self, key: &CacheKey) -> Result<Option<Value>, CacheError> {
        match self.entries.get(key).await {
            Some(entry)
                if entry
                    .expires
                    .is_none_or(|at| at > tokio::time::Instant::now()) =>
            {
                Ok(Some((*entry.value).clone()))
            }
            Some(_) => {
                self.entries.invalidate(key).await;
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn put(&self, key: &CacheKey, value: Value, ttl: Duration) -> Result<(), CacheError> {
        let entry = Entry {
            value: Arc::new(value),
            ttl,
            expires: tokio::time::Instant::now().checked_add(ttl),
        };
        self.entries.insert(key.clone(), entry).await;
        Ok(())
    }

    async fn remove(&self, key: &CacheKey) -> Result<(), CacheError> {
        self.entries.invalidate(key).await;
        Ok(())
    }
}
