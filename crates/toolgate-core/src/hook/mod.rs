//! The [`Hook`] trait: how policy code plugs into the stages of the pipeline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::context::ToolInvokeContext;
use crate::control::HookResult;
use crate::provider::ProviderRequirement;
use crate::stage::{Stage, StageSet};

mod closure;

pub use closure::{AsyncStage, FnHook, StageClosure, SyncStage, hook_fn, hook_fn_sync};

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

/// A hook as it is registered: the hook, its [options](HookOptions), and the tool it is
/// for (every tool unless [`for_tool`](Self::for_tool) names one). What
/// [`PipelineBuilder::hook`](crate::pipeline::PipelineBuilder::hook) takes; any hook converts
/// into one with default options.
///
/// ```
/// use std::sync::Arc;
/// use toolgate_core::hook::{FailureMode, HookRegistration};
/// use toolgate_core::prelude::*;
///
/// struct Audit;
/// #[hook]
/// impl Hook for Audit {
///     fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult { Ok(()) }
/// }
///
/// let shared: Arc<dyn Hook> = Arc::new(Audit);
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     // Every tool, default options.
///     .hook(Audit)
///     // One tool, in shadow mode, before the others.
///     .hook(HookRegistration::new(Audit).for_tool("ping").failure(FailureMode::Audit).priority(100))
///     // One instance shared with other pipelines.
///     .hook(HookRegistration::shared(shared))
///     .build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
#[derive(Clone)]
#[must_use = "a registration does nothing until it is passed to `PipelineBuilder::hook`"]
pub struct HookRegistration {
    pub(crate) hook: Arc<dyn Hook>,
    pub(crate) options: HookOptions,
    pub(crate) tool: Option<String>,
}

impl HookRegistration {
    /// Registers `hook` for every tool with default options. An `Arc<dyn Hook>` passed here
    /// is kept as it is, not wrapped once more.
    pub fn new<H: Hook>(hook: H) -> Self {
        let mut slot = Some(hook);
        let any: &mut dyn std::any::Any = &mut slot;
        let hook = match any.downcast_mut::<Option<Arc<dyn Hook>>>() {
            Some(shared) => shared.take(),
            None => None,
        };
        HookRegistration::shared(hook.unwrap_or_else(|| {
            Arc::new(slot.expect("the hook is still in its slot unless it was shared"))
        }))
    }

    /// Registers an instance shared with other pipelines or registrations.
    pub fn shared(hook: Arc<dyn Hook>) -> Self {
        HookRegistration {
            hook,
            options: HookOptions::default(),
            tool: None,
        }
    }

    /// Only for the tool named `tool` (which [`build`](crate::pipeline::PipelineBuilder::build)
    /// checks is registered).
    pub fn for_tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// What the hook's failure means for the call.
    pub fn failure(mut self, failure: FailureMode) -> Self {
        self.options.failure = failure;
        self
    }

    /// Overrides [`Hook::priority`].
    pub fn priority(mut self, priority: i32) -> Self {
        self.options.priority = Some(priority);
        self
    }

    /// Sets every option at once.
    pub fn options(mut self, options: HookOptions) -> Self {
        self.options = options;
        self
    }

    /// The hook registered.
    pub fn hook(&self) -> &Arc<dyn Hook> {
        &self.hook
    }

    /// Its options.
    pub fn registered_options(&self) -> HookOptions {
        self.options
    }

    /// The tool it is for, or `None` for every tool.
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }
}

/// Anything [`PipelineBuilder::hook`](crate::pipeline::PipelineBuilder::hook) takes: a
/// [`Hook`] (for every tool, default options) or a [`HookRegistration`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a toolgate hook",
    label = "this needs `impl Hook for {Self}`",
    note = "write the stage methods under `#[hook] impl Hook for {Self} {{ … }}`, or use `hook_fn` for a hook of one stage; `HookRegistration::new(hook)` adds options"
)]
pub trait IntoHook {
    /// The hook as it is registered.
    fn into_registration(self) -> HookRegistration;
}

impl<H: Hook> IntoHook for H {
    fn into_registration(self) -> HookRegistration {
        HookRegistration::new(self)
    }
}

impl IntoHook for HookRegistration {
    fn into_registration(self) -> HookRegistration {
        self
    }
}

impl std::fmt::Debug for HookRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRegistration")
            .field("hook", &self.hook.name())
            .field("options", &self.options)
            .field("tool", &self.tool)
            .finish()
    }
}

/// The rest of the execution chain, handed to [`Hook::around_execute`].
///
/// Call [`run`](Next::run) zero times to short-circuit, once to wrap, or several times to
/// retry: each call runs the inner `around_execute` wrappers, then `on_retry` (from the
/// second attempt on), `will_execute`, the tool and `did_execute`.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    chain: &'a dyn ExecutionChain,
    /// The index of the next wrapper to consider.
    next: usize,
}

/// The `around_execute` wrappers of one tool, outermost first, and the attempt they wrap.
/// The engine implements it; [`Next`] walks it.
pub(crate) trait ExecutionChain: Sync {
    /// The wrapper at `index`, or `None` past the innermost.
    fn wrapper(&self, index: usize) -> Option<&dyn Hook>;

    /// One attempt: `on_retry` (from the second on), `will_execute`, the tool,
    /// `did_execute`.
    fn attempt<'c>(&'c self, ctx: &'c mut ToolInvokeContext) -> HookFuture<'c>;
}

impl<'a> Next<'a> {
    /// The whole chain of `chain`, from its outermost wrapper.
    pub(crate) fn new(chain: &'a dyn ExecutionChain) -> Self {
        Next { chain, next: 0 }
    }

    /// Runs the rest of the chain: the next wrapper whose filter lets this call through,
    /// or the attempt when none is left.
    pub fn run<'b>(self, ctx: &'b mut ToolInvokeContext) -> HookFuture<'b>
    where
        'a: 'b,
    {
        let mut index = self.next;
        while let Some(wrapper) = self.chain.wrapper(index) {
            index += 1;
            if wrapper.filter(ctx) {
                let next = Next {
                    chain: self.chain,
                    next: index,
                };
                return wrapper.around_execute(ctx, next);
            }
        }
        self.chain.attempt(ctx)
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

pub(crate) use for_each_stage_method;

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
/// A hook has one method per [stage](Stage), each with a default that does nothing, plus
/// [`around_execute`](Hook::around_execute). Write the impl block under
/// [`#[hook]`](macro@crate::hook): it lists the stages from the methods you wrote, so a method
/// you implement always runs and a stage you did not implement costs nothing. Plans are
/// compiled from [`stages`](Hook::stages) when the pipeline is built; the pipeline never
/// calls a hook at a stage outside that set.
///
/// A stage method returns `Ok(())` to let the pipeline go on, or a [`Control`](crate::Control) — respond,
/// abort, retry-after, suspend, or a failure — which ends the stage at once: no later hook
/// at that stage sees it. What each outcome means depends on the stage; every method below
/// says so.
///
/// Order: a higher [`priority`](Hook::priority) runs first at `will_*`, `on_*` and
/// `around_execute` stages and last at `did_*` stages, so acquire and release nest like
/// brackets. Ties keep registration order, global hooks before per-tool hooks.
///
/// One instance serves every invocation (it is shared, never built per call): keep
/// per-call state in the context's [scratchpad](ToolInvokeContext::scratch_mut), and what
/// the call holds until its release stage with [`ToolInvokeContext::hold`].
///
/// # Writing stage methods
///
/// Under `#[hook]` a stage method is written the way you would write any method:
///
/// * `fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult` — synchronous:
///   the result is ready at once, nothing is allocated, no future is polled;
/// * `async fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult` — may
///   await; its future is boxed once per call;
/// * `async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult`.
///
/// Without the macro, or for a method that picks between ready and boxed work itself, a
/// stage method has the trait's own signature and returns a [`HookFuture`]
/// (`HookFuture::ok()`, `ctx.abort(…).into()`, or `HookFuture::new(async move { … })`);
/// `#[hook]` accepts that form too.
///
/// # When to write `stages` by hand
///
/// Only when the set depends on how the hook was configured — a hook that releases at
/// `did_release_quota` only when it was built to hold, say. List a subset of the
/// methods you implemented: `#[hook]` then leaves your `stages` alone. A hook written
/// without `#[hook]` must write `stages`, and must keep it in step with its methods by
/// hand: a method it leaves out of the list never runs.
///
/// # Examples
///
/// A deny list, synchronous and allocation-free:
///
/// ```
/// use toolgate_core::{hook, Hook, HookResult, ToolInvokeContext};
///
/// struct DenyList(Vec<String>);
///
/// #[hook]
/// impl Hook for DenyList {
///     fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
///         if self.0.iter().any(|id| *id == ctx.user().id) {
///             return ctx.abort("you may not call tools", "forbidden", 403);
///         }
///         Ok(())
///     }
/// }
/// ```
///
/// An async stage, and a wrapper around execution that retries once:
///
/// ```
/// use toolgate_core::{hook, Control, Hook, HookResult, Next, ToolInvokeContext};
///
/// struct RetryOnce;
///
/// #[hook]
/// impl Hook for RetryOnce {
///     async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
///         match next.run(ctx).await {
///             Err(Control::Error(e)) if e.is_retryable() => next.run(ctx).await,
///             other => other,
///         }
///     }
///
///     async fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
///         tokio::task::yield_now().await;
///         tracing::info!(tool = ctx.tool_name(), attempts = ctx.attempt(), "audited");
///         Ok(())
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a toolgate hook",
    label = "this needs `impl Hook for {Self}`",
    note = "write the stage methods under `#[hook] impl Hook for {Self} {{ … }}`, or use `hook_fn` for a hook of one stage"
)]
pub trait Hook: Send + Sync + 'static {
    /// The stages this hook takes part in. `#[hook]` writes this method from the stage
    /// methods of the impl block (with [`Stage::AroundExecute`] when it defines
    /// [`around_execute`](Hook::around_execute)); write it yourself only to narrow the set
    /// by configuration (see the trait's documentation).
    fn stages(&self) -> StageSet;

    /// The stages whose methods always finish at once — return a ready [`HookFuture`] — so
    /// the pipeline calls them without making a future of its own. `#[hook]` writes this
    /// method: every stage except `around_execute` and those whose method is written as an
    /// `async fn` or returns a [`HookFuture`] (a plain `fn` and the trait's default method
    /// both finish at once); when a macro inside the block writes methods it cannot see,
    /// only the plain `fn`s it sees. A hand-written impl keeps the default (none), which is always
    /// correct, and costs a future per stage it takes part in (no allocation: its method is
    /// still called in place, and awaited only when its future is not ready); list the stages whose
    /// methods return [`HookFuture::ok`] or [`HookFuture::ready`] to save it. Listing a stage whose method does not
    /// finish at once is a bug in the hook: the call fails at that stage with an `internal`
    /// error that names it.
    fn synchronous_stages(&self) -> StageSet {
        StageSet::EMPTY
    }

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
    /// Under `#[hook]`, `#[requires(Key, …)]` on the impl block or on a method writes it.
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

    /// Phase 1, the first stage of every invocation.
    ///
    /// The context holds the call's identity (tool, request id, session id, user), its raw
    /// input, deadline and cancellation token; no provider is bound per call yet.
    ///
    /// * respond — the value becomes the output and the output stages run (no input
    ///   checks, no execution);
    /// * abort or any error — the call fails: `on_error`, then the record and end stages;
    /// * suspend — the call is to wait for a person; as at
    ///   [`will_check_consent`](Hook::will_check_consent), it waits once its input is
    ///   checked and redacted.
    ///
    /// Nothing is acquired here, so no release stage pairs with it.
    fn will_create_invoke_context<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 1: the context exists. A `did_*` stage: hooks run in reverse priority order.
    ///
    /// Holds what [`will_create_invoke_context`](Hook::will_create_invoke_context) holds,
    /// plus whatever its hooks put in the scratchpad or metadata. Outcomes mean the same
    /// as there. No release stage pairs with it.
    fn did_create_invoke_context<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 2: bind request and session providers with
    /// [`ctx.provide`](ToolInvokeContext::provide) (a hook that does lists them in
    /// [`provided_providers`](Hook::provided_providers)).
    ///
    /// Global providers are readable; binding one is an error. Outcomes mean what they
    /// mean at [`will_create_invoke_context`](Hook::will_create_invoke_context); a failed
    /// binding is an error that fails the call. No release stage pairs with it.
    ///
    /// This stage runs again when a suspended call resumes
    /// ([`ctx.resumed()`](ToolInvokeContext::resumed) is set then): request providers
    /// belong to one invocation, and the resumed call is a new one, so what was bound
    /// before the wait is bound again. On resume a hook here may only let the call through
    /// or fail it.
    fn will_bind_providers<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 3: may this caller call this tool?
    ///
    /// The user, the tool's definition (with its annotations) and the raw input are
    /// known, and every provider is bound. Nothing has been acquired yet, so a refusal
    /// here is the cheapest one.
    ///
    /// * abort (`forbidden`, 403) — the call is refused: `on_error`, record, end; the tool
    ///   never runs and no capacity was taken;
    /// * respond — the value is the answer, the output stages run, the tool does not.
    ///
    /// This stage runs again when a suspended call resumes to run or to be completed
    /// ([`ctx.resumed()`](ToolInvokeContext::resumed) is set then), so that access revoked
    /// while the call waited refuses it. Ask for approval at
    /// [`will_check_consent`](Hook::will_check_consent), not here: a suspend or respond on
    /// that second run refuses the call as a hook fault.
    ///
    /// An authorization hook fails closed: when its evaluator errors, it refuses.
    fn will_authorize<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 3: has a person approved this call, where the tool needs approval?
    ///
    /// Runs after authorization, before any capacity is taken (the decision is made here;
    /// a call that is to wait waits later, see below).
    ///
    /// * suspend — the usual answer when no approval is on record. The call does not wait
    ///   at once: it goes on through the capacity and input stages, taking its quota unit
    ///   (a waiting call counts against its caller's limits) and having its input checked
    ///   and redacted, and waits at the end of
    ///   [`will_redact_input`](Hook::will_redact_input), so that what is stored is the call
    ///   the tool would run. A refusal on the way (rate limit, invalid input) fails the
    ///   call instead. The caller gets
    ///   [`ToolError::Suspended`](crate::ToolError::Suspended) (202) with an id; approving
    ///   it authorizes it again and continues after the input stages, rejecting it fails
    ///   the call with `rejected` (403);
    /// * abort — the call is refused without waiting;
    /// * respond — the value is the answer, the tool does not run.
    fn will_check_consent<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 3: is the tool (or this behaviour of it) switched on for this caller?
    ///
    /// * abort (e.g. `disabled`, 404 or 403) — the call is refused;
    /// * respond — a fallback answer instead of the tool's;
    /// * suspend — as at [`will_check_consent`](Hook::will_check_consent).
    ///
    /// Like [`will_authorize`](Hook::will_authorize), this stage runs again when a
    /// suspended call resumes, so a tool switched off while the call waited does not run.
    fn will_check_feature_flags<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 4: take a quota (rate-limit) unit. Paired with
    /// [`did_release_quota`](Hook::did_release_quota).
    ///
    /// Policy has passed. Keep what you take with [`ToolInvokeContext::hold`]: it is then
    /// given back on every path, a dropped call included.
    ///
    /// * retry-after (`rate_limited`, 429) — over the limit: the call fails with the delay;
    /// * abort or error — e.g. a backend that cannot decide, failing closed;
    /// * respond, suspend — as at the policy stages.
    ///
    /// Once this stage is *reached*, `did_release_quota` runs exactly once on every path —
    /// even when an earlier hook here refused before yours ran, so release only what this
    /// call holds.
    fn will_acquire_quota<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 4: take a concurrency permit. Paired with
    /// [`did_release_semaphore`](Hook::did_release_semaphore).
    ///
    /// Outcomes as at [`will_acquire_quota`](Hook::will_acquire_quota). A suspended call
    /// gives its permit back while it waits, and on resume this stage runs again (the
    /// quota unit, taken before the call waited, is not taken twice).
    fn will_acquire_semaphore<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 5: the raw input is about to be checked; reshape raw JSON here
    /// ([`ctx.set_input`](ToolInvokeContext::set_input)), e.g. parse a string that holds
    /// JSON.
    ///
    /// * abort (`invalid_input`, 400) — the input cannot be read;
    /// * respond, suspend — as at the policy stages.
    ///
    /// Capacity is held from here on, and is released on every path.
    fn will_parse_input<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 5: check the input. The tool's own check (serde and garde for a typed tool,
    /// its JSON Schema for a remote one) runs right after this stage's hooks, so a hook
    /// here sees the input before any tool-specific check.
    ///
    /// * abort (`invalid_input`, 400) naming the field — the input is refused;
    /// * respond, suspend — as at the policy stages.
    fn will_validate_input<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 5: the input passed the tool's check; fill defaults and repair unambiguous
    /// mistakes ([`ctx.set_input`](ToolInvokeContext::set_input) keeps the history, and
    /// metadata can say what was repaired).
    ///
    /// Outcomes as at [`will_validate_input`](Hook::will_validate_input).
    fn will_normalize_input<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 5: remove personal data and secrets from the input before the tool, the
    /// cache key and the audit record see it.
    ///
    /// Outcomes as at [`will_validate_input`](Hook::will_validate_input); a redactor that
    /// cannot do its work fails the call rather than let the data through. A call asked
    /// to wait at an earlier stage waits once this stage's hooks are done, with the
    /// redacted input.
    fn will_redact_input<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 5: put the secrets the tool needs into the context's
    /// [secret slot](ToolInvokeContext::secrets_mut), the last stage before the cache.
    ///
    /// Secrets never reach a cache key, a log, an audit record or an error, and their
    /// values are scrubbed from the output. An error here (a vault that cannot be
    /// reached) fails the call; a respond answers without running the tool; a suspend
    /// makes the call wait here at once (its input is already checked and redacted), and
    /// resuming continues after this stage.
    fn will_inject_secrets<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 6: look the call up in a cache. The input is final (checked, normalized,
    /// redacted).
    ///
    /// * respond — a cache hit: the value becomes the output, `did_cache_hit` runs, then
    ///   the output stages (without `will_write_cache`); the tool does not run;
    /// * `Ok(())` from every hook — a miss: `did_cache_miss`, then execution;
    /// * abort or error — the call fails;
    /// * suspend — the call waits here at once; resuming continues after this stage.
    fn will_read_cache<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 6: a hook at [`will_read_cache`](Hook::will_read_cache) responded;
    /// [`ctx.output`](ToolInvokeContext::output) holds the cached value. A `did_*` stage:
    /// hooks run in reverse priority order.
    ///
    /// A respond replaces the output; an error fails the call.
    fn did_cache_hit<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 6: nothing at [`will_read_cache`](Hook::will_read_cache) responded; the tool
    /// is about to run. A `did_*` stage: hooks run in reverse priority order.
    ///
    /// A respond still answers without running the tool; an error fails the call.
    fn did_cache_miss<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 7: wraps execution, outermost (highest priority) first. Call
    /// [`next.run(ctx)`](Next::run) zero times (short-circuit), once (wrap), or several
    /// times (retry): each call runs the inner wrappers, then `on_retry` (from the second
    /// attempt on), `will_execute`, the tool and `did_execute`. The default calls it once.
    ///
    /// What the wrapper returns is the outcome of execution: `Ok(())` with the output in
    /// the context, a respond (the value becomes the output), or an error, which fails the
    /// call (`on_give_up` first when more than one attempt ran). A wrapper's outcome
    /// always applies, whatever its failure mode, and a panic in it fails the call.
    fn around_execute<'a>(
        &'a self,
        ctx: &'a mut ToolInvokeContext,
        next: Next<'a>,
    ) -> HookFuture<'a> {
        next.run(ctx)
    }

    /// Phase 7: an attempt after the first is about to start;
    /// [`ctx.attempt`](ToolInvokeContext::attempt) is its number and
    /// [`ctx.error`](ToolInvokeContext::error) the previous attempt's error.
    ///
    /// * abort or error — this attempt fails at once, and the wrapper that retries decides
    ///   what then;
    /// * respond — the attempt answers without running the tool.
    fn on_retry<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 7: the tool is about to run (once per attempt), with the final input and the
    /// secrets in place.
    ///
    /// * respond — the attempt answers with the value without running the tool; the
    ///   output stages run, without `will_write_cache`;
    /// * abort or error — the attempt fails; a retry wrapper may try again;
    /// * suspend — the call waits; resuming runs the execution phase again.
    fn will_execute<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 7: the tool returned an output, in [`ctx.output`](ToolInvokeContext::output).
    /// A `did_*` stage: hooks run in reverse priority order.
    ///
    /// * respond — replaces the output, which is then not written to a cache;
    /// * abort or error — the attempt fails (a retry wrapper may try again);
    /// * suspend — the call waits; resuming runs the execution phase again.
    fn did_execute<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 7: execution failed after more than one attempt;
    /// [`ctx.error`](ToolInvokeContext::error) is the last attempt's error, and it stands:
    /// `on_error`, record, release and end follow. Log, count or alert here.
    ///
    /// Runs like a tail stage: an outcome returned here (or a panic) is logged and kept in
    /// the decision trace, never applied.
    fn on_give_up<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 8: store a freshly executed output (never after a respond or a cache hit).
    ///
    /// An error fails the call (a cache hook that cannot write should log and go on
    /// instead); a respond replaces the output.
    fn will_write_cache<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 8: remove personal data and secrets from the output, whether it came from the
    /// tool, a cache or a respond.
    ///
    /// * respond — replaces the output and the next output stage runs;
    /// * abort or error — the call fails and the output is not returned;
    /// * suspend — the call waits with its output; resuming continues after this stage.
    fn will_redact_output<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 8: check the output (its schema, its size).
    ///
    /// Outcomes as at [`will_redact_output`](Hook::will_redact_output).
    fn will_validate_output<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 8: reshape the output for the caller, the last stage before the record.
    ///
    /// Outcomes as at [`will_redact_output`](Hook::will_redact_output).
    fn will_transform_output<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 9: write the audit record. Runs on every path — success, error, suspension,
    /// a dropped call — with the outcome settled: [`ctx.output`](ToolInvokeContext::output)
    /// or [`ctx.error`](ToolInvokeContext::error).
    ///
    /// A tail stage: an outcome returned here (or a panic) is logged and kept in the
    /// decision trace, and never replaces the call's outcome. It runs outside the call's
    /// deadline, bounded by the pipeline's tail hook timeout.
    fn will_audit<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 9: the audit record was written. A tail stage, as
    /// [`will_audit`](Hook::will_audit); a `did_*` stage: hooks run in reverse priority
    /// order.
    fn did_audit<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 9: record metrics, on every path. A tail stage, as
    /// [`will_audit`](Hook::will_audit).
    fn on_metrics<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 10: give back the concurrency permit. Runs exactly once when
    /// [`will_acquire_semaphore`](Hook::will_acquire_semaphore) was reached, on every path,
    /// and not at all otherwise; drop what *this call* holds
    /// ([`ToolInvokeContext::release`]) and tolerate finding nothing.
    ///
    /// A tail stage: outcomes are logged, never applied. A `did_*` stage: hooks run in
    /// reverse priority order, so releases nest inside acquires.
    fn did_release_semaphore<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 10: give back (or settle) the quota unit. Runs exactly once when
    /// [`will_acquire_quota`](Hook::will_acquire_quota) was reached, after
    /// `did_release_semaphore`. As [`did_release_semaphore`](Hook::did_release_semaphore)
    /// otherwise.
    fn did_release_quota<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// Phase 11: the last stage of every invocation, exactly once, whatever the path.
    ///
    /// A tail stage: outcomes are logged, never applied. After it the context is dropped,
    /// and with it whatever is still held.
    fn will_finalize_invoke<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }

    /// The error path: the call failed; [`ctx.error`](ToolInvokeContext::error) says why.
    /// Runs once, before the record, release and end stages, and not for a call that waits
    /// ([`ToolError::is_waiting`](crate::ToolError::is_waiting): a suspension, or a tool
    /// that needs the caller's input).
    ///
    /// A tail stage: an error returned here is logged and never replaces the original
    /// error. Change the caller's error with
    /// [`ctx.error_mut`](ToolInvokeContext::error_mut) if you must.
    fn on_error<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::ok()
    }
}

macro_rules! forward_hook {
    ($ty:ty) => {
        impl<H: Hook + ?Sized> Hook for $ty {
            fn stages(&self) -> StageSet {
                (**self).stages()
            }
            fn synchronous_stages(&self) -> StageSet {
                (**self).synchronous_stages()
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

macro_rules! forward_option_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                match self {
                    Some(hook) => hook.$method(ctx),
                    None => HookFuture::ok(),
                }
            }
        )*
    };
}

/// A hook that may be switched off: `None` takes part in no stage and costs nothing per
/// call, so a policy that configuration leaves out can still be registered in one line.
///
/// ```
/// use toolgate_core::{hook, Hook, HookResult, Pipeline, ToolInvokeContext};
///
/// struct Audit;
///
/// #[hook]
/// impl Hook for Audit {
///     fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
///         Ok(())
///     }
/// }
///
/// let audit_enabled = false;
/// let pipeline = Pipeline::builder().hook(audit_enabled.then_some(Audit)).build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
impl<H: Hook> Hook for Option<H> {
    fn stages(&self) -> StageSet {
        self.as_ref().map_or(StageSet::EMPTY, Hook::stages)
    }
    fn synchronous_stages(&self) -> StageSet {
        self.as_ref()
            .map_or(StageSet::EMPTY, Hook::synchronous_stages)
    }
    fn name(&self) -> &str {
        self.as_ref().map_or("switched-off hook", Hook::name)
    }
    fn priority(&self) -> i32 {
        self.as_ref().map_or(0, Hook::priority)
    }
    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        self.as_ref().is_some_and(|hook| hook.filter(ctx))
    }
    fn required_providers(&self) -> Vec<ProviderRequirement> {
        self.as_ref()
            .map_or_else(Vec::new, Hook::required_providers)
    }
    fn provided_providers(&self) -> Vec<ProviderRequirement> {
        self.as_ref()
            .map_or_else(Vec::new, Hook::provided_providers)
    }
    fn wants_stage_durations(&self) -> bool {
        self.as_ref().is_some_and(Hook::wants_stage_durations)
    }
    fn around_execute<'a>(
        &'a self,
        ctx: &'a mut ToolInvokeContext,
        next: Next<'a>,
    ) -> HookFuture<'a> {
        match self {
            Some(hook) => hook.around_execute(ctx, next),
            None => next.run(ctx),
        }
    }
    for_each_stage_method!(forward_option_stage_methods);
}

for_each_stage_method!(dispatch_stage);
