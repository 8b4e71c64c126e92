//! Suspend and resume: capacity is released while a call waits, a call waits only once its
//! quota unit is taken and its input checked and redacted, and resuming authorizes the
//! call again, then continues after the suspending stage without re-running earlier side
//! effects.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use toolgate::core::hook::hook_fn_sync;
use toolgate::core::suspension::ResumeDecision;
use toolgate::core::{InvokeOptions, Pipeline, Stage::*, ToolError, User};
use toolgate_test::{
    CapacityCounters, CapacityHook, Inject, ScriptedTool, StageLog, assert_stages,
};

use crate::{TOOL, input, options, recorded};

/// A pipeline whose hook asks to wait at `will_validate_input` (after quota and permit were
/// taken), with a capacity hook to prove balance. The call waits at the end of
/// `will_redact_input`, once its input is checked and redacted.
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
            WillNormalizeInput,
            WillRedactInput,
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
    assert_eq!(saved.stage, WillRedactInput);
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
    // Earlier stages do not run again — except provider binding (request providers belong
    // to one invocation, and the resumed call is a new one), authorization, decided anew,
    // and the semaphore, whose permit was given back while the call waited.
    assert_stages(
        &log,
        &[
            WillBindProviders,
            WillAuthorize,
            WillCheckFeatureFlags,
            WillAcquireSemaphore,
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
            WillBindProviders,
            WillAuthorize,
            WillCheckFeatureFlags,
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
            WillBindProviders,
            WillAuthorize,
            WillCheckFeatureFlags,
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

// ---------------------------------------------------------------------------------------
// A call waits only once it counts against its caller's limits and its input is the one the
// tool would run with (DESIGN.md §10).

/// A pipeline whose consent hook asks to wait, with a capacity hook, a redaction hook that
/// masks the input, and an authorization hook that refuses once `revoked` is set.
fn consent_pipeline(
    tool: &ScriptedTool,
    revoked: &Arc<AtomicBool>,
) -> (Pipeline, StageLog, Arc<CapacityCounters>) {
    let capacity = CapacityHook::new("capacity").with_priority(100);
    let counters = capacity.counters();
    let revoked = Arc::clone(revoked);
    let test = recorded(tool.clone(), |h| {
        h.at(WillCheckConsent, Inject::suspend("a person must approve"))
    })
    .hook(capacity)
    .hook(hook_fn_sync(WillRedactInput, |ctx| {
        ctx.set_input(json!({ "q": "[REDACTED]" }));
        Ok(())
    }))
    .hook(hook_fn_sync(WillAuthorize, move |ctx| {
        if revoked.load(Ordering::SeqCst) {
            return ctx.abort("you may no longer call `t`", "forbidden", 403);
        }
        Ok(())
    }));
    let log = test.log();
    (test.build(), log, counters)
}

#[tokio::test]
async fn a_call_asked_to_wait_at_consent_takes_its_quota_and_waits_with_its_redacted_input() {
    let tool = ScriptedTool::returning(TOOL, json!("ran"));
    let (pipeline, log, counters) = consent_pipeline(&tool, &Arc::default());

    let id = suspend(&pipeline).await;

    assert_eq!(counters.quota_acquires(), 1, "a waiting call took its unit");
    counters.assert_balanced();
    let saved = pipeline.suspended(&id).await.unwrap().expect("it waits");
    assert_eq!(saved.stage, WillRedactInput);
    assert_eq!(
        saved.input,
        json!({ "q": "[REDACTED]" }),
        "never the raw input"
    );
    assert!(log.stages().contains(&WillRedactInput), "{log:?}");

    let out = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await;

    assert_eq!(out, Ok(json!("ran")));
    assert_eq!(
        counters.quota_acquires(),
        1,
        "and does not take a second one"
    );
    counters.assert_balanced();
}

#[tokio::test]
async fn a_call_over_its_rate_limit_fails_instead_of_waiting() {
    let tool = ScriptedTool::new(TOOL);
    let test = recorded(tool.clone(), |h| {
        h.at(WillCheckConsent, Inject::suspend("a person must approve"))
            .at(
                WillAcquireQuota,
                Inject::RetryAfter(std::time::Duration::from_secs(12)),
            )
    });
    let pipeline = test.build();

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    assert_eq!((err.code(), err.status()), ("rate_limited", 429));
    assert_eq!(tool.calls(), 0);
}

#[tokio::test]
async fn a_call_with_invalid_input_fails_instead_of_waiting() {
    let tool = ScriptedTool::new(TOOL);
    let pipeline = recorded(tool.clone(), |h| {
        h.at(WillCheckConsent, Inject::suspend("a person must approve"))
            .at(
                WillValidateInput,
                Inject::abort("argument `q`: not a string", "invalid_input", 400),
            )
    })
    .build();

    let err = pipeline
        .invoke(TOOL, json!({ "q": 5 }), options())
        .await
        .unwrap_err();

    assert_eq!((err.code(), err.status()), ("invalid_input", 400));
    assert_eq!(tool.calls(), 0);
}

#[tokio::test]
async fn a_respond_after_a_request_to_wait_does_not_get_around_the_wait() {
    let tool = ScriptedTool::new(TOOL);
    let pipeline = recorded(tool.clone(), |h| {
        h.at(WillCheckConsent, Inject::suspend("a person must approve"))
            .at(WillNormalizeInput, Inject::Respond(json!("short-circuit")))
    })
    .build();

    let id = suspend(&pipeline).await;

    let saved = pipeline.suspended(&id).await.unwrap().expect("it waits");
    assert_eq!(saved.output, Some(json!("short-circuit")));
    let rejected = pipeline
        .resume(
            &id,
            ResumeDecision::Reject {
                reason: "no".into(),
            },
            options(),
        )
        .await;
    assert_eq!(rejected.unwrap_err().code(), "rejected");
    assert_eq!(tool.calls(), 0);
}

#[tokio::test]
async fn an_approval_after_access_was_revoked_refuses_the_call_and_never_runs_it() {
    let tool = ScriptedTool::new(TOOL);
    let revoked = Arc::new(AtomicBool::new(false));
    let (pipeline, _, counters) = consent_pipeline(&tool, &revoked);
    let id = suspend(&pipeline).await;

    revoked.store(true, Ordering::SeqCst);
    let err = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await
        .unwrap_err();

    assert_eq!((err.code(), err.status()), ("forbidden", 403));
    assert_eq!(err.to_string(), "you may no longer call `t`");
    assert_eq!(tool.calls(), 0);
    counters.assert_balanced();
    let again = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await;
    assert_eq!(
        again.unwrap_err().code(),
        "unknown_suspension",
        "the call ended"
    );
}

#[tokio::test]
async fn a_completion_after_access_was_revoked_is_refused_too_but_a_rejection_is_not() {
    let tool = ScriptedTool::new(TOOL);
    let revoked = Arc::new(AtomicBool::new(false));
    let (pipeline, _, _) = consent_pipeline(&tool, &revoked);
    let completed = suspend(&pipeline).await;
    let rejected = suspend(&pipeline).await;

    revoked.store(true, Ordering::SeqCst);
    let complete = ResumeDecision::Complete { output: json!(1) };
    let reject = ResumeDecision::Reject {
        reason: "no".into(),
    };

    let err = pipeline.resume(&completed, complete, options()).await;
    assert_eq!(err.unwrap_err().code(), "forbidden");
    let err = pipeline.resume(&rejected, reject, options()).await;
    assert_eq!(err.unwrap_err().code(), "rejected");
}

#[tokio::test]
async fn a_hook_that_asks_to_wait_again_at_authorization_on_resume_refuses_the_call() {
    let tool = ScriptedTool::new(TOOL);
    let pipeline = recorded(tool.clone(), |h| {
        h.at(WillAuthorize, Inject::suspend("a person must approve"))
    })
    .build();
    let id = suspend(&pipeline).await;

    let err = pipeline
        .resume(&id, ResumeDecision::Approve, options())
        .await
        .unwrap_err();

    assert_eq!(err.code(), "internal");
    assert!(err.to_string().contains("will_check_consent"), "{err}");
    assert_eq!(tool.calls(), 0);
}

/// The request provider a hook binds at `will_bind_providers`: which binding it is.
struct Connection;
impl toolgate::core::external::TypeMapKey for Connection {
    type Value = u32;
}

/// Binds a fresh [`Connection`] per invocation, counting the bindings.
struct Connect(Arc<std::sync::atomic::AtomicU32>);

#[toolgate::core::hook]
impl toolgate::core::Hook for Connect {
    fn will_bind_providers(
        &self,
        ctx: &mut toolgate::core::ToolInvokeContext,
    ) -> toolgate::core::HookResult {
        let binding = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        ctx.provide::<Connection>(binding, toolgate::core::provider::Scope::Request)?;
        Ok(())
    }

    fn provided_providers(&self) -> Vec<toolgate::core::provider::ProviderRequirement> {
        vec![toolgate::core::provider::ProviderRequirement::of::<
            Connection,
        >()]
    }
}

#[tokio::test]
async fn a_resumed_call_binds_its_request_providers_again_and_runs_with_the_new_ones() {
    let bindings = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let pipeline = Pipeline::builder()
        .tool(toolgate::core::tool::tool_fn_with_context(
            "use_connection",
            "Answers with the binding of its connection.",
            |_: (), ctx| Box::pin(async move { Ok::<_, ToolError>(*ctx.get::<Connection>()?) }),
        ))
        .hook(Connect(Arc::clone(&bindings)))
        .hook(hook_fn_sync(WillCheckConsent, |ctx| {
            ctx.suspend("a person approves every call")
        }))
        .build()
        .unwrap();

    let waiting = pipeline
        .invoke("use_connection", json!(null), options())
        .await
        .unwrap_err();
    let ToolError::Suspended { suspension_id, .. } = waiting else {
        panic!("expected a suspension, got {waiting:?}");
    };
    assert_eq!(bindings.load(Ordering::SeqCst), 1);

    let out = pipeline
        .resume(&suspension_id, ResumeDecision::Approve, options())
        .await;

    assert_eq!(
        out,
        Ok(json!(2)),
        "the call ran with the connection bound on resume"
    );
    assert_eq!(bindings.load(Ordering::SeqCst), 2);
}

/// A pipeline that asks for consent, and authorizes analysts only.
fn analysts_with_consent(tool: &ScriptedTool) -> Pipeline {
    recorded(tool.clone(), |h| {
        h.at(WillCheckConsent, Inject::suspend("a person must approve"))
    })
    .hook(hook_fn_sync(WillAuthorize, |ctx| {
        if ctx.user().has_role("analyst") {
            Ok(())
        } else {
            ctx.abort("only analysts may call `t`", "forbidden", 403)
        }
    }))
    .build()
}

/// Suspends a call of `user` and returns its suspension id.
async fn suspend_as(pipeline: &Pipeline, user: &User) -> String {
    let options = InvokeOptions::new().user(user.clone());
    match pipeline.invoke(TOOL, input(), options).await {
        Err(ToolError::Suspended { suspension_id, .. }) => suspension_id,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

#[tokio::test]
async fn a_resume_naming_the_caller_as_they_are_now_authorizes_them_as_that() {
    let tool = ScriptedTool::returning(TOOL, json!("ran"));
    let pipeline = analysts_with_consent(&tool);
    let analyst = User::new("bob").with_roles(["analyst"]);
    let kept = suspend_as(&pipeline, &analyst).await;
    let demoted = suspend_as(&pipeline, &analyst).await;

    // Named as he is now: no longer an analyst, so refused, and the tool never runs.
    let now = InvokeOptions::new().user(User::new("bob").with_roles(["intern"]));
    let err = pipeline
        .resume(&demoted, ResumeDecision::Approve, now)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    assert_eq!(tool.calls(), 0);
    // Not named: the caller as he was when the call waited.
    let ran = pipeline
        .resume(&kept, ResumeDecision::Approve, options())
        .await;
    assert_eq!(ran.unwrap(), json!("ran"));
}

#[tokio::test]
async fn a_resume_naming_another_user_than_the_caller_is_refused_and_the_call_still_waits() {
    let tool = ScriptedTool::returning(TOOL, json!("ran"));
    let pipeline = analysts_with_consent(&tool);
    let id = suspend_as(&pipeline, &User::new("bob").with_roles(["analyst"])).await;

    let someone_else = InvokeOptions::new().user(User::new("mallory").with_roles(["analyst"]));
    let err = pipeline
        .resume(&id, ResumeDecision::Approve, someone_else)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "internal", "{err}");
    assert_eq!(tool.calls(), 0);
    let waiting = pipeline.suspended(&id).await.unwrap();
    assert_eq!(waiting.map(|w| w.user.id).as_deref(), Some("bob"));
}
