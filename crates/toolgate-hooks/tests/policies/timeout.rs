use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolgate_core::external::{CancellationToken, TypeMapKey};
use toolgate_core::tool::tool_fn_with_context;
use toolgate_core::{
    Hook, HookResult, InvokeOptions, Pipeline, PipelineBuilder, ToolError, ToolInvokeContext, hook,
};
use toolgate_hooks::retry::{Retry, RetryBudget};
use toolgate_hooks::timeout::{Timeout, TimeoutScope};

use crate::support::IDEMPOTENT;

/// A tool whose first `slow_runs` runs take `slow`, later ones answer at once; it records
/// whether the token it saw fired, and how many runs started with a cancelled token.
struct Watched {
    runs: Arc<AtomicU32>,
    saw_cancel: Arc<AtomicBool>,
    started_cancelled: Arc<AtomicU32>,
}

fn watched_tool(
    builder: PipelineBuilder,
    name: &str,
    slow_runs: u32,
    slow: Duration,
) -> (PipelineBuilder, Watched) {
    let w = Watched {
        runs: Arc::new(AtomicU32::new(0)),
        saw_cancel: Arc::new(AtomicBool::new(false)),
        started_cancelled: Arc::new(AtomicU32::new(0)),
    };
    let (runs, saw, started) = (
        Arc::clone(&w.runs),
        Arc::clone(&w.saw_cancel),
        Arc::clone(&w.started_cancelled),
    );
    let builder = builder.tool(
        tool_fn_with_context(
            name,
            "Sometimes slow.",
            move |_: (), ctx: &ToolInvokeContext| {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                let token = ctx.cancellation().clone();
                if token.is_cancelled() {
                    started.fetch_add(1, Ordering::SeqCst);
                }
                let saw = Arc::clone(&saw);
                let watcher = token.clone();
                tokio::spawn(async move {
                    watcher.cancelled().await;
                    saw.store(true, Ordering::SeqCst);
                });
                Box::pin(async move {
                    if run < slow_runs {
                        tokio::time::sleep(slow).await;
                    }
                    Ok::<_, ToolError>("done")
                })
            },
        )
        .annotations(IDEMPOTENT),
    );
    (builder, w)
}

#[tokio::test(start_paused = true)]
async fn an_attempt_past_its_limit_fails_with_timeout_and_fires_the_token() {
    let (builder, w) = watched_tool(
        Pipeline::builder(),
        "slow",
        u32::MAX,
        Duration::from_secs(60),
    );
    let pipeline = builder
        .hook(Timeout::per_attempt(Duration::from_secs(2)))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = pipeline
        .invoke("slow", json!(null), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("timeout", 504));
    assert_eq!(err.to_string(), "timed out after 2000 ms");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    tokio::task::yield_now().await;
    assert!(
        w.saw_cancel.load(Ordering::SeqCst),
        "the tool's token fired"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_limit_overrides_the_default_and_unlisted_tools_run_unbounded() {
    let (builder, _) = watched_tool(Pipeline::builder(), "a", u32::MAX, Duration::from_secs(3));
    let (builder, _) = watched_tool(builder, "b", u32::MAX, Duration::from_secs(3));
    let pipeline = builder
        .hook(Timeout::only_listed(TimeoutScope::Attempt).tool("a", Duration::from_secs(1)))
        .build()
        .unwrap();
    let err = pipeline
        .invoke("a", json!(null), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "timed out after 1000 ms");
    assert!(
        pipeline
            .invoke("b", json!(null), InvokeOptions::new())
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_limit_too_long_for_the_clock_is_no_limit_instead_of_a_panic() {
    for scope in [TimeoutScope::Attempt, TimeoutScope::Call] {
        let (builder, w) = watched_tool(Pipeline::builder(), "a", 1, Duration::from_secs(3));
        let pipeline = builder
            .hook(Timeout::only_listed(scope).tool("a", Duration::MAX))
            .build()
            .unwrap();
        let out = pipeline
            .invoke("a", json!(null), InvokeOptions::new())
            .await;
        assert!(out.is_ok(), "{scope:?}: {out:?}");
        assert_eq!(w.runs.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_of_an_idempotent_tool_is_retried_with_a_fresh_token() {
    let (builder, w) = watched_tool(Pipeline::builder(), "slow", 1, Duration::from_secs(60));
    let pipeline = builder
        .hook(Timeout::per_attempt(Duration::from_secs(1)))
        .hook(
            Retry::builder()
                .max_attempts(2)
                .budget(RetryBudget::unlimited())
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    assert_eq!(
        pipeline
            .invoke("slow", json!(null), InvokeOptions::new())
            .await
            .unwrap(),
        json!("done")
    );
    assert_eq!(w.runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        w.started_cancelled.load(Ordering::SeqCst),
        0,
        "the second attempt started with a live token"
    );
}

#[tokio::test(start_paused = true)]
async fn a_per_call_limit_bounds_every_attempt_and_the_waits_between() {
    let (builder, w) = watched_tool(
        Pipeline::builder(),
        "slow",
        u32::MAX,
        Duration::from_millis(900),
    );
    let pipeline = builder
        .hook(Timeout::per_call(Duration::from_secs(3)))
        .hook(Timeout::per_attempt(Duration::from_millis(500)))
        .hook(
            Retry::builder()
                .max_attempts(100)
                .base_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(10))
                .budget(RetryBudget::unlimited())
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = pipeline
        .invoke("slow", json!(null), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "timeout");
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(w.runs.load(Ordering::SeqCst) >= 5);
}

#[tokio::test(start_paused = true)]
async fn the_callers_cancellation_still_reaches_a_tool_under_a_timeout() {
    let (builder, w) = watched_tool(
        Pipeline::builder(),
        "slow",
        u32::MAX,
        Duration::from_secs(60),
    );
    let pipeline = builder
        .hook(Timeout::per_attempt(Duration::from_secs(30)))
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let err = pipeline
        .invoke(
            "slow",
            json!(null),
            InvokeOptions::new().cancellation(token),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "cancelled");
    tokio::task::yield_now().await;
    assert!(w.saw_cancel.load(Ordering::SeqCst));
}

/// A key no scope binds: looking it up counts as a provider read of the tool when the tool
/// is the one looking.
struct Unbound;
impl TypeMapKey for Unbound {
    type Value = String;
}

/// At `on_retry`, after a timed-out attempt: looks up a provider, or panics.
struct AfterTimeout {
    panic: bool,
    reads_seen: Arc<Mutex<Option<usize>>>,
}

#[hook]
impl Hook for AfterTimeout {
    fn on_retry(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        assert!(!self.panic, "a hook's own bug");
        let _ = ctx.try_get::<Unbound>();
        Ok(())
    }

    fn did_execute(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        *self.reads_seen.lock().unwrap() = Some(ctx.tool_provider_reads().len());
        Ok(())
    }
}

fn retried_after_a_timeout(hook: AfterTimeout) -> Pipeline {
    let (builder, _) = watched_tool(Pipeline::builder(), "slow", 1, Duration::from_secs(60));
    builder
        .hook(Timeout::per_attempt(Duration::from_secs(1)))
        .hook(
            Retry::builder()
                .max_attempts(2)
                .budget(RetryBudget::unlimited())
                .build()
                .unwrap(),
        )
        .hook(hook)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hook_that_panics_after_a_timed_out_attempt_is_named_not_the_tool() {
    let pipeline = retried_after_a_timeout(AfterTimeout {
        panic: true,
        reads_seen: Arc::default(),
    });
    let err = pipeline
        .invoke("slow", json!(null), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "internal");
    assert!(
        err.to_string()
            .contains("a hook panicked at stage `on_retry`"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hooks_lookup_after_a_timed_out_attempt_is_not_counted_as_the_tools() {
    let reads_seen = Arc::default();
    let pipeline = retried_after_a_timeout(AfterTimeout {
        panic: false,
        reads_seen: Arc::clone(&reads_seen),
    });
    let out = pipeline
        .invoke("slow", json!(null), InvokeOptions::new())
        .await
        .unwrap();
    assert_eq!(out, json!("done"));
    assert_eq!(
        *reads_seen.lock().unwrap(),
        Some(0),
        "the tool read no provider: only a hook did, between the attempts"
    );
}

#[tokio::test]
async fn a_tool_that_panics_under_a_per_attempt_timeout_is_named_as_the_tool() {
    let pipeline = Pipeline::builder()
        .tool(tool_fn_with_context(
            "boom",
            "Panics while it runs.",
            |_: (), _: &ToolInvokeContext| {
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    if true {
                        panic!("a bug in the tool");
                    }
                    Ok::<_, ToolError>("never")
                })
            },
        ))
        .hook(Timeout::per_attempt(Duration::from_secs(1)))
        .build()
        .unwrap();
    let err = pipeline
        .invoke("boom", json!(null), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "internal");
    assert!(err.to_string().contains("the tool panicked"), "{err}");
}
