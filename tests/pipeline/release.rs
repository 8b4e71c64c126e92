//! Release stages run exactly once for every acquire stage that ran, and for no other: an
//! abort at each point of the pipeline gives back exactly what was taken.

use std::time::Duration;

use toolgate::core::stage::StageSet;
use toolgate::core::{Stage, Stage::*};
use toolgate_test::{
    CapacityHook, Inject, RecordingHook, ScriptedTool, StageLog, TestPipeline, assert_stages,
};

use crate::{TOOL, input, options, recorded};

/// The error path's record and end stages, without release.
const RECORD_AND_END: &[Stage] = &[WillAudit, DidAudit, OnMetrics];

/// Aborts at `stage` with a recording hook (priority 0) and a capacity hook (priority 100,
/// so it acquires before the abort at the same stage), and checks the recorded sequence
/// and the capacity counters.
async fn abort_at(stage: Stage, expected: &[Stage], quota: usize, permits: usize) {
    let capacity = CapacityHook::new("capacity").with_priority(100);
    let counters = capacity.counters();
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.at(stage, Inject::abort("no", "forbidden", 403))
    })
    .hook(capacity);
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!(err.code(), "forbidden");
    assert_stages(&log, expected);
    assert_eq!(
        (counters.quota_acquires(), counters.permit_acquires()),
        (quota, permits),
        "what was acquired before the abort at {stage}"
    );
    counters.assert_balanced();
}

#[tokio::test]
async fn abort_in_authorize_releases_nothing() {
    let expected = [
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            OnError,
        ][..],
        RECORD_AND_END,
        &[WillFinalizeInvoke],
    ]
    .concat();
    abort_at(WillAuthorize, &expected, 0, 0).await;
}

#[tokio::test]
async fn abort_in_quota_releases_only_the_quota() {
    let expected = [
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillCheckConsent,
            WillCheckFeatureFlags,
            WillAcquireQuota,
            OnError,
        ][..],
        RECORD_AND_END,
        &[DidReleaseQuota, WillFinalizeInvoke],
    ]
    .concat();
    abort_at(WillAcquireQuota, &expected, 1, 0).await;
}

#[tokio::test]
async fn abort_in_semaphore_releases_the_permit_then_the_quota() {
    let expected = [
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillCheckConsent,
            WillCheckFeatureFlags,
            WillAcquireQuota,
            WillAcquireSemaphore,
            OnError,
        ][..],
        RECORD_AND_END,
        &[DidReleaseSemaphore, DidReleaseQuota, WillFinalizeInvoke],
    ]
    .concat();
    abort_at(WillAcquireSemaphore, &expected, 1, 1).await;
}

#[tokio::test]
async fn abort_in_validate_releases_permit_and_quota() {
    let expected = [
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
            OnError,
        ][..],
        RECORD_AND_END,
        &[DidReleaseSemaphore, DidReleaseQuota, WillFinalizeInvoke],
    ]
    .concat();
    abort_at(WillValidateInput, &expected, 1, 1).await;
}

#[tokio::test]
async fn abort_in_execute_releases_permit_and_quota_and_never_runs_the_tool() {
    let expected = [
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
            WillNormalizeInput,
            WillRedactInput,
            WillInjectSecrets,
            WillReadCache,
            DidCacheMiss,
            AroundExecute,
            WillExecute,
            OnError,
        ][..],
        RECORD_AND_END,
        &[DidReleaseSemaphore, DidReleaseQuota, WillFinalizeInvoke],
    ]
    .concat();
    abort_at(WillExecute, &expected, 1, 1).await;
}

// Regressions found by the property test (tests/pipeline/property.rs).

#[tokio::test]
async fn a_panic_in_one_hooks_release_does_not_skip_the_release_of_the_hooks_after_it() {
    let capacity = CapacityHook::new("capacity");
    let counters = capacity.counters();
    // At `did_*` stages the lower priority runs first: the panicking hook goes before the
    // capacity hook.
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.with_priority(-1).at(DidReleaseSemaphore, Inject::Panic)
    })
    .hook(capacity);
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await;

    assert!(out.is_ok(), "{out:?}");
    assert_eq!(counters.permit_releases(), 1, "{counters}");
    counters.assert_balanced();
    assert_eq!(log.count(WillFinalizeInvoke), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_in_the_middle_of_a_release_stage_still_runs_the_remaining_releases() {
    let capacity = CapacityHook::new("capacity").with_priority(1);
    let counters = capacity.counters();
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.at(
            DidReleaseSemaphore,
            Inject::Delay(Duration::from_millis(20)),
        )
    })
    .hook(capacity);
    let log = test.log();
    let pipeline = test.build();

    // Polled once: it runs until the delay in `did_release_semaphore`, then is dropped.
    let dropped =
        tokio::time::timeout(Duration::ZERO, pipeline.invoke(TOOL, input(), options())).await;
    assert!(dropped.is_err());

    assert!(
        log.wait_for(WillFinalizeInvoke, Duration::from_secs(5))
            .await,
        "{log:?}"
    );
    assert_eq!(counters.permit_releases(), 1, "{counters}");
    counters.assert_balanced();
    assert_eq!(
        log.count(DidReleaseSemaphore),
        1,
        "the interrupted hook is not called again"
    );
    assert_eq!(log.count(DidReleaseQuota), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_while_one_hook_finalizes_still_finalizes_the_others() {
    let log = StageLog::new();
    let finalize = StageSet::of(&[WillFinalizeInvoke]);
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(
            RecordingHook::new("slow", &log)
                .with_stages(finalize)
                .at(WillFinalizeInvoke, Inject::Delay(Duration::from_millis(20))),
        )
        .hook(RecordingHook::new("after", &log).with_stages(finalize))
        .build();

    let dropped =
        tokio::time::timeout(Duration::ZERO, pipeline.invoke(TOOL, input(), options())).await;
    assert!(dropped.is_err());

    let finished = async {
        while log.len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(5), finished)
            .await
            .is_ok(),
        "{log:?}"
    );
    assert_eq!(log.hooks_at(WillFinalizeInvoke), ["slow", "after"]);
}
