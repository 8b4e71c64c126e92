use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline, PipelineBuilder, ToolError, tool_fn};
use toolgate_hooks::concurrency::{
    Concurrency, ConcurrencyConfigError, InMemoryConcurrency, WhenFull,
};
use toolgate_hooks::partition::Partition;

use crate::support::{as_caller, as_user};

fn sleeper(builder: PipelineBuilder, name: &str, ms: u64) -> PipelineBuilder {
    builder.tool(tool_fn(name, "Sleeps.", move |_: ()| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, ToolError>("done")
    }))
}

fn capped(
    limit: u32,
    configure: impl FnOnce(
        toolgate_hooks::concurrency::ConcurrencyBuilder,
    ) -> toolgate_hooks::concurrency::ConcurrencyBuilder,
) -> (Pipeline, InMemoryConcurrency) {
    let backend = InMemoryConcurrency::default();
    let builder = sleeper(Pipeline::builder(), "slow", 100)
        .tool(tool_fn("boom", "Panics.", |_: ()| async {
            panic!("tool exploded");
            #[allow(unreachable_code)]
            Ok::<(), ToolError>(())
        }))
        .tool(tool_fn("fail", "Fails.", |_: ()| async {
            Err::<(), _>(ToolError::execution("no"))
        }))
        .tool(tool_fn("hang", "Never ends.", |_: ()| {
            std::future::pending::<Result<(), ToolError>>()
        }));
    let hook = configure(
        Concurrency::builder(limit)
            .unwrap()
            .backend(Arc::new(backend.clone())),
    )
    .build();
    (builder.hook(hook).build().unwrap(), backend)
}

#[tokio::test(start_paused = true)]
async fn past_the_limit_a_call_gets_overloaded_with_a_retry_after() {
    let (pipeline, _) = capped(1, |b| b);
    let (a, b) = tokio::join!(
        pipeline.invoke("slow", json!(null), as_user("ann")),
        pipeline.invoke("slow", json!(null), as_user("bob")),
    );
    assert!(a.is_ok());
    let err = b.unwrap_err();
    assert_eq!((err.code(), err.status()), ("overloaded", 503));
    assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn abort_mode_refuses_without_a_retry_after() {
    let (pipeline, _) = capped(1, |b| b.when_full(WhenFull::Abort));
    let (_, b) = tokio::join!(
        pipeline.invoke("slow", json!(null), as_user("ann")),
        pipeline.invoke("slow", json!(null), as_user("bob")),
    );
    let err = b.unwrap_err();
    assert_eq!(
        (err.code(), err.status(), err.retry_after_delay()),
        ("overloaded", 503, None)
    );
}

#[tokio::test(start_paused = true)]
async fn a_bounded_wait_gets_the_permit_when_it_comes_back_in_time() {
    let (pipeline, _) = capped(1, |b| b.wait(Duration::from_millis(150)));
    let started = tokio::time::Instant::now();
    let (a, b) = tokio::join!(
        pipeline.invoke("slow", json!(null), as_user("ann")),
        pipeline.invoke("slow", json!(null), as_user("bob")),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(started.elapsed(), Duration::from_millis(200));

    let (pipeline, _) = capped(1, |b| b.wait(Duration::from_millis(50)));
    let (_, b) = tokio::join!(
        pipeline.invoke("slow", json!(null), as_user("ann")),
        pipeline.invoke("slow", json!(null), as_user("bob")),
    );
    assert_eq!(b.unwrap_err().code(), "overloaded");
}

#[tokio::test(start_paused = true)]
async fn the_wait_never_runs_past_the_callers_deadline() {
    let (pipeline, _) = capped(1, |b| b.wait(Duration::from_secs(10)));
    let started = tokio::time::Instant::now();
    let (_, b) = tokio::join!(
        pipeline.invoke("slow", json!(null), as_user("ann")),
        pipeline.invoke(
            "slow",
            json!(null),
            as_user("bob").timeout(Duration::from_millis(30))
        ),
    );
    assert!(b.is_err());
    assert!(started.elapsed() <= Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn the_permit_comes_back_after_success_error_panic_and_drop() {
    let (pipeline, backend) = capped(1, |b| b);
    for tool in ["slow", "fail", "boom"] {
        let _ = pipeline.invoke(tool, json!(null), as_user("ann")).await;
        assert_eq!(backend.in_flight(), 0, "after {tool}");
    }
    let dropped = tokio::time::timeout(
        Duration::from_millis(10),
        pipeline.invoke("hang", json!(null), as_user("ann")),
    )
    .await;
    assert!(dropped.is_err());
    tokio::task::yield_now().await;
    assert_eq!(backend.in_flight(), 0);
    assert_eq!(backend.key_count(), 0, "idle keys are dropped");
    assert!(
        pipeline
            .invoke("slow", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_timeout_gives_the_permit_back() {
    let (pipeline, backend) = capped(1, |b| b);
    let err = pipeline
        .invoke(
            "hang",
            json!(null),
            as_user("ann").timeout(Duration::from_millis(5)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "timeout");
    assert_eq!(backend.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_per_user_limit_lets_different_users_run_side_by_side() {
    let (pipeline, backend) = capped(1, |b| b.partition(Partition::User));
    let (a, b, c) = tokio::join!(
        pipeline.invoke("slow", json!(null), as_user("ann")),
        pipeline.invoke("slow", json!(null), as_user("bob")),
        pipeline.invoke(
            "slow",
            json!(null),
            InvokeOptions::new().user(toolgate_core::User::new("ann"))
        ),
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(c.unwrap_err().code(), "overloaded");
    assert_eq!(backend.key_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn ann_of_globex_does_not_take_the_concurrency_slot_of_ann_of_acme() {
    for partition in [Partition::User, Partition::UserTool] {
        let (pipeline, backend) = capped(1, |b| b.partition(partition.clone()));
        let (globex, acme, globex_again) = tokio::join!(
            pipeline.invoke("slow", json!(null), as_caller("ann", "globex")),
            pipeline.invoke("slow", json!(null), as_caller("ann", "acme")),
            pipeline.invoke("slow", json!(null), as_caller("ann", "globex")),
        );
        assert!(globex.is_ok(), "{partition:?}");
        assert!(acme.is_ok(), "{partition:?}: ann of acme has her own slot");
        assert_eq!(
            globex_again.unwrap_err().code(),
            "overloaded",
            "{partition:?}"
        );
        assert_eq!(backend.key_count(), 0);
    }
}

#[test]
fn a_zero_limit_is_a_typed_error() {
    assert_eq!(
        Concurrency::builder(0).err(),
        Some(ConcurrencyConfigError::ZeroLimit)
    );
}

/// The pipeline of a configuration whose `slow` tool is capped at `limit` calls in flight,
/// over the process's `backend` (kept across reloads, as the gateway keeps its state).
fn configured(limit: u32, backend: &InMemoryConcurrency) -> Pipeline {
    let hook = Concurrency::builder(limit)
        .unwrap()
        .backend(Arc::new(backend.clone()))
        .build();
    sleeper(Pipeline::builder(), "slow", 100)
        .hook(hook)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_limit_lowered_by_a_reload_holds_while_calls_are_still_in_flight() {
    let backend = InMemoryConcurrency::default();
    let before = configured(3, &backend);
    let after = configured(1, &backend);
    // Two calls of the old configuration are in flight when the new one, allowing one,
    // takes over: nothing more runs until they are down to none.
    let (a, b, c) = tokio::join!(
        before.invoke("slow", json!(null), as_user("ann")),
        before.invoke("slow", json!(null), as_user("bob")),
        async {
            tokio::task::yield_now().await;
            assert_eq!(backend.in_flight_for("concurrency\u{1f}t\u{1f}slow"), 2);
            after.invoke("slow", json!(null), as_user("cid")).await
        },
    );
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(c.unwrap_err().code(), "overloaded", "over the new limit");

    let (d, e) = tokio::join!(
        after.invoke("slow", json!(null), as_user("dan")),
        after.invoke("slow", json!(null), as_user("eve")),
    );
    assert!(d.is_ok());
    assert_eq!(e.unwrap_err().code(), "overloaded", "one at a time now");
    assert_eq!(backend.key_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_limit_raised_by_a_reload_applies_while_calls_are_still_in_flight() {
    let backend = InMemoryConcurrency::default();
    let before = configured(1, &backend);
    let after = configured(3, &backend);
    let (a, b, c) = tokio::join!(
        before.invoke("slow", json!(null), as_user("ann")),
        async {
            tokio::task::yield_now().await;
            after.invoke("slow", json!(null), as_user("bob")).await
        },
        async {
            tokio::task::yield_now().await;
            after.invoke("slow", json!(null), as_user("cid")).await
        },
    );
    assert!(a.is_ok());
    assert!(b.is_ok() && c.is_ok(), "three may run now: {b:?} {c:?}");
    assert_eq!(backend.key_count(), 0);
}

#[tokio::test]
async fn a_limit_cut_then_raised_while_calls_run_counts_every_call_in_flight() {
    use toolgate_hooks::concurrency::{ConcurrencyBackend, PermitRequest};

    let backend = InMemoryConcurrency::default();
    let asking = |limit| PermitRequest {
        key: "k",
        limit,
        wait: Duration::ZERO,
    };
    let take = |limit| {
        let backend = backend.clone();
        async move { backend.acquire(asking(limit)).await.unwrap() }
    };
    let mut out: Vec<_> = Vec::new();
    for _ in 0..3 {
        out.push(take(3).await.expect("within 3"));
    }
    assert!(take(1).await.is_none(), "3 out, 1 allowed");
    drop(out.pop());
    assert!(take(1).await.is_none(), "2 out, 1 allowed");
    // Raised to 4 while 2 are out: two more, not three.
    out.push(take(4).await.expect("3 of 4"));
    out.push(take(4).await.expect("4 of 4"));
    assert!(take(4).await.is_none(), "4 out, 4 allowed");
    assert_eq!(backend.in_flight(), 4);
    out.clear();
    assert_eq!((backend.in_flight(), backend.key_count()), (0, 0));
    // Nothing owed is left behind: a fresh start at 2 admits exactly 2.
    let (a, b) = (take(2).await, take(2).await);
    assert!(a.is_some() && b.is_some() && take(2).await.is_none());
}
