use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolgate_core::tool::{ToolAnnotations, ToolSource};
use toolgate_core::{
    Hook, HookResult, InvokeOptions, JsonTool, Pipeline, ToolError, ToolInvokeContext, hook,
    tool_fn,
};
use toolgate_hooks::retry::{Retry, RetryBudget, RetryConfigError};

use crate::support::{IDEMPOTENT, as_user, counting_tool, runs};

/// Counts `on_retry` and `on_give_up`.
#[derive(Clone, Default)]
struct Events {
    retries: Arc<AtomicU32>,
    give_ups: Arc<AtomicU32>,
}

#[hook]
impl Hook for Events {
    fn on_retry(&self, _: &mut ToolInvokeContext) -> HookResult {
        self.retries.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn on_give_up(&self, _: &mut ToolInvokeContext) -> HookResult {
        self.give_ups.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn retry(max_attempts: u32) -> Retry {
    Retry::builder()
        .max_attempts(max_attempts)
        .budget(RetryBudget::unlimited())
        .seed(7)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn transient_failures_of_an_idempotent_tool_are_retried_until_success() {
    let events = Events::default();
    let (builder, runs_) = counting_tool(Pipeline::builder(), "flaky", IDEMPOTENT, |run| {
        if run < 2 {
            Err(ToolError::transient("hiccup"))
        } else {
            Ok(json!("ok"))
        }
    });
    let pipeline = builder.hook(retry(5)).hook(events.clone()).build().unwrap();
    assert_eq!(
        pipeline
            .invoke("flaky", json!(null), as_user("ann"))
            .await
            .unwrap(),
        json!("ok")
    );
    assert_eq!(runs(&runs_), 3);
    assert_eq!(events.retries.load(Ordering::SeqCst), 2);
    assert_eq!(events.give_ups.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_non_idempotent_tool_with_transient_failures_runs_exactly_once() {
    let (builder, runs_) = counting_tool(
        Pipeline::builder(),
        "charge",
        ToolAnnotations::default(),
        |_| Err(ToolError::transient("hiccup")),
    );
    let pipeline = builder.hook(retry(5)).build().unwrap();
    let err = pipeline
        .invoke("charge", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "tool_error");
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test(start_paused = true)]
async fn remote_annotations_do_not_count_but_the_owner_can_declare_a_tool_idempotent() {
    let attempts = Arc::new(AtomicU32::new(0));
    let remote = |attempts: Arc<AtomicU32>| {
        let mut tool = JsonTool::new("remote", "An MCP tool.", json!({}), move |_, _| {
            attempts.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(ToolError::transient("upstream down")) })
        });
        tool.definition_mut().annotations = IDEMPOTENT;
        tool.definition_mut().source = ToolSource::Mcp {
            server: "far".into(),
        };
        tool
    };
    let pipeline = Pipeline::builder()
        .tool(remote(Arc::clone(&attempts)))
        .hook(retry(3))
        .build()
        .unwrap();
    assert!(
        pipeline
            .invoke("remote", json!({}), as_user("ann"))
            .await
            .is_err()
    );
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "the server's word is not enough"
    );

    let attempts = Arc::new(AtomicU32::new(0));
    let builder = Pipeline::builder().tool(remote(Arc::clone(&attempts)));
    let owner_says = Retry::builder()
        .max_attempts(3)
        .budget(RetryBudget::unlimited())
        .idempotent_tool("remote")
        .build()
        .unwrap();
    let pipeline = builder.hook(owner_says).build().unwrap();
    assert!(
        pipeline
            .invoke("remote", json!({}), as_user("ann"))
            .await
            .is_err()
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn errors_that_are_not_retryable_are_not_retried() {
    let (builder, runs_) = counting_tool(Pipeline::builder(), "bad", IDEMPOTENT, |_| {
        Err(ToolError::execution("bad request"))
    });
    let pipeline = builder.hook(retry(5)).build().unwrap();
    assert!(
        pipeline
            .invoke("bad", json!(null), as_user("ann"))
            .await
            .is_err()
    );
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test(start_paused = true)]
async fn attempts_stop_at_max_attempts_and_give_up_is_emitted_once() {
    let events = Events::default();
    let (builder, runs_) = counting_tool(Pipeline::builder(), "down", IDEMPOTENT, |_| {
        Err(ToolError::transient("down"))
    });
    let pipeline = builder.hook(retry(4)).hook(events.clone()).build().unwrap();
    let err = pipeline
        .invoke("down", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "tool_error");
    assert_eq!(runs(&runs_), 4);
    assert_eq!(events.retries.load(Ordering::SeqCst), 3);
    assert_eq!(events.give_ups.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn backoff_is_exponential_with_full_jitter_under_the_cap() {
    let times = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&times);
    let builder = Pipeline::builder().tool(
        tool_fn("down", "Always fails.", move |_: ()| {
            seen.lock().unwrap().push(tokio::time::Instant::now());
            async { Err::<(), _>(ToolError::transient("down")) }
        })
        .annotations(IDEMPOTENT),
    );
    let policy = Retry::builder()
        .max_attempts(6)
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_millis(500))
        .budget(RetryBudget::unlimited())
        .build()
        .unwrap();
    let pipeline = builder.hook(policy).build().unwrap();
    assert!(
        pipeline
            .invoke("down", json!(null), as_user("ann"))
            .await
            .is_err()
    );
    let times = times.lock().unwrap();
    assert_eq!(times.len(), 6);
    let caps = [100, 200, 400, 500, 500];
    for (i, pair) in times.windows(2).enumerate() {
        let waited = pair[1] - pair[0];
        assert!(
            waited <= Duration::from_millis(caps[i]),
            "retry {} waited {waited:?}",
            i + 1
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_tools_retry_after_is_waited_out_up_to_the_maximum() {
    let times = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&times);
    let builder = Pipeline::builder().tool(
        tool_fn("busy", "Busy once.", move |_: ()| {
            let mut t = seen.lock().unwrap();
            t.push(tokio::time::Instant::now());
            let first = t.len() == 1;
            async move {
                if first {
                    Err(ToolError::retry_after(Duration::from_secs(2), "busy"))
                } else {
                    Ok("ok")
                }
            }
        })
        .annotations(IDEMPOTENT),
    );
    let policy = Retry::builder()
        .base_delay(Duration::from_millis(10))
        .budget(RetryBudget::unlimited())
        .build()
        .unwrap();
    let pipeline = builder.hook(policy).build().unwrap();
    assert!(
        pipeline
            .invoke("busy", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    let times = times.lock().unwrap();
    let waited = times[1] - times[0];
    assert!(
        waited >= Duration::from_secs(2) && waited <= Duration::from_millis(2010),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_above_the_maximum_ends_the_call_with_the_tools_delay() {
    let (builder, runs_) = counting_tool(Pipeline::builder(), "busy", IDEMPOTENT, |_| {
        Err(ToolError::retry_after(Duration::from_secs(120), "busy"))
    });
    let policy = Retry::builder()
        .max_retry_after(Duration::from_secs(30))
        .budget(RetryBudget::unlimited())
        .build()
        .unwrap();
    let pipeline = builder.hook(policy).build().unwrap();
    let started = tokio::time::Instant::now();
    let err = pipeline
        .invoke("busy", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(120)));
    assert_eq!(runs(&runs_), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_would_start_past_the_deadline_is_not_slept_for() {
    let (builder, runs_) = counting_tool(Pipeline::builder(), "busy", IDEMPOTENT, |_| {
        Err(ToolError::retry_after(Duration::from_secs(2), "busy"))
    });
    let pipeline = builder.hook(retry(5)).build().unwrap();
    let started = tokio::time::Instant::now();
    let err = pipeline
        .invoke(
            "busy",
            json!(null),
            InvokeOptions::new().timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "rate_limited",
        "the tool's own error, not a timeout"
    );
    assert_eq!(runs(&runs_), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn with_an_upstream_that_always_fails_attempts_stay_within_the_budget() {
    let (builder, runs_) = counting_tool(Pipeline::builder(), "down", IDEMPOTENT, |_| {
        Err(ToolError::transient("down"))
    });
    let budget = RetryBudget::new(0.1, 5, 50).unwrap();
    let policy = Retry::builder()
        .max_attempts(5)
        .budget(budget.clone())
        .build()
        .unwrap();
    let pipeline = builder.hook(policy).build().unwrap();
    let calls = 200;
    for _ in 0..calls {
        assert!(
            pipeline
                .invoke("down", json!(null), as_user("ann"))
                .await
                .is_err()
        );
    }
    let retries = runs(&runs_) - calls;
    // At most the reserve plus 10% of calls; without a budget it would be 4 × 200 = 800.
    assert!(retries <= 5 + calls / 10, "{retries} retries");
    assert!(
        retries >= calls / 10,
        "the budget is spent, not hoarded: {retries}"
    );
}

#[test]
fn policies_that_cannot_work_are_typed_errors() {
    assert_eq!(
        Retry::builder().max_attempts(0).build().err(),
        Some(RetryConfigError::ZeroAttempts)
    );
    assert!(matches!(
        Retry::builder()
            .base_delay(Duration::from_secs(5))
            .max_delay(Duration::from_secs(1))
            .build(),
        Err(RetryConfigError::DelayOrder { .. })
    ));
    assert!(matches!(
        RetryBudget::new(-0.5, 1, 10),
        Err(RetryConfigError::BadBudget { .. })
    ));
    assert!(matches!(
        RetryBudget::new(f64::NAN, 1, 10),
        Err(RetryConfigError::BadBudget { .. })
    ));
    assert!(matches!(
        RetryBudget::new(0.1, 10, 1),
        Err(RetryConfigError::BadBudget { .. })
    ));
}
