//! The [`Hook`] trait: how policy code plugs into the stages of the pipeline.

use std::any::Any;

use crate::context::ToolInvokeContext;
use crate::definition::ToolDefinition;
use crate::provider::ProviderRequirement;
use crate::stage::{Stage, StageSet};

mod closure;
mod forward;
mod future;
mod interest;
mod registration;

pub use closure::{AsyncStage, FnHook, StageClosure, SyncStage, hook_fn, hook_fn_sync};
pub(crate) use forward::{StageMethod, stage_method};
pub(crate) use future::{ExecutionChain, Step};
pub use future::{HookFuture, Next};
pub use interest::Interest;
pub use registration::{FailureMode, HookOptions, HookRegistration, IntoHook};

/// Policy code that runs at the stages of the pipeline.
///
/// # The contract
///
/// A hook has one method per [stage](crate::Stage), each with a default that does nothing, plus
/// [`around_execute`](Hook::around_execute). Write the impl block under
/// [`#[hook]`](macro@crate::hook): it lists the stages from the methods you wrote, so a method
/// you implement always runs and a stage you did not implement costs nothing. Plans are
/// compiled from [`stages`](Hook::stages) when the pipeline is built; the pipeline never
/// calls a hook at a stage outside that set.
///
/// Which tools a hook serves is asked once per tool, when the plans are built:
/// [`interest`](Hook::interest) answers never (left out of the tool's plan), always, or
/// sometimes (the default: [`filter`](Hook::filter) decides per call).
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
pub trait Hook: Any + Send + Sync {
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
    /// correct. A stage it leaves to the trait's default method costs nothing after the first
    /// call: the default's answer proves it, and the pipeline runs the stage in place from
    /// then on. A stage with a method of its own costs a future per call (no allocation: its
    /// method is still called in place, and awaited only when its future is not ready); list
    /// the stages whose methods return [`HookFuture::ok`] or [`HookFuture::ready`] to save it. Listing a stage whose method does not
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

    /// Whether this hook takes part in the calls of `tool`, asked once per tool when the
    /// pipeline is built, before any call of it.
    ///
    /// # When it is called
    ///
    /// [`PipelineBuilder::build`](crate::PipelineBuilder::build) asks every hook registered
    /// for a tool (every global hook, and the tool's own), once per tool, with the tool's
    /// definition as the pipeline will serve it: name, description, schemas, annotations,
    /// tags and source. A tool's definition does not change within a pipeline; a host that
    /// serves a changed definition (an upstream's new tool list, an accepted change) builds
    /// a new pipeline, and the question is asked again there. Answer from the definition
    /// and the hook's own configuration alone: nothing of a call is known yet.
    ///
    /// # What the answer means
    ///
    /// * [`Interest::never`] — the hook is left out of the tool's plan: none of its stages
    ///   runs for that tool, it costs the tool's calls nothing (a stage left without hooks
    ///   costs a branch), and [`Pipeline::plan`](crate::Pipeline::plan) does not list it.
    ///   Its required providers are still checked at build.
    /// * [`Interest::always`] — the hook runs at its stages in every call of the tool, and
    ///   [`filter`](Hook::filter) is not asked.
    /// * [`Interest::sometimes`] — the default: the hook is in the plan, and `filter` decides
    ///   before each of its stages in each call, as it always did.
    ///
    /// A policy that applies to some tools — a retry policy for idempotent tools, approval
    /// for destructive ones, a timeout for the tools that have a limit — answers here
    /// rather than in `filter`: the decision is made once instead of at every call, and
    /// what a tool's plan lists is what runs for it. `#[hook]` answers `always` for a
    /// block that writes neither `interest` nor `filter`.
    ///
    /// # Examples
    ///
    /// Approval for destructive tools only, decided per tool:
    ///
    /// ```
    /// use toolgate_core::prelude::*;
    ///
    /// struct AskFirst;
    ///
    /// #[hook]
    /// impl Hook for AskFirst {
    ///     fn interest(&self, tool: &ToolDefinition) -> Interest {
    ///         Interest::when(tool.annotations.destructive)
    ///     }
    ///
    ///     fn will_check_consent(&self, ctx: &mut ToolInvokeContext) -> HookResult {
    ///         ctx.abort("ask a person first", "approval_required", 403)
    ///     }
    /// }
    ///
    /// let pipeline = Pipeline::builder()
    ///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
    ///     .tool(
    ///         tool_fn("wipe", "Deletes everything.", |_: ()| async { Ok::<_, ToolError>("gone") })
    ///             .annotations(ToolAnnotations { destructive: true, ..Default::default() }),
    ///     )
    ///     .hook(AskFirst)
    ///     .build()?;
    ///
    /// // Not in `ping`'s plan: it never runs there.
    /// assert_eq!(pipeline.plan("ping"), Some(vec![]));
    /// assert_eq!(pipeline.plan("wipe").unwrap()[0].0, Stage::WillCheckConsent);
    /// # Ok::<(), toolgate_core::error::BuildError>(())
    /// ```
    ///
    /// Deciding per call is still `filter`'s work, with the default `sometimes`: the answer
    /// here cannot see the caller or the input.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        let _ = tool;
        Interest::sometimes()
    }

    /// Whether the hook takes part in this invocation, asked before each of its stages in
    /// each call — when [`interest`](Hook::interest) answered
    /// [`sometimes`](Interest::sometimes) for the tool (the default). A decision that
    /// depends on the tool alone belongs in `interest`, made once.
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
        HookFuture::default_method(self, Stage::WillCreateInvokeContext)
    }

    /// Phase 1: the context exists. A `did_*` stage: hooks run in reverse priority order.
    ///
    /// Holds what [`will_create_invoke_context`](Hook::will_create_invoke_context) holds,
    /// plus whatever its hooks put in the scratchpad or metadata. Outcomes mean the same
    /// as there. No release stage pairs with it.
    fn did_create_invoke_context<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::DidCreateInvokeContext)
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
        HookFuture::default_method(self, Stage::WillBindProviders)
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
        HookFuture::default_method(self, Stage::WillAuthorize)
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
        HookFuture::default_method(self, Stage::WillCheckConsent)
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
        HookFuture::default_method(self, Stage::WillCheckFeatureFlags)
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
        HookFuture::default_method(self, Stage::WillAcquireQuota)
    }

    /// Phase 4: take a concurrency permit. Paired with
    /// [`did_release_semaphore`](Hook::did_release_semaphore).
    ///
    /// Outcomes as at [`will_acquire_quota`](Hook::will_acquire_quota). A suspended call
    /// gives its permit back while it waits, and on resume this stage runs again (the
    /// quota unit, taken before the call waited, is not taken twice).
    fn will_acquire_semaphore<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillAcquireSemaphore)
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
        HookFuture::default_method(self, Stage::WillParseInput)
    }

    /// Phase 5: check the input. The tool's own check (serde and garde for a typed tool,
    /// its JSON Schema for a remote one) runs right after this stage's hooks, so a hook
    /// here sees the input before any tool-specific check.
    ///
    /// * abort (`invalid_input`, 400) naming the field — the input is refused;
    /// * respond, suspend — as at the policy stages.
    fn will_validate_input<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillValidateInput)
    }

    /// Phase 5: the input passed the tool's check; fill defaults and repair unambiguous
    /// mistakes ([`ctx.set_input`](ToolInvokeContext::set_input) keeps the history, and
    /// metadata can say what was repaired).
    ///
    /// Outcomes as at [`will_validate_input`](Hook::will_validate_input).
    fn will_normalize_input<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillNormalizeInput)
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
        HookFuture::default_method(self, Stage::WillRedactInput)
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
        HookFuture::default_method(self, Stage::WillInjectSecrets)
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
        HookFuture::default_method(self, Stage::WillReadCache)
    }

    /// Phase 6: a hook at [`will_read_cache`](Hook::will_read_cache) responded;
    /// [`ctx.output`](ToolInvokeContext::output) holds the cached value. A `did_*` stage:
    /// hooks run in reverse priority order.
    ///
    /// A respond replaces the output; an error fails the call.
    fn did_cache_hit<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::DidCacheHit)
    }

    /// Phase 6: nothing at [`will_read_cache`](Hook::will_read_cache) responded; the tool
    /// is about to run. A `did_*` stage: hooks run in reverse priority order.
    ///
    /// A respond still answers without running the tool; an error fails the call.
    fn did_cache_miss<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::DidCacheMiss)
    }

    /// Phase 7: wraps execution, outermost (highest priority) first. Call
    /// [`next.run(ctx)`](Next::run) zero times (short-circuit), once (wrap), or several
    /// times (retry): each call runs the inner wrappers, then `on_retry` (from the second
    /// attempt on), `will_execute`, the tool and `did_execute`. The default calls it once,
    /// handing back the rest of the chain unstarted: a hook that keeps it allocates nothing
    /// for it, and once a call has found every wrapper of a tool keeping it, the tool's
    /// calls run as if it had no wrapper.
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
        HookFuture::default_next(self, next, ctx)
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
        HookFuture::default_method(self, Stage::OnRetry)
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
        HookFuture::default_method(self, Stage::WillExecute)
    }

    /// Phase 7: the tool returned an output, in [`ctx.output`](ToolInvokeContext::output).
    /// A `did_*` stage: hooks run in reverse priority order.
    ///
    /// * respond — replaces the output, which is then not written to a cache;
    /// * abort or error — the attempt fails (a retry wrapper may try again);
    /// * suspend — the call waits; resuming runs the execution phase again.
    fn did_execute<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::DidExecute)
    }

    /// Phase 7: execution failed after more than one attempt;
    /// [`ctx.error`](ToolInvokeContext::error) is the last attempt's error, and it stands:
    /// `on_error`, record, release and end follow. Log, count or alert here.
    ///
    /// Runs like a tail stage: an outcome returned here (or a panic) is logged and kept in
    /// the decision trace, never applied.
    fn on_give_up<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::OnGiveUp)
    }

    /// Phase 8: store a freshly executed output (never after a respond or a cache hit).
    ///
    /// An error fails the call (a cache hook that cannot write should log and go on
    /// instead); a respond replaces the output.
    fn will_write_cache<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillWriteCache)
    }

    /// Phase 8: remove personal data and secrets from the output, whether it came from the
    /// tool, a cache or a respond.
    ///
    /// * respond — replaces the output and the next output stage runs;
    /// * abort or error — the call fails and the output is not returned;
    /// * suspend — the call waits with its output; resuming continues after this stage.
    fn will_redact_output<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillRedactOutput)
    }

    /// Phase 8: check the output (its schema, its size).
    ///
    /// Outcomes as at [`will_redact_output`](Hook::will_redact_output).
    fn will_validate_output<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillValidateOutput)
    }

    /// Phase 8: reshape the output for the caller, the last stage before the record.
    ///
    /// Outcomes as at [`will_redact_output`](Hook::will_redact_output).
    fn will_transform_output<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillTransformOutput)
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
        HookFuture::default_method(self, Stage::WillAudit)
    }

    /// Phase 9: the audit record was written. A tail stage, as
    /// [`will_audit`](Hook::will_audit); a `did_*` stage: hooks run in reverse priority
    /// order.
    fn did_audit<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::DidAudit)
    }

    /// Phase 9: record metrics, on every path. A tail stage, as
    /// [`will_audit`](Hook::will_audit).
    fn on_metrics<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::OnMetrics)
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
        HookFuture::default_method(self, Stage::DidReleaseSemaphore)
    }

    /// Phase 10: give back (or settle) the quota unit. Runs exactly once when
    /// [`will_acquire_quota`](Hook::will_acquire_quota) was reached, after
    /// `did_release_semaphore`. As [`did_release_semaphore`](Hook::did_release_semaphore)
    /// otherwise.
    fn did_release_quota<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::DidReleaseQuota)
    }

    /// Phase 11: the last stage of every invocation, exactly once, whatever the path.
    ///
    /// A tail stage: outcomes are logged, never applied. After it the context is dropped,
    /// and with it whatever is still held.
    fn will_finalize_invoke<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let _ = ctx;
        HookFuture::default_method(self, Stage::WillFinalizeInvoke)
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
        HookFuture::default_method(self, Stage::OnError)
    }
}
