//! The shared result cache: one replica's result serves the others, never another user,
//! every entry with its TTL, and oversize results skipped.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{Value, json};
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_hooks::cache::ResultCache;
use toolgate_redis::RedisCache;

use common::{
    assert_every_key_expires, config, connect, inspect, keys_under, namespace, redis_or_skip,
};

/// A replica's pipeline: a read-only `profile` tool that takes `ms`, answers with its
/// caller's id (and `padding` bytes), and counts its runs in `runs`; fails when the input
/// says `fail`.
fn replica(cache: RedisCache, runs: Arc<AtomicUsize>, ms: u64, padding: usize) -> Pipeline {
    let mut tool = JsonTool::new(
        "profile",
        "Returns the caller's profile.",
        json!({}),
        move |input, ctx| {
            runs.fetch_add(1, Ordering::SeqCst);
            let owner = ctx.user().id.clone();
            let fail = input["fail"] == json!(true);
            let out = json!({
                "owner": owner,
                "canary": format!("canary-of-{owner}"),
                "input": input,
                "padding": "x".repeat(padding),
            });
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                if fail {
                    return Err(ToolError::execution("asked to fail"));
                }
                Ok::<Value, ToolError>(out)
            })
        },
    );
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    let builder = Pipeline::builder().tool(tool);
    builder
        .hook(
            ResultCache::builder()
                .backend(cache)
                .ttl(Duration::from_secs(60))
                .build(),
        )
        .build()
        .unwrap()
}

fn as_user(id: &str) -> InvokeOptions {
    InvokeOptions::new().user(User::new(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_an_entry_and_run_the_tool_once() {
    let Some(url) = redis_or_skip("two_replicas_share_an_entry_and_run_the_tool_once").await else {
        return;
    };
    let prefix = namespace();
    let runs = Arc::new(AtomicUsize::new(0));
    let with_fill_lock = || config(&prefix).cache_fill_wait(Some(Duration::from_secs(5)));
    let a = replica(
        connect(&url, with_fill_lock()).await.cache(),
        runs.clone(),
        200,
        0,
    );
    let b = replica(
        connect(&url, with_fill_lock()).await.cache(),
        runs.clone(),
        200,
        0,
    );

    // Concurrent identical misses on both replicas: one runs the tool, all get its result.
    let mut calls = tokio::task::JoinSet::new();
    for pipeline in [&a, &b, &a, &b, &a, &b] {
        let pipeline = pipeline.clone();
        calls.spawn(async move {
            pipeline
                .invoke("profile", json!({"q": 1}), as_user("ann"))
                .await
        });
    }
    while let Some(out) = calls.join_next().await {
        assert_eq!(out.unwrap().unwrap()["owner"], json!("ann"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one run for both replicas");

    // A later call on either replica is a hit.
    b.invoke("profile", json!({"q": 1}), as_user("ann"))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_never_served_to_another_user() {
    let Some(url) = redis_or_skip("entries_are_never_served_to_another_user").await else {
        return;
    };
    let prefix = namespace();
    let runs = Arc::new(AtomicUsize::new(0));
    let a = replica(
        connect(&url, config(&prefix)).await.cache(),
        runs.clone(),
        0,
        0,
    );
    let b = replica(
        connect(&url, config(&prefix)).await.cache(),
        runs.clone(),
        0,
        0,
    );
    let users: Vec<String> = (0..6).map(|i| format!("user-{i}")).collect();
    for round in 0..3 {
        for (i, user) in users.iter().enumerate() {
            let pipeline = if (i + round) % 2 == 0 { &a } else { &b };
            let out = pipeline
                .invoke("profile", json!({"q": 1}), as_user(user))
                .await
                .unwrap();
            assert_eq!(out["owner"], json!(user));
            assert_eq!(out["canary"], json!(format!("canary-of-{user}")));
        }
    }
    // One run per user (the first round), hits after that, on either replica.
    assert_eq!(runs.load(Ordering::SeqCst), users.len());
    assert_eq!(keys_under(&url, &prefix).await.len(), users.len());
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_is_written_with_its_ttl_and_no_fill_claim_is_left() {
    let Some(url) =
        redis_or_skip("every_entry_is_written_with_its_ttl_and_no_fill_claim_is_left").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(
        &url,
        config(&prefix).cache_fill_wait(Some(Duration::from_secs(5))),
    )
    .await;
    let pipeline = replica(state.cache(), Arc::default(), 0, 0);
    pipeline
        .invoke("profile", json!({"q": 1}), as_user("ann"))
        .await
        .unwrap();
    let keys = keys_under(&url, &prefix).await;
    assert_eq!(
        keys.len(),
        1,
        "the entry only, its claim given back: {keys:?}"
    );
    assert!(
        keys[0].starts_with(&format!("{prefix}:profile:")),
        "{keys:?}"
    );
    let pttl: i64 = inspect(&url).await.pttl(&keys[0]).await.unwrap();
    assert!((50_000..=60_000).contains(&pttl), "PTTL {pttl}");
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_result_is_not_stored_and_the_call_succeeds() {
    let Some(url) = redis_or_skip("an_oversize_result_is_not_stored_and_the_call_succeeds").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix).cache_max_value_bytes(1024)).await;
    let cache = state.cache();
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = replica(cache.clone(), runs.clone(), 0, 4096);
    for _ in 0..2 {
        let out = pipeline
            .invoke("profile", json!({"q": 1}), as_user("ann"))
            .await
            .unwrap();
        assert_eq!(out["padding"].as_str().unwrap().len(), 4096);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "nothing was cached");
    assert_eq!(cache.stats().oversize_skipped, 2);
    assert!(keys_under(&url, &prefix).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_for_a_failed_fill_no_longer_than_the_fill_wait() {
    let Some(url) =
        redis_or_skip("a_replica_waits_for_a_failed_fill_no_longer_than_the_fill_wait").await
    else {
        return;
    };
    let prefix = namespace();
    let wait = Duration::from_millis(300);
    let runs = Arc::new(AtomicUsize::new(0));
    let with_fill_lock = || config(&prefix).cache_fill_wait(Some(wait));
    let a = replica(
        connect(&url, with_fill_lock()).await.cache(),
        runs.clone(),
        100,
        0,
    );
    let b_cache = connect(&url, with_fill_lock()).await.cache();
    let b = replica(b_cache.clone(), runs.clone(), 0, 0);

    let failing = tokio::spawn(async move {
        a.invoke("profile", json!({"fail": true}), as_user("ann"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    let started = tokio::time::Instant::now();
    // The leader on replica A fails and stores nothing: B runs the tool itself once the
    // claim lapses, instead of waiting for a result that never comes.
    let err = b
        .invoke("profile", json!({"fail": true}), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "tool_error", "{err}");
    assert!(started.elapsed() <= wait + Duration::from_millis(200));
    assert!(failing.await.unwrap().is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(b_cache.stats().fill_waits, 1);
    assert_every_key_expires(&url, &prefix).await;
}
