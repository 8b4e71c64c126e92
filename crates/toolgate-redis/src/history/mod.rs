//! [`RedisHistory`]: the newest entries of a record shared by every replica.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::link::{Link, millis_at_least_one};

static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("record.lua")));

/// Redis gave no answer in time, or failed: nothing was kept or read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the history kept on Redis cannot be reached ({0}); try again once Redis answers")]
pub struct HistoryUnavailable(String);

/// The newest entries of one record (the decisions on waiting calls, say), shared by every
/// replica on the same Redis (and [key prefix](crate::RedisConfigBuilder::key_prefix)): an
/// entry kept through one replica is read through every other, newest first.
///
/// It holds at most `max` entries, the oldest forgotten first, in one list
/// (`<prefix>:history:<name>`) that expires `keep` after its newest entry: nothing stays on
/// Redis forever. Keeping an entry is one script (push, trim, expiry), so the bound holds
/// however many replicas keep entries at once. Entries are text the caller chose (JSON,
/// say).
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
}

impl RedisHistory {
    pub(crate) fn new(link: Link, name: &str, max: usize, keep: Duration) -> Self {
        let key = format!("{}:history:{name}", link.prefix());
        RedisHistory {
            link,
            key,
            max: max.max(1),
            keep,
        }
    }

    /// Keeps `entry` as the newest, forgetting the oldest past the bound.
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when Redis gives no answer within the deadline.
    pub async fn record(&self, entry: &str) -> Result<(), HistoryUnavailable> {
        let mut invocation = RECORD.prepare_invoke();
        invocation
            .key(&self.key)
            .arg(entry)
            .arg(self.max)
            .arg(millis_at_least_one(self.keep));
        let mut connection = self.link.connection();
        self.link
            .within(invocation.invoke_async::<usize>(&mut connection))
            .await
            .map(drop)
            .map_err(|failure| HistoryUnavailable(failure.to_string()))
    }

    /// The newest `limit` entries (at most the bound), newest first.
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
        self.link
            .within(command.query_async::<Vec<String>>(&mut connection))
            .await
            .map_err(|failure| HistoryUnavailable(failure.to_string()))
    }
}
