//! Guards held by hook instance: two stacked instances of one hook keep their own.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolgate::core::external::TypeMapKey;
use toolgate::core::{Hook, HookResult, ToolInvokeContext, hook};
use toolgate_test::assert_stacks_twice;

/// A concurrency cap that keeps its permit by instance, as `docs/writing-hooks.md` teaches.
struct InFlightLimit {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl InFlightLimit {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(InFlightLimit {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        })
    }

    fn in_use(&self) -> usize {
        self.limit - self.permits.available_permits()
    }
}

#[hook]
impl Hook for InFlightLimit {
    fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            return ctx.abort("too many calls at once", "busy", 503);
        };
        ctx.hold(self, permit);
        Ok(())
    }

    fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.release::<OwnedSemaphorePermit>(self);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn two_instances_holding_by_instance_stack_cleanly() {
    assert_stacks_twice(
        InFlightLimit::new(10),
        InFlightLimit::new(2),
        InFlightLimit::in_use,
    )
    .await;
}

/// The same cap written the way the old guide taught: the permit kept in the scratchpad
/// under a key of its type, so a second instance's insert drops the first one's permit.
struct TypeKeyedLimit {
    permits: Arc<Semaphore>,
    limit: usize,
}

struct Permit;

impl TypeMapKey for Permit {
    type Value = OwnedSemaphorePermit;
}

#[hook]
impl Hook for TypeKeyedLimit {
    fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            return ctx.abort("too many calls at once", "busy", 503);
        };
        ctx.scratch_mut().insert::<Permit>(permit);
        Ok(())
    }

    fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.scratch_mut().remove::<Permit>();
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "the first instance held nothing while the tool ran")]
async fn the_kit_catches_guards_kept_under_a_key_of_their_type() {
    let limit = |n| {
        Arc::new(TypeKeyedLimit {
            permits: Arc::new(Semaphore::new(n)),
            limit: n,
        })
    };
    assert_stacks_twice(limit(10), limit(2), |h: &TypeKeyedLimit| {
        h.limit - h.permits.available_permits()
    })
    .await;
}

#[tokio::test]
async fn what_an_instance_holds_is_its_own_until_it_releases_it() {
    let (first, second) = (InFlightLimit::new(1), InFlightLimit::new(1));
    let (a, b) = (Arc::clone(&first), Arc::clone(&second));
    let check =
        toolgate::core::hook::hook_fn_sync(toolgate::core::Stage::WillExecute, move |ctx| {
            let permit = |limit: &InFlightLimit| Arc::clone(&limit.permits).try_acquire_owned();
            ctx.hold(&*a, permit(&a).expect("a permit is free"));
            ctx.hold(&*b, permit(&b).expect("a permit is free"));
            assert!(ctx.held::<OwnedSemaphorePermit>(&*a).is_some());
            assert!(
                ctx.held::<u32>(&*a).is_none(),
                "guards are told apart by type too"
            );
            assert_eq!(ctx.release::<OwnedSemaphorePermit>(&*a), 1);
            assert_eq!((a.in_use(), b.in_use()), (0, 1));
            assert!(ctx.held::<OwnedSemaphorePermit>(&*a).is_none());
            assert_eq!(ctx.release::<OwnedSemaphorePermit>(&*a), 0);
            Ok(())
        });
    let pipeline = toolgate_test::TestPipeline::new()
        .tool(toolgate_test::ScriptedTool::returning(
            "t",
            serde_json::json!(1),
        ))
        .hook(check)
        .build();
    let out = pipeline
        .invoke(
            "t",
            serde_json::json!({}),
            toolgate::core::InvokeOptions::new(),
        )
        .await;
    assert_eq!(out.unwrap(), serde_json::json!(1));
    // What `second` still held went with the context.
    assert_eq!((first.in_use(), second.in_use()), (0, 0));
}
