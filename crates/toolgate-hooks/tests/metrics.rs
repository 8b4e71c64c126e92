//! Metrics through the `metrics` facade, read back with a debugging recorder.

mod common;

use std::sync::{Arc, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::json;
use toolgate_core::{
    Hook, HookResult, InvokeOptions, Pipeline, ToolError, ToolInvokeContext, hook,
};
use toolgate_hooks::cache::ResultCache;
use toolgate_hooks::metrics::Metrics;

/// The tests share one process-wide recorder whose snapshots drain what they read, so they
/// take turns: one test's snapshot must not swallow another's counts.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("one recorder per test binary");
        snapshotter
    })
}

/// (name, sorted labels, value) of every metric about `tool` since the last snapshot.
fn metrics_of(tool: &str) -> Vec<(String, Vec<String>, DebugValue)> {
    let mut found: Vec<_> = snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key()
                .labels()
                .any(|l| l.key() == "tool" && l.value() == tool)
        })
        .map(|(key, _, _, value)| {
            let mut labels: Vec<String> = key
                .key()
                .labels()
                .filter(|l| l.key() != "tool")
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (key.key().name().to_owned(), labels, value)
        })
        .collect();
    found.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    found
}

fn counter(found: &[(String, Vec<String>, DebugValue)], name: &str, labels: &[&str]) -> u64 {
    found
        .iter()
        .filter(|(n, l, _)| {
            n == name && labels.iter().all(|want| l.iter().any(|have| have == want))
        })
        .map(|(_, _, v)| match v {
            DebugValue::Counter(c) => *c,
            _ => 0,
        })
        .sum()
}

struct RateLimitOdd(std::sync::atomic::AtomicUsize);

#[hook]
impl Hook for RateLimitOdd {
    fn will_acquire_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 2 == 1 {
            return ctx.retry_after(std::time::Duration::from_secs(1), "rate limited");
        }
        Ok(())
    }
}

#[tokio::test]
async fn calls_outcomes_latency_cache_and_rate_limits_are_recorded_per_tool() {
    let _turn = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let p = Pipeline::builder()
        .tool(common::read_only("metered", |input| {
            if input["fail"] == true {
                Err(ToolError::execution("no"))
            } else {
                Ok(json!("ok"))
            }
        }))
        .record_hook_timings(true)
        .hook(Metrics::new())
        .hook(ResultCache::new())
        .hook(RateLimitOdd(Default::default()))
        .build()
        .unwrap();
    // quota: ok, limited, ok, limited, ok
    let _ = p.invoke("metered", json!({}), InvokeOptions::new()).await; // miss, success
    let _ = p.invoke("metered", json!({}), InvokeOptions::new()).await; // rate limited
    let _ = p.invoke("metered", json!({}), InvokeOptions::new()).await; // hit
    let _ = p.invoke("metered", json!({}), InvokeOptions::new()).await; // rate limited
    let _ = p
        .invoke("metered", json!({ "fail": true }), InvokeOptions::new())
        .await; // miss, error

    let found = metrics_of("metered");
    assert_eq!(
        counter(
            &found,
            "toolgate_calls_total",
            &["outcome=success", "code=ok"]
        ),
        2
    );
    assert_eq!(
        counter(&found, "toolgate_calls_total", &["code=rate_limited"]),
        2
    );
    assert_eq!(
        counter(&found, "toolgate_calls_total", &["code=tool_error"]),
        1
    );
    assert_eq!(counter(&found, "toolgate_rate_limited_total", &[]), 2);
    assert_eq!(
        counter(&found, "toolgate_cache_lookups_total", &["result=hit"]),
        1
    );
    assert_eq!(
        counter(&found, "toolgate_cache_lookups_total", &["result=miss"]),
        2
    );
    let latencies: usize = found
        .iter()
        .filter(|(n, ..)| n == "toolgate_call_duration_seconds")
        .map(|(_, _, v)| match v {
            DebugValue::Histogram(xs) => xs.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(latencies, 5);
    assert!(
        found
            .iter()
            .any(|(n, l, _)| n == "toolgate_hook_duration_seconds"
                && l.contains(&"hook=result_cache".to_owned())
                && l.contains(&"stage=will_read_cache".to_owned())),
        "{found:?}"
    );
}

#[tokio::test]
async fn labels_never_carry_user_ids_or_arguments() {
    let _turn = ONE_AT_A_TIME.lock().await;
    snapshotter();
    let p = Pipeline::builder()
        .tool(common::read_only("private", |_| Ok(json!("ok"))))
        .hook(Metrics::builder().prefix("agent").build())
        .build()
        .unwrap();
    let user = toolgate_core::User::new("user-8c1e");
    p.invoke(
        "private",
        json!({ "q": "arg-5d2a" }),
        InvokeOptions::new().user(Arc::new(user)),
    )
    .await
    .unwrap();
    let found = metrics_of("private");
    assert!(
        found.iter().all(|(n, ..)| n.starts_with("agent_")),
        "{found:?}"
    );
    let text = format!("{found:?}");
    assert!(
        !text.contains("user-8c1e") && !text.contains("arg-5d2a"),
        "{text}"
    );
}
