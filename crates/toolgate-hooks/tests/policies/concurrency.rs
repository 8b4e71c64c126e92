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
