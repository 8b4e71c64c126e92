//! `#[hook]` derives the stages from the methods written: each one runs.

use std::collections::BTreeSet;

use serde_json::json;
use toolgate::core::{Hook, HookResult, InvokeOptions, Next, Stage, ToolInvokeContext, User, hook};
use toolgate_test::{Inject, ScriptedTool, StageLog, Step, TestPipeline};

/// Writes every stage method — half of them synchronous, half async — and records each
/// call, without listing a single stage by hand.
struct EveryStage {
    log: StageLog,
    retries: u32,
}

impl EveryStage {
    fn seen(&self, stage: Stage) -> HookResult {
        self.log.record(stage, "every_stage");
        Ok(())
    }
}

#[hook]
impl Hook for EveryStage {
    fn will_create_invoke_context(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillCreateInvokeContext)
    }
    async fn did_create_invoke_context(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidCreateInvokeContext)
    }
    fn will_bind_providers(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillBindProviders)
    }
    async fn will_authorize(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        tokio::task::yield_now().await;
        self.seen(Stage::WillAuthorize)
    }
    fn will_check_consent(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillCheckConsent)
    }
    async fn will_check_feature_flags(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillCheckFeatureFlags)
    }
    fn will_acquire_quota(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillAcquireQuota)
    }
    async fn will_acquire_semaphore(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillAcquireSemaphore)
    }
    fn will_parse_input(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillParseInput)
    }
    async fn will_validate_input(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillValidateInput)
    }
    fn will_normalize_input(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillNormalizeInput)
    }
    async fn will_redact_input(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillRedactInput)
    }
    fn will_inject_secrets(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillInjectSecrets)
    }
    async fn will_read_cache(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillReadCache)
    }
    fn did_cache_hit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidCacheHit)
    }
    async fn did_cache_miss(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidCacheMiss)
    }
    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        self.seen(Stage::AroundExecute)?;
        let mut outcome = next.run(ctx).await;
        for _ in 0..self.retries {
            if outcome.is_ok() {
                break;
            }
            outcome = next.run(ctx).await;
        }
        outcome
    }
    fn on_retry(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::OnRetry)
    }
    async fn will_execute(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillExecute)
    }
    fn did_execute(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidExecute)
    }
    async fn on_give_up(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::OnGiveUp)
    }
    fn will_write_cache(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillWriteCache)
    }
    async fn will_redact_output(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillRedactOutput)
    }
    fn will_validate_output(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillValidateOutput)
    }
    async fn will_transform_output(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillTransformOutput)
    }
    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillAudit)
    }
    async fn did_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidAudit)
    }
    fn on_metrics(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::OnMetrics)
    }
    async fn did_release_semaphore(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidReleaseSemaphore)
    }
    fn did_release_quota(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::DidReleaseQuota)
    }
    async fn will_finalize_invoke(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::WillFinalizeInvoke)
    }
    fn on_error(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.seen(Stage::OnError)
    }
}

#[test]
fn a_derived_stage_set_is_exactly_the_methods_written() {
    let hook = EveryStage {
        log: StageLog::new(),
        retries: 0,
    };
    assert_eq!(hook.stages(), toolgate::core::stage::StageSet::ALL);
}

#[tokio::test(start_paused = true)]
async fn a_derived_hook_runs_at_every_stage_it_implements() {
    let log = StageLog::new();
    let every = || EveryStage {
        log: log.clone(),
        retries: 1,
    };

    // A success: every stage of the success path, `around_execute` included.
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning("t", json!(1)))
        .hook(every())
        .build();
    pipeline
        .invoke("t", json!({}), InvokeOptions::new())
        .await
        .unwrap();

    // A cache hit, answered by a neighbour at `will_read_cache`.
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning("t", json!(1)))
        .hook(every())
        .recording("cache", |h| {
            h.with_stages(Stage::WillReadCache)
                .at(Stage::WillReadCache, Inject::Respond(json!(2)))
        })
        .build();
    let hit = pipeline.invoke("t", json!({}), InvokeOptions::new()).await;
    assert_eq!(hit.unwrap(), json!(2));

    // Two failed attempts: a retry, giving up, and the error path.
    let flaky = ScriptedTool::new("t")
        .then(Step::transient("down"))
        .then(Step::transient("still down"));
    let pipeline = TestPipeline::new().tool(flaky).hook(every()).build();
    let failed = pipeline.invoke("t", json!({}), InvokeOptions::new()).await;
    assert!(failed.is_err());

    let seen: BTreeSet<Stage> = log.stages().into_iter().collect();
    let missing: Vec<Stage> = Stage::ALL
        .into_iter()
        .filter(|stage| !seen.contains(stage))
        .collect();
    assert!(missing.is_empty(), "never called at {missing:?}");
}

/// The hook of the issue that failed open: an authorization method the old API let an
/// author write without listing it. Under `#[hook]` there is no list to forget.
struct DenyList(Vec<String>);

#[hook]
impl Hook for DenyList {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if self.0.contains(&ctx.user().id) {
            return ctx.abort("you may not call tools", "forbidden", 403);
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_authorization_method_written_under_the_attribute_denies() {
    let tool = ScriptedTool::returning("t", json!("ran"));
    let pipeline = TestPipeline::new()
        .tool(tool.clone())
        .hook(DenyList(vec!["mallory".into()]))
        .build();

    let mallory = InvokeOptions::new().user(User::new("mallory"));
    let err = pipeline.invoke("t", json!({}), mallory).await.unwrap_err();
    assert_eq!((err.code(), err.status()), ("forbidden", 403));
    assert_eq!(tool.calls(), 0);

    let alice = InvokeOptions::new().user(User::new("alice"));
    assert_eq!(
        pipeline.invoke("t", json!({}), alice).await.unwrap(),
        json!("ran")
    );
}

#[tokio::test]
async fn a_switched_off_hook_takes_part_in_nothing() {
    let off: Option<DenyList> = None;
    assert!(off.stages().is_empty());

    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::returning("t", json!("ran")))
        .hook(off)
        .hook(Some(DenyList(vec!["eve".into()])))
        .build();
    let eve = InvokeOptions::new().user(User::new("eve"));
    let err = pipeline.invoke("t", json!({}), eve).await.unwrap_err();
    assert_eq!(err.code(), "forbidden");
    let bob = InvokeOptions::new().user(User::new("bob"));
    assert_eq!(
        pipeline.invoke("t", json!({}), bob).await.unwrap(),
        json!("ran")
    );
}
