//! The main phases (1–8 of DESIGN.md §2) of a fresh or a resumed invocation, as one walk:
//! the stages before execution, execution, the output stages.
//!
//! Stages without hooks cost a bit test: the walk visits only the stages of the tool's plan.
//! A stage whose hooks all finish at once runs in place, in a plain function; a future is
//! made only for a stage where some hook may not, and for execution when an
//! `around_execute` wrapper, or a `will_execute` or `did_execute` hook that may not finish
//! at once, is in it.

use serde_json::Value;

use super::ToolEntry;
use super::stages::{self, Phase};
use crate::context::ToolInvokeContext;
use crate::control::{Control, HookResult, SuspendRequest};
use crate::error::{InputViolations, ToolError};
use crate::hook::{ExecutionChain, Hook, HookFuture, Next, Step};
use crate::prepared::PreparedInput;
use crate::progress::LeftTool;
use crate::stage::{Stage, StageSet};
use crate::suspension::ResumeDecision;

/// How an invocation starts.
pub(crate) enum Start {
    Fresh,
    /// A call that waited after stage `after` and was decided.
    Resume {
        after: Stage,
        decision: ResumeDecision,
    },
}

/// Every stage up to `did_cache_miss`, the last before execution on a cache miss.
const BEFORE_EXECUTION: StageSet = StageSet::before(Stage::DidCacheHit).with(Stage::DidCacheMiss);

/// The stages of execution.
const EXECUTION: StageSet = StageSet::of(&[
    Stage::AroundExecute,
    Stage::OnRetry,
    Stage::WillExecute,
    Stage::DidExecute,
]);

/// The stages after execution, `did_cache_hit` (which runs in their place on a hit) first.
const OUTPUT: StageSet = StageSet::of(&[
    Stage::DidCacheHit,
    Stage::WillWriteCache,
    Stage::WillRedactOutput,
    Stage::WillValidateOutput,
    Stage::WillTransformOutput,
]);

/// The last stage before a call that asks to wait actually waits: the end of
/// `will_redact_input`. A call is bound to what it would run with (DESIGN.md §10), so a
/// request to wait from an earlier stage — consent, in the policy phase — is held while the
/// call goes on: it takes its quota unit (a waiting call counts against its caller's
/// limits), its input is checked and redacted, and only then is it stored. An error on the
/// way (over the rate limit, invalid input) fails the call instead: nobody is asked to
/// approve a call that could not run.
const WAIT_AFTER: Stage = Stage::WillRedactInput;

/// The stages a resumed call runs again before anything else, with the pipeline's hooks as
/// they are now. Binding first: request providers belong to one invocation, and a resumed
/// call is a new one (its context is new), so what hooks bound before the wait is bound
/// again — a per-request client or transaction does not outlive the wait. Then the policy
/// stages that decide whether the call may run at all: access may have been revoked, or a
/// tool switched off, while the call waited (DESIGN.md §10). Consent is not asked again: a
/// person has just decided.
const RUN_AGAIN: [Stage; 3] = [
    Stage::WillBindProviders,
    Stage::WillAuthorize,
    Stage::WillCheckFeatureFlags,
];

/// Phases 1–8: `Ok` with the output set, or the control outcome that ended them. One
/// function, so that a phase builds no future of its own: only a hook that may not finish
/// at once, and execution when a wrapper or such a hook is in it, get one.
pub(super) async fn walk(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    start: Start,
) -> HookResult {
    let present = entry.plan.present();
    if present.is_empty() && matches!(start, Start::Fresh) {
        // A fresh call of a tool without hooks: phases 1–6 are the tool's check, 7 the
        // tool, 8 nothing. Written apart, so that the common call pays for no walk.
        check_input_at_its_stage(entry, ctx, false)?;
        if let Some(lapsed) = lapsed_approval(ctx) {
            return Err(lapsed);
        }
        ctx.progress.acquired.reach(Stage::DidCacheMiss, false);
        // Nothing can give up on the tool here but the deadline or the caller, which end
        // the main phases (`main_outcome` clears `in_tool`): no guard as in `attempt`.
        ctx.stage = Stage::WillExecute;
        ctx.attempt += 1;
        let prepared = enter_tool(ctx);
        let output = entry.tool.call(prepared, ctx).await;
        return leave_tool(ctx, output);
    }
    let mut output = present
        .intersection(OUTPUT)
        .difference(Stage::DidCacheHit.into());
    let mut done = None;
    let mut output_only = false;
    if let Start::Resume { after, decision } = start {
        match resume(entry, ctx, decision).await? {
            Resumed::Run => done = Some(after),
            // Decided with an output, or waited after one: only output stages remain.
            Resumed::OutputOnly => {
                let done = after.max(Stage::DidExecute);
                output = output
                    .difference(Stage::WillWriteCache.into())
                    .difference(StageSet::before(done).with(done));
                output_only = true;
            }
        }
    }
    if !output_only {
        // Phases 1–6, up to a cache miss; for a resumed call, after stage `done`. The
        // stages run in place, in `Before::advance`; the walk's future awaits only a stage
        // where some hook may not finish at once, and a request to wait.
        let mut before_walk =
            Before::new(present, done, stages::runs_plain(entry, ctx, Phase::Main));
        let quota_taken = before_walk.quota_taken;
        let mut before = Ok(());
        loop {
            match before_walk.advance(entry, ctx) {
                Ok(Pause::Passed) => break,
                Ok(Pause::Stage(stage)) => {
                    let result = stages::run_stage(entry, ctx, stage, 0, Phase::Main).await;
                    if let Err(control) = before_walk.settle(ctx, result) {
                        before = Err(control);
                        break;
                    }
                }
                Ok(Pause::Wait(request)) => {
                    let at = before_walk.wait_after;
                    if let Err(control) = wait_unless_approved(entry, ctx, at, request).await {
                        before = Err(control);
                        break;
                    }
                }
                Err(control) => {
                    before = Err(control);
                    break;
                }
            }
        }
        // Phase 7, or the short-circuit that took its place.
        if before.is_ok()
            && let Some(lapsed) = lapsed_approval(ctx)
        {
            before = Err(lapsed);
        }
        match before {
            Ok(()) => {
                ctx.progress
                    .acquired
                    .reach(Stage::DidCacheMiss, quota_taken);
                ctx.stage = Stage::DidCacheMiss;
                let hooks = present.intersection(EXECUTION);
                let ran = if hooks.is_empty() || attempt_in_place(entry, hooks) {
                    // The one attempt, run here when nothing wraps the tool and its
                    // `will_execute` and `did_execute` hooks all finish at once (without a
                    // wrapper there is no retry: `on_retry` never runs). Nothing can give up
                    // on the tool here but the deadline or the caller, which end the main
                    // phases (`main_outcome` clears `in_tool`): no guard as in `attempt`.
                    ctx.stage = Stage::WillExecute;
                    ctx.attempt += 1;
                    if hooks.is_empty() || execution_stage_in_place(entry, ctx, Stage::WillExecute)?
                    {
                        let prepared = enter_tool(ctx);
                        let output = entry.tool.call(prepared, ctx).await;
                        leave_tool(ctx, output)?;
                        hooks.is_empty() || execution_stage_in_place(entry, ctx, Stage::DidExecute)?
                    } else {
                        false
                    }
                } else {
                    execution(entry, ctx).await?
                };
                if !ran {
                    // A wrapper answered without running the tool: nothing to cache.
                    output = output.difference(Stage::WillWriteCache.into());
                }
            }
            Err(Control::Respond(value)) => {
                // Answered before execution: a cache hit runs `did_cache_hit`; nothing is
                // written to the cache.
                if ctx.stage == Stage::WillReadCache && present.contains(Stage::DidCacheHit) {
                    output = output.with(Stage::DidCacheHit);
                }
                output = output.difference(Stage::WillWriteCache.into());
                ctx.set_output(value);
            }
            Err(other) => return Err(other),
        }
    }
    // Phase 8: a respond sets the output and the next stage runs. The stages run in place;
    // the walk's future awaits only one where some hook may not finish at once.
    while let Some(stage) = output_in_place(entry, ctx, &mut output)? {
        let result = stages::run_stage(entry, ctx, stage, 0, Phase::Main).await;
        output_outcome(ctx, result)?;
    }
    Ok(())
}

/// Phase 8's stages from the next one of `output` on, in place while their hooks all
/// finish at once: `Some(stage)` when `stage`, entered and taken off `output`, has a hook
/// that may not, for the walk's future to run. A plain function, so that the walk's state
/// stays in registers.
#[inline]
fn output_in_place(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    output: &mut StageSet,
) -> Result<Option<Stage>, Control> {
    let plain = stages::runs_plain(entry, ctx, Phase::Main);
    while let Some(stage) = output.iter().next() {
        *output = output.difference(stage.into());
        ctx.stage = stage;
        if !entry.plan.is_synchronous(stage) {
            return Ok(Some(stage));
        }
        let result = stages::run_synchronous_as(entry, ctx, stage, 0, Phase::Main, plain);
        output_outcome(ctx, result)?;
    }
    Ok(None)
}

/// An output stage's result: a respond sets the output and the next stage runs; any other
/// control outcome ends the main phases.
#[inline]
fn output_outcome(ctx: &mut ToolInvokeContext, result: HookResult) -> HookResult {
    match result {
        Ok(()) => Ok(()),
        Err(Control::Respond(value)) => {
            ctx.set_output(value);
            Ok(())
        }
        Err(other) => Err(other),
    }
}

/// The walk through phases 1–6, the stages before execution. Its stages run in place, in
/// a plain function ([`Before::advance`]), where the walk's state stays in registers: only
/// a stage where some hook may not finish at once, and a held request to wait, are handed
/// to the walk's future to await.
struct Before {
    /// The stages with hooks still to run, in pipeline order.
    route: StageSet,
    /// A resumed call's quota unit was taken before it waited.
    quota_taken: bool,
    /// The tool's own check has run, or is not due (a resumed call past it).
    checked: bool,
    /// The stage after which a held request to wait takes effect.
    wait_after: Stage,
    /// The first stage whose reach [`Acquired::reach`](crate::progress::Acquired::reach)
    /// records (an acquire stage, or one after it), until both are passed: each is
    /// recorded once, at the first stage of the route at or after it.
    next_acquire: Option<Stage>,
    /// Nothing is timed or traced ([`stages::runs_plain`]).
    plain: bool,
    /// A request to wait from a stage up to `wait_after`, held until then.
    held: Option<SuspendRequest>,
}

/// Where [`Before::advance`] stopped.
enum Pause {
    /// Every stage before execution passed, the tool's check too.
    Passed,
    /// The current stage, entered (`ctx.stage` says which), has a hook that may not finish
    /// at once: the walk's future runs it with [`stages::run_stage`], then
    /// [`Before::settle`]s its result.
    Stage(Stage),
    /// The held request to wait takes effect now, unless the call was approved for a retry
    /// ([`wait_unless_approved`]); the walk advances again when it does not.
    Wait(SuspendRequest),
}

impl Before {
    /// The walk of a fresh call (`done` is `None`) or of a resumed one that waited after
    /// stage `done`.
    #[inline]
    fn new(present: StageSet, done: Option<Stage>, plain: bool) -> Before {
        let mut route = present.intersection(BEFORE_EXECUTION);
        let mut checked = false;
        if let Some(done) = done {
            // A resumed call's semaphore permit was given back when it waited, so that
            // stage runs again.
            let passed = StageSet::before(done).with(done);
            route = route.difference(passed.difference(Stage::WillAcquireSemaphore.into()));
            checked = done >= Stage::WillValidateInput;
        }
        Before {
            route,
            // A resumed call's quota unit was taken before it waited.
            quota_taken: done.is_some_and(|d| d >= Stage::WillAcquireQuota),
            checked,
            // A request to wait from a stage that runs again (the semaphore) waits until
            // the stages that ran before the suspension are passed again.
            wait_after: done.map_or(WAIT_AFTER, |d| WAIT_AFTER.max(d)),
            next_acquire: Some(Stage::WillAcquireQuota),
            plain,
            held: None,
        }
    }

    /// Runs the stages in place, from the next one, as long as their hooks all finish at
    /// once; the tool's check right after the `will_validate_input` hooks, and a held
    /// request to wait once `wait_after` is passed. `Err` with the control outcome that
    /// ends phases 1–6.
    #[inline]
    fn advance(
        &mut self,
        entry: &ToolEntry,
        ctx: &mut ToolInvokeContext,
    ) -> Result<Pause, Control> {
        while let Some(stage) = self.route.iter().next() {
            if !self.checked && stage > Stage::WillValidateInput {
                self.checked = true;
                check_input_at_its_stage(entry, ctx, self.quota_taken)?;
            }
            if stage > self.wait_after
                && let Some(request) = self.held.take()
            {
                return Ok(Pause::Wait(request));
            }
            self.route = self.route.difference(stage.into());
            if self.next_acquire.is_some_and(|acquire| stage >= acquire) {
                ctx.progress.acquired.reach(stage, self.quota_taken);
                self.next_acquire =
                    (stage < Stage::WillAcquireSemaphore).then_some(Stage::WillAcquireSemaphore);
            }
            ctx.stage = stage;
            if !entry.plan.is_synchronous(stage) {
                return Ok(Pause::Stage(stage));
            }
            let result = stages::run_synchronous_as(entry, ctx, stage, 0, Phase::Main, self.plain);
            self.settle(ctx, result)?;
        }
        if !self.checked {
            self.checked = true;
            check_input_at_its_stage(entry, ctx, self.quota_taken)?;
        }
        match self.held.take() {
            Some(request) => Ok(Pause::Wait(request)),
            None => Ok(Pause::Passed),
        }
    }

    /// What a stage's result does to the walk: `Err` when it ends phases 1–6, see [`hold`].
    #[inline]
    fn settle(&mut self, ctx: &mut ToolInvokeContext, result: HookResult) -> HookResult {
        match result {
            Ok(()) => Ok(()),
            Err(control) => match hold(ctx, &mut self.held, self.wait_after, control) {
                None => Ok(()),
                Some(control) => Err(control),
            },
        }
    }
}

/// What a resumed call goes on with.
enum Resumed {
    /// The stages after the one it waited at, execution and output.
    Run,
    /// Only the output stages after its output.
    OutputOnly,
}

/// Applies the decision on a waiting call, after [`RUN_AGAIN`] bound its providers and
/// said it may still run.
async fn resume(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    decision: ResumeDecision,
) -> Result<Resumed, Control> {
    if let ResumeDecision::Reject { reason } = decision {
        return Err(ToolError::abort(reason, "rejected", 403).into());
    }
    for stage in RUN_AGAIN {
        match stages::run_main_stage(entry, ctx, stage).await {
            Ok(()) => {}
            Err(Control::Error(error)) => return Err(Control::Error(error)),
            Err(other) => {
                return Err(ToolError::internal(format!(
                    "a hook at `{stage}` answered a resumed call with `{}`, so it did not run: on resume that stage may only let a call through or refuse it (ask for approval at `will_check_consent`, answer at `will_read_cache` or later)",
                    other.label()
                ))
                .into());
            }
        }
    }
    Ok(match decision {
        ResumeDecision::Complete { output } => {
            ctx.set_output(output);
            Resumed::OutputOnly
        }
        _ if ctx.output().is_some() => Resumed::OutputOnly,
        _ => Resumed::Run,
    })
}

/// What a control outcome of a stage before execution does while a request to wait is
/// held until `until`: `None` to go on with the next stage.
///
/// * A request to wait at a stage up to `until` is held. A second one joins the first:
///   one person's decision settles the call.
/// * A respond while one is held keeps the value as the output and the call waits now:
///   a short-circuit does not get around the wait.
/// * Anything else ends the main phases as usual.
fn hold(
    ctx: &mut ToolInvokeContext,
    held: &mut Option<SuspendRequest>,
    until: Stage,
    control: Control,
) -> Option<Control> {
    match control {
        Control::Suspend(request) if ctx.stage <= until => {
            if held.is_none() {
                *held = Some(request);
            } else {
                tracing::debug!(stage = %ctx.stage, reason = %request.reason, "a second request to wait joins the first: one decision settles the call");
            }
            None
        }
        Control::Respond(value) => match held.take() {
            Some(request) => {
                ctx.set_output(value);
                Some(Control::Suspend(request))
            }
            None => Some(Control::Respond(value)),
        },
        other => Some(other),
    }
}

/// The held request takes effect — the call waits as if suspended at `at` — unless the
/// call is a fresh one that a person approved for a retry: then it uses that approval up
/// and goes on. Only a call equal to the approved one finds it (its binding's key, made
/// here from what the call would run with).
async fn wait_unless_approved(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    at: Stage,
    request: SuspendRequest,
) -> HookResult {
    if ctx.resumed().is_none() {
        let key = entry.binding(ctx.user(), ctx.input()).key();
        match entry.shared.suspensions.use_retry_approval(&key).await {
            Ok(Some(approval)) => {
                tracing::info!(suspension_id = %approval.suspension_id, decided_by = approval.decided_by.as_deref().unwrap_or(""), "the call runs on its approval for a retry");
                ctx.run_as_approved(approval);
                return Ok(());
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "approvals for a retry could not be looked up; the call waits");
            }
        }
    }
    ctx.stage = at;
    Err(Control::Suspend(request))
}

/// An approved call reaches execution within the pipeline's `approval_run_within` of the
/// decision, or does not run: an approval is not good for ever. The error when its time has
/// passed; in place, since for a call that was not approved this is one test.
#[inline]
fn lapsed_approval(ctx: &ToolInvokeContext) -> Option<Control> {
    match ctx.approval_run_by() {
        Some(by) if tokio::time::Instant::now() > by => Some(approval_lapsed()),
        _ => None,
    }
}

#[cold]
fn approval_lapsed() -> Control {
    ToolError::abort(
        "the call was approved but could not start to run soon enough after the decision (it waited for capacity), so the approval has lapsed and the call did not run: make the call again",
        "approval_expired",
        410,
    )
    .into()
}

/// The tool's own check, at the `will_validate_input` stage it belongs to (so the acquire
/// stages before it count as reached). In place: every call runs it.
#[inline(always)]
fn check_input_at_its_stage(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    quota_taken: bool,
) -> HookResult {
    ctx.stage = Stage::WillValidateInput;
    ctx.progress
        .acquired
        .reach(Stage::WillValidateInput, quota_taken);
    if entry.wants_object && !ctx.input().is_object() {
        return Err(not_an_object());
    }
    if let Some(prepared) = entry.tool.check_input(ctx.input())? {
        ctx.prepared = Some((ctx.input_version, prepared));
    }
    Ok(())
}

#[cold]
fn not_an_object() -> Control {
    ToolError::InvalidInput(InputViolations::one(
        "",
        "the arguments must be a JSON object",
    ))
    .into()
}

/// Whether the attempt runs in the walk's future though execution has hooks (`hooks`):
/// no `around_execute` wrapper but ones that keep the trait's default (which hands the
/// rest of the chain back unstarted: no retry, nothing around the tool), and the
/// `will_execute` and `did_execute` hooks all finish at once. Otherwise [`execution`]
/// runs it, in a future of its own.
#[inline]
fn attempt_in_place(entry: &ToolEntry, hooks: StageSet) -> bool {
    (!hooks.contains(Stage::AroundExecute) || entry.plan.wrappers_kept_default())
        && entry.plan.is_synchronous(Stage::WillExecute)
        && entry.plan.is_synchronous(Stage::DidExecute)
}

/// `will_execute` or `did_execute` (`stage`) of an attempt run in place: `Ok(true)` to go
/// on, `Ok(false)` when a hook answered (its value is the output, as a wrapper's would be:
/// nothing is cached), `Err` with the control outcome that ends the main phases — as
/// [`execution`] treats the outcome of a first attempt. Out of line: the walk's future
/// stays small.
#[inline(never)]
fn execution_stage_in_place(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
) -> Result<bool, Control> {
    ctx.stage = stage;
    if !entry.plan.has(stage) {
        return Ok(true);
    }
    match stages::run_synchronous(entry, ctx, stage, 0, Phase::Main) {
        Ok(()) => Ok(true),
        Err(Control::Respond(value)) => {
            ctx.set_output(value);
            Ok(false)
        }
        Err(other) => Err(other),
    }
}

/// Phase 7 when it has hooks: whether the output comes from a real run of the tool, or the
/// control outcome that ends the main phases.
async fn execution(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> Result<bool, Control> {
    ctx.stage = Stage::AroundExecute;
    let result = if entry.plan.has(Stage::AroundExecute) {
        through_wrappers(entry, ctx).await
    } else {
        attempt::<false>(entry, ctx).await
    };
    match result {
        // A wrapper that returns `Ok` without running the tool produced nothing to cache.
        Ok(()) => Ok(ctx.runs > 0),
        Err(Control::Respond(value)) => {
            ctx.set_output(value);
            Ok(false)
        }
        Err(Control::Error(error)) if ctx.attempt > 1 => Err(give_up(entry, ctx, error).await),
        Err(other) => Err(other),
    }
}

/// The `around_execute` wrappers around the attempt. A wrapper that hands back the rest of
/// the chain unstarted (the trait's default) is stepped over here, and when every wrapper
/// did so the attempt runs inside this future: nothing is boxed for it. When every wrapper
/// of the tool was called and each answered with the trait's default method's own future,
/// the plan learns it, and from the next call on the attempt runs as if there were no
/// wrapper ([`attempt_in_place`]).
async fn through_wrappers(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> HookResult {
    let wrappers = entry.plan.hooks(Stage::AroundExecute);
    // Wrappers called so far, and whether each of them, in plan order, kept the default:
    // one skipped by its filter leaves fewer called than there are.
    let (mut called, mut kept_default) = (0, true);
    let mut step = Next::new(entry).step(ctx);
    loop {
        match step {
            Step::Wrapper(future) => {
                kept_default &= wrappers.get(called).is_some_and(|planned| {
                    future.is_default_method(Stage::AroundExecute, planned.type_id)
                });
                called += 1;
                match future.into_next() {
                    Ok((next, ctx)) => step = next.step(ctx),
                    Err(started) => return started.await,
                }
            }
            Step::Attempt(ctx) => {
                if kept_default && called == wrappers.len() {
                    entry.plan.learn_wrappers_kept_default();
                }
                return attempt::<false>(entry, ctx).await;
            }
        }
    }
}

/// Retries ran out: the error is kept, `on_give_up` runs (as the tail does: outcomes
/// recorded, never applied), and the error ends the main phases.
async fn give_up(entry: &ToolEntry, ctx: &mut ToolInvokeContext, error: ToolError) -> Control {
    ctx.error = Some(error.clone());
    ctx.stage = Stage::OnGiveUp;
    if entry.plan.is_synchronous(Stage::OnGiveUp) {
        if entry.plan.has(Stage::OnGiveUp) {
            let _ = stages::run_synchronous(entry, ctx, Stage::OnGiveUp, 0, Phase::Tail);
        }
    } else {
        let _ = stages::run_stage(entry, ctx, Stage::OnGiveUp, 0, Phase::Tail).await;
    }
    Control::Error(error)
}

/// One attempt: `on_retry` (from the second on), `will_execute`, the tool, `did_execute`.
///
/// `WRAPPED`: the attempt runs inside a wrapper's own future, which may give up on it while
/// the tool runs (a per-attempt timeout) and go on — so `in_tool` is cleared when it is
/// dropped. Run in place (no wrapper, or only wrappers stepped over), nothing but the
/// deadline or the caller can give up on it, and those end the main phases
/// (`main_outcome` clears `in_tool`): no guard to pay for.
async fn attempt<const WRAPPED: bool>(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
) -> HookResult {
    ctx.attempt += 1;
    if ctx.attempt > 1 {
        stages::run_main_stage(entry, ctx, Stage::OnRetry).await?;
    }
    ctx.stage = Stage::WillExecute;
    if entry.plan.is_synchronous(Stage::WillExecute) {
        if entry.plan.has(Stage::WillExecute) {
            stages::run_synchronous(entry, ctx, Stage::WillExecute, 0, Phase::Main)?;
        }
    } else {
        stages::run_stage(entry, ctx, Stage::WillExecute, 0, Phase::Main).await?;
    }
    let prepared = enter_tool(ctx);
    let output = if WRAPPED {
        let left = LeftTool(&ctx.progress.in_tool);
        let output = entry.tool.call(prepared, ctx).await;
        left.returned();
        output
    } else {
        entry.tool.call(prepared, ctx).await
    };
    leave_tool(ctx, output)?;
    ctx.stage = Stage::DidExecute;
    if !entry.plan.has(Stage::DidExecute) {
        return Ok(());
    }
    if entry.plan.is_synchronous(Stage::DidExecute) {
        stages::run_synchronous(entry, ctx, Stage::DidExecute, 0, Phase::Main)
    } else {
        stages::run_stage(entry, ctx, Stage::DidExecute, 0, Phase::Main).await
    }
}

/// The tool is about to run: the input its check parsed, unless a hook changed the input
/// since.
#[inline]
fn enter_tool(ctx: &mut ToolInvokeContext) -> Option<PreparedInput> {
    *ctx.progress.in_tool.get_mut() = true;
    ctx.runs += 1;
    match ctx.prepared.take() {
        Some((version, prepared)) if version == ctx.input_version => Some(prepared),
        _ => None,
    }
}

/// The tool ran: its output is kept, or its error ends the attempt.
#[inline]
fn leave_tool(ctx: &mut ToolInvokeContext, output: Result<Value, ToolError>) -> HookResult {
    *ctx.progress.in_tool.get_mut() = false;
    ctx.set_output(output?);
    Ok(())
}

/// The tool's `around_execute` chain: its wrappers, and one attempt at its center.
impl ExecutionChain for ToolEntry {
    fn wrapper(&self, index: usize) -> Option<(&dyn Hook, bool)> {
        self.plan
            .hooks(Stage::AroundExecute)
            .get(index)
            .map(|planned| (&*planned.hook, planned.filtered))
    }

    fn attempt<'c>(&'c self, ctx: &'c mut ToolInvokeContext) -> HookFuture<'c> {
        HookFuture::new(attempt::<true>(self, ctx))
    }
}
