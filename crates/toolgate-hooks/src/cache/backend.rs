//! Where cached results live: the [`CacheBackend`] trait and the in-memory [`MokaCache`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

    /// Stores `value` under `key` for `ttl`, knowing whose call wrote it: `caller` is that
    /// caller's [`caller_key`](toolgate_core::User::caller_key) (a user id in its tenant),
    /// whatever the entry's scope — a result shared by a tenant or by everyone is charged
    /// to the caller whose call stored it, so that one caller's flood uses up only their
    /// own share, never the tenant's or everyone's. The [`ResultCache`](super::ResultCache)
    /// hook stores through this method, so that a shared backend can bound what each
    /// caller makes it hold (the Redis backend does); the key itself is a hash and does
    /// not say.
    ///
    /// By default it calls [`put`](Self::put): a backend without a bound per caller need
    /// not write it. A backend that wraps another should pass it on, or the wrapped
    /// backend never learns the caller.
    ///
    /// # Examples
    ///
    /// A backend that refuses to hold entries of one caller (a stand-in for a bound that
    /// is used up), and stores everyone else's through its own `put`:
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::Mutex;
    /// use std::time::Duration;
    ///
    /// use serde_json::{json, Value};
    /// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
    /// use toolgate_core::tool::ToolAnnotations;
    /// use toolgate_hooks::async_trait;
    /// use toolgate_hooks::cache::{CacheBackend, CacheError, CacheKey, ResultCache};
    ///
    /// #[derive(Default)]
    /// struct AllButMallory(Mutex<HashMap<CacheKey, Value>>);
    ///
    /// #[async_trait]
    /// impl CacheBackend for AllButMallory {
    ///     async fn get(&self, key: &CacheKey) -> Result<Option<Value>, CacheError> {
    ///         Ok(self.0.lock().unwrap().get(key).cloned())
    ///     }
    ///
    ///     async fn put(&self, key: &CacheKey, value: Value, _ttl: Duration) -> Result<(), CacheError> {
    ///         self.0.lock().unwrap().insert(key.clone(), value);
    ///         Ok(())
    ///     }
    ///
    ///     async fn put_for(
    ///         &self,
    ///         key: &CacheKey,
    ///         caller: &str,
    ///         value: Value,
    ///         ttl: Duration,
    ///     ) -> Result<(), CacheError> {
    ///         if caller == "mallory" {
    ///             return Ok(()); // not stored; the call succeeds all the same
    ///         }
    ///         self.put(key, value, ttl).await
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
    /// let backend = std::sync::Arc::new(AllButMallory::default());
    /// let pipeline = Pipeline::builder()
    ///     .tool(
    ///         tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") })
    ///             .annotations(ToolAnnotations::READ_ONLY),
    ///     )
    ///     .hook(ResultCache::builder().shared_backend(backend.clone()).build())
    ///     .build()?;
    ///
    /// for user in ["ann", "mallory"] {
    ///     pipeline.invoke("ping", json!(null), InvokeOptions::new().user(User::new(user))).await?;
    /// }
    /// assert_eq!(backend.0.lock().unwrap().len(), 1, "ann's result only");
    /// # Ok(()) }
    /// ```
    async fn put_for(
        &self,
        key: &CacheKey,
        caller: &str,
        value: Value,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let _ = caller;
        self.put(key, value, ttl).await
    }

    /// Removes the entry under `key`.
    async fn remove(&self, key: &CacheKey) -> Result<(), CacheError>;
}

#[derive(Clone)]
struct Entry {
    value: Arc<Value>,
    ttl: Duration,
    /// `None`: a TTL too long for the clock to add (`Duration::MAX`), which never ends.
    expires: Option<tokio::time::Instant>,
    /// What the entry counts against the capacity ([`MokaCache::weight_of`]).
    weight: u32,
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

/// What an entry costs beyond its key and value: the entry, moka's bookkeeping, the
/// allocations' headers. Counted so that many tiny results do not hold far more memory
/// than the capacity says.
const ENTRY_OVERHEAD: u64 = 256;

/// The least default [`MokaCacheBuilder::max_entry_bytes`]: a sixteenth of a small capacity
/// would be smaller than an entry's overhead and its key, and such a cache would store
/// nothing at all.
const LEAST_DEFAULT_ENTRY_BYTES: u64 = 4 * 1024;

/// The in-memory backend, on `moka`: bounded in bytes, with a TTL per entry.
///
/// * **Capacity in bytes** ([`MokaCacheBuilder::max_bytes`], default
///   [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES), 64 MiB): each entry weighs its key,
///   what its result holds in memory and a fixed overhead, and the least useful entries
///   are evicted when the weights pass the capacity. The result's size is estimated from
///   its shape, not its JSON text: each value weighs its own size (32 bytes, where a `0`
///   in an array is one byte of text), its strings their bytes, an object's members
///   their keys and the map's bookkeeping — so a result of very many small items weighs
///   the memory it takes.
/// * **Largest entry** ([`MokaCacheBuilder::max_entry_bytes`], default a sixteenth of
///   the capacity, 4 MiB by default, but at least 4 KiB or the whole capacity when that is
///   smaller): a larger result is not stored (and an older entry under its key is dropped);
///   the call succeeds all the same. One caller asking for large results cannot push
///   everyone else's entries out or exhaust memory. An entry weighs at least 256 bytes and
///   its key, so a capacity or largest entry below about 512 bytes holds nothing.
/// * **Entry count** ([`MokaCacheBuilder::max_entries`], [`MokaCache::new`]): optional,
///   on top of the bytes.
///
/// Expiry is checked against tokio's clock (so tests with paused time see entries
/// expire), and moka drops expired entries from memory on its own schedule. Counts and
/// sizes settle lazily too: [`run_pending_tasks`](Self::run_pending_tasks) settles them
/// now.
///
/// # Examples
///
/// ```
/// use toolgate_hooks::cache::{MokaCache, ResultCache};
///
/// // 256 MiB of results, none larger than 8 MiB.
/// let backend = MokaCache::builder()
///     .max_bytes(256 * 1024 * 1024)
///     .max_entry_bytes(8 * 1024 * 1024)
///     .build();
/// assert_eq!(backend.max_bytes(), 256 * 1024 * 1024);
/// let cache = ResultCache::builder().backend(backend).build();
/// # let _ = cache;
/// ```
#[derive(Clone)]
pub struct MokaCache {
    entries: moka::future::Cache<CacheKey, Entry>,
    max_bytes: u64,
    max_entry_bytes: u64,
    /// The least weight of an entry: `max_bytes / max_entries`, or 0 without a count cap.
    least_weight: u64,
    oversize_skipped: Arc<AtomicU64>,
}

/// Builds a [`MokaCache`]: [`MokaCache::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct MokaCacheBuilder {
    max_bytes: u64,
    max_entry_bytes: Option<u64>,
    max_entries: Option<u64>,
}

impl Default for MokaCache {
    /// A cache of [`MokaCache::DEFAULT_MAX_BYTES`] (64 MiB), no entry larger than 4 MiB.
    fn default() -> Self {
        MokaCache::builder().build()
    }
}

impl std::fmt::Debug for MokaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MokaCache")
            .field("max_bytes", &self.max_bytes)
            .field("max_entry_bytes", &self.max_entry_bytes)
            .field("weighted_size", &self.weighted_size())
            .finish()
    }
}

impl MokaCacheBuilder {
    /// The capacity: the most bytes the entries weigh together (default
    /// [`MokaCache::DEFAULT_MAX_BYTES`], 64 MiB; at least 1).
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes.max(1);
        self
    }

    /// The most one entry may weigh: a larger result is not stored (default: a sixteenth
    /// of [`max_bytes`](Self::max_bytes), at least 4 KiB; never more than the capacity).
    pub fn max_entry_bytes(mut self, bytes: u64) -> Self {
        self.max_entry_bytes = Some(bytes);
        self
    }

    /// At most this many entries as well as the bytes (default: no count of its own).
    pub fn max_entries(mut self, entries: u64) -> Self {
        self.max_entries = Some(entries.max(1));
        self
    }

    /// The cache.
    pub fn build(self) -> MokaCache {
        let max_entry_bytes = self
            .max_entry_bytes
            .unwrap_or((self.max_bytes / 16).max(LEAST_DEFAULT_ENTRY_BYTES))
            .min(self.max_bytes);
        // With an entry cap, every entry weighs at least its share of the capacity: no
        // more than `max_entries` fit, and the bytes still bound larger ones.
        let least_weight = self.max_entries.map_or(0, |n| self.max_bytes / n);
        MokaCache {
            entries: moka::future::Cache::builder()
                .max_capacity(self.max_bytes)
                .weigher(|_key: &CacheKey, entry: &Entry| entry.weight)
                .expire_after(PerEntryTtl)
                .build(),
            max_bytes: self.max_bytes,
            max_entry_bytes,
            least_weight,
            oversize_skipped: Arc::default(),
        }
    }
}

impl MokaCache {
    /// The capacity of [`MokaCache::default`]: 64 MiB.
    pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

    /// A cache of at most `max_entries` entries, within
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES) (64 MiB) all the same: the
    /// [builder](Self::builder) sets the bytes.
    ///
    /// ```
    /// use toolgate_hooks::cache::MokaCache;
    ///
    /// let cache = MokaCache::new(10_000);
    /// assert_eq!(cache.max_bytes(), MokaCache::DEFAULT_MAX_BYTES);
    /// ```
    pub fn new(max_entries: u64) -> Self {
        MokaCache::builder().max_entries(max_entries).build()
    }

    /// A builder, with the defaults of [`MokaCache::default`].
    pub fn builder() -> MokaCacheBuilder {
        MokaCacheBuilder {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_entry_bytes: None,
            max_entries: None,
        }
    }

    /// The capacity in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The most one entry may weigh.
    pub fn max_entry_bytes(&self) -> u64 {
        self.max_entry_bytes
    }

    /// How many entries are held (approximate: moka settles counts lazily).
    pub fn entry_count(&self) -> u64 {
        self.entries.entry_count()
    }

    /// What the entries held weigh together, in bytes (approximate: moka settles it
    /// lazily; [`run_pending_tasks`](Self::run_pending_tasks) settles it now).
    pub fn weighted_size(&self) -> u64 {
        self.entries.weighted_size()
    }

    /// How many results were not stored because they weigh more than
    /// [`max_entry_bytes`](Self::max_entry_bytes).
    pub fn oversize_skipped(&self) -> u64 {
        self.oversize_skipped.load(Ordering::Relaxed)
    }

    /// Applies the evictions and counts moka has pending, so that
    /// [`entry_count`](Self::entry_count) and [`weighted_size`](Self::weighted_size) are
    /// exact (for tests and inspection).
    pub async fn run_pending_tasks(&self) {
        self.entries.run_pending_tasks().await;
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

    /// The weight of `value` under `key`: the key, what the value holds in memory, and the
    /// overhead of an entry.
    fn weight_of(key: &CacheKey, value: &Value) -> u64 {
        (key.as_str().len() as u64)
            .saturating_add(size_in_memory(value))
            .saturating_add(ENTRY_OVERHEAD)
    }
}

/// What a JSON value holds in memory, estimated: each value's own size (a number or a
/// `null` weighs that much, not the byte or two of its text), the bytes of its strings,
/// and for an object's members their keys and the map's bookkeeping. Walked without
/// recursion, so that no depth of nesting overflows the stack.
fn size_in_memory(value: &Value) -> u64 {
    // A member's key (a `String`) and what the map keeps beside it.
    const MEMBER: u64 = std::mem::size_of::<String>() as u64 + 16;
    let mut total = 0;
    let mut containers = Vec::new();
    count_value(value, &mut total, &mut containers);
    while let Some(container) = containers.pop() {
        match container {
            Value::Array(items) => {
                for item in items {
                    count_value(item, &mut total, &mut containers);
                }
            }
            Value::Object(members) => {
                for (key, member) in members {
                    total = total.saturating_add(MEMBER + key.len() as u64);
                    count_value(member, &mut total, &mut containers);
                }
            }
            _ => {}
        }
    }
    total
}

/// Counts `value` itself (and a string's bytes); an array or object is left in
/// `containers` for its items to be counted.
fn count_value<'a>(value: &'a Value, total: &mut u64, containers: &mut Vec<&'a Value>) {
    *total = total.saturating_add(std::mem::size_of::<Value>() as u64);
    match value {
        Value::String(text) => *total = total.saturating_add(text.len() as u64),
        Value::Array(_) | Value::Object(_) => containers.push(value),
        _ => {}
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
        let weight = Self::weight_of(key, &value);
        if weight > self.max_entry_bytes {
            self.oversize_skipped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                %key,
                bytes = weight,
                max = self.max_entry_bytes,
                "result too large to cache; not stored"
            );
            // An older, smaller result under this key is not newer than this one.
            self.entries.invalidate(key).await;
            return Ok(());
        }
        let entry = Entry {
            value: Arc::new(value),
            ttl,
            expires: tokio::time::Instant::now().checked_add(ttl),
            weight: u32::try_from(weight.max(self.least_weight)).unwrap_or(u32::MAX),
        };
        self.entries.insert(key.clone(), entry).await;
        Ok(())
    }

    async fn remove(&self, key: &CacheKey) -> Result<(), CacheError> {
        self.entries.invalidate(key).await;
        Ok(())
    }
}
