//! [`RedisHistory`]: the newest entries of a record shared by every replica, and
//! [`RedisPartedHistory`], the same bounded per part.

mod parts;

pub use parts::RedisPartedHistory;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use crate::RedisError;
use crate::link::{Link, millis_at_least_one};
use crate::seal::{self, Seal};

static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("record.lua")));

/// Redis gave no answer in time, or failed: nothing was kept or read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the history kept on Redis cannot be reached ({0}); try again once Redis answers")]
pub struct HistoryUnavailable(pub(crate) String);

/// The newest entries of one record (the decisions on waiting calls, say), shared by every
/// replica on the same Redis (and [key prefix](crate::RedisConfigBuilder::key_prefix)): an
/// entry kept through one replica is read through every other, newest first.
///
/// It holds at most `max` entries, the oldest forgotten first, in one list
/// (`<prefix>:history:<name>`) that expires `keep` after its newest entry: nothing stays on
/// Redis forever. Keeping an entry is one script (push, trim, expiry), so the bound holds
/// however many replicas keep entries at once. Entries are JSON the caller chose, sealed
/// with AES-256-GCM when the history has an [encryption key](Self::with_encryption_key).
///
/// Built by [`RedisState::history`](crate::RedisState::history).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let decisions = state.history("decisions", 500, Duration::from_secs(30 * 24 * 3600));
/// decisions.record(r#"{"id":"s1","decision":"approve"}"#).await?;
/// assert_eq!(decisions.newest(10).await?.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisHistory {
    link: Link,
    key: String,
    max: usize,
    keep: Duration,
    seal: Option<Arc<Seal>>,
}

impl RedisHistory {
    pub(crate) fn new(link: Link, name: &str, max: usize, keep: Duration) -> Self {
        let key = format!("{}:history:{name}", link.prefix());
        RedisHistory {
            link,
            key,
            max: max.max(1),
            keep,
            seal: None,
        }
    }

    /// The same history, sealing each entry with AES-256-GCM under `key`: 32 bytes, or 64
    /// hexadecimal digits (`openssl rand -hex 32`). Every replica needs the same key: an
    /// entry this history cannot open (sealed with another key, or written without one) is
    /// left out of what it reads, and logged.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidEncryptionKey`] for a key of another length or form.
    pub fn with_encryption_key(mut self, key: &[u8]) -> Result<Self, RedisError> {
        self.seal = Some(Arc::new(Seal::new(key)?));
        Ok(self)
    }

    /// Where the entries are kept, as a sealed entry is bound to its history.
    fn place(&self) -> Vec<u8> {
        format!("toolgate history\0{}", self.key).into_bytes()
    }

    /// Keeps `entry` as the newest, forgetting the oldest past the bound.
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when Redis gives no answer within the deadline.
    pub async fn record(&self, entry: &str) -> Result<(), HistoryUnavailable> {
        let entry = seal::write(self.seal.as_deref(), &self.place(), entry.into())
            .map_err(HistoryUnavailable)?;
        let mut invocation = RECORD.prepare_invoke();
        invocation
            .key(&self.key)
            .arg(entry)
            .arg(self.max)
            .arg(millis_at_least_one(self.keep));
        let mut connection = self.link.connection();
        self.link
            .within(invocation.invoke_async::<()>(&mut connection))
            .await
            .map_err(|failure| HistoryUnavailable(failure.to_string()))
    }

    /// The newest `limit` entries (at most the bound), newest first; those it cannot open
    /// are left out.
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when Redis gives no answer within the deadline.
    pub async fn newest(&self, limit: usize) -> Result<Vec<String>, HistoryUnavailable> {
        let last = limit.min(self.max);
        if last == 0 {
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("LRANGE");
        command.arg(&self.key).arg(0).arg(last - 1);
        let mut connection = self.link.connection();
        let stored = self
            .link
            .within(command.query_async::<Vec<Vec<u8>>>(&mut connection))
            .await
            .map_err(|failure| HistoryUnavailable(failure.to_string()))?;
        let mut unreadable = None;
        let entries = opened(self.seal.as_deref(), &self.place(), stored, &mut unreadable);
        if let Some(why) = unreadable {
            tracing::warn!(history = %self.key, "an entry on Redis {why}; it is left out");
        }
        Ok(entries)
    }
}

/// The entries of `stored` that open under `seal` at `place`, in their order; why the last
/// one that did not open was left out goes into `unreadable`.
fn opened(
    seal: Option<&Seal>,
    place: &[u8],
    stored: Vec<Vec<u8>>,
    unreadable: &mut Option<String>,
) -> Vec<String> {
    let mut entries = Vec::with_capacity(stored.len());
    for entry in stored {
        match seal::read_text(seal, place, &entry) {
            Ok(entry) => entries.push(entry),
            Err(why) => *unreadable = Some(why),
        }
    }
    entries
}
