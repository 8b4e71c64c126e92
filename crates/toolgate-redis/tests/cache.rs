//! The shared result cache: one replica's result serves the others, never another user,
//! every entry with its TTL, oversize results skipped, and what one caller stores bounded.

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
    replica_of(ResultCache::builder().backend(cache), runs, ms, padding)
}

/// As [`replica`], with the cache built from `cache`.
fn replica_of(
    cache: toolgate_hooks::cache::ResultCacheBuilder,
    runs: Arc<AtomicUsize>,
    ms: u64,
    padding: usize,
) -> Pipeline {
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
        .hook(cache.ttl(Duration::from_secs(60)).build())
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
    assert_eq!(entries_under(&url, &prefix).await, users.len());
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
    // Beside the entry, only the count of what ann stored this window.
    let counter = state.cache().caller_bytes_key("ann");
    let keys: Vec<String> = keys_under(&url, &prefix)
        .await
        .into_iter()
        .filter(|key| *key != counter)
        .collect();
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

/// The entries of the `profile` tool under `prefix`.
async fn entries_under(url: &str, prefix: &str) -> usize {
    let entries = format!("{prefix}:profile:");
    keys_under(url, prefix)
        .await
        .iter()
        .filter(|key| key.starts_with(&entries))
        .count()
}

/// With a bound of 4 KiB per caller, three of these results fit (each about 1.2 KB with
/// its key), a fourth does not.
const BOUND: u64 = 4096;
const PADDING: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_past_the_bound_stores_nothing_more_while_another_caller_still_does() {
    let Some(url) = redis_or_skip(
        "a_caller_past_the_bound_stores_nothing_more_while_another_caller_still_does",
    )
    .await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix).cache_max_bytes_per_caller(BOUND)).await;
    let cache = state.cache();
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = replica(cache.clone(), runs.clone(), 0, PADDING);

    // Mallory floods the cache with distinct inputs: every call succeeds, three are stored.
    for q in 0..6 {
        let out = pipeline
            .invoke("profile", json!({"q": q}), as_user("mallory"))
            .await
            .unwrap();
        assert_eq!(out["owner"], json!("mallory"));
    }
    assert_eq!(entries_under(&url, &prefix).await, 3, "the bound held");
    assert_eq!(cache.stats().over_caller_bound, 3);
    let counted: u64 = inspect(&url)
        .await
        .get(cache.caller_bytes_key("mallory"))
        .await
        .unwrap();
    assert!(counted <= BOUND && counted > BOUND / 2, "{counted} bytes");

    // A result past the bound was not stored: asked again, the tool runs again.
    pipeline
        .invoke("profile", json!({"q": 5}), as_user("mallory"))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 7);

    // Ann's results are stored all the same, and served.
    for _ in 0..2 {
        pipeline
            .invoke("profile", json!({"q": 0}), as_user("ann"))
            .await
            .unwrap();
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        8,
        "ann's second call was a hit"
    );
    assert_eq!(entries_under(&url, &prefix).await, 4);
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_count_ends_with_its_window_and_the_caller_stores_again() {
    let Some(url) =
        redis_or_skip("a_callers_count_ends_with_its_window_and_the_caller_stores_again").await
    else {
        return;
    };
    let prefix = namespace();
    let window = Duration::from_secs(2);
    let state = connect(
        &url,
        config(&prefix)
            .cache_max_bytes_per_caller(BOUND)
            .cache_caller_window(window),
    )
    .await;
    let cache = state.cache();
    let pipeline = replica(cache.clone(), Arc::default(), 0, PADDING);
    let counter = cache.caller_bytes_key("mallory");
    for q in 0..4 {
        pipeline
            .invoke("profile", json!({"q": q}), as_user("mallory"))
            .await
            .unwrap();
    }
    assert_eq!(cache.stats().over_caller_bound, 1);
    assert_eq!(entries_under(&url, &prefix).await, 3);
    let mut connection = inspect(&url).await;
    let pttl: i64 = connection.pttl(&counter).await.unwrap();
    assert!((1..=2_000).contains(&pttl), "PTTL {pttl}");

    let late = tokio::time::Instant::now() + Duration::from_secs(10);
    while connection.exists::<_, bool>(&counter).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < late,
            "the count outlived its window"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A new window: the result the bound refused is stored now.
    pipeline
        .invoke("profile", json!({"q": 3}), as_user("mallory"))
        .await
        .unwrap();
    assert_eq!(cache.stats().over_caller_bound, 1);
    assert_eq!(entries_under(&url, &prefix).await, 4);
    assert_every_key_expires(&url, &prefix).await;
}

/// A result shared by everyone is charged to the caller whose call stored it: one
/// caller's flood of public results uses up their own share, not everyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_result_is_charged_to_the_caller_who_stored_it() {
    let Some(url) = redis_or_skip("a_public_result_is_charged_to_the_caller_who_stored_it").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix).cache_max_bytes_per_caller(BOUND)).await;
    let cache = state.cache();
    let public = ResultCache::builder()
        .backend(cache.clone())
        .public("profile");
    let pipeline = replica_of(public, Arc::default(), 0, PADDING);
    for q in 0..6 {
        pipeline
            .invoke("profile", json!({"q": q}), as_user("mallory"))
            .await
            .unwrap();
    }
    assert_eq!(entries_under(&url, &prefix).await, 3, "mallory's share");
    assert_eq!(cache.stats().over_caller_bound, 3);
    pipeline
        .invoke("profile", json!({"q": 100}), as_user("ann"))
        .await
        .unwrap();
    assert_eq!(
        entries_under(&url, &prefix).await,
        4,
        "ann's public result is stored, on her own share"
    );
    assert_eq!(cache.stats().over_caller_bound, 3);
    let mut connection = inspect(&url).await;
    for caller in ["mallory", "ann"] {
        let counter = cache.caller_bytes_key(caller);
        assert!(
            connection.exists::<_, bool>(&counter).await.unwrap(),
            "{caller}"
        );
    }
    assert_every_key_expires(&url, &prefix).await;
}
