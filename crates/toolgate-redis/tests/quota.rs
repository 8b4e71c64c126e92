//! The shared quota: exact across replicas and callers, the in-memory GCRA's answers, and
//! keys that expire.

mod common;

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline, ToolError, User, tool_fn};
use toolgate_hooks::quota::{Quota, QuotaBackend, QuotaDecision, QuotaRequest, Rate};
use toolgate_redis::RedisQuota;

use common::{assert_every_key_expires, config, connect, inspect, namespace, redis_or_skip};

fn limited(backend: RedisQuota, rate: Rate) -> Pipeline {
    let builder = Pipeline::builder().tool(tool_fn("ping", "Answers pong.", |_: ()| async {
        Ok::<_, ToolError>("pong")
    }));
    builder
        .hook(Quota::builder(rate).backend(Arc::new(backend)).build())
        .build()
        .unwrap()
}

fn ann() -> InvokeOptions {
    InvokeOptions::new().user(User::new("ann"))
}

/// Microseconds on the Redis server's clock.
async fn redis_now(url: &str) -> u64 {
    let mut connection = inspect(url).await;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    seconds * 1_000_000 + micros
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_with_256_callers_each_admit_exactly_the_burst() {
    let Some(url) =
        redis_or_skip("four_replicas_with_256_callers_each_admit_exactly_the_burst").await
    else {
        return;
    };
    let prefix = namespace();
    // One unit every 36 s: within the test's few seconds the budget is the burst, exactly.
    let rate = Rate::per_hour(100).unwrap().with_burst(40).unwrap();
    let mut replicas = Vec::new();
    for _ in 0..4 {
        // A generous deadline: this test is about exactness, not about slow calls.
        let state = connect(&url, config(&prefix).deadline(Duration::from_secs(10))).await;
        replicas.push(limited(state.quota(), rate));
    }
    let mut calls = tokio::task::JoinSet::new();
    for pipeline in &replicas {
        for _ in 0..256 {
            let pipeline = pipeline.clone();
            calls.spawn(async move { pipeline.invoke("ping", json!(null), ann()).await });
        }
    }
    let (mut admitted, mut limited_calls) = (0, 0);
    while let Some(outcome) = calls.join_next().await {
        match outcome.unwrap() {
            Ok(_) => admitted += 1,
            Err(error) => {
                assert_eq!(error.code(), "rate_limited", "{error}");
                limited_calls += 1;
            }
        }
    }
    assert_eq!(
        admitted, 40,
        "exactly the burst, across 4 replicas and 1024 callers"
    );
    assert_eq!(limited_calls, 1024 - 40);
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_window_admissions_never_exceed_the_burst_plus_one_per_interval() {
    let Some(url) =
        redis_or_skip("over_a_window_admissions_never_exceed_the_burst_plus_one_per_interval")
            .await
    else {
        return;
    };
    let prefix = namespace();
    let rate = Rate::per_second(20).unwrap().with_burst(5).unwrap();
    let slow_ok = || config(&prefix).deadline(Duration::from_secs(10));
    let backends = [
        connect(&url, slow_ok()).await.quota(),
        connect(&url, slow_ok()).await.quota(),
    ];

    let start = redis_now(&url).await;
    let until = tokio::time::Instant::now() + Duration::from_millis(800);
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..32 {
        let backend = backends[caller % 2].clone();
        callers.spawn(async move {
            let mut granted = 0u64;
            while tokio::time::Instant::now() < until {
                let request = QuotaRequest {
                    key: "window",
                    rate,
                };
                if let Ok(QuotaDecision::Granted(_)) = backend.acquire(request).await {
                    granted += 1;
                }
            }
            granted
        });
    }
    let mut admitted = 0;
    while let Some(granted) = callers.join_next().await {
        admitted += granted.unwrap();
    }
    let window = redis_now(&url).await - start;
    let interval = rate.emission_interval().as_micros() as u64;
    let bound = u64::from(rate.burst()) + window / interval;
    assert!(
        admitted <= bound,
        "{admitted} admitted in {window} µs, at most {bound} allowed"
    );
    assert!(admitted >= u64::from(rate.burst()), "{admitted} admitted");
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_call_gets_the_exact_gcra_retry_after() {
    let Some(url) = redis_or_skip("a_limited_call_gets_the_exact_gcra_retry_after").await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let pipeline = limited(state.quota(), Rate::per_minute(2).unwrap());
    let before = redis_now(&url).await;
    for _ in 0..2 {
        pipeline.invoke("ping", json!(null), ann()).await.unwrap();
    }
    let err = pipeline
        .invoke("ping", json!(null), ann())
        .await
        .unwrap_err();
    let elapsed = Duration::from_micros(redis_now(&url).await - before);
    assert_eq!((err.code(), err.status()), ("rate_limited", 429));
    // As in memory: the second unit comes back 30 s after the first call, less the time
    // the calls took on the Redis clock.
    let wait = err.retry_after_delay().unwrap();
    assert!(wait <= Duration::from_secs(30), "{wait:?}");
    assert!(
        wait >= Duration::from_secs(30) - elapsed,
        "{wait:?} after {elapsed:?}"
    );
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_key_expires_once_its_budget_is_full_again() {
    let Some(url) = redis_or_skip("a_budget_key_expires_once_its_budget_is_full_again").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let backend = state.quota();
    let rate = Rate::per_second(10).unwrap().with_burst(3).unwrap();
    for _ in 0..2 {
        let request = QuotaRequest { key: "k", rate };
        assert!(matches!(
            backend.acquire(request).await.unwrap(),
            QuotaDecision::Granted(_)
        ));
    }
    // Two units out, one back every 100 ms: the state means something for 200 ms, no more.
    let mut connection = inspect(&url).await;
    let pttl: i64 = connection.pttl(backend.redis_key("k")).await.unwrap();
    assert!((1..=200).contains(&pttl), "PTTL {pttl}");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let exists: bool = connection.exists(backend.redis_key("k")).await.unwrap();
    assert!(!exists, "the key outlived its use");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_ann_of_globex_does_not_spend_the_rate_limit_of_ann_of_acme() {
    let test = "a_flood_from_ann_of_globex_does_not_spend_the_rate_limit_of_ann_of_acme";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let rate = Rate::per_hour(2).unwrap();
    // Two replicas on one Redis: the flood and ann of acme meet on either.
    let globex_replica = limited(connect(&url, config(&prefix)).await.quota(), rate);
    let state = connect(&url, config(&prefix)).await;
    let backend = state.quota();
    let acme_replica = limited(state.quota(), rate);
    let caller = |tenant: &str| InvokeOptions::new().user(User::new("ann").with_tenant(tenant));

    for _ in 0..2 {
        let globex = globex_replica.invoke("ping", json!(null), caller("globex"));
        globex.await.unwrap();
    }
    for _ in 0..10 {
        let flood = globex_replica.invoke("ping", json!(null), caller("globex"));
        assert_eq!(flood.await.unwrap_err().code(), "rate_limited");
    }
    for _ in 0..2 {
        let acme = acme_replica.invoke("ping", json!(null), caller("acme"));
        assert!(acme.await.is_ok(), "ann of acme has her own budget");
    }
    acme_replica
        .invoke("ping", json!(null), ann())
        .await
        .unwrap();

    // The ann without a tenant keeps the key she had, so her budget carries over.
    let mut connection = inspect(&url).await;
    let kept: bool = connection
        .exists(backend.redis_key("quota\u{1f}ut\u{1f}ping\u{1f}ann"))
        .await
        .unwrap();
    assert!(kept, "the key of a caller without a tenant is what it was");
    assert_every_key_expires(&url, &prefix).await;
}

/// A state past a full budget from now — written on a clock ahead of this Redis's (a
/// failover to a node whose clock is behind), or not a time at all — reads as the latest
/// state a replica on this clock could have written: the caller waits at most one emission
/// interval, not for as long as the clocks differ (or forever), and the state is put back
/// in range for every replica. A value that is not a number reads as no state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_from_a_clock_ahead_never_makes_a_caller_wait_past_one_interval() {
    let test = "a_state_from_a_clock_ahead_never_makes_a_caller_wait_past_one_interval";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let backend = state.quota();
    let rate = Rate::per_second(1).unwrap().with_burst(2).unwrap();
    let mut connection = inspect(&url).await;
    let an_hour_ahead = (redis_now(&url).await + 3_600_000_000).to_string();
    for (n, stored) in [an_hour_ahead.as_str(), "1e300", "inf"].iter().enumerate() {
        let key = format!("ahead{n}");
        let redis_key = backend.redis_key(&key);
        let _: () = connection
            .pset_ex(&redis_key, *stored, 3_600_000)
            .await
            .unwrap();
        let request = QuotaRequest { key: &key, rate };
        match backend.acquire(request).await.unwrap() {
            QuotaDecision::Limited { retry_after } => {
                assert!(
                    retry_after <= Duration::from_secs(1),
                    "{stored}: {retry_after:?}"
                );
            }
            QuotaDecision::Granted(_) => panic!("{stored}: the budget read as spent is spent"),
        }
        let pttl: i64 = connection.pttl(&redis_key).await.unwrap();
        assert!((1..=2000).contains(&pttl), "{stored}: PTTL {pttl}");
    }
    for (n, stored) in ["nan", "-nan", "not a time"].iter().enumerate() {
        let key = format!("nan{n}");
        let _: () = connection
            .pset_ex(backend.redis_key(&key), *stored, 3_600_000)
            .await
            .unwrap();
        for _ in 0..2 {
            let request = QuotaRequest { key: &key, rate };
            let decision = backend.acquire(request).await.unwrap();
            assert!(matches!(decision, QuotaDecision::Granted(_)), "{stored}");
        }
        let request = QuotaRequest { key: &key, rate };
        let decision = backend.acquire(request).await.unwrap();
        assert!(
            matches!(decision, QuotaDecision::Limited { .. }),
            "{stored}: past the burst"
        );
    }
    assert_every_key_expires(&url, &prefix).await;
}
