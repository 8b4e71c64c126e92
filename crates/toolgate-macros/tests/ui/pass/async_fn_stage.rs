//! A stage method written as a plain `async fn`, and `around_execute` as one.
use toolgate_core::stage::StageSet;
use toolgate_core::{Control, Hook, HookResult, Next, Stage, ToolInvokeContext, hook};

struct Slow;

#[hook]
impl Hook for Slow {
    async fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        tokio::task::yield_now().await;
        if ctx.user().has_role("guest") {
            return ctx.abort("guests may not call tools", "forbidden", 403);
        }
        Ok(())
    }

    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        match next.run(ctx).await {
            Err(Control::Error(e)) if e.is_retryable() => next.run(ctx).await,
            other => other,
        }
    }
}

fn main() {
    assert_eq!(
        Slow.stages(),
        StageSet::of(&[Stage::WillAuthorize, Stage::AroundExecute])
    );
    // An `async fn` may not finish at once; `around_execute` never counts as synchronous.
    // The stages left to the trait's default methods do: those finish at once.
    let synchronous = Slow.synchronous_stages();
    assert!(!synchronous.contains(Stage::WillAuthorize));
    assert!(!synchronous.contains(Stage::AroundExecute));
    assert!(synchronous.contains(Stage::WillAudit));
    assert_eq!(
        synchronous.union(Slow.stages()),
        StageSet::ALL,
        "every stage but the two written ones is synchronous"
    );
}
