//! `hook_fn` and `hook_fn_sync`: a hook of one stage from a closure.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolgate::core::hook::{HookFuture, hook_fn, hook_fn_sync};
use toolgate::core::{Hook, InvokeOptions, Stage, User};
use toolgate_test::{ScriptedTool, TestPipeline, assert_stages_of};

#[tokio::test]
async fn a_sync_closure_hook_refuses_at_its_stage() {
    let tool = ScriptedTool::returning("t", json!("ran"));
    let deny_guests = hook_fn_sync(Stage::WillAuthorize, |ctx| {
        if ctx.user().has_role("guest") {
            return ctx.abort("guests may not call tools", "forbidden", 403);
        }
        Ok(())
    });
    let test = TestPipeline::new()
        .tool(tool.clone())
        .hook(deny_guests.named("deny_guests").with_priority(100))
        .recording("probe", |h| h.with_stages(Stage::WillAuthorize));
    let log = test.log();
    let pipeline = test.build();

    let guest = InvokeOptions::new().user(User::new("g").with_roles(["guest"]));
    let err = pipeline.invoke("t", json!({}), guest).await.unwrap_err();
    assert_eq!((err.code(), err.status()), ("forbidden", 403));
    assert_eq!(tool.calls(), 0);
    // The closure ran first (priority 100) and stopped the stage.
    assert_stages_of(&log, "probe", &[]);

    let member = InvokeOptions::new().user(User::new("m"));
    assert_eq!(
        pipeline.invoke("t", json!({}), member).await.unwrap(),
        json!("ran")
    );
    assert_stages_of(&log, "probe", &[Stage::WillAuthorize]);
}

#[tokio::test]
async fn an_async_closure_hook_awaits_and_runs_only_at_its_stage() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let audit = hook_fn(Stage::WillAudit, move |ctx| {
        let counted = Arc::clone(&counted);
        HookFuture::new(async move {
            tokio::task::yield_now().await;
            assert!(ctx.output().is_some() || ctx.error().is_some());
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    });
    assert_eq!(audit.stages(), Stage::WillAudit.into());
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning("t", json!(1)))
        .hook(audit)
        .build();
    for _ in 0..3 {
        pipeline
            .invoke("t", json!({}), InvokeOptions::new())
            .await
            .unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
#[should_panic(expected = "cannot wrap execution")]
fn a_closure_hook_cannot_claim_around_execute() {
    let _ = hook_fn_sync(Stage::AroundExecute, |_| Ok(()));
}
