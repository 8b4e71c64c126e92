//! The stage runner: the hooks of one stage in plan order, each outcome under the hook's
//! failure mode.
//!
//! A stage whose hooks all declare it synchronous ([`Hook::synchronous_stages`], which
//! `#[hook]` writes) runs with [`run_synchronous`]: in place, without a future. Any other
//! stage runs with [`run_stage`], one future for the stage: each hook is still called in
//! place, and only one whose future is not ready at once is awaited. When every hook of
//! such a stage declared it or answered with the trait's default method (a future that
//! names the stage and the hook's type, which only that method makes), the plan learns the
//! stage synchronous, and it runs in place from the next call on. The plan says which
//! stage is which ([`ToolPlan::is_synchronous`](crate::plan::ToolPlan::is_synchronous)).
//! The same runners serve the main phases and the tail ([`Phase`]).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tracing::Instrument;

use super::{ToolEntry, telemetry};
use crate::context::{ClockInstant, Decision, HookTiming, ToolInvokeContext};
use crate::control::{Control, HookResult};
use crate::error::ToolError;
use crate::hook::{FailureMode, Hook, HookFuture};
use crate::plan::PlannedHook;
use crate::stage::Stage;

/// Which part of the invocation a stage belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Phases 1–8: an outcome takes effect under the hook's failure mode, and a panic in a
    /// fail-call hook fails the call.
    Main,
    /// `on_give_up` and the tail: outcomes are recorded and logged, never applied; every
    /// hook's code runs under `catch_unwind`, and a pending hook is bounded by the tail
    /// timeout.
    Tail,
    /// The tail run in place under one `catch_unwind` of its caller's
    /// ([`tail::run_in_place`](super::tail::run_in_place)), for synchronous stages only: as
    /// [`Phase::Tail`], except that a fail-call hook's code runs without a `catch_unwind`
    /// of its own. The hook is marked running before it is called, so that the caller
    /// contains its panic and goes on with the hook after it.
    TailInPlace,
}

impl Phase {
    /// Whether this is the tail (or `on_give_up`): outcomes are never applied.
    #[inline]
    fn is_tail(self) -> bool {
        self != Phase::Main
    }
}

/// Runs the hooks of `stage`, from the one at `from`, in place: for a stage the plan says
/// is synchronous (every hook there declares it). Callers check that the stage has hooks
/// first.
#[inline(always)]
pub(super) fn run_synchronous(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    phase: Phase,
) -> HookResult {
    let plain = runs_plain(entry, ctx, phase);
    run_synchronous_as(entry, ctx, stage, from, phase, plain)
}

/// Whether the synchronous stages of `phase` run with [`run_plain`] in this invocation:
/// not [`Phase::Tail`], and nothing is timed or traced. The same for every stage of an
/// invocation's phase, so that a walk or a tail asks once.
#[inline(always)]
pub(super) fn runs_plain(entry: &ToolEntry, ctx: &ToolInvokeContext, phase: Phase) -> bool {
    phase != Phase::Tail && entry.plan.times_nothing() && !ctx.progress.stage_spans
}

/// [`run_synchronous`] with its choice of runner made beforehand ([`runs_plain`]).
#[inline(always)]
pub(super) fn run_synchronous_as(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    phase: Phase,
    plain: bool,
) -> HookResult {
    if plain {
        return run_plain(entry, ctx, stage, from, phase);
    }
    run_timed_or_traced(entry, ctx, stage, from, phase)
}

/// [`run_synchronous`] when something is timed or traced, or for [`Phase::Tail`]. Out of
/// line: the common runner, [`run_plain`], is inlined where each stage runs.
#[inline(never)]
fn run_timed_or_traced(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    phase: Phase,
) -> HookResult {
    let started = entry.plan.records_durations().then(ClockInstant::now);
    if ctx.progress.stage_spans {
        return run_synchronous_traced(entry, ctx, stage, from, started, phase);
    }
    run_hooks_in_place(entry, ctx, stage, from, started, phase)
}

/// The hooks of a synchronous stage, from the one at `from`, when nothing is timed or
/// traced, in the main phases or [`Phase::TailInPlace`]: each hook whose panic fails the
/// call (the default failure mode) is called and, when it lets the call through, nothing
/// else is done. The first hook whose panic is contained, or that answers otherwise, goes
/// on in [`run_hooks_in_place`], out of line.
#[inline(always)]
fn run_plain(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    phase: Phase,
) -> HookResult {
    let hooks = entry.plan.hooks(stage);
    for (index, planned) in hooks.iter().enumerate().skip(from) {
        if !planned.plain && planned.failure != FailureMode::FailCall {
            return run_rest(entry, ctx, stage, index, phase);
        }
        if phase == Phase::TailInPlace {
            ctx.progress.tail.running = Some((stage, index));
        }
        // A hook that is not plain here is filtered.
        if !planned.plain && filtered_out(planned, ctx) {
            continue;
        }
        let future = (planned.call)(&*planned.hook, ctx);
        if future.is_ready_ok() {
            continue;
        }
        let outcome = match future.into_ready() {
            Ok(outcome) => outcome,
            Err(_pending) => Err(not_synchronous(planned, stage)),
        };
        return settle_plain(entry, ctx, stage, index, outcome, phase);
    }
    if phase.is_tail() {
        ctx.progress.tail.running = None;
    }
    Ok(())
}

/// Whether the filter of `planned` leaves this call out. Out of line, so that the hook
/// found behind its `Arc<dyn Hook>` for the filter is not kept across the call for the
/// method: the common hook has no filter, and the loop stays lean for it.
#[inline(never)]
fn filtered_out(planned: &PlannedHook, ctx: &ToolInvokeContext) -> bool {
    !planned.hook.filter(ctx)
}

/// [`run_plain`]'s hook at `index` answered with `outcome`, not a plain `Ok`: its failure
/// mode applies, and the stage goes on after it.
#[cold]
#[inline(never)]
fn settle_plain(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    index: usize,
    outcome: HookResult,
    phase: Phase,
) -> HookResult {
    let planned = &entry.plan.hooks(stage)[index];
    if let Err(control) = apply(planned, stage, ctx, None, outcome, phase) {
        end_stage(entry, ctx, stage, None, phase);
        return Err(control);
    }
    run_rest(entry, ctx, stage, index + 1, phase)
}

/// The rest of a stage [`run_plain`] began, from the hook at `from`: nothing is timed or
/// traced.
#[inline(never)]
fn run_rest(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    phase: Phase,
) -> HookResult {
    run_hooks_in_place(entry, ctx, stage, from, None, phase)
}

/// [`run_synchronous`] inside the stage's span, for an invocation an OpenTelemetry
/// subscriber traces.
#[inline(never)]
fn run_synchronous_traced(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    started: Option<ClockInstant>,
    phase: Phase,
) -> HookResult {
    let _span = telemetry::stage_span(stage).entered();
    run_hooks_in_place(entry, ctx, stage, from, started, phase)
}

/// The hooks of a synchronous stage from the one at `from` on. `started` is when the
/// stage began, when its duration is recorded.
#[inline(always)]
fn run_hooks_in_place(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    started: Option<ClockInstant>,
    phase: Phase,
) -> HookResult {
    let timed = entry.plan.records_hook_timings();
    let hooks = entry.plan.hooks(stage);
    for (index, planned) in hooks.iter().enumerate().skip(from) {
        let hook_started = timed.then(ClockInstant::now);
        let outcome = if contains_panics(planned, phase) {
            match call_contained(planned, stage, ctx, phase, index) {
                // Filtered out, a contained panic, or let through with nothing to record.
                None => continue,
                Some(Ok(())) if hook_started.is_none() => continue,
                Some(outcome) => outcome,
            }
        } else {
            if phase == Phase::TailInPlace {
                ctx.progress.tail.running = Some((stage, index));
            }
            // Found once: reaching the hook behind its `Arc<dyn Hook>` reads the vtable.
            let hook: &dyn Hook = &*planned.hook;
            if planned.filtered && !hook.filter(ctx) {
                continue;
            }
            let future = (planned.call)(hook, ctx);
            // Nothing follows a hook that let the call through, unless its time is recorded.
            if future.is_ready_ok() && hook_started.is_none() {
                continue;
            }
            match future.into_ready() {
                Ok(outcome) => outcome,
                Err(_pending) => Err(not_synchronous(planned, stage)),
            }
        };
        if let Err(control) = apply(planned, stage, ctx, hook_started, outcome, phase) {
            end_stage(entry, ctx, stage, started, phase);
            return Err(control);
        }
    }
    end_stage(entry, ctx, stage, started, phase);
    Ok(())
}

/// Calls a synchronous hook whose panic is contained (a fail-open hook, or any hook in the
/// tail): `None` when there is nothing to apply (filtered out, or a contained panic). Out
/// of line, so that the common fail-call loop stays small.
#[inline(never)]
fn call_contained(
    planned: &PlannedHook,
    stage: Stage,
    ctx: &mut ToolInvokeContext,
    phase: Phase,
    index: usize,
) -> Option<HookResult> {
    if phase.is_tail() {
        ctx.progress.tail.running = Some((stage, index));
    }
    let called = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let hook: &dyn Hook = &*planned.hook;
        if planned.filtered && !hook.filter(ctx) {
            return None;
        }
        let future = (planned.call)(hook, ctx);
        if future.is_ready_ok() {
            return Some(Ok(()));
        }
        Some(match future.into_ready() {
            Ok(outcome) => outcome,
            Err(_pending) => Err(not_synchronous(planned, stage)),
        })
    }));
    called.unwrap_or_else(|_panic| {
        contained_panic(planned, stage, ctx, phase);
        None
    })
}

/// Runs the hooks of `stage`, from the one at `from`, for a stage where some hook may not
/// finish at once: one future for the stage, in which each hook is called in place and one
/// whose future is not ready is awaited. Callers check that the stage has hooks first.
pub(super) async fn run_stage(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    phase: Phase,
) -> HookResult {
    let started = entry.plan.records_durations().then(ClockInstant::now);
    if ctx.progress.stage_spans {
        // Boxed: a traced invocation's stage keeps its span, out of the state of the
        // untraced one.
        let span = telemetry::stage_span(stage);
        let traced = run_hooks(entry, ctx, stage, from, started, phase).instrument(span);
        return Box::pin(traced).await;
    }
    run_hooks(entry, ctx, stage, from, started, phase).await
}

/// [`run_stage`]'s hooks, from the one at `from`.
async fn run_hooks(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    from: usize,
    started: Option<ClockInstant>,
    phase: Phase,
) -> HookResult {
    let timed = entry.plan.records_hook_timings();
    // Whether every hook of the stage, so far, declared it synchronous or answered with
    // the trait's default method: then the stage runs in place from the next call on.
    let mut learnable = from == 0;
    for (index, planned) in entry.plan.hooks(stage).iter().enumerate().skip(from) {
        let hook_started = timed.then(ClockInstant::now);
        let contain = contains_panics(planned, phase);
        let future = if contain {
            if phase.is_tail() {
                ctx.progress.tail.running = Some((stage, index));
            }
            let Some(called) = call(planned, ctx, true).ok() else {
                contained_panic(planned, stage, ctx, phase);
                learnable = false;
                continue;
            };
            // `None`: filtered out.
            let Some(future) = called else {
                learnable = false;
                continue;
            };
            future
        } else {
            let hook: &dyn Hook = &*planned.hook;
            if planned.filtered && !hook.filter(ctx) {
                learnable = false;
                continue;
            }
            (planned.call)(hook, ctx)
        };
        learnable &= planned.synchronous || future.is_default_method(stage, planned.type_id);
        // Nothing follows a hook that let the call through, unless its time is recorded.
        if future.is_ready_ok() && hook_started.is_none() {
            continue;
        }
        let settled = match future.into_ready() {
            Ok(outcome) => Ok(Some(outcome)),
            Err(_pending) if planned.synchronous => Ok(Some(Err(not_synchronous(planned, stage)))),
            Err(pending) => wait(entry, planned, stage, pending, contain, phase).await,
        };
        let outcome = match settled {
            Ok(Some(outcome)) => outcome,
            // Abandoned past the tail timeout.
            Ok(None) => continue,
            Err(_panic) => {
                contained_panic(planned, stage, ctx, phase);
                continue;
            }
        };
        if let Err(control) = apply(planned, stage, ctx, hook_started, outcome, phase) {
            end_stage(entry, ctx, stage, started, phase);
            return Err(control);
        }
    }
    if learnable {
        entry.plan.learn_synchronous(stage);
    }
    end_stage(entry, ctx, stage, started, phase);
    Ok(())
}

/// Runs `stage` whole, in the main phases: for the paths where one more future costs
/// nothing worth saving (a resumed call, a retry).
pub(super) async fn run_main_stage(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
) -> HookResult {
    ctx.stage = stage;
    if !entry.plan.has(stage) {
        return Ok(());
    }
    if entry.plan.is_synchronous(stage) {
        return run_synchronous(entry, ctx, stage, 0, Phase::Main);
    }
    run_stage(entry, ctx, stage, 0, Phase::Main).await
}

/// Whether a panic in `planned`'s code is contained here (the call goes on) rather than
/// failing the call, or contained by the caller ([`Phase::TailInPlace`]).
#[inline]
fn contains_panics(planned: &PlannedHook, phase: Phase) -> bool {
    phase == Phase::Tail || planned.failure != FailureMode::FailCall
}

/// Calls `planned`'s filter and, when it lets the call through, its stage method; under
/// `catch_unwind` when `contain`.
#[inline]
fn call<'a>(
    planned: &'a PlannedHook,
    ctx: &'a mut ToolInvokeContext,
    contain: bool,
) -> std::thread::Result<Option<HookFuture<'a>>> {
    let once = move || {
        let ctx = ctx;
        // Reached once: the hook behind its `Arc<dyn Hook>` is a vtable read.
        let hook: &dyn Hook = &*planned.hook;
        (!planned.filtered || hook.filter(ctx)).then(|| (planned.call)(hook, ctx))
    };
    if contain {
        std::panic::catch_unwind(AssertUnwindSafe(once))
    } else {
        Ok(once())
    }
}

/// Awaits a hook that did not finish at once: `Ok(None)` when the tail timeout abandoned
/// it, `Err` for a contained panic.
async fn wait(
    entry: &ToolEntry,
    planned: &PlannedHook,
    stage: Stage,
    pending: HookFuture<'_>,
    contain: bool,
    phase: Phase,
) -> std::thread::Result<Option<HookResult>> {
    if !contain {
        return Ok(Some(pending.await));
    }
    let mut pending = AssertUnwindSafe(pending).catch_unwind();
    if phase == Phase::Main {
        return pending.await.map(Some);
    }
    // Most hooks finish at their first poll: only one that does not reads the clock for a
    // timer.
    if let std::task::Poll::Ready(settled) = futures::poll!(&mut pending) {
        return settled.map(Some);
    }
    // Boxed: the timer is large, and kept out of the state of every stage's future it
    // would otherwise be part of.
    let timeout = entry.shared.tail_hook_timeout;
    match Box::pin(tokio::time::timeout(timeout, pending)).await {
        Ok(settled) => settled.map(Some),
        Err(_) => {
            tracing::error!(stage = %stage, hook = %planned.name, timeout_ms = timeout.as_millis() as u64, "a hook did not finish within the tail timeout and was abandoned; the outcome is kept");
            Ok(None)
        }
    }
}

/// Records how long `stage` took, when asked, and ends a tail stage's hook tracking.
#[inline(always)]
fn end_stage(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    stage: Stage,
    started: Option<ClockInstant>,
    phase: Phase,
) {
    if phase.is_tail() {
        ctx.progress.tail.running = None;
    }
    if let Some(started) = started {
        record_duration(entry, ctx, stage, started);
    }
}

/// Keeps how long `stage` took in the context's trail.
#[inline(never)]
fn record_duration(
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

/// What follows a hook's outcome: its timing is kept (when asked for) and its failure mode
/// applied. `Err` when the outcome takes effect — never in the tail.
#[inline]
fn apply(
    planned: &PlannedHook,
    stage: Stage,
    ctx: &mut ToolInvokeContext,
    hook_started: Option<ClockInstant>,
    outcome: HookResult,
    phase: Phase,
) -> HookResult {
    if let Some(t) = hook_started {
        ctx.trail_mut().hook_timings.push(HookTiming {
            stage,
            hook: Arc::clone(&planned.name),
            duration: t.elapsed(),
        });
    }
    let Err(control) = outcome else {
        return Ok(());
    };
    let applied = phase == Phase::Main
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
        Err(control)
    } else {
        tracing::warn!(stage = %stage, hook = %planned.name, outcome = control.label(), mode = ?planned.failure, "control outcome not applied");
        Ok(())
    }
}

/// A contained panic: logged and, in the main phases, kept in the decision trace as the
/// `internal` failure it would have been; the call goes on.
pub(super) fn contained_panic(
    planned: &PlannedHook,
    stage: Stage,
    ctx: &mut ToolInvokeContext,
    phase: Phase,
) {
    if phase.is_tail() {
        tracing::error!(stage = %stage, hook = %planned.name, "a hook panicked; the panic was contained and the outcome kept");
        return;
    }
    tracing::error!(stage = %stage, hook = %planned.name, mode = ?planned.failure, "a hook panicked; the panic was contained and, by the hook's failure mode, the call goes on");
    ctx.trail_mut().decisions.push(Decision {
        stage,
        hook: Arc::clone(&planned.name),
        outcome: "internal".to_owned(),
        applied: false,
    });
}

/// A hook that lists `stage` among its synchronous stages returned a future that was not
/// ready: a bug in the hook, reported as its failure.
#[cold]
fn not_synchronous(planned: &PlannedHook, stage: Stage) -> Control {
    ToolError::internal(format!(
        "hook `{}` lists `{stage}` in `synchronous_stages` but its method there did not finish at once; remove the stage from that list (or let `#[hook]` write it)",
        planned.name
    ))
    .into()
}
