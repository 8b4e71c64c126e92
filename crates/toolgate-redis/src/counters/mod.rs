//! [`RedisCounters`]: per-tool counts summed over every replica.
//!
//! The `.lua` files are the scripts; `add.lua` and `reset.lua` behind `server_clock.lua`.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::keys;
use crate::link::Link;

static ADD: LazyLock<Script> =
    LazyLock::new(|| crate::server_clock::script(&[include_str!("add.lua")]));
static RESET: LazyLock<Script> =
    LazyLock::new(|| crate::server_clock::script(&[include_str!("reset.lua")]));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("read.lua")));

/// Redis gave no answer in time, or failed: nothing was added or read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the counts shared on Redis cannot be reached ({0}); try again once Redis answers")]
pub struct CountersUnavailable(String);

/// The counts of every replica, as [`RedisCounters::read`] finds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedCounts {
    /// When the first count was added, or the counts were last [reset](RedisCounters::reset),
    /// in milliseconds since the Unix epoch on Redis's clock; `None` before either.
    pub since_ms: Option<u64>,
    /// Each tool's fields and their counts.
    pub tools: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Per-tool counts (calls, errors, latency buckets: fields the caller names) that every
/// replica on the same Redis (and [key prefix](crate::RedisConfigBuilder::key_prefix)) adds
/// to, so that any of them can show the figures of all.
///
/// A replica counts in its own memory and adds what it counted since its last addition
/// now and then: one script, whatever the number of tools. At most `max_tools` tools are
/// counted apart; further ones are added under `other`. The counts outlive the last
/// addition by `keep`, then expire, as every key toolgate writes does. An operator may
/// [reset](Self::reset) them; every addition answers when the counts started, so that a
/// replica learns of a reset at its next addition.
///
/// Every key lives under `<prefix>:{<prefix>:counters}`, so every script keeps to one
/// Redis Cluster slot. Built by [`RedisState::counters`](crate::RedisState::counters).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let counters = state.counters(4096, Duration::from_secs(30 * 24 * 3600));
/// counters.add(&[("search", &[("calls", 3), ("errors", 1)][..])]).await?;
/// let all = counters.read().await?;
/// assert!(all.tools["search"]["calls"] >= 3);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisCounters {
    link: Link,
    base: String,
    max_tools: usize,
    keep: Duration,
}

impl RedisCounters {
    pub(crate) fn new(link: Link, max_tools: usize, keep: Duration) -> Self {
        let base = keys::counters(link.prefix());
        RedisCounters {
            link,
            base,
            max_tools,
            keep,
        }
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        args: &[&[u8]],
    ) -> Result<T, CountersUnavailable> {
        self.link
            .run_script(script, format!("{}:tools", self.base), args)
            .await
            .map_err(|failure| CountersUnavailable(failure.to_string()))
    }

    /// Adds `counts`, each a tool and what to add to its fields. Fields added nothing may
    /// be left out. Answers when the counts started (milliseconds since the Unix epoch on
    /// Redis's clock), `None` when nothing was ever added (`counts` empty): a start later
    /// than the one the last addition answered means the counts were
    /// [reset](Self::reset), or expired, in between.
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis gives no answer within the deadline: then it is
    /// not known whether the counts were added.
    pub async fn add(
        &self,
        counts: &[(&str, &[(&str, u64)])],
    ) -> Result<Option<u64>, CountersUnavailable> {
        let max = self.max_tools.to_string();
        let mut args: Vec<String> = vec![self.base.clone(), max, self.keep_ms()];
        for (tool, fields) in counts {
            args.push((*tool).to_owned());
            args.push(fields.len().to_string());
            for (field, count) in *fields {
                args.push((*field).to_owned());
                // HINCRBY takes a signed 64-bit number.
                args.push(count.min(&(i64::MAX as u64)).to_string());
            }
        }
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let since: String = self.run(&ADD, &args).await?;
        Ok(since.parse().ok())
    }

    /// Starts the counts over for every replica: every tool's counts are removed, and the
    /// counts start now. Answers the new start (milliseconds since the Unix epoch on
    /// Redis's clock). What a replica counted before the reset and had not added yet is
    /// added after it (at most its last few seconds).
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis gives no answer within the deadline: then it is
    /// not known whether the counts were reset.
    pub async fn reset(&self) -> Result<u64, CountersUnavailable> {
        let keep = self.keep_ms();
        let since: String = self
            .run(&RESET, &[self.base.as_bytes(), keep.as_bytes()])
            .await?;
        since
            .parse()
            .map_err(|_| CountersUnavailable(format!("Redis answered `{since}` for the new start")))
    }

    fn keep_ms(&self) -> String {
        self.keep.as_millis().max(1).to_string()
    }

    /// The counts of every replica.
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis gives no answer within the deadline.
    pub async fn read(&self) -> Result<SharedCounts, CountersUnavailable> {
        let (since, tools, counts): (String, Vec<String>, Vec<Vec<String>>) =
            self.run(&READ, &[self.base.as_bytes()]).await?;
        let tools = tools
            .into_iter()
            .zip(counts)
            .filter(|(_, fields)| !fields.is_empty())
            .map(|(tool, fields)| {
                let fields = fields
                    .chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].parse().unwrap_or(0)))
                    .collect();
                (tool, fields)
            })
            .collect();
        Ok(SharedCounts {
            since_ms: since.parse().ok(),
            tools,
        })
    }
}
