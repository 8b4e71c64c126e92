//! The gateway's own per-tool counters: calls, errors, refusals, calls that wait, and a
//! latency histogram, counted by a hook at `on_metrics` (the same point, and so the same
//! calls, as the Prometheus metrics) and read as JSON by `GET /v1/admin/stats`.
//!
//! They live as long as the process (reloads keep them), or until an approver starts them
//! over (`DELETE /v1/admin/stats`), and are bounded: past [`MAX_TOOLS`] tools, further
//! tools are counted under `other`. With the state on Redis, each replica also adds what
//! it counted to counts every replica shares ([`RedisCounters`]) every [`FLUSH_EVERY`],
//! the statistics are every replica's, and starting them over does so for every replica
//! (each learns of it at its next addition).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};
use toolgate_redis::{CountersUnavailable, RedisCounters};

/// The most tools counted apart.
pub const MAX_TOOLS: usize = 4096;

/// The upper bounds of the latency buckets, in milliseconds (a last bucket holds the rest).
pub const BUCKETS_MS: [u64; 12] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10_000];

/// How often a replica adds what it counted to the counts every replica shares.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);

/// How long the shared counts outlive the last addition of any replica.
pub const SHARED_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);

/// What is counted of each tool, by position: how calls ended, their total time, then
/// each latency bucket. The names are the fields of the shared counts.
const FIELDS: [&str; 19] = [
    "calls",
    "succeeded",
    "errors",
    "refused",
    "waiting",
    "total_us",
    "b0",
    "b1",
    "b2",
    "b3",
    "b4",
    "b5",
    "b6",
    "b7",
    "b8",
    "b9",
    "b10",
    "b11",
    "b12",
];
const CALLS: usize = 0;
const TOTAL_US: usize = 5;
const FIRST_BUCKET: usize = 6;

type Values = [u64; FIELDS.len()];

#[derive(Default)]
struct Counts {
    /// Everything this process counted.
    counted: [AtomicU64; FIELDS.len()],
    /// What of it was added to the shared counts.
    shared: [AtomicU64; FIELDS.len()],
}

impl Counts {
    fn counted(&self) -> Values {
        std::array::from_fn(|i| self.counted[i].load(Ordering::Relaxed))
    }

    /// What this process counted and has not added to the shared counts yet.
    fn unshared(&self) -> Values {
        self.beyond_shared(&self.counted())
    }

    /// What of `counted` (read a moment ago) was not added to the shared counts.
    fn beyond_shared(&self, counted: &Values) -> Values {
        std::array::from_fn(|i| counted[i].saturating_sub(self.shared[i].load(Ordering::Relaxed)))
    }
}

/// How one call ended, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It ran and answered.
    Succeeded,
    /// It failed (tool, upstream, timeout, bad input…).
    Error,
    /// A policy refused it: not authorized, rate-limited, over a cap (403 or 429).
    Refused,
    /// It waits for a person: approval or input.
    Waiting,
}

impl Ending {
    /// How `error` (none for a success) counts.
    pub fn of(error: Option<&ToolError>) -> Ending {
        match error {
            None => Ending::Succeeded,
            Some(ToolError::Suspended { .. } | ToolError::InputRequired { .. }) => Ending::Waiting,
            Some(e) if matches!(e.status(), 401 | 403 | 429) => Ending::Refused,
            Some(_) => Ending::Error,
        }
    }

    /// Its position in [`FIELDS`].
    fn field(self) -> usize {
        match self {
            Ending::Succeeded => 1,
            Ending::Error => 2,
            Ending::Refused => 3,
            Ending::Waiting => 4,
        }
    }
}

/// The counters, shared by every configuration the process serves.
pub struct ToolCounters {
    tools: RwLock<BTreeMap<String, Arc<Counts>>>,
    /// When this process started counting, or last started over.
    since: RwLock<SystemTime>,
    /// Held while adding to the shared counts, reading them and starting them over, so
    /// that what is added is never also read as this replica's own. It holds when the
    /// shared counts started, as this replica last learnt it (milliseconds on Redis's
    /// clock): a later start means another replica started them over.
    sharing: tokio::sync::Mutex<Option<u64>>,
}

impl Default for ToolCounters {
    fn default() -> Self {
        ToolCounters {
            tools: RwLock::default(),
            since: RwLock::new(SystemTime::now()),
            sharing: tokio::sync::Mutex::new(None),
        }
    }
}

impl std::fmt::Debug for ToolCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCounters").finish_non_exhaustive()
    }
}

impl ToolCounters {
    fn counts(&self, tool: &str) -> Arc<Counts> {
        if let Some(counts) = self
            .tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tool)
        {
            return counts.clone();
        }
        let mut tools = self.tools.write().unwrap_or_else(|e| e.into_inner());
        let name = if tools.len() >= MAX_TOOLS && !tools.contains_key(tool) {
            "other"
        } else {
            tool
        };
        tools.entry(name.to_owned()).or_default().clone()
    }

    fn each(&self, read: impl Fn(&Counts) -> Values) -> Vec<(String, Values)> {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools
            .iter()
            .map(|(tool, c)| (tool.clone(), read(c)))
            .collect()
    }

    fn since(&self) -> SystemTime {
        *self.since.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets every count of this process: it counts from now.
    fn start_over(&self) {
        self.tools
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *self.since.write().unwrap_or_else(|e| e.into_inner()) = SystemTime::now();
    }

    /// Counts one call of `tool` that ended so after `elapsed`.
    pub fn record(&self, tool: &str, ending: Ending, elapsed: Duration) {
        let counts = self.counts(tool);
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let ms = elapsed.as_millis();
        let bucket = BUCKETS_MS
            .iter()
            .position(|&bound| ms < u128::from(bound))
            .unwrap_or(BUCKETS_MS.len());
        for (field, by) in [
            (CALLS, 1),
            (ending.field(), 1),
            (TOTAL_US, us),
            (FIRST_BUCKET + bucket, 1),
        ] {
            counts.counted[field].fetch_add(by, Ordering::Relaxed);
        }
    }

    /// What this process counted, as `GET /v1/admin/stats` answers it with the state in
    /// memory.
    pub fn snapshot(&self) -> Value {
        let tools = self.each(Counts::counted);
        render(self.since(), "this replica", tools)
    }

    /// Adds what this process counted since its last addition to the counts every replica
    /// shares. What an addition that failed carried is added by the next one; one that
    /// timed out after Redis ran it is so counted twice. When the shared counts started
    /// later than this replica last learnt, another replica started them over: this one
    /// then starts its own over too (what it just added stays added).
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis does not answer within the deadline.
    pub async fn share(&self, to: &RedisCounters) -> Result<(), CountersUnavailable> {
        let mut learnt = self.sharing.lock().await;
        let tools: Vec<(String, Arc<Counts>, Values)> = {
            let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
            tools
                .iter()
                .map(|(tool, c)| (tool.clone(), c.clone(), c.counted()))
                .collect()
        };
        let deltas: Vec<(&str, Vec<(&str, u64)>)> = tools
            .iter()
            .map(|(tool, c, counted)| {
                let fields = FIELDS
                    .iter()
                    .zip(c.beyond_shared(counted))
                    .filter(|(_, delta)| *delta > 0)
                    .map(|(name, delta)| (*name, delta))
                    .collect::<Vec<_>>();
                (tool.as_str(), fields)
            })
            .filter(|(_, fields)| !fields.is_empty())
            .collect();
        let batch: Vec<(&str, &[(&str, u64)])> = deltas
            .iter()
            .map(|(tool, fields)| (*tool, fields.as_slice()))
            .collect();
        let started = to.add(&batch).await?;
        for (_, c, counted) in &tools {
            for (shared, counted) in c.shared.iter().zip(counted) {
                shared.store(*counted, Ordering::Relaxed);
            }
        }
        if let Some(started) = started {
            if learnt.is_some_and(|learnt| learnt != started) {
                self.start_over();
            }
            *learnt = Some(started);
        }
        Ok(())
    }

    /// The counts of every replica (what this one has not added yet included), as
    /// `GET /v1/admin/stats` answers it with the state on Redis.
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis does not answer within the deadline.
    pub async fn shared_snapshot(
        &self,
        from: &RedisCounters,
    ) -> Result<Value, CountersUnavailable> {
        let _sharing = self.sharing.lock().await;
        let shared = from.read().await?;
        let mut tools: BTreeMap<String, Values> = shared
            .tools
            .into_iter()
            .map(|(tool, fields)| {
                let values = std::array::from_fn(|i| fields.get(FIELDS[i]).copied().unwrap_or(0));
                (tool, values)
            })
            .collect();
        for (tool, unshared) in self.each(Counts::unshared) {
            let values = tools.entry(tool).or_insert([0; FIELDS.len()]);
            for (value, more) in values.iter_mut().zip(unshared) {
                // The shared count was read back from Redis, where anything may be.
                *value = value.saturating_add(more);
            }
        }
        let since = shared
            .since_ms
            .map_or_else(|| self.since(), |ms| UNIX_EPOCH + Duration::from_millis(ms));
        Ok(render(since, "every replica", tools))
    }

    /// Starts the counts over from now: this process's, and with `shared` every replica's
    /// (what another replica counted and had not added yet, at most its last
    /// [`FLUSH_EVERY`], is added after the reset).
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis does not answer within the deadline: then this
    /// process's counts are kept, and the shared ones may or may not have been reset.
    pub async fn reset(&self, shared: Option<&RedisCounters>) -> Result<(), CountersUnavailable> {
        let mut learnt = self.sharing.lock().await;
        if let Some(shared) = shared {
            *learnt = Some(shared.reset().await?);
        }
        self.start_over();
        Ok(())
    }
}

/// The statistics of `tools`, counted since `since` by `counted_by`.
fn render(
    since: SystemTime,
    counted_by: &str,
    tools: impl IntoIterator<Item = (String, Values)>,
) -> Value {
    let tools: Vec<Value> = tools
        .into_iter()
        .filter(|(_, values)| values[CALLS] > 0)
        .map(|(tool, values)| {
            let buckets = &values[FIRST_BUCKET..];
            let calls = values[CALLS];
            let mean_ms = values[TOTAL_US] as f64 / calls as f64 / 1000.0;
            json!({
                "tool": tool,
                "calls": calls,
                "succeeded": values[Ending::Succeeded.field()],
                "errors": values[Ending::Error.field()],
                "refused": values[Ending::Refused.field()],
                "waiting": values[Ending::Waiting.field()],
                "latency_ms": {
                    "mean": (mean_ms * 1000.0).round() / 1000.0,
                    "p50": quantile(buckets, 0.5),
                    "p95": quantile(buckets, 0.95),
                    "p99": quantile(buckets, 0.99),
                    "buckets": buckets.iter().enumerate().map(|(i, count)| json!({
                        "le_ms": BUCKETS_MS.get(i),
                        "count": count,
                    })).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    json!({
        "since": humantime::format_rfc3339_seconds(since).to_string(),
        "counted_by": counted_by,
        "bucket_bounds_ms": BUCKETS_MS,
        "tools": tools,
    })
}

/// The upper bound (ms) of the bucket that holds quantile `q`: an estimate no finer than
/// the buckets; `None` with no calls or when it falls past the last bound.
fn quantile(buckets: &[u64], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, count) in buckets.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return BUCKETS_MS.get(i).copied();
        }
    }
    None
}

#[hook]
impl Hook for ToolCounters {
    fn name(&self) -> &str {
        "console_counters"
    }

    fn on_metrics(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.record(ctx.tool_name(), Ending::of(ctx.error()), ctx.elapsed());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_how_they_ended_with_their_latency_bucket() {
        let counters = ToolCounters::default();
        counters.record("echo", Ending::Succeeded, Duration::from_micros(300));
        counters.record("echo", Ending::Succeeded, Duration::from_millis(30));
        counters.record("echo", Ending::Refused, Duration::from_millis(3));
        counters.record("echo", Ending::Error, Duration::from_secs(20));
        let s = counters.snapshot();
        let echo = &s["tools"][0];
        assert_eq!(echo["tool"], "echo");
        assert_eq!(
            (
                &echo["calls"],
                &echo["succeeded"],
                &echo["refused"],
                &echo["errors"]
            ),
            (&json!(4), &json!(2), &json!(1), &json!(1))
        );
        let buckets = &echo["latency_ms"]["buckets"];
        assert_eq!(buckets[0]["count"], 1, "{buckets}");
        assert_eq!(buckets[2]["count"], 1, "3 ms is under 5 ms: {buckets}");
        assert_eq!(buckets[5]["count"], 1, "30 ms is under 50 ms: {buckets}");
        assert_eq!(buckets[12]["count"], 1, "past the last bound: {buckets}");
        assert_eq!(buckets[12]["le_ms"], Value::Null);
        assert_eq!(echo["latency_ms"]["p50"], 5);
        assert_eq!(echo["latency_ms"]["p99"], Value::Null);
    }

    #[test]
    fn policy_refusals_are_told_from_errors_and_waits() {
        assert_eq!(Ending::of(None), Ending::Succeeded);
        let limited = ToolError::retry_after(Duration::from_secs(1), "slow down");
        assert_eq!(Ending::of(Some(&limited)), Ending::Refused);
        let failed = ToolError::abort("boom", "tool_failed", 500);
        assert_eq!(Ending::of(Some(&failed)), Ending::Error);
    }

    #[tokio::test]
    async fn a_reset_forgets_every_count_and_frees_the_places_of_the_tools_counted_apart() {
        let counters = ToolCounters::default();
        for i in 0..MAX_TOOLS {
            counters.record(&format!("t{i}"), Ending::Succeeded, Duration::ZERO);
        }
        let before = counters.since();
        counters.reset(None).await.unwrap();
        assert!(counters.since() > before, "counted from the reset");
        assert_eq!(counters.snapshot()["tools"], json!([]));
        counters.record("new", Ending::Error, Duration::ZERO);
        let s = counters.snapshot();
        assert_eq!(s["tools"][0]["tool"], "new", "not under `other`: {s}");
        assert_eq!(s["tools"][0]["errors"], 1);
    }

    /// Shared counters on the Redis of `REDIS_URL` (or 127.0.0.1:6379), under a prefix of
    /// the test's own whose keys expire within a minute; `None` (said on stderr) without
    /// Redis outside CI.
    async fn shared_or_skip(test: &str) -> Option<RedisCounters> {
        let redis = super::super::test_redis::redis_or_skip(test, "tgcount").await?;
        Some(redis.counters(MAX_TOOLS, Duration::from_secs(60)))
    }

    #[tokio::test]
    async fn a_replica_starts_its_own_counts_over_when_another_started_the_shared_ones_over() {
        let test = "a_replica_starts_its_own_counts_over_when_another_started_the_shared_ones_over";
        let Some(shared) = shared_or_skip(test).await else {
            return;
        };
        let (a, b) = (ToolCounters::default(), ToolCounters::default());
        a.record("echo", Ending::Succeeded, Duration::ZERO);
        b.record("echo", Ending::Succeeded, Duration::ZERO);
        a.share(&shared).await.unwrap();
        b.share(&shared).await.unwrap();
        assert_eq!(
            b.shared_snapshot(&shared).await.unwrap()["tools"][0]["calls"],
            2
        );

        let before = b.since();
        a.reset(Some(&shared)).await.unwrap();
        assert_eq!(a.snapshot()["tools"], json!([]));
        // Until its next addition, `b` keeps what it counted before (shown when Redis
        // cannot be read); that addition tells it of the reset.
        assert_eq!(b.snapshot()["tools"][0]["calls"], 1);
        b.record("late", Ending::Succeeded, Duration::ZERO);
        b.share(&shared).await.unwrap();
        assert_eq!(b.snapshot()["tools"], json!([]), "started over");
        assert!(b.since() > before);
        let every = a.shared_snapshot(&shared).await.unwrap();
        assert_eq!(every["tools"].as_array().unwrap().len(), 1, "{every}");
        assert_eq!(
            every["tools"][0]["tool"], "late",
            "added after the reset: {every}"
        );
        // Its own reset is no news to `a`.
        a.record("echo", Ending::Succeeded, Duration::ZERO);
        a.share(&shared).await.unwrap();
        assert_eq!(a.snapshot()["tools"][0]["calls"], 1);
    }

    #[test]
    fn past_the_bound_further_tools_are_counted_as_other() {
        let counters = ToolCounters::default();
        for i in 0..MAX_TOOLS {
            counters.record(&format!("t{i}"), Ending::Succeeded, Duration::ZERO);
        }
        counters.record("one_more", Ending::Succeeded, Duration::ZERO);
        counters.record("t0", Ending::Succeeded, Duration::ZERO);
        let s = counters.snapshot();
        let tools = s["tools"].as_array().unwrap();
        assert_eq!(tools.len(), MAX_TOOLS + 1);
        assert!(
            tools
                .iter()
                .any(|t| t["tool"] == "other" && t["calls"] == 1)
        );
        assert!(tools.iter().any(|t| t["tool"] == "t0" && t["calls"] == 2));
    }
}
