//! The [`Hook`] trait: how policy code plugs into the stages of the pipeline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::pipeline::{ToolEntry, execute_once};
use crate::plan::PlannedHook;
use crate::{HookResult, ProviderRequirement, Stage, StageSet, ToolInvokeContext};

/// The future a stage method returns.
///
/// A hook whose work is synchronous returns a ready value and pays no allocation:
/// `HookFuture::ok()`, or `ctx.abort(…).into()`. A hook that awaits wraps its async block
/// with [`HookFuture::new`], which boxes it once.
#[must_use = "a hook future does nothing unless awaited"]
pub struct HookFuture<'a>(Inner<'a>);

enum Inner<'a> {
    Ready(Option<HookResult>),
    Boxed(Pin<Box<dyn Future<Output = HookResult> + Send + 'a>>),
}

impl<'a> HookFuture<'a> {
    /// A future that is already done with `Ok(())`: let the pipeline continue.
    pub fn ok() -> Self {
        HookFuture(Inner::Ready(Some(Ok(()))))
    }

    /// A future that is already done with `result`.
    pub fn ready(result: HookResult) -> Self {
        HookFuture(Inner::Ready(Some(result)))
    }

    /// Wraps async work.
    pub fn new(future: impl Future<Output = HookResult> + Send + 'a) -> Self {
        HookFuture(Inner::Boxed(Box::pin(future)))
    }

    /// Whether this future is already done with `Ok(())`: the common answer of a
    /// synchronous hook, which the pipeline takes without moving the result out.
    #[inline]
    pub(crate) fn is_ready_ok(&self) -> bool {
        matches!(self.0, Inner::Ready(Some(Ok(()))))
    }

    /// The result, when the future is already done (a synchronous hook); the future back
    /// otherwise. The pipeline takes a ready result without polling.
    #[inline]
    pub(crate) fn into_ready(self) -> Result<HookResult, Self> {
        match self.0 {
            Inner::Ready(Some(result)) => Ok(result),
            inner => Err(HookFuture(inner)),
        }
    }
}

impl From<HookResult> for HookFuture<'_> {
    fn from(result: HookResult) -> Self {
        HookFuture::ready(result)
    }
}

impl Future for HookFuture<'_> {
    type Output = HookResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<HookResult> {
        match &mut self.0 {
            Inner::Ready(result) => Poll::Ready(
                result
                    .take()
                    .expect("a HookFuture must not be polled after it completed"),
            ),
            Inner::Boxed(future) => future.as_mut().poll(cx),
        }
    }
}

/// What a hook's own failure means for the call. Chosen by the hook's owner when it is
/// registered ([`HookOptions`]), so a new policy can be tried in shadow first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailureMode {
    /// Every outcome of the hook applies: a failure fails the call. The default.
    #[default]
    FailCall,
    /// A failure of the hook (an error that is not a decision, or a panic in its code) is
    /// logged and the call goes on; its decisions (respond, abort, retry-after, suspend)
    /// still apply. (A panic in an `around_execute` wrapper fails the call in every mode.)
    Ignore,
    /// Audit (shadow) mode: every outcome is recorded in the decision trace and logged, and
    /// none is applied; a panic in the hook's code is recorded as an `internal` failure.
    Audit,
}

/// How a hook is registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookOptions {
    /// What the hook's failure means.
    pub failure: FailureMode,
    /// Overrides [`Hook::priority`].
    pub priority: Option<i32>,
}

impl HookOptions {
    /// Options with this failure mode.
    pub fn failure(failure: FailureMode) -> Self {
        HookOptions {
            failure,
            priority: None,
        }
    }

    /// The same options with a priority override.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// The rest of the execution chain, handed to [`Hook::around_execute`].
///
/// Call [`run`](Next::run) zero times to short-circuit, once to wrap, or several times to
/// retry: each call runs the inner `around_execute` wrappers, then `on_retry` (from the
/// second attempt on), `will_execute`, the tool and `did_execute`.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    pub(crate) chain: &'a [PlannedHook],
    pub(crate) entry: &'a ToolEntry,
}

impl<'a> Next<'a> {
    /// Runs the rest of the chain.
    pub fn run<'b>(self, ctx: &'b mut ToolInvokeContext) -> HookFuture<'b>
    where
        'a: 'b,
    {
        let mut chain = self.chain;
        while let Some((first, rest)) = chain.split_first() {
            if first.hook.filter(ctx) {
                let next = Next {
                    chain: rest,
                    entry: self.entry,
                };
                return first.hook.around_execute(ctx, next);
            }
            chain = rest;
        }
        HookFuture::new(execute_once(self.entry, ctx))
    }
}

macro_rules! for_each_stage_method {
    ($callback:ident) => {
        $callback! {
            will_create_invoke_context => WillCreateInvokeContext,
            did_create_invoke_context => DidCreateInvokeContext,
            will_bind_providers => WillBindProviders,
            will_authorize => WillAuthorize,
            will_check_consent => WillCheckConsent,
            will_check_feature_flags => WillCheckFeatureFlags,
            will_acquire_quota => WillAcquireQuota,
            will_acquire_semaphore => WillAcquireSemaphore,
            will_parse_input => WillParseInput,
            will_validate_input => WillValidateInput,
            will_normalize_input => WillNormalizeInput,
            will_redact_input => WillRedactInput,
            will_inject_secrets => WillInjectSecrets,
            will_read_cache => WillReadCache,
            did_cache_hit => DidCacheHit,
            did_cache_miss => DidCacheMiss,
            on_retry => OnRetry,
            will_execute => WillExecute,
            did_execute => DidExecute,
            on_give_up => OnGiveUp,
            will_write_cache => WillWriteCache,
            will_redact_output => WillRedactOutput,
            will_validate_output => WillValidateOutput,
            will_transform_output => WillTransformOutput,
            will_audit => WillAudit,
            did_audit => DidAudit,
            on_metrics => OnMetrics,
            did_release_semaphore => DidReleaseSemaphore,
            did_release_quota => DidReleaseQuota,
            will_finalize_invoke => WillFinalizeInvoke,
            on_error => OnError,
        }
    };
}

macro_rules! declare_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            #[doc = concat!("The `", stringify!($method), "` stage: see [`Stage::", stringify!($stage), "`]. Does nothing unless overridden; list the stage in [`Hook::stages`] when you override it.")]
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                let _ = ctx;
                HookFuture::ok()
            }
        )*
    };
}

macro_rules! forward_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                (**self).$method(ctx)
            }
        )*
    };
}

/// Calls one stage's method of a hook: what a planned hook holds for the stage whose list
/// it is in, so that calling it needs no `match` on the stage.
pub(crate) type StageMethod = for<'a> fn(&'a dyn Hook, &'a mut ToolInvokeContext) -> HookFuture<'a>;

macro_rules! dispatch_stage {
    ($($method:ident => $stage:ident,)*) => {
        /// The [`StageMethod`] of `stage`. `around_execute` has its own signature and is
        /// called through [`Next`]; its entry answers `Ok`.
        pub(crate) fn stage_method(stage: Stage) -> StageMethod {
            $(
                fn $method<'a>(hook: &'a dyn Hook, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                    hook.$method(ctx)
                }
            )*
            fn around_execute<'a>(_: &'a dyn Hook, _: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                HookFuture::ok()
            }
            match stage {
                $(Stage::$stage => $method,)*
                Stage::AroundExecute => around_execute,
            }
        }
    };
}

/// Policy code that runs at the stages of the pipeline.
///
/// # The contract
///
/// A hook has one method per stage, each with a default that does nothing, plus
/// [`around_execute`](Hook::around_execute). It implements the stages it cares about and
/// **lists them in [`stages`](Hook::stages)**: plans are compiled from that list when the
/// pipeline is built, so the pipeline never calls a hook for a stage it did not list, and
/// never calls a method it did not override for nothing.
///
/// A stage method returns `Ok(())` to let the pipeline go on, or a
/// [`Control`](crate::Control) — respond, abort, retry-after, suspend, or a failure —
/// which ends the stage at once; no later hook at that stage sees it.
///
/// Order: a higher [`priority`](Hook::priority) runs first at `will_*`, `on_*` and
/// `around_execute` stages and last at `did_*` stages, so acquire and release nest like
/// brackets. Ties keep registration order, global hooks before per-tool hooks.
///
/// One instance serves every invocation (it is shared, never built per call): keep
/// per-call state in the context's [scratchpad](ToolInvokeContext::scratch_mut).
///
/// # Examples
///
/// A synchronous check that allocates nothing:
///
/// ```
/// use toolgate_core::{Hook, HookFuture, Stage, StageSet, ToolInvokeContext};
///
/// struct DenyGuests;
///
/// impl Hook for DenyGuests {
///     fn stages(&self) -> StageSet {
///         StageSet::of(&[Stage::WillAuthorize])
///     }
///
///     fn will_authorize<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
///         if ctx.user().has_role("guest") {
///             return ctx.abort("guests may not call tools", "forbidden", 403).into();
///         }
///         HookFuture::ok()
///     }
/// }
/// ```
///
/// An async stage, and a wrapper around execution that retries once:
///
/// ```
/// use toolgate_core::{Control, Hook, HookFuture, Next, Stage, StageSet, ToolInvokeContext};
///
/// struct RetryOnce;
///
/// impl Hook for RetryOnce {
///     fn stages(&self) -> StageSet {
///         StageSet::of(&[Stage::AroundExecute, Stage::WillAudit])
///     }
///
///     fn around_execute<'a>(&'a self, ctx: &'a mut ToolInvokeContext, next: Next<'a>) -> HookFuture<'a> {
///         HookFuture::new(async move {
///             match next.run(ctx).await {
///                 Err(Control::Error(e)) if e.is_retryable() => next.run(ctx).await,
///                 other => other,
///             }
///         })
///     }
///
///     fn will_audit<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
///         HookFuture::new(async move {
///             tokio::task::yield_now().await;
///             tracing::info!(tool = ctx.tool_name(), attempts = ctx.attempt(), "audited");
///             Ok(())
///         })
///     }
/// }
/// ```
pub trait Hook: Send + Sync + 'static {
    /// The stages this hook implements. Include [`Stage::AroundExecute`] when overriding
    /// [`around_execute`](Hook::around_execute).
    fn stages(&self) -> StageSet;

    /// A name for logs, decision traces and plan listings.
    fn name(&self) -> &str {
        std::any::type_name::<Self>()
    }

    /// Higher runs first at `will_*`, `on_*` and `around_execute`; later at `did_*`.
    fn priority(&self) -> i32 {
        0
    }

    /// Whether the hook takes part in this invocation (checked before each of its stages).
    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        let _ = ctx;
        true
    }

    /// Providers this hook needs. Building the pipeline fails when one is neither bound
    /// globally nor listed by some hook's [`provided_providers`](Hook::provided_providers).
    fn required_providers(&self) -> Vec<ProviderRequirement> {
        Vec::new()
    }

    /// Providers this hook binds per call (in `will_bind_providers`).
    fn provided_providers(&self) -> Vec<ProviderRequirement> {
        Vec::new()
    }

    /// Whether this hook reads [`ToolInvokeContext::stage_durations`] (an audit hook, say).
    /// The pipeline then records stage durations for every tool this hook serves,
    /// as [`PipelineBuilder::record_stage_durations`](crate::PipelineBuilder::record_stage_durations)
    /// does for all tools. The default, `false`, keeps the clock out of the stages.
    fn wants_stage_durations(&self) -> bool {
        false
    }

    /// Wraps execution. Call `next.run(ctx)` zero times (short-circuit), once, or several
    /// times (retry). The default calls it once.
    fn around_execute<'a>(
        &'a self,
        ctx: &'a mut ToolInvokeContext,
        next: Next<'a>,
    ) -> HookFuture<'a> {
        next.run(ctx)
    }

    for_each_stage_method!(declare_stage_methods);
}

macro_rules! forward_hook {
    ($ty:ty) => {
        impl<H: Hook + ?Sized> Hook for $ty {
            fn stages(&self) -> StageSet {
                (**self).stages()
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn priority(&self) -> i32 {
                (**self).priority()
            }
            fn filter(&self, ctx: &ToolInvokeContext) -> bool {
                (**self).filter(ctx)
            }
            fn required_providers(&self) -> Vec<ProviderRequirement> {
                (**self).required_providers()
            }
            fn provided_providers(&self) -> Vec<ProviderRequirement> {
                (**self).provided_providers()
            }
            fn wants_stage_durations(&self) -> bool {
                (**self).wants_stage_durations()
            }
            fn around_execute<'a>(
                &'a self,
                ctx: &'a mut ToolInvokeContext,
                next: Next<'a>,
            ) -> HookFuture<'a> {
                (**self).around_execute(ctx, next)
            }
            for_each_stage_method!(forward_stage_methods);
        }
    };
}

forward_hook!(Box<H>);
forward_hook!(Arc<H>);

for_each_stage_method!(dispatch_stage);
