//! Decisions made without Redis reach the `metrics` facade, and so does Redis's state.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use toolgate_hooks::quota::{QuotaBackend, QuotaRequest, Rate};
use toolgate_redis::{
    QuotaFailurePolicy, REDIS_UP, RedisConfig, RedisState, UNAVAILABLE_DECISIONS,
};

use common::{Proxy, config, connect, namespace, redis_or_skip};

/// The recorder of this test binary, installed once. The `toolgate_redis_up` gauge is one
/// per process, so the tests that read it run one at a time ([`one_at_a_time`]).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// The gauge's value now, if it was ever set.
fn redis_up() -> Option<DebugValue> {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(key, ..)| key.key().name() == REDIS_UP)
        .map(|(.., value)| value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_up_is_exported_from_the_start_before_any_call() {
    let Some(url) = redis_or_skip("redis_up_is_exported_from_the_start_before_any_call").await
    else {
        return;
    };
    let _turn = one_at_a_time().await;
    snapshotter();
    // A lazy state whose Redis has not answered yet says so: 0, not nothing.
    let _lazy = RedisState::connect_lazy("redis://127.0.0.1:1", RedisConfig::default()).unwrap();
    assert_eq!(redis_up(), Some(DebugValue::Gauge(0.0.into())));
    // A state that connected (Redis answered its check) is up, before any call and with
    // no failure yet.
    let _state = connect(&url, config(&namespace())).await;
    assert_eq!(redis_up(), Some(DebugValue::Gauge(1.0.into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_without_redis_are_counted_by_backend_and_outcome() {
    let Some(url) =
        redis_or_skip("decisions_without_redis_are_counted_by_backend_and_outcome").await
    else {
        return;
    };
    let _turn = one_at_a_time().await;
    let snapshotter = snapshotter();

    let prefix = namespace();
    let proxy = Proxy::start(&url).await;
    const UP_AFTER: Duration = Duration::from_millis(200);
    let quota = connect(&proxy.url(), config(&prefix).up_after(UP_AFTER))
        .await
        .quota()
        .on_unavailable(QuotaFailurePolicy::FailOpen);
    let rate = Rate::per_minute(60).unwrap();
    let counted_before = fail_open_count(snapshotter);
    proxy.stall();
    for _ in 0..5 {
        quota
            .acquire(QuotaRequest { key: "k", rate })
            .await
            .unwrap();
    }

    assert_eq!(fail_open_count(snapshotter) - counted_before, 5);
    assert_eq!(quota.unavailable_decisions().fail_open, 5);
    assert_eq!(redis_up(), Some(DebugValue::Gauge(0.0.into())));

    // Back: once calls were answered for `up_after`, the gauge says so.
    proxy.heal();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        quota
            .acquire(QuotaRequest { key: "k", rate })
            .await
            .unwrap();
        if redis_up() == Some(DebugValue::Gauge(1.0.into())) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "Redis never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    common::assert_every_key_expires(&url, &prefix).await;
}

/// `toolgate_redis_unavailable_decisions_total{backend="quota", outcome="fail_open"}`.
fn fail_open_count(snapshotter: &Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (key.key().name() == UNAVAILABLE_DECISIONS
                && labels.contains(&"backend=quota".to_owned())
                && labels.contains(&"outcome=fail_open".to_owned()))
            .then_some(value)
        })
        .map_or(0, |value| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
}
