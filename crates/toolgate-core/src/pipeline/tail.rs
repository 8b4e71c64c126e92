//! The tail: `on_error` (on the error path), then record, release and end. It runs whatever
//! the main phases ended with — and after a drop of the invocation future, in a task of its
//! own — each stage at most once; what its hooks return or how they panic never changes the
//! outcome.

use std::panic::AssertUnwindSafe;

use super::ToolEntry;
use super::stages::{self, Phase};
use crate::context::{ClockInstant, ToolInvokeContext};
use crate::stage::{Stage, StageSet};

/// The tail's stages. They run in stage order, except `on_error` (last in stage order),
/// which runs first: see [`run`].
const TAIL: StageSet = StageSet::of(&[
    Stage::OnError,
    Stage::WillAudit,
    Stage::DidAudit,
    Stage::OnMetrics,
    Stage::DidReleaseSemaphore,
    Stage::DidReleaseQuota,
    Stage::WillFinalizeInvoke,
]);

/// Whether the tail has a hook to run (or to go on with, after a drop).
#[inline]
pub(super) fn has_hooks(entry: &ToolEntry, ctx: &ToolInvokeContext) -> bool {
    !entry.plan.present().intersection(TAIL).is_empty() || ctx.progress.tail.running.is_some()
}

/// The tail's stages due that have hooks, in the order they run: `on_error` on the error
/// path, a release stage when its acquire stage was reached. `on_error`, last in stage
/// order, runs first.
#[inline]
fn due(entry: &ToolEntry, ctx: &ToolInvokeContext) -> Due {
    let mut due = entry.plan.present().intersection(TAIL);
    let failed = ctx.error.as_ref().is_some_and(|e| !e.is_waiting());
    let acquired = ctx.progress.acquired;
    for (stage, is_due) in [
        (Stage::OnError, failed),
        (Stage::DidReleaseSemaphore, acquired.semaphore),
        (Stage::DidReleaseQuota, acquired.quota),
    ] {
        if !is_due {
            due = due.difference(stage.into());
        }
    }
    Due {
        on_error: due.contains(Stage::OnError),
        rest: due.difference(Stage::OnError.into()),
    }
}

/// The tail's stages due, in the order they run: `on_error` first, then the rest in stage
/// order.
struct Due {
    on_error: bool,
    rest: StageSet,
}

impl Iterator for Due {
    type Item = Stage;

    #[inline]
    fn next(&mut self) -> Option<Stage> {
        if std::mem::take(&mut self.on_error) {
            return Some(Stage::OnError);
        }
        let stage = self.rest.iter().next()?;
        self.rest = self.rest.difference(stage.into());
        Some(stage)
    }
}

/// Runs the tail in place, without a future, as long as the hooks of its stages all finish
/// at once: `true` when it is done, `false` at the first stage due with a hook that may
/// not, which [`run`] then goes on from (the stages run here have begun: they do not run
/// again). The tail of most calls: a future of its own costs more than its stages.
///
/// The hooks' panics are contained by one `catch_unwind` around the stages rather than one
/// per hook: the hook that panicked is the one marked running, and the tail goes on after
/// it as it does after a drop ([`begin`]). Not when stage durations are recorded: a stage
/// run again from its next hook would record two.
#[inline]
pub(super) fn run_in_place(entry: &ToolEntry, ctx: &mut ToolInvokeContext) -> bool {
    if entry.plan.records_durations() {
        return stages_in_place(entry, ctx, Phase::Tail);
    }
    loop {
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
            stages_in_place(entry, ctx, Phase::TailInPlace)
        }));
        match ran {
            Ok(done) => return done,
            Err(panic) => contained_panic(entry, ctx, panic),
        }
    }
}

/// [`run_in_place`]'s stages, from the hook after an interrupted one.
#[inline]
fn stages_in_place(entry: &ToolEntry, ctx: &mut ToolInvokeContext, phase: Phase) -> bool {
    let plain = stages::runs_plain(entry, ctx, phase);
    for stage in due(entry, ctx) {
        if !entry.plan.is_synchronous(stage) {
            return false;
        }
        if stage != Stage::OnError {
            ctx.finished.get_or_insert_with(ClockInstant::now);
        }
        let Some(first) = begin(ctx, stage) else {
            continue;
        };
        // Outcomes in the tail are recorded, never applied.
        let _ = stages::run_synchronous_as(entry, ctx, stage, first, phase, plain);
    }
    ctx.finished.get_or_insert_with(ClockInstant::now);
    end(ctx);
    true
}

/// A hook of a tail run in place panicked: the one marked running. A panic outside every
/// hook is the engine's own, and goes on as it would from the tail's future.
#[cold]
fn contained_panic(
    entry: &ToolEntry,
    ctx: &mut ToolInvokeContext,
    panic: Box<dyn std::any::Any + Send>,
) {
    let Some((stage, index)) = ctx.progress.tail.running else {
        std::panic::resume_unwind(panic);
    };
    let planned = &entry.plan.hooks(stage)[index];
    stages::contained_panic(planned, stage, ctx, Phase::Tail);
}

/// Runs the tail's stages that have not begun, from the hook after an interrupted one.
pub(super) async fn run(entry: &ToolEntry, ctx: &mut ToolInvokeContext) {
    for stage in due(entry, ctx) {
        if stage != Stage::OnError {
            ctx.finished.get_or_insert_with(ClockInstant::now);
        }
        let Some(first) = begin(ctx, stage) else {
            continue;
        };
        // Outcomes in the tail are recorded, never applied.
        let _ = if entry.plan.is_synchronous(stage) {
            stages::run_synchronous(entry, ctx, stage, first, Phase::Tail)
        } else {
            stages::run_stage(entry, ctx, stage, first, Phase::Tail).await
        };
    }
    ctx.finished.get_or_insert_with(ClockInstant::now);
    end(ctx);
}

/// The tail when no hook is in it: every tail stage is done at once. No hook can read the
/// finish time either, so the clock is not read for it here; what reports a duration reads
/// the clock itself.
pub(super) fn end_without_hooks(ctx: &mut ToolInvokeContext) {
    end(ctx);
}

/// Every tail stage is done: those without hooks, or not due, count as begun and over.
#[inline]
fn end(ctx: &mut ToolInvokeContext) {
    ctx.progress.tail.begun = ctx.progress.tail.begun.union(TAIL);
    ctx.stage = Stage::WillFinalizeInvoke;
    log_end(ctx);
}

/// Marks tail stage `stage` (which has hooks) as begun and tells from which hook to run
/// it: `None` when it has begun before. A stage interrupted by the drop of the invocation
/// future goes on with the hook after the one that was running (so every hook's release
/// still runs, none twice).
#[inline]
fn begin(ctx: &mut ToolInvokeContext, stage: Stage) -> Option<usize> {
    let tail = &mut ctx.progress.tail;
    let first = match tail.running {
        Some((interrupted, hook)) if interrupted == stage => hook + 1,
        _ if tail.begun.contains(stage) => return None,
        _ => 0,
    };
    tail.begun = tail.begun.with(stage);
    ctx.stage = stage;
    Some(first)
}

/// The invocation's last event.
fn log_end(ctx: &ToolInvokeContext) {
    // The clock is read only when the event is enabled.
    match &ctx.error {
        Some(error) => tracing::debug!(
            code = error.code(),
            elapsed_us = ctx.elapsed().as_micros() as u64,
            "invocation ended"
        ),
        None => tracing::debug!(
            elapsed_us = ctx.elapsed().as_micros() as u64,
            "invocation succeeded"
        ),
    }
}
