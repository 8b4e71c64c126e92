//! The gateway's own per-tool counters: calls, errors, refusals, calls that wait, and a
//! latency histogram, counted by a hook at `on_metrics` (the same point, and so the same
//! calls, as the Prometheus metrics) and read as JSON by `GET /v1/admin/stats`.
//!
//! They live as long as the process (reloads keep them) and are bounded: past
//! [`MAX_TOOLS`] tools, further tools are counted under `other`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

/// The most tools counted apart.
pub const MAX_TOOLS: usize = 4096;

/// The upper bounds of the latency buckets, in milliseconds (a last bucket holds the rest).
pub const BUCKETS_MS: [u64; 12] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10_000];

#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    succeeded: AtomicU64,
    errors: AtomicU64,
    refused: AtomicU64,
    waiting: AtomicU64,
    total_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS_MS.len() + 1],
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
}

/// The counters, shared by every configuration the process serves.
pub struct ToolCounters {
    tools: RwLock<BTreeMap<String, Arc<Counts>>>,
    since: SystemTime,
}

impl Default for ToolCounters {
    fn default() -> Self {
        ToolCounters {
            tools: RwLock::default(),
            since: SystemTime::now(),
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

    /// Counts one call of `tool` that ended so after `elapsed`.
    pub fn record(&self, tool: &str, ending: Ending, elapsed: Duration) {
        let counts = self.counts(tool);
        counts.calls.fetch_add(1, Ordering::Relaxed);
        let which = match ending {
            Ending::Succeeded => &counts.succeeded,
            Ending::Error => &counts.errors,
            Ending::Refused => &counts.refused,
            Ending::Waiting => &counts.waiting,
        };
        which.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        counts.total_us.fetch_add(us, Ordering::Relaxed);
        let ms = elapsed.as_millis();
        let bucket = BUCKETS_MS
            .iter()
            .position(|&bound| ms < u128::from(bound))
            .unwrap_or(BUCKETS_MS.len());
        counts.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// Everything counted, as `GET /v1/admin/stats` answers it.
    pub fn snapshot(&self) -> Value {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        let tools: Vec<Value> = tools
            .iter()
            .map(|(tool, c)| {
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let buckets: Vec<u64> = c.buckets.iter().map(get).collect();
                let calls = get(&c.calls);
                let mean_ms = match calls {
                    0 => 0.0,
                    n => get(&c.total_us) as f64 / n as f64 / 1000.0,
                };
                json!({
                    "tool": tool,
                    "calls": calls,
                    "succeeded": get(&c.succeeded),
                    "errors": get(&c.errors),
                    "refused": get(&c.refused),
                    "waiting": get(&c.waiting),
                    "latency_ms": {
                        "mean": (mean_ms * 1000.0).round() / 1000.0,
                        "p50": quantile(&buckets, 0.5),
                        "p95": quantile(&buckets, 0.95),
                        "p99": quantile(&buckets, 0.99),
                        "buckets": buckets.iter().enumerate().map(|(i, count)| json!({
                            "le_ms": BUCKETS_MS.get(i),
                            "count": count,
                        })).collect::<Vec<_>>(),
                    },
                })
            })
            .collect();
        json!({
            "since": humantime::format_rfc3339_seconds(self.since).to_string(),
            "bucket_bounds_ms": BUCKETS_MS,
            "tools": tools,
        })
    }
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
