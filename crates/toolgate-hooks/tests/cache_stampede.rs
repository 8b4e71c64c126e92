//! Coalescing: concurrent identical misses run the tool once, and a leader that is
//! cancelled, panics or fails leaves no follower hanging.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use toolgate_core::hook::HookRegistration;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_hooks::cache::ResultCache;

/// What the tool does on its n-th run (0-based).
#[derive(Clone, Copy)]
enum Run {
    Slow,
    Hang,
    Panic,
    Fail,
}

fn pipeline(script: &'static [Run], runs: Arc<AtomicUsize>) -> (Pipeline, Arc<ResultCache>) {
    let mut tool = JsonTool::new("report", "A slow report.", json!({}), move |_, _| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        let step = script.get(n).copied().unwrap_or(Run::Slow);
        Box::pin(async move {
            match step {
                Run::Slow => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, ToolError>(json!({ "report": n }))
                }
                Run::Hang => std::future::pending().await,
                Run::Panic => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    panic!("the report generator broke");
                }
                Run::Fail => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(ToolError::execution("the report generator failed"))
                }
            }
        })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    let cache = Arc::new(ResultCache::new());
    let p = Pipeline::builder()
        .tool(tool)
        .hook(HookRegistration::shared(cache.clone()))
        .build()
        .unwrap();
    (p, cache)
}

fn caller() -> InvokeOptions {
    InvokeOptions::new()
        .user(User::new("ann"))
        .timeout(Duration::from_secs(5))
}

#[tokio::test(start_paused = true)]
async fn a_thousand_concurrent_identical_misses_run_the_tool_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (p, cache) = pipeline(&[], runs.clone());
    let calls = (0..1000).map(|_| p.invoke("report", json!({ "month": 3 }), caller()));
    let outs = join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        outs.iter()
            .all(|o| o.as_ref().ok() == Some(&json!({ "report": 0 })))
    );
    assert_eq!(cache.in_flight(), 0);
}

async fn followers_of(
    p: &Pipeline,
    leader_first: tokio::task::JoinHandle<Result<Value, ToolError>>,
    abort: bool,
) -> (Result<Value, ToolError>, Vec<Result<Value, ToolError>>) {
    // Let the leader claim the key and start the tool before the followers arrive.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let followers: Vec<_> = (0..50)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.invoke("report", json!({ "month": 3 }), caller()).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    if abort {
        leader_first.abort();
    }
    let leader = leader_first.await.unwrap_or(Err(ToolError::Cancelled));
    let mut outs = Vec::new();
    for f in followers {
        outs.push(f.await.unwrap());
    }
    (leader, outs)
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_leader_leaves_no_follower_hanging() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (p, cache) = pipeline(&[Run::Hang], runs.clone());
    let started = tokio::time::Instant::now();
    let leader = {
        let p = p.clone();
        tokio::spawn(async move { p.invoke("report", json!({ "month": 3 }), caller()).await })
    };
    let (leader, followers) = followers_of(&p, leader, true).await;
    assert_eq!(leader, Err(ToolError::Cancelled));
    assert!(
        followers
            .iter()
            .all(|o| o.as_ref().ok() == Some(&json!({ "report": 1 }))),
        "{followers:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "one follower became the next leader"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(cache.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_leader_leaves_no_follower_hanging() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (p, cache) = pipeline(&[Run::Panic], runs.clone());
    let leader = {
        let p = p.clone();
        tokio::spawn(async move { p.invoke("report", json!({ "month": 3 }), caller()).await })
    };
    let (leader, followers) = followers_of(&p, leader, false).await;
    assert_eq!(leader.unwrap_err().code(), "internal");
    assert!(
        followers
            .iter()
            .all(|o| o.as_ref().ok() == Some(&json!({ "report": 1 }))),
        "{followers:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(cache.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failing_leader_is_not_shared_and_the_next_call_executes() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (p, cache) = pipeline(&[Run::Fail], runs.clone());
    let leader = {
        let p = p.clone();
        tokio::spawn(async move { p.invoke("report", json!({ "month": 3 }), caller()).await })
    };
    let (leader, followers) = followers_of(&p, leader, false).await;
    assert_eq!(leader.unwrap_err().code(), "tool_error");
    assert!(
        followers
            .iter()
            .all(|o| o.as_ref().ok() == Some(&json!({ "report": 1 }))),
        "{followers:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(cache.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_follower_of_a_hung_leader_ends_at_its_own_deadline() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (p, _cache) = pipeline(&[Run::Hang], runs.clone());
    let leader = {
        let p = p.clone();
        tokio::spawn(async move {
            p.invoke(
                "report",
                json!({ "month": 3 }),
                InvokeOptions::new().user(User::new("ann")),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = tokio::time::Instant::now();
    let follower = p
        .invoke(
            "report",
            json!({ "month": 3 }),
            InvokeOptions::new()
                .user(User::new("ann"))
                .timeout(Duration::from_secs(2)),
        )
        .await;
    assert_eq!(follower.unwrap_err().code(), "timeout");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the follower waited, it did not run the tool"
    );
    leader.abort();
}

#[tokio::test(start_paused = true)]
async fn identical_calls_share_a_result_too_large_to_store_and_the_next_call_runs_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mut tool = JsonTool::new("dump", "A large dump.", json!({}), move |_, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, ToolError>(json!({ "dump": "x".repeat(10_000) }))
        })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    // No entry over 4 KiB.
    let backend = Arc::new(
        toolgate_hooks::cache::MokaCache::builder()
            .max_bytes(64 * 1024)
            .build(),
    );
    let cache = Arc::new(
        ResultCache::builder()
            .shared_backend(backend.clone())
            .build(),
    );
    let p = Pipeline::builder()
        .tool(tool)
        .hook(HookRegistration::shared(cache.clone()))
        .build()
        .unwrap();

    let calls = (0..10).map(|_| p.invoke("dump", json!({}), caller()));
    let outs = join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one run for ten calls");
    assert!(outs.iter().all(|o| {
        o.as_ref()
            .is_ok_and(|v| v["dump"].as_str().map(str::len) == Some(10_000))
    }));
    assert_eq!(cache.in_flight(), 0);
    assert_eq!(backend.oversize_skipped(), 1);

    p.invoke("dump", json!({}), caller()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2, "nothing was stored");
}
