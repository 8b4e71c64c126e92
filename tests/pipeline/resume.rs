//! Suspend and resume: capacity is released while a call waits, and resuming continues
//! after the suspending stage without re-running earlier side effects.

use serde_json::json;
use toolgate::{Pipeline, ResumeDecision, Stage::*, ToolError};
use toolgate_test::{
    CapacityCounters, CapacityHook, Inject, ScriptedTool, StageLog, assert_stages,
};

use crate::{TOOL, input, options, recorded};

/// A pipeline whose hook suspends at `will_validate_input` (after quota and permit were
/// taken), with a capacity hook to prove balance.
fn suspending_at_validate(
    tool: &ScriptedTool,
) -> (Pipeline, StageLog, std::sync::Arc<CapacityCounters>) {
    let capacity = CapacityHook::new("capacity").with_priority(100);
    let counters = capacity.counters();
    let test = recorded(tool.clone(), |h| {
        h.at(WillValidateInput, Inject::suspend("a person must approve"))
    })
    .hook(capacity);
    let log = test.log();
    (test.build(), log, counters)
}

/// Suspends a call and returns its suspension id.
async fn suspend(pipeline: &Pipeline) -> String {
    match pipeline.invoke(TOOL, input(), options()).await {
        Err(ToolError::Suspended {
            suspension_id,
            reason,
        }) => {
            assert_eq!(reason, "a person must approve");
            suspension_id
        }
        other => panic!("expected a suspension, got {other:?}"),
    }
}

#[tokio::test]
async fn suspend_releases_capacity_and_finalizes_with_a_suspended_outcome() {
    let tool = ScriptedTool::new(TOOL);
    let (pipeline, log, counters) = suspending_at_validate(&tool);

    let id = suspend(&pipeline).await;

    assert_stages(
        &log,
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillCheckConsent,
            WillCheckFeatureFlags,
            WillAcquireQuota,
            WillAcquireSemaphore,
            WillParseInput,
            WillValidateInput,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            DidReleaseQuota,
            WillFinalizeInvoke,
        ],
    );
    counters.assert_balanced();
    assert_eq!(tool.calls(), 0);
    let saved = pipeline
        .suspended(&id)
        .await
        .unwrap()
        .expect("the call waits");
    assert_eq!(saved.stage, WillValidateInput);
    assert_eq!(saved.input, input());
    let again = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();
    assert_eq!(
        (again.code(), again.status()),
        ("suspended", 202),
        "the caller gets a typed suspended outcome"
    );
}

#[tokio::test]
async fn resume_approve_continues_after_the_suspending_stage_and_takes_a_new_permit() {
    let tool = ScriptedTool::returning(TOOL, json!("approved result"));
    let (pipeline, log, counters) = suspending_at_validate(&tool);
    let id = suspend(&pipeline).await;
    log.clear();

    let out = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await
        .unwrap();

    assert_eq!(out, json!("approved result"));
    assert_eq!(tool.calls(), 1);
    // Earlier stages do not run again — except the semaphore, whose permit was given back
    // while the call waited.
    assert_stages(
        &log,
        &[
            WillAcquireSemaphore,
            WillNormalizeInput,
            WillRedactInput,
            WillInjectSecrets,
            WillReadCache,
            DidCacheMiss,
            AroundExecute,
            WillExecute,
            DidExecute,
            WillWriteCache,
            WillRedactOutput,
            WillValidateOutput,
            WillTransformOutput,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            WillFinalizeInvoke,
        ],
    );
    assert_eq!(
        counters.quota_acquires(),
        1,
        "the quota unit is not taken twice"
    );
    assert_eq!(counters.permit_acquires(), 2);
    counters.assert_balanced();
}

#[tokio::test]
async fn resume_reject_fails_with_rejected_and_never_runs_the_tool() {
    let tool = ScriptedTool::new(TOOL);
    let (pipeline, log, counters) = suspending_at_validate(&tool);
    let id = suspend(&pipeline).await;
    log.clear();

    let err = pipeline
        .resume(
            &id,
            ResumeDecision::Reject {
                reason: "not this time".into(),
            },
            options(),
        )
        .await
        .unwrap_err();

    assert_eq!((err.code(), err.status()), ("rejected", 403));
    assert_eq!(err.to_string(), "not this time");
    assert_eq!(tool.calls(), 0);
    assert_stages(
        &log,
        &[OnError, WillAudit, DidAudit, OnMetrics, WillFinalizeInvoke],
    );
    counters.assert_balanced();
}

#[tokio::test]
async fn resume_complete_uses_the_persons_output_and_still_runs_output_stages() {
    let tool = ScriptedTool::new(TOOL);
    let (pipeline, log, counters) = suspending_at_validate(&tool);
    let id = suspend(&pipeline).await;
    log.clear();

    let out = pipeline
        .resume(
            &id,
            ResumeDecision::Complete {
                output: json!("done by hand"),
            },
            options(),
        )
        .await
        .unwrap();

    assert_eq!(out, json!("done by hand"));
    assert_eq!(tool.calls(), 0);
    assert_stages(
        &log,
        &[
            WillRedactOutput,
            WillValidateOutput,
            WillTransformOutput,
            WillAudit,
            DidAudit,
            OnMetrics,
            WillFinalizeInvoke,
        ],
    );
    counters.assert_balanced();
}

#[tokio::test]
async fn suspending_inside_execution_resumes_by_running_the_execution_phase() {
    let tool = ScriptedTool::returning(TOOL, json!("ran"));
    let test = recorded(tool.clone(), |h| {
        h.at(WillExecute, Inject::suspend("a person must approve"))
    });
    let log = test.log();
    let pipeline = test.build();
    let id = suspend(&pipeline).await;
    assert_eq!(tool.calls(), 0);
    log.clear();

    let out = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await;

    // The suspending hook suspends again at `will_execute`: the execution phase ran anew.
    assert!(matches!(out, Err(ToolError::Suspended { .. })), "{out:?}");
    assert_stages(
        &log,
        &[
            WillAcquireSemaphore,
            AroundExecute,
            WillExecute,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test]
async fn resume_with_an_unknown_id_is_a_typed_error() {
    let (pipeline, log, _) = suspending_at_validate(&ScriptedTool::new(TOOL));

    let err = pipeline
        .resume("susp-does-not-exist", ResumeDecision::Approve, options())
        .await
        .unwrap_err();

    assert_eq!(
        err,
        ToolError::UnknownSuspension {
            id: "susp-does-not-exist".into()
        }
    );
    assert_eq!((err.code(), err.status()), ("unknown_suspension", 404));
    assert!(log.is_empty(), "no stage runs for an unknown id: {log:?}");
}

#[tokio::test]
async fn a_suspension_id_resumes_only_once() {
    let tool = ScriptedTool::new(TOOL);
    let (pipeline, _, _) = suspending_at_validate(&tool);
    let id = suspend(&pipeline).await;

    pipeline
        .resume(
            &id,
            ResumeDecision::Complete { output: json!(1) },
            options(),
        )
        .await
        .unwrap();
    let again = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await
        .unwrap_err();

    assert_eq!(again, ToolError::UnknownSuspension { id: id.clone() });
    assert!(pipeline.suspended(&id).await.unwrap().is_none());
}
