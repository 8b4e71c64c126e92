//! Hook order: priority, stable ties, `did_*` reversal, global before per-tool, filters,
//! and `around_execute` calling `next` zero, one or many times.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::core::hook::{HookFuture, HookRegistration};
use toolgate::core::stage::StageSet;
use toolgate::core::{
    Control, Hook, HookResult, Next, Stage, Stage::*, ToolError, ToolInvokeContext, User, hook,
};
use toolgate_test::{
    Around, Inject, RecordingHook, ScriptedTool, StageLog, Step, TestPipeline, assert_entries,
    assert_stages, assert_stages_of,
};

use crate::{TOOL, input, options, quiet_injected_panics, recorded};

/// A will, a did and an on stage, plus a pair that brackets the call.
fn probe_stages() -> StageSet {
    StageSet::of(&[
        WillAuthorize,
        DidCreateInvokeContext,
        OnMetrics,
        WillAcquireQuota,
        DidReleaseQuota,
    ])
}

fn probe(label: &str, log: &StageLog, priority: i32) -> RecordingHook {
    RecordingHook::new(label, log)
        .with_stages(probe_stages())
        .with_priority(priority)
}

#[tokio::test]
async fn higher_priority_runs_first_at_will_and_on_stages_and_last_at_did_stages() {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe("low", &log, -5))
        .hook(probe("mid", &log, 0))
        .hook(probe("high", &log, 10))
        .build();

    pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_entries(
        &log,
        &[
            (DidCreateInvokeContext, "low"),
            (DidCreateInvokeContext, "mid"),
            (DidCreateInvokeContext, "high"),
            (WillAuthorize, "high"),
            (WillAuthorize, "mid"),
            (WillAuthorize, "low"),
            (WillAcquireQuota, "high"),
            (WillAcquireQuota, "mid"),
            (WillAcquireQuota, "low"),
            (OnMetrics, "high"),
            (OnMetrics, "mid"),
            (OnMetrics, "low"),
            (DidReleaseQuota, "low"),
            (DidReleaseQuota, "mid"),
            (DidReleaseQuota, "high"),
        ],
    );
}

#[tokio::test]
async fn equal_priorities_keep_registration_order_and_reverse_it_at_did_stages() {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe("first", &log, 3))
        .hook(probe("second", &log, 3))
        .hook(probe("third", &log, 3))
        .build();

    pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(log.hooks_at(WillAuthorize), ["first", "second", "third"]);
    assert_eq!(log.hooks_at(OnMetrics), ["first", "second", "third"]);
    assert_eq!(log.hooks_at(DidReleaseQuota), ["third", "second", "first"]);
}

#[tokio::test]
async fn hook_options_priority_overrides_the_hooks_own_priority() {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe("own_10", &log, 10))
        .hook(HookRegistration::new(probe("override_20", &log, 0)).priority(20))
        .build();

    pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(log.hooks_at(WillAuthorize), ["override_20", "own_10"]);
}

#[tokio::test]
async fn global_hooks_run_before_per_tool_hooks_at_equal_priority_whatever_the_registration_order()
{
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .tool(ScriptedTool::new("other"))
        .hook(HookRegistration::new(probe("per_tool", &log, 0)).for_tool(TOOL))
        .hook(probe("global", &log, 0))
        .hook(HookRegistration::new(probe("per_tool_high", &log, 1)).for_tool(TOOL))
        .build();

    pipeline.invoke(TOOL, input(), options()).await.unwrap();
    assert_eq!(
        log.hooks_at(WillAuthorize),
        ["per_tool_high", "global", "per_tool"]
    );
    assert_eq!(
        log.hooks_at(DidReleaseQuota),
        ["per_tool", "global", "per_tool_high"]
    );

    log.clear();
    pipeline.invoke("other", input(), options()).await.unwrap();
    assert_eq!(
        log.hooks_at(WillAuthorize),
        ["global"],
        "per-tool hooks stay with their tool"
    );
}

#[tokio::test]
async fn the_compiled_plan_lists_hooks_in_run_order() {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe("low", &log, -1))
        .hook(probe("high", &log, 1))
        .build();

    let plan = pipeline.plan(TOOL).expect("the tool has a plan");

    let at = |stage: Stage| {
        plan.iter()
            .find(|(s, _)| *s == stage)
            .map(|(_, hooks)| hooks.clone())
    };
    assert_eq!(
        at(WillAuthorize),
        Some(vec!["high".to_owned(), "low".to_owned()])
    );
    assert_eq!(
        at(DidReleaseQuota),
        Some(vec!["low".to_owned(), "high".to_owned()])
    );
    assert_eq!(
        at(WillExecute),
        None,
        "stages without hooks are not in the plan"
    );
}

#[tokio::test]
async fn a_filtered_out_hook_runs_at_no_stage_and_others_still_run() {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe("admins_only", &log, 1).with_filter(|ctx| ctx.user().has_role("admin")))
        .hook(probe("everyone", &log, 0))
        .build();

    pipeline
        .invoke(TOOL, input(), options().user(User::new("bob")))
        .await
        .unwrap();
    assert!(log.stages_of("admins_only").is_empty(), "{log:?}");
    assert_eq!(log.stages_of("everyone").len(), 5);

    log.clear();
    let admin = User::new("ann").with_roles(["admin"]);
    pipeline
        .invoke(TOOL, input(), options().user(admin))
        .await
        .unwrap();
    assert_eq!(log.stages_of("admins_only").len(), 5);
}

#[tokio::test]
async fn a_decision_stops_its_stage_so_later_hooks_at_that_stage_never_see_it() {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe("deny", &log, 1).at(WillAuthorize, Inject::abort("no", "forbidden", 403)))
        .hook(probe("later", &log, 0))
        .build();

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    assert_eq!(err.code(), "forbidden");
    assert_eq!(log.hooks_at(WillAuthorize), ["deny"]);
    assert_eq!(log.count(WillAcquireQuota), 0);
}

#[tokio::test]
async fn around_execute_calling_next_zero_times_short_circuits_without_running_the_tool() {
    let tool = ScriptedTool::new(TOOL);
    let test = recorded(tool.clone(), |h| {
        h.around(Around::Respond(json!("from wrapper")))
    });
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("from wrapper"));
    assert_eq!(tool.calls(), 0);
    let tail = &log.stages()[15..];
    assert_eq!(
        tail,
        [
            AroundExecute,
            WillRedactOutput,
            WillValidateOutput,
            WillTransformOutput,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            DidReleaseQuota,
            WillFinalizeInvoke,
        ],
        "no will_execute, no tool, no will_write_cache: {log:?}"
    );
}

#[tokio::test]
async fn around_execute_calling_next_once_wraps_one_attempt() {
    let tool = ScriptedTool::returning(TOOL, json!(7));
    let test = recorded(tool.clone(), |h| h.around(Around::Once));
    let log = test.log();

    assert_eq!(
        test.build().invoke(TOOL, input(), options()).await.unwrap(),
        json!(7)
    );

    assert_eq!(tool.calls(), 1);
    assert_stages(&log, crate::paths::SUCCESS);
}

#[tokio::test]
async fn around_execute_retrying_runs_on_retry_before_every_attempt_after_the_first() {
    let tool = ScriptedTool::new(TOOL)
        .then(Step::transient("reset"))
        .then(Step::transient("reset"))
        .then(Step::ok(json!("third time")));
    let test = recorded(tool.clone(), |h| h.around(Around::Retry(3)));
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("third time"));
    assert_eq!(tool.calls(), 3);
    assert_eq!(
        &log.stages()[15..21],
        [
            AroundExecute,
            WillExecute,
            OnRetry,
            WillExecute,
            OnRetry,
            WillExecute
        ]
    );
    assert_eq!(&log.stages()[21..23], [DidExecute, WillWriteCache]);
    assert_eq!(log.count(OnGiveUp), 0);
}

#[tokio::test]
async fn around_execute_running_out_of_retries_runs_on_give_up_then_the_error_path() {
    let tool = ScriptedTool::new(TOOL).otherwise(Step::transient("still down"));
    let test = recorded(tool.clone(), |h| h.around(Around::Retry(2)));
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!(err, ToolError::transient("still down"));
    assert_eq!(tool.calls(), 2);
    assert_eq!(
        &log.stages()[15..],
        [
            AroundExecute,
            WillExecute,
            OnRetry,
            WillExecute,
            OnGiveUp,
            OnError,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            DidReleaseQuota,
            WillFinalizeInvoke,
        ]
    );
}

#[tokio::test]
async fn around_execute_may_call_next_several_times_even_after_success() {
    let tool = ScriptedTool::new(TOOL)
        .then(Step::ok(json!("first")))
        .then(Step::ok(json!("second")));
    let test = recorded(tool.clone(), |h| h.around(Around::Repeat(2)));
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("second"), "the last run's output wins");
    assert_eq!(tool.calls(), 2);
    assert_eq!(
        &log.stages()[15..23],
        [
            AroundExecute,
            WillExecute,
            DidExecute,
            OnRetry,
            WillExecute,
            DidExecute,
            WillWriteCache,
            WillRedactOutput
        ]
    );
}

#[tokio::test]
async fn nested_around_wrappers_run_outermost_first_and_inner_ones_rerun_on_each_retry() {
    quiet_injected_panics();
    let log = StageLog::new();
    let around_only = StageSet::of(&[AroundExecute, OnRetry, WillExecute, DidExecute, OnGiveUp]);
    let tool = ScriptedTool::new(TOOL)
        .then(Step::transient("once"))
        .then(Step::ok(json!("ok")));
    let pipeline = TestPipeline::new()
        .tool(tool)
        .hook(RecordingHook::new("inner", &log).with_stages(around_only))
        // Between the two, a wrapper that keeps the trait's default hands on to the inner one.
        .hook(HookRegistration::new(KeepsTheDefault).priority(1))
        .hook(
            RecordingHook::new("outer", &log)
                .with_stages(StageSet::of(&[AroundExecute]))
                .with_priority(2)
                .around(Around::Retry(2)),
        )
        .build();

    pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_entries(
        &log,
        &[
            (AroundExecute, "outer"),
            (AroundExecute, "inner"),
            (WillExecute, "inner"),
            (AroundExecute, "inner"),
            (OnRetry, "inner"),
            (WillExecute, "inner"),
            (DidExecute, "inner"),
        ],
    );
    assert_stages_of(&log, "outer", &[AroundExecute]);
}

/// A wrapper written without a method: it lists `around_execute` and keeps the trait's
/// default, which hands the rest of the chain on.
struct KeepsTheDefault;

impl Hook for KeepsTheDefault {
    fn stages(&self) -> StageSet {
        StageSet::of(&[AroundExecute])
    }
}

#[tokio::test]
async fn only_wrappers_keeping_the_default_run_the_tool_once() {
    let tool = ScriptedTool::returning(TOOL, json!(7));
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(tool.clone())
        .hook(KeepsTheDefault)
        .hook(HookRegistration::new(KeepsTheDefault).priority(1))
        .hook(RecordingHook::new("rec", &log))
        .build();

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!(7));
    assert_eq!(tool.calls(), 1);
    assert_stages(&log, crate::paths::SUCCESS);
}

/// Makes the rest of the chain, drops it without awaiting it, and answers itself.
struct DropsTheRest;

#[hook]
impl Hook for DropsTheRest {
    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        drop(next.run(ctx));
        Err(Control::Respond(json!("answered by the wrapper")))
    }
}

/// Counts the calls of its `around_execute`, written in the trait's form: the count is
/// taken when the method is called, before its future is polled.
#[derive(Clone, Default)]
struct CountsCalls(Arc<AtomicUsize>);

impl Hook for CountsCalls {
    fn stages(&self) -> StageSet {
        StageSet::of(&[AroundExecute])
    }

    fn around_execute<'a>(
        &'a self,
        ctx: &'a mut ToolInvokeContext,
        next: Next<'a>,
    ) -> HookFuture<'a> {
        self.0.fetch_add(1, Ordering::SeqCst);
        next.run(ctx)
    }
}

#[tokio::test]
async fn the_rest_of_the_chain_starts_only_when_awaited() {
    let inner = CountsCalls::default();
    let tool = ScriptedTool::returning(TOOL, json!(7));
    let pipeline = TestPipeline::new()
        .tool(tool.clone())
        .hook(inner.clone())
        .hook(HookRegistration::new(DropsTheRest).priority(1))
        .build();

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("answered by the wrapper"));
    assert_eq!(tool.calls(), 0);
    assert_eq!(
        inner.0.load(Ordering::SeqCst),
        0,
        "the inner wrapper was called"
    );
}
