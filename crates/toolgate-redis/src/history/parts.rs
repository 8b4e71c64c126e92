//! [`RedisPartedHistory`]: the newest entries of a record, bounded per part.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use super::{HistoryUnavailable, opened};
use crate::RedisError;
use crate::link::{Link, millis_at_least_one};
use crate::seal::{self, Seal};

static RECORD_PART: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("record_part.lua")));

/// The newest entries of one record split into parts (the decisions on waiting calls, by
/// tenant, say), shared by every replica on the same Redis: entries of one part never push
/// out those of another.
///
/// Each part kept apart holds at most `max` entries in a list of its own; at most
/// `max_parts` parts are kept apart at once, and the entries of any further part share one
/// more list of `max` entries, so however many parts entries name, at most
/// `(max_parts + 1) × max` entries are kept. A part keeps its place while it has entries:
/// every list expires `keep` after its newest entry, and a part whose newest entry is older
/// than that gives its place up to the next part that asks. Keeping an entry is one script,
/// so the bounds hold however many replicas keep entries at once. Every key lies under
/// `<prefix>:{<prefix>:history:<name>}` (one Redis Cluster slot): `:parts` (sorted set,
/// part → newest entry), `:part:<part>` and `:other` (lists). Entries are sealed as those
/// of a [`RedisHistory`](crate::RedisHistory) are, with an
/// [encryption key](Self::with_encryption_key).
///
/// Built by [`RedisState::parted_history`](crate::RedisState::parted_history).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let decisions = state.parted_history("decisions", 500, 64, Duration::from_secs(30 * 24 * 3600));
/// decisions.record("acme", r#"{"id":"s1","decision":"approve"}"#).await?;
/// let lists = decisions.newest(Some("acme"), 10).await?;
/// assert_eq!(lists.concat().len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisPartedHistory {
    link: Link,
    base: String,
    max: usize,
    max_parts: usize,
    keep: Duration,
    seal: Option<Arc<Seal>>,
}

impl RedisPartedHistory {
    pub(crate) fn new(
        link: Link,
        name: &str,
        max: usize,
        max_parts: usize,
        keep: Duration,
    ) -> Self {
        let base = crate::keys::parted_history(link.prefix(), name);
        RedisPartedHistory {
            link,
            base,
            max: max.max(1),
            max_parts,
            keep,
            seal: None,
        }
    }

    /// The same history, sealing each entry with AES-256-GCM under `key`, as
    /// [`RedisHistory::with_encryption_key`](crate::RedisHistory::with_encryption_key) does.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidEncryptionKey`] for a key of another length or form.
    pub fn with_encryption_key(mut self, key: &[u8]) -> Result<Self, RedisError> {
        self.seal = Some(Arc::new(Seal::new(key)?));
        Ok(self)
    }

    fn place(&self) -> Vec<u8> {
        format!("toolgate history\0{}", self.base).into_bytes()
    }

    fn parts_key(&self) -> String {
        format!("{}:parts", self.base)
    }

    fn part_key(&self, part: &str) -> String {
        format!("{}:part:{part}", self.base)
    }

    fn other_key(&self) -> String {
        format!("{}:other", self.base)
    }

    /// Keeps `entry` as the newest of `part`, forgetting that list's oldest past the
    /// bound. Returns whether the part is kept apart (`false`: the entry went into the
    /// list the parts past `max_parts` share).
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when Redis gives no answer within the deadline.
    pub async fn record(&self, part: &str, entry: &str) -> Result<bool, HistoryUnavailable> {
        let entry = seal::write(self.seal.as_deref(), &self.place(), entry.into())
            .map_err(HistoryUnavailable)?;
        let mut invocation = RECORD_PART.prepare_invoke();
        invocation
            .key(self.parts_key())
            .key(self.part_key(part))
            .key(self.other_key())
            .arg(entry)
            .arg(part)
            .arg(self.max)
            .arg(millis_at_least_one(self.keep))
            .arg(self.max_parts);
        let mut connection = self.link.connection();
        let apart = self
            .link
            .within(invocation.invoke_async::<i64>(&mut connection))
            .await
            .map_err(|failure| HistoryUnavailable(failure.to_string()))?;
        Ok(apart == 1)
    }

    /// The newest `limit` entries (at most the bound) of each list that may hold entries of
    /// `part` — its own and the other parts' — or, for `None`, of every list; each newest
    /// first. Entries it cannot open are left out.
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when Redis gives no answer within the deadline.
    pub async fn newest(
        &self,
        part: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Vec<String>>, HistoryUnavailable> {
        let last = limit.min(self.max);
        if last == 0 {
            return Ok(Vec::new());
        }
        let unavailable = |failure: crate::link::Failure| HistoryUnavailable(failure.to_string());
        let mut connection = self.link.connection();
        let mut keys = match part {
            Some(part) => vec![self.part_key(part)],
            None => {
                let mut command = redis::cmd("ZRANGE");
                command.arg(self.parts_key()).arg(0).arg(-1);
                let parts = self
                    .link
                    .within(command.query_async::<Vec<String>>(&mut connection))
                    .await
                    .map_err(unavailable)?;
                parts.iter().map(|part| self.part_key(part)).collect()
            }
        };
        keys.push(self.other_key());
        let mut pipeline = redis::pipe();
        for key in &keys {
            pipeline.cmd("LRANGE").arg(key).arg(0).arg(last - 1);
        }
        let lists = self
            .link
            .within(pipeline.query_async::<Vec<Vec<Vec<u8>>>>(&mut connection))
            .await
            .map_err(unavailable)?;
        let place = self.place();
        let mut unreadable = None;
        let lists = lists
            .into_iter()
            .map(|stored| opened(self.seal.as_deref(), &place, stored, &mut unreadable))
            .collect();
        if let Some(why) = unreadable {
            tracing::warn!(history = %self.base, "an entry on Redis {why}; it is left out");
        }
        Ok(lists)
    }
}
