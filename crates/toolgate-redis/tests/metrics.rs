//! Decisions made without Redis reach the `metrics` facade, and so does Redis's state.

mod common;

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use toolgate_hooks::quota::{QuotaBackend, QuotaRequest, Rate};
use toolgate_redis::{QuotaFailurePolicy, REDIS_UP, UNAVAILABLE_DECISIONS};

use common::{Proxy, config, connect, namespace, redis_or_skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_without_redis_are_counted_by_backend_and_outcome() {
    let Some(url) =
        redis_or_skip("decisions_without_redis_are_counted_by_backend_and_outcome").await
    else {
        return;
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let prefix = namespace();
    let proxy = Proxy::start(&url).await;
    let quota = connect(&proxy.url(), config(&prefix))
        .await
        .quota()
        .on_unavailable(QuotaFailurePolicy::FailOpen);
    let rate = Rate::per_minute(60).unwrap();
    proxy.stall();
    for _ in 0..5 {
        quota
            .acquire(QuotaRequest { key: "k", rate })
            .await
            .unwrap();
    }

    let snapshot = snapshotter.snapshot().into_vec();
    let counted = snapshot.iter().find_map(|(key, _, _, value)| {
        let labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        (key.key().name() == UNAVAILABLE_DECISIONS
            && labels.contains(&"backend=quota".to_owned())
            && labels.contains(&"outcome=fail_open".to_owned()))
        .then_some(value)
    });
    assert_eq!(counted, Some(&DebugValue::Counter(5)));
    assert_eq!(quota.unavailable_decisions().fail_open, 5);
    let up = snapshot
        .iter()
        .find(|(key, ..)| key.key().name() == REDIS_UP)
        .map(|(.., value)| value);
    assert_eq!(up, Some(&DebugValue::Gauge(0.0.into())));

    // Back: the gauge says so.
    proxy.heal();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let before = quota.unavailable_decisions().total();
        quota
            .acquire(QuotaRequest { key: "k", rate })
            .await
            .unwrap();
        if quota.unavailable_decisions().total() == before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "Redis never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let up = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(key, ..)| key.key().name() == REDIS_UP)
        .map(|(.., value)| value);
    assert_eq!(up, Some(DebugValue::Gauge(1.0.into())));
    common::assert_every_key_expires(&url, &prefix).await;
}
