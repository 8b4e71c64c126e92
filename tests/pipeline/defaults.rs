//! The trait's default stage methods: a hand-written hook that keeps them is found out at
//! its first call and runs in place from then on, and nothing else is taken for a default —
//! not a hook that hands back another hook's default, nor one that hands back its own
//! default of another stage, nor a wrapper forwarding either — so a hook that answers at
//! once on one call and waits on the next is awaited, never refused as a hook that broke
//! its word.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use toolgate::core::hook::HookFuture;
use toolgate::core::stage::StageSet;
use toolgate::core::{Hook, Stage::*, ToolInvokeContext};
use toolgate_test::{ScriptedTool, TestPipeline};

use crate::{TOOL, input, options};

/// A hand-written hook at `will_authorize` that keeps the trait's default method there.
struct KeepsDefaults;

impl Hook for KeepsDefaults {
    fn stages(&self) -> StageSet {
        StageSet::of(&[WillAuthorize])
    }
}

/// Which default method a [`Switching`] hook hands back while it answers at once.
enum AtOnce {
    /// `will_authorize` of the hook it holds.
    AnotherHooksDefault(KeepsDefaults),
    /// Its own `will_audit`, which it keeps.
    OwnDefaultOfAnotherStage,
    /// `will_authorize` of the hook it holds in a `Box<dyn Hook>` — the same wrapper type the
    /// test registers this hook in.
    AnotherBoxedHooksDefault(Box<dyn Hook>),
}

/// Until `wait` is set, what `will_authorize` hands back comes from a default method; after,
/// it waits a turn of the runtime and refuses the call.
struct Switching {
    at_once: AtOnce,
    wait: Arc<AtomicBool>,
    waited: Arc<AtomicUsize>,
}

impl Hook for Switching {
    fn stages(&self) -> StageSet {
        StageSet::of(&[WillAuthorize])
    }

    fn will_authorize<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        if !self.wait.load(Ordering::SeqCst) {
            return match &self.at_once {
                AtOnce::AnotherHooksDefault(inner) => inner.will_authorize(ctx),
                AtOnce::OwnDefaultOfAnotherStage => self.will_audit(ctx),
                AtOnce::AnotherBoxedHooksDefault(inner) => inner.will_authorize(ctx),
            };
        }
        HookFuture::new(async move {
            tokio::task::yield_now().await;
            self.waited.fetch_add(1, Ordering::SeqCst);
            ctx.abort("refused after a wait", "waited", 403)
        })
    }
}

/// Calls the tool of a [`Switching`] hook three times answering at once, then once
/// waiting: the last call must be refused by the hook itself, after its wait. The hook is
/// registered as it is, or in a `Box<dyn Hook>` when `boxed`.
async fn answers_at_once_then_waits(at_once: AtOnce, boxed: bool) {
    let (wait, waited) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let hook = Switching {
        at_once,
        wait: wait.clone(),
        waited: waited.clone(),
    };
    let pipeline = TestPipeline::new().tool(ScriptedTool::new(TOOL));
    let pipeline = if boxed {
        pipeline.hook(Box::new(hook) as Box<dyn Hook>)
    } else {
        pipeline.hook(hook)
    }
    .build();
    for _ in 0..3 {
        pipeline.invoke(TOOL, input(), options()).await.unwrap();
    }
    wait.store(true, Ordering::SeqCst);
    let refused = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();
    assert_eq!(refused.code(), "waited", "{refused}");
    assert_eq!(waited.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_hand_written_hook_keeping_its_defaults_runs_every_call() {
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(KeepsDefaults)
        .build();
    // The first call finds the default out; the later ones run the stage in place.
    for _ in 0..3 {
        pipeline.invoke(TOOL, input(), options()).await.unwrap();
    }
}

#[tokio::test]
async fn a_hook_handing_back_another_hooks_default_is_awaited_when_it_later_waits() {
    answers_at_once_then_waits(AtOnce::AnotherHooksDefault(KeepsDefaults), false).await;
}

#[tokio::test]
async fn a_hook_handing_back_its_own_default_of_another_stage_is_awaited_when_it_later_waits() {
    answers_at_once_then_waits(AtOnce::OwnDefaultOfAnotherStage, false).await;
}

#[tokio::test]
async fn a_boxed_hook_handing_back_another_boxed_hooks_default_is_awaited_when_it_later_waits() {
    // The box this hook is registered in forwards its answer, and the box inside it answers
    // for its own default: neither may make the outer box look as if it kept its default.
    let inner: Box<dyn Hook> = Box::new(KeepsDefaults);
    answers_at_once_then_waits(AtOnce::AnotherBoxedHooksDefault(inner), true).await;
}
