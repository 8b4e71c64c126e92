//! The run loop: every path of DESIGN.md §2.
//!
//! The main phases (1–8) run under the deadline, the caller's cancellation token and a
//! panic boundary. Whatever they end with, the tail runs: `on_error` (on the error path),
//! then record, release and end, each stage at most once. If the invocation future is
//! dropped before the tail is done, its [`Guard`] hands the context to a task that runs
//! the rest of the tail; RAII guards kept in the context come back in every case.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use serde_json::Value;
use tracing::Instrument;

use super::ToolEntry;
use crate::context::ClockInstant;
use crate::plan::PlannedHook;
use crate::suspension::new_suspension_id;
use crate::{
    Control, Decision, FailureMode, Hook, HookResult, HookTiming, Next, ResumeDecision, Stage,
    StageSet, SuspendRequest, SuspendedInvocation, ToolError, ToolInvokeContext,
};

/// How an invocation starts.
pub(crate) enum Start {
    Fresh,
    Resume {
        after: Stage,
        decision: ResumeDecision,
    },
}

/// The stages before execution, in order: everything before `did_cache_hit`.
const PRE_STAGES: &[Stage] = Stage::ALL.split_at(Stage::DidCacheHit.index()).0;

const OUTPUT_STAGES: [Stage; 4] = [
    Stage::WillWriteCache,
    Stage::WillRedactOutput,
    Stage::WillValidateOutput,
    Stage::WillTransformOutput,
];

const OUTPUT_SET: StageSet = StageSet::of(&OUTPUT_STAGES);

const RECORD_STAGES: [Stage; 3] = [Stage::WillAudit, Stage::DidAudit, Stage::OnMetrics];

/// The stages of phase 7, execution.
const EXECUTE_SET: StageSet = StageSet::of(&[
    Stage::AroundExecute,
    Stage::OnRetry,
    Stage::WillExecute,
    Stage::DidExecute,
]);

/// The stages [`tail`] runs.
const TAIL_SET: StageSet = StageSet::of(&[
    Stage::OnError,
    Stage::WillAudit,
    Stage::DidAudit,
    Stage::OnMetrics,
    Stage::DidReleaseSemaphore,
    Stage::DidReleaseQuota,
    Stage::WillFinalizeInvoke,
]);

/// Runs the hooks of tail stage `$stage` from the hook at index `$first`, once
/// [`enter_tail`] said so, in the tail's own future (like [`run_stage!`]). Outcomes are
/// recorded and logged, never applied; a hook's own code (its filter and its stage method)
/// runs under `catch_unwind`, so that a panic in one hook's release does not skip the
/// release of the hooks after it; a pending hook future is bounded by the tail timeout.
macro_rules! run_tail_stage {
    ($entry:expr, $ctx:expr, $stage:expr, $first:expr) => {{
        let (entry, stage, first): (&ToolEntry, Stage, usize) = ($entry, $stage, $first);
        let started = entry.plan.records_durations().then(ClockInstant::now);
        let timed_hooks = entry.plan.records_hook_timings();
        for (planned, index) in entry.plan.hooks(stage)[first..].iter().zip(first..) {
            $ctx.progress.tail_hook = Some((stage, index));
            let hook_started = timed_hooks.then(ClockInstant::now);
            let settled = match call_contained(planned, $ctx) {
                Ok(Called::Skipped) => continue,
                Ok(Called::ReadyOk) if hook_started.is_none() => continue,
                Ok(Called::ReadyOk) => Ok(Ok(())),
                Ok(Called::Ready(outcome)) => Ok(outcome),
                Ok(Called::Pending(pending)) => {
                    let mut pending = AssertUnwindSafe(pending).catch_unwind();
                    // Most async hooks finish at their first poll: only one that does not
                    // pays for a timer.
                    match futures::poll!(&mut pending) {
                        std::task::Poll::Ready(settled) => settled,
                        std::task::Poll::Pending => {
                            // A hook that never finishes must not hang the call: past the
                            // tail timeout it is abandoned (its future dropped) and the
                            // next hook runs.
                            let bounded =
                                tokio::time::timeout(entry.shared.tail_hook_timeout, pending);
                            match bounded.await {
                                Ok(settled) => settled,
                                Err(_) => {
                                    tracing::error!(stage = %stage, hook = %planned.name, timeout_ms = entry.shared.tail_hook_timeout.as_millis() as u64, "a hook did not finish within the tail timeout and was abandoned; the outcome is kept");
                                    continue;
                                }
                            }
                        }
                    }
                }
                Err(panic) => Err(panic),
            };
            match settled {
                Ok(outcome) => {
                    let _ = settle(planned, stage, $ctx, hook_started, outcome, false);
                }
                Err(_) => {
                    tracing::error!(stage = %stage, hook = %planned.name, "a hook panicked; the panic was contained and the outcome kept");
                }
            }
        }
        $ctx.progress.tail_hook = None;
        if let Some(started) = started {
            record_stage_duration(entry, $ctx, stage, started);
        }
    }};
}

/// What calling a hook under [`call_contained`] gave, told apart without moving a result
/// in the common case.
enum Called<'a> {
    /// Its filter said no.
    Skipped,
    /// Done with `Ok(())`.
    ReadyOk,
    /// Done with another outcome.
    Ready(HookResult),
    /// Still running.
    Pending(crate::HookFuture<'a>),
}

/// Runs the hooks of main-phase stage `$stage` in plan order, once [`enter`] said it has
/// some, and evaluates to the stage's [`HookResult`]. A macro, not a function: the loop
/// runs in the phase's own future, so a stage builds no future of its own — a
/// synchronous hook costs its calls, and only a pending hook future is awaited, in place.
macro_rules! run_stage {
    ($entry:expr, $ctx:expr, $stage:expr) => {{
        let (entry, stage): (&ToolEntry, Stage) = ($entry, $stage);
        let started = entry.plan.records_durations().then(ClockInstant::now);
        let timed_hooks = entry.plan.records_hook_timings();
        let mut result = Ok(());
        for planned in entry.plan.hooks(stage) {
            let (hook_started, outcome) = if planned.failure == FailureMode::FailCall {
                // Found once: reaching the hook behind its `Arc<dyn Hook>` reads the
                // vtable, and the calls below could not reuse it.
                let hook: &dyn Hook = &*planned.hook;
                if !hook.filter($ctx) {
                    continue;
                }
                let hook_started = timed_hooks.then(ClockInstant::now);
                let called = (planned.call)(hook, $ctx);
                if called.is_ready_ok() && hook_started.is_none() {
                    continue;
                }
                let outcome = match called.into_ready() {
                    Ok(outcome) => outcome,
                    Err(pending) => pending.await,
                };
                (hook_started, outcome)
            } else {
                match call_fail_open(planned, stage, $ctx, timed_hooks).await {
                    Some(called) => called,
                    None => continue,
                }
            };
            if let Err(control) = settle(planned, stage, $ctx, hook_started, outcome, true) {
                result = Err(control);
                break;
            }
        }
        if let Some(started) = started {
            record_stage_duration(entry, $ctx, stage, started);
        }
        result
    }};
}

/// Phases 1–8 under the deadline, the cancellation token and the panic boundary; evaluates
/// to their [`HookResult`]. A macro, so that it runs in the invocation's own future rather
/// than in one more nested future.
macro_rules! run_main {
    ($entry:expr, $ctx:expr, $start:expr) => {{
        let (entry, ctx, start): (&ToolEntry, &mut ToolInvokeContext, Start) =
            ($entry, $ctx, $start);
        let deadline = ctx.deadline();
        let cancel = ctx.cancellation_if_given();
        // The clock is read only when a deadline needs it (for the `Timeout` error), and the
        // main future is pinned where it is built: moving it into an `.await` or into
        // `select!` would copy it, and it is the largest state of the invocation.
        let started = deadline.map(|_| tokio::time::Instant::now());
        let ended = {
            let main = std::pin::pin!(AssertUnwindSafe(drive(entry, ctx, start)).catch_unwind());
            if deadline.is_none() && cancel.is_none() {
                match main.await {
                    Ok(result) => Ended::Done(result),
                    Err(_) => Ended::Panicked,
                }
            } else {
                let expired = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                let cancelled = async {
                    match &cancel {
                        Some(token) => token.cancelled().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    result = main => match result {
                        Ok(result) => Ended::Done(result),
                        Err(_) => Ended::Panicked,
                    },
                    () = expired => Ended::TimedOut,
                    () = cancelled => Ended::Cancelled,
                }
            }
        };
        main_outcome(ctx, ended, deadline.zip(started))
    }};
}

/// Runs the tool itself (on the input it checked, when that has not changed since) and
/// keeps its output; evaluates to a [`HookResult`]. A macro for the same reason as
/// [`run_stage!`]: the tool's future is awaited in the caller's own.
macro_rules! run_tool {
    ($entry:expr, $ctx:expr) => {{
        let (entry, ctx): (&ToolEntry, &mut ToolInvokeContext) = ($entry, $ctx);
        let prepared = match ctx.prepared.take() {
            Some((version, prepared)) if version == ctx.input_version => Some(prepared),
            _ => None,
        };
        ctx.progress.in_tool = true;
        ctx.runs += 1;
        let output = entry.tool.call(prepared, ctx).await;
        ctx.progress.in_tool = false;
        output.map(|output| ctx.set_output(output))
    }};
}

/// One attempt, in the caller's future: `on_retry` (after the first), `will_execute`, the
/// tool, `did_execute`. Evaluates to a [`HookResult`].
macro_rules! run_execute_once {
    ($entry:expr, $ctx:expr) => {
        'attempt: {
            let (entry, ctx): (&ToolEntry, &mut ToolInvokeContext) = ($entry, $ctx);
            ctx.attempt += 1;
            if ctx.attempt > 1
                && enter(entry, ctx, Stage::OnRetry)
                && let Err(control) = run_stage!(entry, ctx, Stage::OnRetry)
            {
                break 'attempt Err(control);
            }
            if enter(entry, ctx, Stage::WillExecute)
                && let Err(control) = run_stage!(entry, ctx, Stage::WillExecute)
            {
                break 'attempt Err(control);
            }
            if let Err(error) = run_tool!(entry, ctx) {
                break 'attempt Err(error.into());
            }
            if enter(entry, ctx, Stage::DidExecute) {
                run_stage!(entry, ctx, Stage::DidExecute)
            } else {
                Ok(())
            }
        }
    };
}

/// Phase 7, in the caller's future; evaluates to whether the output comes from a real
/// execution, or the control outcome that ended it.
macro_rules! run_execute_phase {
    ($entry:expr, $ctx:expr) => {{
        let (entry, ctx): (&ToolEntry, &mut ToolInvokeContext) = ($entry, $ctx);
        ctx.stage = Stage::AroundExecute;
        let around = entry.plan.hooks(Stage::AroundExecute);
        let result = if around.is_empty() {
            run_execute_once!(entry, ctx)
        } else {
            Next {
                chain: around,
                entry,
            }
            .run(ctx)
            .await
        };
        match result {
            Err(Control::Error(error)) if ctx.attempt > 1 => Err(give_up(entry, ctx, error).await),
            other => execute_phase_outcome(ctx, other),
        }
    }};
}

/// Phases 1–6 of a fresh invocation, in the caller's future: the same steps as
/// [`pre_phase`], visiting only the stages with hooks (found by bit scan, not by walking
/// every stage). Evaluates to a [`HookResult`], `Err(Control::Respond)` on a short-circuit.
macro_rules! run_fresh_pre_phase {
    ($entry:expr, $ctx:expr) => {
        'pre: {
            let (entry, ctx): (&ToolEntry, &mut ToolInvokeContext) = ($entry, $ctx);
            // The tool's check comes right after the `will_validate_input` hooks: before the
            // first stage with hooks past it, or at the end when there is none.
            let mut checked = false;
            // A request to wait made before the input is checked and redacted waits here
            // until it is ([`park`]).
            let mut parked = None;
            for stage in entry.plan.present().intersection(PRE_WITH_MISS).iter() {
                if !checked && stage > Stage::WillValidateInput {
                    if let Err(control) = check_input_in_place(entry, ctx) {
                        break 'pre Err(control);
                    }
                    checked = true;
                }
                if stage > PARK_UNTIL
                    && let Some(request) = parked.take()
                {
                    break 'pre Err(unpark(ctx, PARK_UNTIL, request));
                }
                reach_capacity_stages(ctx, stage);
                ctx.stage = stage;
                if let Err(control) = run_stage!(entry, ctx, stage)
                    && let Some(control) = park(ctx, &mut parked, PARK_UNTIL, control)
                {
                    break 'pre Err(control);
                }
            }
            if !checked && let Err(control) = check_input_in_place(entry, ctx) {
                break 'pre Err(control);
            }
            if let Some(request) = parked {
                break 'pre Err(unpark(ctx, PARK_UNTIL, request));
            }
            ctx.stage = Stage::DidCacheMiss;
            Ok(())
        }
    };
}

/// Phase 8 over `$stages` (the output stages with hooks that are to run), in the caller's
/// future. A respond sets the output and the next stage runs. Evaluates to a
/// [`HookResult`].
macro_rules! run_output_phase {
    ($entry:expr, $ctx:expr, $stages:expr) => {
        'output: {
            let (entry, ctx, stages): (&ToolEntry, &mut ToolInvokeContext, StageSet) =
                ($entry, $ctx, $stages);
            for stage in stages.iter() {
                ctx.stage = stage;
                if let Err(control) = respond_continues(run_stage!(entry, ctx, stage), ctx) {
                    break 'output Err(control);
                }
            }
            Ok(())
        }
    };
}

/// `on_error` (on the error path), record, release, end — each stage at most once — in the
/// caller's future. Without a hook to run, every tail stage is done at once.
macro_rules! run_tail {
    ($entry:expr, $ctx:expr) => {{
        let (entry, ctx): (&ToolEntry, &mut ToolInvokeContext) = ($entry, $ctx);
        if has_tail_hooks(entry, ctx) {
            let failed = ctx.error.as_ref().is_some_and(|e| !e.is_waiting());
            if failed && let Some(first) = enter_tail(entry, ctx, Stage::OnError) {
                run_tail_stage!(entry, ctx, Stage::OnError, first);
            }
            ctx.finished.get_or_insert_with(ClockInstant::now);
            for stage in RECORD_STAGES {
                if let Some(first) = enter_tail(entry, ctx, stage) {
                    run_tail_stage!(entry, ctx, stage, first);
                }
            }
            if ctx.progress.semaphore
                && let Some(first) = enter_tail(entry, ctx, Stage::DidReleaseSemaphore)
            {
                run_tail_stage!(entry, ctx, Stage::DidReleaseSemaphore, first);
            }
            if ctx.progress.quota
                && let Some(first) = enter_tail(entry, ctx, Stage::DidReleaseQuota)
            {
                run_tail_stage!(entry, ctx, Stage::DidReleaseQuota, first);
            }
            if let Some(first) = enter_tail(entry, ctx, Stage::WillFinalizeInvoke) {
                run_tail_stage!(entry, ctx, Stage::WillFinalizeInvoke, first);
            }
            log_end(ctx);
        } else {
            end_without_tail_hooks(ctx);
        }
    }};
}

/// Owns the context while the invocation runs; finishes the tail if the invocation future
/// is dropped first. The context stays in its box from its creation to its end: the
/// invocation's futures hold a pointer to it, never a copy of it.
struct Guard<'a> {
    ctx: Option<Box<ToolInvokeContext>>,
    entry: &'a Arc<ToolEntry>,
    span: tracing::Span,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Some(mut ctx) = self.ctx.take() else {
            return;
        };
        // Done, unless dropped while a `will_finalize_invoke` hook ran: the hooks after it
        // still get their turn.
        if ctx.progress.tail_done.contains(Stage::WillFinalizeInvoke)
            && ctx.progress.tail_hook.is_none()
        {
            return;
        }
        if !ctx.progress.tail_started {
            ctx.error = Some(ToolError::Cancelled);
            ctx.cancel_if_watched();
            tracing::debug!(parent: &self.span, stage = %ctx.stage, "invocation dropped; finishing its tail in the background");
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let entry = Arc::clone(self.entry);
                handle.spawn(
                    async move {
                        let mut ctx = ctx;
                        tail(&entry, &mut ctx).await;
                    }
                    .instrument(self.span.clone()),
                );
            }
            Err(_) => {
                tracing::warn!(parent: &self.span, "invocation dropped outside a tokio runtime: release and finalize hooks did not run (guards in the context were still released)");
            }
        }
    }
}

/// Runs one invocation of the tool of `entry` (the one `ctx` was made for) to its end.
pub(crate) fn invoke(
    entry: &Arc<ToolEntry>,
    ctx: Box<ToolInvokeContext>,
    start: Start,
) -> impl Future<Output = Result<Value, ToolError>> + '_ {
    run_to_end(entry, ctx, start, |_, result| result)
}

/// Runs one invocation to its end and keeps its metadata, attempts and duration.
pub(crate) fn invoke_detailed(
    entry: &Arc<ToolEntry>,
    ctx: Box<ToolInvokeContext>,
    start: Start,
) -> impl Future<Output = super::Invocation> + '_ {
    run_to_end(entry, ctx, start, |ctx, result| super::Invocation {
        result,
        metadata: std::mem::take(ctx.metadata_mut()),
        attempts: ctx.runs,
        duration: ctx.elapsed(),
    })
}

/// Runs one invocation to its end; `conclude` makes the caller's answer from the
/// finished context and the result (what it does not take is dropped with the context).
async fn run_to_end<R>(
    entry: &Arc<ToolEntry>,
    ctx: Box<ToolInvokeContext>,
    start: Start,
    conclude: impl FnOnce(&mut ToolInvokeContext, Result<Value, ToolError>) -> R,
) -> R {
    let span = tracing::info_span!(
        "toolgate.invoke",
        tool = %ctx.tool_name(),
        request_id = %ctx.request_id(),
        session_id = ctx.session_id().unwrap_or(""),
        user_id = %ctx.user().id,
    );
    debug_assert!(Arc::ptr_eq(entry, &ctx.entry));
    let mut guard = Guard {
        ctx: Some(ctx),
        entry,
        span: span.clone(),
    };
    let run = std::pin::pin!(async move {
        let entry = &**guard.entry;
        let ctx = guard
            .ctx
            .as_mut()
            .expect("the guard holds the context until the end");
        let outcome = run_main!(entry, ctx, start);
        ctx.progress.tail_started = true;
        if let Err(Control::Suspend(request)) = outcome {
            ctx.error = Some(suspend(entry, ctx, request).await.unwrap_or_else(|e| e));
        } else {
            settle_outcome(ctx, outcome);
        }
        run_tail!(entry, ctx);
        let mut ctx = guard
            .ctx
            .take()
            .expect("the guard holds the context until the end");
        let result = match ctx.error.take() {
            Some(error) => Err(error),
            None => Ok(ctx.take_output().unwrap_or(Value::Null)),
        };
        conclude(&mut ctx, result)
    });
    // A span no subscriber is interested in is disabled for good: entering it on every
    // poll would do nothing, so the invocation runs without the wrapper.
    if span.is_disabled() {
        run.await
    } else {
        run.instrument(span).await
    }
}

enum Ended {
    Done(HookResult),
    Panicked,
    TimedOut,
    Cancelled,
}

/// What the main phases ended with, as the invocation's outcome: a contained panic, the
/// deadline (`timed`: the deadline and when the phases started) and cancellation become
/// errors.
fn main_outcome(
    ctx: &mut ToolInvokeContext,
    ended: Ended,
    timed: Option<(tokio::time::Instant, tokio::time::Instant)>,
) -> HookResult {
    match ended {
        Ended::Done(result) => result,
        Ended::Panicked => {
            let message = if ctx.progress.in_tool {
                "the tool panicked; the panic was contained".to_owned()
            } else {
                format!(
                    "a hook panicked at stage `{}`; the panic was contained",
                    ctx.stage
                )
            };
            ctx.progress.in_tool = false;
            tracing::error!(stage = %ctx.stage, "{message}");
            Err(ToolError::internal(message).into())
        }
        Ended::TimedOut => {
            ctx.progress.in_tool = false;
            ctx.cancel_if_watched();
            let after = timed.map_or_else(Default::default, |(deadline, started)| {
                deadline.saturating_duration_since(started)
            });
            Err(ToolError::Timeout { after }.into())
        }
        Ended::Cancelled => {
            ctx.progress.in_tool = false;
            Err(ToolError::Cancelled.into())
        }
    }
}

/// Phases 1–8: `Ok` with the output set, or the control outcome that ended them.
async fn drive(entry: &ToolEntry, ctx: &mut ToolInvokeContext, start: Start) -> HookResult {
    let resume_after = match start {
        Start::Fresh => None,
        Start::Resume { after, decision } => {
            if let ResumeDecision::Reject { reason } = decision {
                return Err(ToolError::abort(reason, "rejected", 403).into());
            }
            authorize_again(entry, ctx).await?;
            match decision {
                ResumeDecision::Complete { output } => {
                    ctx.set_output(output);
                    return output_phase_after(entry, ctx, after.max(Stage::DidExecute)).await;
                }
                ResumeDecision::Approve if ctx.output().is_some() => {
                    // Suspended after a respond or after execution: only output stages remain.
                    return output_phase_after(entry, ctx, after.max(Stage::DidExecute)).await;
                }
                _ => Some(after),
            }
        }
    };

    // Phases without hooks are run in place, without a future of their own.
    let before_execution = match resume_after {
        None if entry.plan.present().intersection(PRE_WITH_MISS).is_empty() => {
            check_input_in_place(entry, ctx).map(|()| ctx.stage = Stage::DidCacheMiss)
        }
        None => run_fresh_pre_phase!(entry, ctx),
        Some(after) => pre_phase(entry, ctx, after).await,
    };
    let executed = match before_execution {
        Ok(()) if entry.plan.present().intersection(EXECUTE_SET).is_empty() => {
            // The stage the tool runs at when execution has hooks but none at it.
            ctx.stage = Stage::WillExecute;
            ctx.attempt += 1;
            run_tool!(entry, ctx)?;
            true
        }
        Ok(()) => run_execute_phase!(entry, ctx)?,
        Err(Control::Respond(value)) => {
            let at = ctx.stage;
            ctx.set_output(value);
            if at == Stage::WillReadCache && enter(entry, ctx, Stage::DidCacheHit) {
                respond_continues(run_stage!(entry, ctx, Stage::DidCacheHit), ctx)?;
            }
            false
        }
        Err(other) => return Err(other),
    };
    let mut stages = entry.plan.present().intersection(OUTPUT_SET);
    if !executed {
        stages = stages.difference(Stage::WillWriteCache.into());
    }
    run_output_phase!(entry, ctx, stages)
}

/// Phases 1–6 of a resumed invocation. Ends with `Err(Control::Respond)` on a
/// short-circuit.
async fn pre_phase(entry: &ToolEntry, ctx: &mut ToolInvokeContext, after: Stage) -> HookResult {
    // A request to wait from a stage that runs again (the semaphore) waits until the
    // stages that ran before the suspension are passed again.
    let until = PARK_UNTIL.max(after);
    let mut parked = None;
    for &stage in PRE_STAGES {
        // Stages up to the suspending one are done — except the semaphore, whose permit
        // was given back while the call waited.
        if stage <= after && stage != Stage::WillAcquireSemaphore {
            continue;
        }
        if stage > until
            && let Some(request) = parked.take()
        {
            return Err(unpark(ctx, until, request));
        }
        match stage {
            Stage::WillAcquireQuota => ctx.progress.quota = true,
            Stage::WillAcquireSemaphore => ctx.progress.semaphore = true,
            _ => {}
        }
        if enter(entry, ctx, stage)
            && let Err(control) = run_stage!(entry, ctx, stage)
            && let Some(control) = park(ctx, &mut parked, until, control)
        {
            return Err(control);
        }
        if stage == Stage::WillValidateInput {
            check_input(entry, ctx)?;
        }
    }
    if let Some(request) = parked {
        return Err(unpark(ctx, until, request));
    }
    if after < Stage::DidCacheMiss && enter(entry, ctx, Stage::DidCacheMiss) {
        run_stage!(entry, ctx, Stage::DidCacheMiss)?;
    }
    Ok(())
}

/// The last stage before a call that asks to wait actually waits: the end of
/// `will_redact_input`. A call is bound to what it would run with (DESIGN.md §10), so a
/// request to wait from an earlier stage — consent, in the policy phase — is parked while
/// the call goes on: it takes its quota unit (a waiting call counts against its caller's
/// limits), its input is checked and redacted, and only then is it stored. An error on the
/// way (over the rate limit, invalid input) fails the call instead: nobody is asked to
/// approve a call that could not run.
const PARK_UNTIL: Stage = Stage::WillRedactInput;

/// What a control outcome of a pre-execution stage does while requests to wait are parked
/// until `until`: `None` to go on with the next stage.
///
/// * A request to wait at a stage up to `until` is parked. A second one joins the first:
///   one person's decision settles the call.
/// * A respond while one is parked keeps the value as the output and the call waits now:
///   a short-circuit does not get around the wait.
/// * Anything else ends the main phases as usual.
fn park(
    ctx: &mut ToolInvokeContext,
    parked: &mut Option<SuspendRequest>,
    until: Stage,
    control: Control,
) -> Option<Control> {
    match control {
        Control::Suspend(request) if ctx.stage <= until => {
            if parked.is_none() {
                *parked = Some(request);
            } else {
                tracing::debug!(stage = %ctx.stage, reason = %request.reason, "a second request to wait joins the first: one decision settles the call");
            }
            None
        }
        Control::Respond(value) => match parked.take() {
            Some(request) => {
                ctx.set_output(value);
                Some(Control::Suspend(request))
            }
            None => Some(Control::Respond(value)),
        },
        other => Some(other),
    }
}

/// The parked request takes effect: the call waits as if suspended at `at`.
fn unpark(ctx: &mut ToolInvokeContext, at: Stage, request: SuspendRequest) -> Control {
    ctx.stage = at;
    Control::Suspend(request)
}

/// The policy stages that decide whether a call may run at all. They run again when a
/// suspended call resumes to run or to be completed, with the pipeline's hooks as they are
/// now: access may have been revoked, or a tool switched off, while the call waited
/// (DESIGN.md §10). Consent is not asked again: a person has just decided.
const AUTHORIZE_AGAIN: [Stage; 2] = [Stage::WillAuthorize, Stage::WillCheckFeatureFlags];

/// Runs [`AUTHORIZE_AGAIN`] for a resumed call. A hook there may let the call through or
/// refuse it; any other outcome is a hook that does not belong there, and refuses the call.
async fn authorize_again(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> HookResult {
    for stage in AUTHORIZE_AGAIN {
        if !enter(entry, ctx, stage) {
            continue;
        }
        match run_stage!(entry, ctx, stage) {
            Ok(()) => {}
            Err(Control::Error(error)) => return Err(Control::Error(error)),
            Err(other) => {
                return Err(ToolError::internal(format!(
                    "a hook at `{stage}` answered a resumed call with `{}`, so it did not run: on resume that stage may only let a call through or refuse it (ask for approval at `will_check_consent`)",
                    other.label()
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// The tool's check of a fresh invocation, at the `will_validate_input` stage it belongs
/// to (so the acquire stages before it count as reached).
fn check_input_in_place(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> HookResult {
    ctx.stage = Stage::WillValidateInput;
    reach_capacity_stages(ctx, Stage::WillValidateInput);
    check_input(entry, ctx)
}

/// Every stage up to `did_cache_miss`, the last of phase 6 on a cache miss.
const PRE_WITH_MISS: StageSet = StageSet::before(Stage::DidCacheHit).with(Stage::DidCacheMiss);

/// Marks the acquire stages passed on the way to `stage` as reached, so that their
/// release stages run.
#[inline]
fn reach_capacity_stages(ctx: &mut ToolInvokeContext, stage: Stage) {
    ctx.progress.quota |= stage >= Stage::WillAcquireQuota;
    ctx.progress.semaphore |= stage >= Stage::WillAcquireSemaphore;
}

/// The tool's own check, right after the `will_validate_input` hooks.
fn check_input(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> HookResult {
    if entry.wants_object && !ctx.input().is_object() {
        return Err(ToolError::InvalidInput(crate::InputViolations::one(
            "",
            "the arguments must be a JSON object",
        ))
        .into());
    }
    if let Some(prepared) = entry.tool.check_input(ctx.input())? {
        ctx.prepared = Some((ctx.input_version, prepared));
    }
    Ok(())
}

/// What phase 7 ended with, retries that ran out aside ([`give_up`]): whether the output
/// comes from a real execution, or the control outcome that ends the main phases.
fn execute_phase_outcome(ctx: &mut ToolInvokeContext, result: HookResult) -> Result<bool, Control> {
    match result {
        // A wrapper that returns `Ok` without running the tool produced nothing to cache.
        Ok(()) => Ok(ctx.attempt > 0),
        Err(Control::Respond(value)) => {
            ctx.set_output(value);
            Ok(false)
        }
        Err(other) => Err(other),
    }
}

/// Retries ran out: the error is kept, `on_give_up` runs, and the error ends the main
/// phases. A future of its own, made only on this path.
async fn give_up(entry: &ToolEntry, ctx: &mut ToolInvokeContext, error: ToolError) -> Control {
    ctx.error = Some(error.clone());
    if let Some(first) = enter_tail(entry, ctx, Stage::OnGiveUp) {
        run_tail_stage!(entry, ctx, Stage::OnGiveUp, first);
    }
    Control::Error(error)
}

/// One attempt as the future an `around_execute` chain calls ([`Next::run`]).
pub(crate) async fn execute_once(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> HookResult {
    run_execute_once!(entry, ctx)
}

/// Phase 8 of a resumed invocation, after stage `done` (nothing was executed in it).
async fn output_phase_after(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    done: Stage,
) -> HookResult {
    let stages = entry
        .plan
        .present()
        .intersection(OUTPUT_SET)
        .difference(Stage::WillWriteCache.into())
        .difference(StageSet::before(done).with(done));
    run_output_phase!(entry, ctx, stages)
}

#[inline]
fn respond_continues(result: HookResult, ctx: &mut ToolInvokeContext) -> HookResult {
    match result {
        Err(Control::Respond(value)) => {
            ctx.set_output(value);
            Ok(())
        }
        other => other,
    }
}

/// Settles the outcome of the main phases (a suspension aside): the output of a respond,
/// or the error.
fn settle_outcome(ctx: &mut ToolInvokeContext, outcome: HookResult) {
    match outcome {
        Ok(()) | Err(Control::Suspend(_)) => {}
        Err(Control::Respond(value)) => ctx.set_output(value),
        Err(Control::Error(error)) => ctx.error = Some(error),
    }
}

/// Stores the suspended call; the caller's error is [`ToolError::Suspended`].
async fn suspend(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    request: SuspendRequest,
) -> Result<ToolError, ToolError> {
    let stage = match ctx.stage {
        // Suspended inside execution: resuming runs the execution phase again.
        Stage::AroundExecute | Stage::OnRetry | Stage::WillExecute => Stage::DidCacheMiss,
        stage => stage,
    };
    let id = new_suspension_id();
    let saved = SuspendedInvocation {
        id: id.clone(),
        tool: entry.definition.name.clone(),
        tool_version: entry.definition.version.clone(),
        session_id: ctx.session_id().map(str::to_owned),
        request_id: ctx.request_id().to_string(),
        user: ctx.user().clone(),
        input: ctx.input().clone(),
        output: ctx.output().cloned(),
        metadata: ctx.metadata().clone(),
        stage,
        reason: request.reason.clone(),
        payload: request.payload,
        suspended_at: std::time::SystemTime::now(),
        expires_at: None,
    };
    entry.shared.suspensions.save(saved).await?;
    tracing::info!(stage = %stage, suspension_id = %id, "invocation suspended");
    Ok(ToolError::Suspended {
        suspension_id: id,
        reason: request.reason,
    })
}

/// The tail as a future of its own: for an invocation whose future was dropped before its
/// tail was done ([`Guard`]).
async fn tail(entry: &ToolEntry, ctx: &mut ToolInvokeContext) {
    ctx.progress.tail_started = true;
    run_tail!(entry, ctx);
}

/// Whether [`run_tail!`] has a hook to run (or to go on with, after a drop).
#[inline]
fn has_tail_hooks(entry: &ToolEntry, ctx: &ToolInvokeContext) -> bool {
    !entry.plan.present().intersection(TAIL_SET).is_empty() || ctx.progress.tail_hook.is_some()
}

/// The tail when no hook is in it: every tail stage is done at once. No hook can read the
/// finish time either, so the clock is not read for it here; what reports a duration
/// (`invoke_detailed`, the end event) reads the clock itself.
fn end_without_tail_hooks(ctx: &mut ToolInvokeContext) {
    ctx.progress.tail_done = ctx.progress.tail_done.union(TAIL_SET);
    ctx.stage = Stage::WillFinalizeInvoke;
    log_end(ctx);
}

/// The invocation's last event.
fn log_end(ctx: &ToolInvokeContext) {
    if let Some(error) = &ctx.error {
        tracing::debug!(
            code = error.code(),
            elapsed_us = ctx.elapsed().as_micros() as u64,
            "invocation ended"
        );
    } else {
        tracing::debug!(
            elapsed_us = ctx.elapsed().as_micros() as u64,
            "invocation succeeded"
        );
    }
}

/// Tail stages run at most once each, and what they return or how they panic never
/// changes the outcome. Callers run a tail stage as
/// `if let Some(first) = enter_tail(..) { run_tail_stage!(.., first) }`.
///
/// Marks tail stage `stage` as begun and tells from which hook to run it: `None` when it
/// already ran or has no hooks. A stage interrupted by the drop of the invocation future
/// goes on with the hook after the one that was running (so every hook's release still
/// runs, none twice); any other stage that has begun never runs again.
#[inline]
fn enter_tail(entry: &ToolEntry, ctx: &mut ToolInvokeContext, stage: Stage) -> Option<usize> {
    let first = match ctx.progress.tail_hook {
        Some((interrupted, hook)) if interrupted == stage => hook + 1,
        _ if ctx.progress.tail_done.contains(stage) => return None,
        _ => 0,
    };
    ctx.progress.tail_done = ctx.progress.tail_done.with(stage);
    ctx.stage = stage;
    entry.plan.has(stage).then_some(first)
}

/// Enters `stage` of the main phases and tells whether it has hooks. Callers check it
/// before building the stage's future, so that an empty stage costs this branch and no
/// future (DESIGN.md §9).
#[inline]
fn enter(entry: &ToolEntry, ctx: &mut ToolInvokeContext, stage: Stage) -> bool {
    ctx.stage = stage;
    entry.plan.has(stage)
}

/// What follows a hook's outcome: its timing is recorded (when asked for) and its failure
/// mode applied. `Err` when the outcome takes effect (never in the tail: `can_apply` is
/// `false` there).
#[inline]
fn settle(
    planned: &PlannedHook,
    stage: Stage,
    ctx: &mut ToolInvokeContext,
    hook_started: Option<ClockInstant>,
    outcome: HookResult,
    can_apply: bool,
) -> HookResult {
    if let Some(t) = hook_started {
        ctx.trail_mut().hook_timings.push(HookTiming {
            stage,
            hook: Arc::clone(&planned.name),
            duration: t.elapsed(),
        });
    }
    match outcome {
        Err(control) => decide(planned, stage, ctx, control, can_apply).map_or(Ok(()), Err),
        Ok(()) => Ok(()),
    }
}

/// Keeps how long `stage` took (room for every timed stage is made at the first).
fn record_stage_duration(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    started: ClockInstant,
) {
    let durations = &mut ctx.trail_mut().stage_durations;
    if durations.capacity() == 0 {
        durations.reserve_exact(entry.plan.timed_stages());
    }
    durations.push((stage, started.elapsed()));
}

/// Calls `planned`'s filter and stage method under `catch_unwind` (for the tail, and for
/// hooks in ignore or audit mode): a panic in the hook's own code comes back as `Err`.
fn call_contained<'a>(
    planned: &'a PlannedHook,
    ctx: &'a mut ToolInvokeContext,
) -> std::thread::Result<Called<'a>> {
    contained(move || {
        if !planned.hook.filter(ctx) {
            return Called::Skipped;
        }
        let called = (planned.call)(&*planned.hook, ctx);
        if called.is_ready_ok() {
            return Called::ReadyOk;
        }
        match called.into_ready() {
            Ok(outcome) => Called::Ready(outcome),
            Err(pending) => Called::Pending(pending),
        }
    })
}

/// Calls `f`, catching a panic.
fn contained<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
}

/// Calls a hook in ignore or audit mode at a main-phase stage: its failures must not fail
/// the call, so neither must its panic — its code runs under `catch_unwind`. `None` when
/// there is nothing to settle (filtered out, a ready `Ok(())` untimed, or a contained
/// panic); else when it started (if timed) and its outcome. Out of line, so that the
/// common fail-call hooks' loop stays small.
async fn call_fail_open(
    planned: &PlannedHook,
    stage: Stage,
    ctx: &mut ToolInvokeContext,
    timed: bool,
) -> Option<(Option<ClockInstant>, HookResult)> {
    let hook_started = timed.then(ClockInstant::now);
    let outcome = match call_contained(planned, ctx) {
        Ok(Called::Skipped) => return None,
        Ok(Called::ReadyOk) if hook_started.is_none() => return None,
        Ok(Called::ReadyOk) => Ok(Ok(())),
        Ok(Called::Ready(outcome)) => Ok(outcome),
        Ok(Called::Pending(pending)) => AssertUnwindSafe(pending).catch_unwind().await,
        Err(panic) => Err(panic),
    };
    match outcome {
        Ok(outcome) => Some((hook_started, outcome)),
        Err(_) => {
            contained_panic(planned, stage, ctx);
            None
        }
    }
}

/// A hook in ignore or audit mode panicked in a main phase: the panic is logged and kept
/// in the decision trace as the `internal` failure it would have been, and the call goes on.
fn contained_panic(planned: &PlannedHook, stage: Stage, ctx: &mut ToolInvokeContext) {
    tracing::error!(stage = %stage, hook = %planned.name, mode = ?planned.failure, "a hook panicked; the panic was contained and, by the hook's failure mode, the call goes on");
    ctx.trail_mut().decisions.push(Decision {
        stage,
        hook: Arc::clone(&planned.name),
        outcome: "internal".to_owned(),
        applied: false,
    });
}

/// Applies the hook's failure mode to its outcome: `Some` when the outcome takes effect.
fn decide(
    planned: &PlannedHook,
    stage: Stage,
    ctx: &mut ToolInvokeContext,
    control: Control,
    can_apply: bool,
) -> Option<Control> {
    let applied = can_apply
        && match planned.failure {
            FailureMode::FailCall => true,
            FailureMode::Ignore => control.is_decision(),
            FailureMode::Audit => false,
        };
    ctx.trail_mut().decisions.push(Decision {
        stage,
        hook: Arc::clone(&planned.name),
        outcome: control.label().to_owned(),
        applied,
    });
    if applied {
        tracing::info!(stage = %stage, hook = %planned.name, outcome = control.label(), "control outcome");
        Some(control)
    } else {
        tracing::warn!(stage = %stage, hook = %planned.name, outcome = control.label(), mode = ?planned.failure, "control outcome not applied");
        None
    }
}
