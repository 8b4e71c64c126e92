//! One test per path through the pipeline (DESIGN.md §2), each with the full stage sequence.

use std::time::Duration;

use serde_json::json;
use toolgate::core::external::CancellationToken;
use toolgate::core::{Stage, Stage::*, ToolError};
use toolgate_test::{CapacityHook, Inject, PANIC_PAYLOAD, ScriptedTool, Step, assert_stages};

use crate::{TOOL, input, options, recorded};

/// Every stage of the success path, in order.
pub(crate) const SUCCESS: &[Stage] = &[
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
    DidExecute,
    WillWriteCache,
    WillRedactOutput,
    WillValidateOutput,
    WillTransformOutput,
    WillAudit,
    DidAudit,
    OnMetrics,
    DidReleaseSemaphore,
    DidReleaseQuota,
    WillFinalizeInvoke,
];

/// The stages up to and including the input phase.
const THROUGH_INPUT: &[Stage] = &[
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
];

/// The error path after a failure during execution, once everything was acquired.
const ERROR_TAIL_ACQUIRED: &[Stage] = &[
    OnError,
    WillAudit,
    DidAudit,
    OnMetrics,
    DidReleaseSemaphore,
    DidReleaseQuota,
    WillFinalizeInvoke,
];

fn concat(parts: &[&[Stage]]) -> Vec<Stage> {
    parts.concat()
}

#[tokio::test]
async fn success_runs_every_stage_once_in_pipeline_order() {
    let tool = ScriptedTool::returning(TOOL, json!({ "answer": 42 }));
    let test = recorded(tool.clone(), |h| h);
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!({ "answer": 42 }));
    assert_eq!(tool.calls(), 1);
    assert_stages(&log, SUCCESS);
}

#[tokio::test]
async fn respond_before_output_skips_execution_and_write_cache_but_runs_output_record_and_release()
{
    let tool = ScriptedTool::new(TOOL);
    let test = recorded(tool.clone(), |h| {
        h.at(WillValidateInput, Inject::Respond(json!("early")))
    });
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("early"));
    assert_eq!(tool.calls(), 0, "a respond short-circuits the tool");
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
    );
}

#[tokio::test]
async fn respond_in_authorize_releases_nothing_because_nothing_was_acquired() {
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.at(WillAuthorize, Inject::Respond(json!(1)))
    });
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!(1));
    assert_stages(
        &log,
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillRedactOutput,
            WillValidateOutput,
            WillTransformOutput,
            WillAudit,
            DidAudit,
            OnMetrics,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test]
async fn respond_from_an_output_stage_replaces_the_output_and_the_next_stage_runs_once() {
    let test = recorded(ScriptedTool::returning(TOOL, json!("raw")), |h| {
        h.at(WillRedactOutput, Inject::Respond(json!("redacted")))
    });
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("redacted"));
    assert_stages(&log, SUCCESS);
}

#[tokio::test]
async fn cache_hit_respond_runs_did_cache_hit_then_output_without_execution_or_write_cache() {
    let tool = ScriptedTool::new(TOOL);
    let test = recorded(tool.clone(), |h| {
        h.at(WillReadCache, Inject::Respond(json!("cached")))
    });
    let log = test.log();

    let out = test.build().invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("cached"));
    assert_eq!(tool.calls(), 0);
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[
                WillReadCache,
                DidCacheHit,
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
        ]),
    );
}

#[tokio::test]
async fn abort_fails_with_reason_code_and_status_and_runs_the_error_path() {
    let tool = ScriptedTool::new(TOOL);
    let test = recorded(tool.clone(), |h| {
        h.at(
            WillCheckConsent,
            Inject::abort("needs consent", "consent_required", 451),
        )
    });
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!((err.code(), err.status()), ("consent_required", 451));
    assert_eq!(err.to_string(), "needs consent");
    assert_eq!(tool.calls(), 0);
    assert_stages(
        &log,
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillCheckConsent,
            OnError,
            WillAudit,
            DidAudit,
            OnMetrics,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test]
async fn retry_after_carries_its_delay_to_the_caller_and_releases_the_quota_it_reached() {
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.at(
            WillAcquireQuota,
            Inject::RetryAfter(Duration::from_millis(1200)),
        )
    });
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!(err.retry_after_delay(), Some(Duration::from_millis(1200)));
    assert_eq!((err.code(), err.status()), ("rate_limited", 429));
    assert_eq!(err.to_string(), "injected retry-after, retry after 1200 ms");
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
            OnError,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseQuota,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test]
async fn tool_error_runs_the_error_path_without_did_execute() {
    let tool = ScriptedTool::new(TOOL).then(Step::permanent("disk full"));
    let test = recorded(tool.clone(), |h| h);
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!(err, ToolError::execution("disk full"));
    assert_eq!((err.code(), err.status()), ("tool_error", 502));
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[WillReadCache, DidCacheMiss, AroundExecute, WillExecute],
            ERROR_TAIL_ACQUIRED,
        ]),
    );
}

#[tokio::test]
async fn a_tool_that_needs_the_callers_input_waits_without_the_error_path() {
    let asked = ToolError::InputRequired {
        requests: json!({"name": {"method": "elicitation/create", "params": {"message": "Name?"}}}),
        state: Some("step=1".to_owned()),
    };
    let tool = ScriptedTool::new(TOOL).then(Step::Fail(asked.clone()));
    let test = recorded(tool.clone(), |h| h);
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!(
        err, asked,
        "the requests and the state reach the caller as they were"
    );
    assert_eq!((err.code(), err.status()), ("input_required", 422));
    assert!(err.is_waiting() && !err.is_retryable());
    // Like a suspension, not a failure: no `on_error`.
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[WillReadCache, DidCacheMiss, AroundExecute, WillExecute],
            &ERROR_TAIL_ACQUIRED[1..],
        ]),
    );
}

#[tokio::test]
async fn a_call_answered_at_will_execute_counts_no_tool_run() {
    let tool = ScriptedTool::returning(TOOL, json!({ "answer": 42 }));
    let test = recorded(tool.clone(), |h| {
        h.at(WillExecute, Inject::Respond(json!("stubbed")))
    });

    let invocation = test.build().invoke_detailed(TOOL, input(), options()).await;

    assert_eq!(invocation.result, Ok(json!("stubbed")));
    assert_eq!(tool.calls(), 0);
    assert_eq!(invocation.attempts, 0, "the tool never ran");
}

#[tokio::test]
async fn panic_in_a_hook_becomes_an_internal_error_without_its_payload() {
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.at(WillCheckFeatureFlags, Inject::Panic)
    });
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!((err.code(), err.status()), ("internal", 500));
    let message = err.to_string();
    assert!(
        !message.contains(PANIC_PAYLOAD),
        "the panic payload leaked: {message}"
    );
    assert!(message.contains("will_check_feature_flags"), "{message}");
    assert_stages(
        &log,
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillCheckConsent,
            WillCheckFeatureFlags,
            OnError,
            WillAudit,
            DidAudit,
            OnMetrics,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test]
async fn panic_in_a_hook_leaves_other_invocations_of_the_pipeline_unaffected() {
    let pipeline = recorded(ScriptedTool::returning(TOOL, json!("fine")), |h| {
        h.at(WillAuthorize, Inject::Panic)
            .with_filter(|ctx| ctx.user().id == "mallory")
    })
    .build();

    let panicked = pipeline.invoke(
        TOOL,
        input(),
        options().user(toolgate::core::User::new("mallory")),
    );
    let fine = pipeline.invoke(
        TOOL,
        input(),
        options().user(toolgate::core::User::new("alice")),
    );
    let (panicked, fine) = tokio::join!(panicked, fine);

    assert_eq!(panicked.unwrap_err().code(), "internal");
    assert_eq!(fine.unwrap(), json!("fine"));
    assert_eq!(
        pipeline.invoke(TOOL, input(), options()).await.unwrap(),
        json!("fine")
    );
}

#[tokio::test]
async fn panic_in_the_tool_becomes_an_internal_error_without_its_payload() {
    let tool = ScriptedTool::new(TOOL).then(Step::Panic);
    let test = recorded(tool.clone(), |h| h);
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options())
        .await
        .unwrap_err();

    assert_eq!(err.code(), "internal");
    let message = err.to_string();
    assert!(
        !message.contains(PANIC_PAYLOAD),
        "the panic payload leaked: {message}"
    );
    assert!(message.contains("the tool panicked"), "{message}");
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[WillReadCache, DidCacheMiss, AroundExecute, WillExecute],
            ERROR_TAIL_ACQUIRED,
        ]),
    );
    assert_eq!(tool.running(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_invocation_future_still_runs_error_release_and_finalize() {
    let tool = ScriptedTool::new(TOOL).then(Step::Hang);
    let capacity = CapacityHook::new("capacity").with_priority(100);
    let counters = capacity.counters();
    let test = recorded(tool.clone(), |h| h).hook(capacity);
    let log = test.log();
    let pipeline = test.build();

    let dropped = tokio::time::timeout(
        Duration::from_secs(1),
        pipeline.invoke(TOOL, input(), options()),
    )
    .await;
    assert!(
        dropped.is_err(),
        "the tool hangs, so the caller gives up and drops the future"
    );

    assert!(
        log.wait_for(WillFinalizeInvoke, Duration::from_secs(5))
            .await,
        "{log:?}"
    );
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[WillReadCache, DidCacheMiss, AroundExecute, WillExecute],
            ERROR_TAIL_ACQUIRED,
        ]),
    );
    assert_eq!(tool.running(), 0, "the tool's future was dropped");
    counters.assert_balanced();
}

#[tokio::test(start_paused = true)]
async fn passing_the_deadline_fails_with_timeout_and_releases_everything() {
    let tool = ScriptedTool::new(TOOL).then(Step::Hang);
    let capacity = CapacityHook::new("capacity");
    let counters = capacity.counters();
    let test = recorded(tool.clone(), |h| h).hook(capacity);
    let log = test.log();
    let pipeline = test.build();

    let started = tokio::time::Instant::now();
    let err = pipeline
        .invoke(TOOL, input(), options().timeout(Duration::from_secs(5)))
        .await
        .unwrap_err();

    assert_eq!(
        err,
        ToolError::Timeout {
            after: Duration::from_secs(5)
        }
    );
    assert_eq!((err.code(), err.status()), ("timeout", 504));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[WillReadCache, DidCacheMiss, AroundExecute, WillExecute],
            ERROR_TAIL_ACQUIRED,
        ]),
    );
    assert_eq!(tool.running(), 0);
    counters.assert_balanced();
}

#[tokio::test(start_paused = true)]
async fn a_hook_that_hangs_is_cut_off_by_the_deadline() {
    let test = recorded(ScriptedTool::new(TOOL), |h| {
        h.at(WillAcquireSemaphore, Inject::Hang)
    });
    let log = test.log();

    let err = test
        .build()
        .invoke(TOOL, input(), options().timeout(Duration::from_millis(250)))
        .await
        .unwrap_err();

    assert_eq!(err.code(), "timeout");
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
            OnError,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            DidReleaseQuota,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_token_fails_with_cancelled_and_releases_everything() {
    let tool = ScriptedTool::new(TOOL).then(Step::Hang);
    let capacity = CapacityHook::new("capacity");
    let counters = capacity.counters();
    let test = recorded(tool.clone(), |h| h).hook(capacity);
    let log = test.log();
    let pipeline = test.build();

    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        canceller.cancel();
    });
    let err = pipeline
        .invoke(TOOL, input(), options().cancellation(token))
        .await
        .unwrap_err();

    assert_eq!(err, ToolError::Cancelled);
    assert_eq!((err.code(), err.status()), ("cancelled", 499));
    assert_stages(
        &log,
        &concat(&[
            THROUGH_INPUT,
            &[WillReadCache, DidCacheMiss, AroundExecute, WillExecute],
            ERROR_TAIL_ACQUIRED,
        ]),
    );
    counters.assert_balanced();
}

#[tokio::test(start_paused = true)]
async fn a_tool_watching_its_cancellation_token_sees_the_caller_cancel() {
    let tool = ScriptedTool::new(TOOL).then(Step::Hang);
    let pipeline = recorded(tool.clone(), |h| h).build();
    let token = CancellationToken::new();

    let call = pipeline.invoke(TOOL, input(), options().cancellation(token.clone()));
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        token.cancel();
    };
    let (result, ()) = tokio::join!(call, cancel);

    assert_eq!(result.unwrap_err(), ToolError::Cancelled);
    assert_eq!(
        tool.saw_cancellation(),
        1,
        "the tool watches the caller's own token"
    );
    assert_eq!(tool.running(), 0);
}
