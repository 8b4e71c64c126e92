//! What a hook's own failure means: fail the call (default), ignore it, or audit (shadow)
//! mode — and failures in `on_error` and the tail that never replace the outcome.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolgate::core::context::Decision;
use toolgate::core::hook::{FailureMode, HookFuture, HookRegistration};
use toolgate::core::stage::StageSet;
use toolgate::core::{Hook, HookResult, Stage, Stage::*, ToolError, ToolInvokeContext, hook};
use toolgate_test::{Inject, RecordingHook, ScriptedTool, StageLog, TestPipeline, assert_stages};

use crate::{TOOL, input, options, paths::SUCCESS, quiet_injected_panics};

/// Copies the invocation's decision trace at `will_finalize_invoke`.
#[derive(Clone, Default)]
struct DecisionProbe(Arc<Mutex<Vec<Decision>>>);

impl DecisionProbe {
    fn decisions(&self) -> Vec<Decision> {
        self.0.lock().unwrap().clone()
    }
}

#[hook]
impl Hook for DecisionProbe {
    fn will_finalize_invoke(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        *self.0.lock().unwrap() = ctx.decisions().to_vec();
        Ok(())
    }
}

fn one_hook(
    stage: Stage,
    outcome: Inject,
    mode: FailureMode,
) -> (toolgate::core::Pipeline, StageLog, DecisionProbe) {
    quiet_injected_panics();
    let log = StageLog::new();
    let probe = DecisionProbe::default();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning(TOOL, json!("out")))
        .hook(
            HookRegistration::new(RecordingHook::new("policy", &log).at(stage, outcome))
                .failure(mode),
        )
        .hook(probe.clone())
        .build();
    (pipeline, log, probe)
}

#[tokio::test]
async fn fail_call_mode_lets_a_hook_failure_fail_the_call() {
    let (pipeline, _, probe) = one_hook(
        WillAuthorize,
        Inject::Fail(ToolError::internal("policy store unreachable")),
        FailureMode::FailCall,
    );

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    assert_eq!(err, ToolError::internal("policy store unreachable"));
    let decisions = probe.decisions();
    assert_eq!(decisions.len(), 1);
    assert!(decisions[0].applied);
}

#[tokio::test]
async fn ignore_mode_logs_a_hook_failure_and_the_call_goes_on() {
    let (pipeline, log, probe) = one_hook(
        WillAuthorize,
        Inject::Fail(ToolError::internal("policy store unreachable")),
        FailureMode::Ignore,
    );

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("out"));
    assert_stages(&log, SUCCESS);
    assert_eq!(
        probe.decisions(),
        [Decision {
            stage: WillAuthorize,
            hook: Arc::from("policy"),
            outcome: "internal".into(),
            applied: false,
        }]
    );
}

#[tokio::test]
async fn a_panicking_hook_in_ignore_or_audit_mode_is_contained_and_the_call_goes_on() {
    for mode in [FailureMode::Ignore, FailureMode::Audit] {
        let (pipeline, log, probe) = one_hook(WillNormalizeInput, Inject::Panic, mode);

        let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

        assert_eq!(out, json!("out"), "{mode:?}");
        assert_stages(&log, SUCCESS);
        assert_eq!(
            probe.decisions(),
            [Decision {
                stage: WillNormalizeInput,
                hook: Arc::from("policy"),
                outcome: "internal".into(),
                applied: false,
            }],
            "{mode:?}: the panic is kept as the failure it would have been"
        );
    }
}

/// Panics when its stage future is first polled, not when the stage method is called.
struct PanicsWhenPolled;

#[hook]
impl Hook for PanicsWhenPolled {
    // The trait's form: the point is a future that panics when polled, not when made.
    fn will_authorize<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        HookFuture::new(async { panic!("{}", toolgate_test::PANIC_PAYLOAD) })
    }
}

#[tokio::test]
async fn a_hook_future_that_panics_in_ignore_mode_is_contained_too() {
    quiet_injected_panics();
    let probe = DecisionProbe::default();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning(TOOL, json!("out")))
        .hook(HookRegistration::new(PanicsWhenPolled).failure(FailureMode::Ignore))
        .hook(probe.clone())
        .build();

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("out"));
    assert_eq!(probe.decisions().len(), 1);
    assert_eq!(probe.decisions()[0].outcome, "internal");
}

#[tokio::test]
async fn a_panicking_hook_in_fail_call_mode_fails_the_call() {
    let (pipeline, _, _) = one_hook(WillNormalizeInput, Inject::Panic, FailureMode::FailCall);

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    // Contained at the pipeline boundary: an `internal` error without the payload.
    assert_eq!(err.code(), "internal");
    assert!(!err.to_string().contains(toolgate_test::PANIC_PAYLOAD));
}

#[tokio::test]
async fn ignore_mode_still_applies_the_hooks_decisions() {
    let (pipeline, _, probe) = one_hook(
        WillAuthorize,
        Inject::abort("no", "forbidden", 403),
        FailureMode::Ignore,
    );

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    assert_eq!(err.code(), "forbidden");
    assert!(probe.decisions()[0].applied);
}

#[tokio::test]
async fn audit_mode_records_a_decision_without_applying_it() {
    let (pipeline, log, probe) = one_hook(
        WillAuthorize,
        Inject::abort("no", "forbidden", 403),
        FailureMode::Audit,
    );

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("out"));
    assert_stages(&log, SUCCESS);
    assert_eq!(
        probe.decisions(),
        [Decision {
            stage: WillAuthorize,
            hook: Arc::from("policy"),
            outcome: "forbidden".into(),
            applied: false,
        }]
    );
}

#[tokio::test]
async fn audit_mode_does_not_apply_a_respond_either() {
    let (pipeline, _, probe) = one_hook(
        WillReadCache,
        Inject::Respond(json!("shadow")),
        FailureMode::Audit,
    );

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("out"));
    assert_eq!(probe.decisions()[0].outcome, "respond");
}

#[tokio::test]
async fn an_error_in_on_error_never_replaces_the_original_error() {
    for failure in [
        Inject::Fail(ToolError::internal("on_error broke")),
        Inject::Panic,
    ] {
        quiet_injected_panics();
        let test = TestPipeline::new()
            .tool(ScriptedTool::new(TOOL))
            .recording("rec", |h| {
                h.at(WillAuthorize, Inject::abort("no", "forbidden", 403))
                    .at(OnError, failure.clone())
            });
        let log = test.log();

        let err = test
            .build()
            .invoke(TOOL, input(), options())
            .await
            .unwrap_err();

        assert_eq!(err.code(), "forbidden", "with {failure:?} in on_error");
        assert_eq!(
            log.count(WillFinalizeInvoke),
            1,
            "the tail goes on after {failure:?}"
        );
    }
}

#[tokio::test]
async fn an_error_in_will_finalize_invoke_never_replaces_the_outcome() {
    for failure in [
        Inject::Fail(ToolError::internal("finalize broke")),
        Inject::abort("too late", "forbidden", 403),
        Inject::Panic,
    ] {
        let test = crate::recorded(ScriptedTool::returning(TOOL, json!("out")), |h| {
            h.at(WillFinalizeInvoke, failure.clone())
        });
        let log = test.log();

        let out = test.build().invoke(TOOL, input(), options()).await;

        assert_eq!(
            out,
            Ok(json!("out")),
            "with {failure:?} in will_finalize_invoke"
        );
        assert_eq!(log.count(WillFinalizeInvoke), 1);
    }
}

#[tokio::test]
async fn errors_in_record_and_release_stages_never_replace_the_outcome_or_skip_later_stages() {
    let test = crate::recorded(ScriptedTool::returning(TOOL, json!("out")), |h| {
        h.at(
            WillAudit,
            Inject::Fail(ToolError::internal("audit sink down")),
        )
        .at(DidReleaseSemaphore, Inject::Panic)
    });
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await;

    assert_eq!(out, Ok(json!("out")));
    assert_stages(&log, SUCCESS);
}

/// Calls the tool with `inject` at `did_release_semaphore` and checks that the call still
/// succeeds with every stage run (did_release_quota and will_finalize_invoke come after the
/// injected hook). Returns how long the call took on the paused clock.
async fn succeeds_with_release_hook(inject: Inject) -> Duration {
    let test = crate::recorded(ScriptedTool::returning(TOOL, json!("out")), |h| {
        h.at(DidReleaseSemaphore, inject)
    });
    let log = test.log();
    let started = tokio::time::Instant::now();

    let out = test.build().invoke(TOOL, input(), options()).await;

    assert_eq!(out, Ok(json!("out")));
    assert_stages(&log, SUCCESS);
    started.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_tail_hook_still_pending_after_its_first_poll_is_awaited_to_its_end_within_the_tail_timeout()
 {
    let waited = succeeds_with_release_hook(Inject::Delay(Duration::from_secs(5))).await;
    assert!(
        (Duration::from_secs(5)..Duration::from_secs(6)).contains(&waited),
        "the delayed release hook was waited for, not abandoned: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hook_that_hangs_in_a_tail_stage_is_abandoned_after_the_tail_timeout_and_the_call_ends() {
    let waited = succeeds_with_release_hook(Inject::Hang).await;
    assert!(
        (Duration::from_secs(30)..Duration::from_secs(31)).contains(&waited),
        "abandoned after the default 30 s tail timeout, not {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_too_long_for_the_clock_sets_no_deadline_instead_of_panicking() {
    let pipeline = crate::recorded(ScriptedTool::returning(TOOL, json!("out")), |h| h).build();
    let out = pipeline
        .invoke(TOOL, input(), options().timeout(Duration::MAX))
        .await;
    assert_eq!(out, Ok(json!("out")));
}

#[tokio::test(start_paused = true)]
async fn a_caller_is_answered_at_its_deadline_while_a_tail_hook_hangs_and_the_tail_ends_in_the_background()
 {
    let test = crate::recorded(ScriptedTool::returning(TOOL, json!("out")), |h| {
        h.at(WillAudit, Inject::Hang)
    });
    let log = test.log();
    let pipeline = test.build();
    let started = tokio::time::Instant::now();

    let out = pipeline
        .invoke(TOOL, input(), options().timeout(Duration::from_millis(100)))
        .await;

    assert_eq!(out, Ok(json!("out")), "the outcome decided before the tail");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(100),
        "answered at the deadline, not after the 30 s tail timeout"
    );
    // The hanging audit hook was abandoned at the deadline; the rest of the tail runs in
    // the background, `will_finalize_invoke` exactly once.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_stages(&log, SUCCESS);
    assert_eq!(log.count(WillFinalizeInvoke), 1);
}

#[tokio::test(start_paused = true)]
async fn a_tail_that_finishes_before_the_deadline_is_waited_for() {
    let test = crate::recorded(ScriptedTool::returning(TOOL, json!("out")), |h| {
        h.at(DidAudit, Inject::Delay(Duration::from_millis(40)))
    });
    let log = test.log();
    let started = tokio::time::Instant::now();

    let out = test
        .build()
        .invoke(TOOL, input(), options().timeout(Duration::from_millis(100)))
        .await;

    assert_eq!(out, Ok(json!("out")));
    assert_eq!(started.elapsed(), Duration::from_millis(40));
    assert_stages(&log, SUCCESS);
}

/// Lists `will_authorize` among its synchronous stages, yet its method there does not
/// finish at once: a bug in the hook.
struct ClaimsSynchronous;

impl Hook for ClaimsSynchronous {
    fn stages(&self) -> StageSet {
        StageSet::of(&[WillAuthorize])
    }
    fn synchronous_stages(&self) -> StageSet {
        StageSet::of(&[WillAuthorize])
    }
    fn will_authorize<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        HookFuture::new(async {
            tokio::task::yield_now().await;
            Ok(())
        })
    }
}

/// A hand-written hook at `will_authorize` that declares no synchronous stage and keeps
/// the trait's default method there, which lets the call through.
struct DeclaresNothing;

impl Hook for DeclaresNothing {
    fn stages(&self) -> StageSet {
        StageSet::of(&[WillAuthorize])
    }
}

#[tokio::test]
async fn a_hook_that_lists_a_stage_as_synchronous_but_does_not_finish_at_once_fails_the_call_there()
{
    // Alone at its stage, the stage runs in place; beside a hook that declares nothing, the
    // stage runs as a future: the hook's bug is reported the same way by either runner.
    for beside_an_undeclared_hook in [false, true] {
        let mut pipeline = TestPipeline::new()
            .tool(ScriptedTool::returning(TOOL, json!("out")))
            .hook(ClaimsSynchronous);
        if beside_an_undeclared_hook {
            pipeline = pipeline.hook(DeclaresNothing);
        }

        let err = pipeline
            .build()
            .invoke(TOOL, input(), options())
            .await
            .unwrap_err();

        assert_eq!(err.code(), "internal", "{err}");
        let message = err.to_string();
        assert!(
            message.contains("will_authorize") && message.contains("synchronous_stages"),
            "beside an undeclared hook: {beside_an_undeclared_hook}; {message}"
        );
    }
}

#[tokio::test]
async fn a_hand_written_hook_that_keeps_the_default_method_lets_the_call_through_to_the_hooks_after_it()
 {
    let log = StageLog::new();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning(TOOL, json!("out")))
        .hook(DeclaresNothing)
        .hook(RecordingHook::new("after", &log))
        .build();

    let output = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(output, json!("out"));
    assert!(log.hooks_at(WillAuthorize).contains(&"after".to_owned()));
}
