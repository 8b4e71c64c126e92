//! Concurrency leases: one cap across replicas, renewed while held, released however the
//! call ends, and never held forever by a replica that died.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline, ToolError, tool_fn};
use toolgate_hooks::concurrency::{Concurrency, ConcurrencyBackend, Permit, PermitRequest};
use toolgate_hooks::partition::Partition;
use toolgate_redis::RedisConcurrency;

use common::{assert_every_key_expires, config, connect, inspect, namespace, redis_or_skip};

const TTL: Duration = Duration::from_millis(300);

/// The key the hooks below use: policy `concurrency`, one budget for every call.
const GLOBAL: &str = "concurrency\u{1f}*";

fn request(limit: u32, wait: Duration) -> PermitRequest<'static> {
    PermitRequest {
        key: GLOBAL,
        limit,
        wait,
    }
}

/// A pipeline with a tool `slow` (sleeps `ms`) and a tool `hang` (never ends), capped at
/// `limit` calls in flight across replicas.
fn capped(backend: RedisConcurrency, limit: u32, ms: u64, wait: Duration) -> Pipeline {
    let builder = Pipeline::builder()
        .tool(tool_fn("slow", "Sleeps.", move |_: ()| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ToolError>("done")
        }))
        .tool(tool_fn("hang", "Never ends.", |_: ()| {
            std::future::pending::<Result<(), ToolError>>()
        }));
    let hook = Concurrency::builder(limit)
        .unwrap()
        .partition(Partition::Global)
        .wait(wait)
        .backend(Arc::new(backend))
        .build();
    builder.hook(hook).build().unwrap()
}

async fn leases_held(url: &str, backend: &RedisConcurrency) -> usize {
    let mut connection = inspect(url).await;
    connection.zcard(backend.redis_key(GLOBAL)).await.unwrap()
}

/// Takes a permit on a runtime of its own, then lets that runtime die: a replica that
/// crashed while a call was in flight.
fn permit_of_a_replica_that_dies(url: &str, prefix: &str) -> Permit {
    let (url, prefix) = (url.to_owned(), prefix.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let permit = runtime.block_on(async {
            let state = connect(&url, config(&prefix).lease_ttl(TTL)).await;
            let backend = state.concurrency();
            backend.acquire(request(1, Duration::ZERO)).await.unwrap()
        });
        drop(runtime);
        permit.expect("the budget was free")
    })
    .join()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_lease_comes_back_after_its_ttl() {
    let Some(url) = redis_or_skip("a_dead_replicas_lease_comes_back_after_its_ttl").await else {
        return;
    };
    let prefix = namespace();
    // Never dropped: the process that held it is gone, nothing will give it back.
    std::mem::forget(permit_of_a_replica_that_dies(&url, &prefix));

    let survivor = connect(&url, config(&prefix).lease_ttl(TTL))
        .await
        .concurrency();
    assert!(
        survivor
            .acquire(request(1, Duration::ZERO))
            .await
            .unwrap()
            .is_none(),
        "the dead replica's lease still counts until it expires"
    );
    let waited = tokio::time::Instant::now();
    let permit = survivor
        .acquire(request(1, Duration::from_secs(3)))
        .await
        .unwrap()
        .expect("the lease expired within its TTL");
    assert!(waited.elapsed() <= TTL + Duration::from_millis(200));
    drop(permit);
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_permit_after_its_runtime_is_gone_does_not_panic() {
    let Some(url) =
        redis_or_skip("dropping_a_permit_after_its_runtime_is_gone_does_not_panic").await
    else {
        return;
    };
    let prefix = namespace();
    drop(permit_of_a_replica_that_dies(&url, &prefix));
    // Nobody could send the release: the lease expires instead.
    let backend = connect(&url, config(&prefix).lease_ttl(TTL))
        .await
        .concurrency();
    let permit = backend
        .acquire(request(1, Duration::from_secs(3)))
        .await
        .unwrap();
    assert!(permit.is_some());
    drop(permit);
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_keeps_its_lease_by_renewing_it() {
    let Some(url) = redis_or_skip("a_long_call_keeps_its_lease_by_renewing_it").await else {
        return;
    };
    let prefix = namespace();
    let replica = |prefix: String| {
        let url = url.clone();
        async move {
            connect(&url, config(&prefix).lease_ttl(TTL))
                .await
                .concurrency()
        }
    };
    let (a, b) = (replica(prefix.clone()).await, replica(prefix.clone()).await);
    let pipeline = capped(a.clone(), 1, 1_000, Duration::ZERO);
    let call = tokio::spawn(async move {
        pipeline
            .invoke("slow", json!(null), InvokeOptions::new())
            .await
    });
    // Past three lease TTLs, the call still holds its (renewed) lease.
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(leases_held(&url, &b).await, 1);
    assert!(
        b.acquire(request(1, Duration::ZERO))
            .await
            .unwrap()
            .is_none()
    );
    call.await.unwrap().unwrap();
    let after = b
        .acquire(request(1, Duration::from_millis(500)))
        .await
        .unwrap();
    assert!(after.is_some(), "released when the call ended");
    drop(after);
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_released_when_the_invocation_future_is_dropped() {
    let Some(url) =
        redis_or_skip("a_lease_is_released_when_the_invocation_future_is_dropped").await
    else {
        return;
    };
    let prefix = namespace();
    // A long TTL: the lease must come back by its release, not by expiring.
    let backend = connect(&url, config(&prefix).lease_ttl(Duration::from_secs(30)))
        .await
        .concurrency();
    let pipeline = capped(backend.clone(), 1, 0, Duration::ZERO);
    let call = tokio::spawn(async move {
        pipeline
            .invoke("hang", json!(null), InvokeOptions::new())
            .await
    });
    let held = tokio::time::Instant::now() + Duration::from_secs(2);
    while leases_held(&url, &backend).await == 0 {
        assert!(
            tokio::time::Instant::now() < held,
            "the call never took its lease"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    let released = tokio::time::Instant::now() + Duration::from_secs(1);
    while leases_held(&url, &backend).await != 0 {
        assert!(
            tokio::time::Instant::now() < released,
            "the lease of a dropped call was not released"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_across_replicas_and_waiters_get_freed_permits() {
    let Some(url) =
        redis_or_skip("the_cap_holds_across_replicas_and_waiters_get_freed_permits").await
    else {
        return;
    };
    let prefix = namespace();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let state = common::replica(&url, &prefix).await;
        let hook = Concurrency::builder(2)
            .unwrap()
            .partition(Partition::Global)
            .wait(Duration::from_secs(20))
            .backend(Arc::new(state.concurrency()))
            .build();
        let (now, peak) = (in_flight.clone(), most.clone());
        let builder = Pipeline::builder().tool(tool_fn("work", "Counts itself.", move |_: ()| {
            let (now, peak) = (now.clone(), peak.clone());
            async move {
                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(running, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ToolError>("done")
            }
        }));
        let pipeline = builder.hook(hook).build().unwrap();
        for _ in 0..8 {
            let pipeline = pipeline.clone();
            calls.spawn(async move {
                pipeline
                    .invoke("work", json!(null), InvokeOptions::new())
                    .await
            });
        }
    }
    while let Some(outcome) = calls.join_next().await {
        outcome.unwrap().expect("every waiter got a permit in time");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "never more than the cap at once"
    );
    assert_every_key_expires(&url, &prefix).await;
}
