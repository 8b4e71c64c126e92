//! Hooks of one stage from a closure: [`hook_fn`] and [`hook_fn_sync`], the way
//! [`tool_fn`](crate::tool_fn) makes a tool.

use std::borrow::Cow;

use super::{Hook, HookFuture};
use crate::context::ToolInvokeContext;
use crate::control::HookResult;
use crate::stage::{Stage, StageSet};

/// A hook that runs one closure at one stage. Made by [`hook_fn`] or [`hook_fn_sync`].
pub struct FnHook<F> {
    stage: Stage,
    run: F,
    name: Cow<'static, str>,
    priority: i32,
}

impl<F> FnHook<F> {
    fn new(stage: Stage, run: F) -> Self {
        assert!(
            stage != Stage::AroundExecute,
            "a closure hook cannot wrap execution, because it is not handed the rest of the \
             chain: write `async fn around_execute` in a `#[hook] impl Hook` block instead"
        );
        FnHook {
            stage,
            run,
            name: Cow::Borrowed(stage.name()),
            priority: 0,
        }
    }

    /// The same hook under this name (in logs, decision traces and plan listings; the
    /// default is the stage's name).
    #[must_use]
    pub fn named(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = name.into();
        self
    }

    /// The same hook with this [priority](Hook::priority).
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The stage the closure runs at.
    pub fn stage(&self) -> Stage {
        self.stage
    }
}

/// A hook that runs `run` at `stage`: the closure form of a one-stage hook, as axum's
/// `from_fn` is for middleware.
///
/// The closure returns a [`HookFuture`]: `HookFuture::new(async move { … })` for work that
/// awaits (boxed once per call), or a ready result with `.into()`, which allocates
/// nothing. The async block is wrapped by hand because a Rust closure cannot yet say that
/// the future it returns borrows its argument; for a closure that never awaits,
/// [`hook_fn_sync`] reads better.
///
/// # Panics
///
/// When `stage` is [`Stage::AroundExecute`]: a wrapper needs the rest of the chain, which
/// a closure of the context alone is not given. Write `async fn around_execute` under
/// [`#[hook]`](macro@crate::hook) instead.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::hook::{hook_fn, HookFuture};
/// use toolgate_core::{Pipeline, Stage};
///
/// let slow_down = hook_fn(Stage::WillExecute, |ctx| {
///     HookFuture::new(async move {
///         if ctx.user().has_role("trial") {
///             tokio::time::sleep(Duration::from_millis(10)).await;
///         }
///         Ok(())
///     })
/// });
/// let pipeline = Pipeline::builder().hook(slow_down.named("trial_delay")).build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
pub fn hook_fn<F>(stage: Stage, run: F) -> FnHook<AsyncStage<F>>
where
    F: for<'a> Fn(&'a mut ToolInvokeContext) -> HookFuture<'a> + Send + Sync + 'static,
{
    FnHook::new(stage, AsyncStage(run))
}

/// A hook that runs the synchronous closure `run` at `stage`: its result is ready at once,
/// and the call allocates nothing.
///
/// # Panics
///
/// When `stage` is [`Stage::AroundExecute`] (see [`hook_fn`]).
///
/// # Examples
///
/// ```
/// use toolgate_core::hook::hook_fn_sync;
/// use toolgate_core::{Pipeline, Stage};
///
/// let deny_guests = hook_fn_sync(Stage::WillAuthorize, |ctx| {
///     if ctx.user().has_role("guest") {
///         return ctx.abort("guests may not call tools", "forbidden", 403);
///     }
///     Ok(())
/// });
/// let pipeline = Pipeline::builder().hook(deny_guests.with_priority(100)).build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
pub fn hook_fn_sync<F>(stage: Stage, run: F) -> FnHook<SyncStage<F>>
where
    F: Fn(&mut ToolInvokeContext) -> HookResult + Send + Sync + 'static,
{
    FnHook::new(stage, SyncStage(run))
}

/// The closure of a [`hook_fn`] hook.
pub struct AsyncStage<F>(F);

/// The closure of a [`hook_fn_sync`] hook.
pub struct SyncStage<F>(F);

/// Runs a closure hook's closure.
pub trait StageClosure: Send + Sync + 'static {
    /// Calls the closure with the context.
    fn call<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a>;

    /// Whether [`call`](Self::call) always returns a ready future.
    const SYNCHRONOUS: bool = false;
}

impl<F> StageClosure for AsyncStage<F>
where
    F: for<'a> Fn(&'a mut ToolInvokeContext) -> HookFuture<'a> + Send + Sync + 'static,
{
    fn call<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        (self.0)(ctx)
    }
}

impl<F> StageClosure for SyncStage<F>
where
    F: Fn(&mut ToolInvokeContext) -> HookResult + Send + Sync + 'static,
{
    fn call<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        HookFuture::ready((self.0)(ctx))
    }

    const SYNCHRONOUS: bool = true;
}

macro_rules! closure_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                // Only the hook's own stage is in its plan; this guards direct calls.
                if self.stage == Stage::$stage {
                    self.run.call(ctx)
                } else {
                    HookFuture::ok()
                }
            }
        )*
    };
}

impl<C: StageClosure> Hook for FnHook<C> {
    fn stages(&self) -> StageSet {
        self.stage.into()
    }

    fn synchronous_stages(&self) -> StageSet {
        if C::SYNCHRONOUS {
            self.stage.into()
        } else {
            StageSet::EMPTY
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn interest(&self, _tool: &crate::definition::ToolDefinition) -> super::Interest {
        super::Interest::always()
    }

    toolgate_macros::__stage_methods!(closure_stage_methods);
}
