//! The tail: `on_error` (on the error path), then record, release and end. It runs whatever
//! the main phases ended with — and after a drop of the invocation future, in a task of its
//! own — each stage at most once; what its hooks return or how they panic never changes the
//! outcome.

use super::ToolEntry;
use super::stages::{self, Phase, StageRun};
use crate::context::{ClockInstant, ToolInvokeContext};
use crate::stage::{Stage, StageSet};

/// The tail's stages, in the order they run.
const ORDER: [Stage; 7] = [
    Stage::OnError,
    Stage::WillAudit,
    Stage::DidAudit,
    Stage::OnMetrics,
    Stage::DidReleaseSemaphore,
    Stage::DidReleaseQuota,
    Stage::WillFinalizeInvoke,
];

const TAIL: StageSet = StageSet::of(&ORDER);

/// Whether the tail has a hook to run (or to go on with, after a drop).
#[inline]
pub(super) fn has_hooks(entry: &ToolEntry, ctx: &ToolInvokeContext) -> bool {
    !entry.plan.present().intersection(TAIL).is_empty() || ctx.progress.tail.running.is_some()
}

/// Runs the tail's stages that have not begun, from the hook after an interrupted one.
pub(super) async fn run(entry: &ToolEntry, ctx: &mut ToolInvokeContext) {
    let failed = ctx.error.as_ref().is_some_and(|e| !e.is_waiting());
    let acquired = ctx.progress.acquired;
    for stage in ORDER {
        let due = match stage {
            Stage::OnError => failed,
            Stage::DidReleaseSemaphore => acquired.semaphore,
            Stage::DidReleaseQuota => acquired.quota,
            _ => true,
        };
        if stage == Stage::WillAudit {
            ctx.finished.get_or_insert_with(ClockInstant::now);
        }
        if !due {
            continue;
        }
        let Some(first) = begin(entry, ctx, stage) else {
            continue;
        };
        if let StageRun::Rest(rest) = stages::run_ready(entry, ctx, stage, first, Phase::Tail) {
            let _ = stages::run_rest(entry, ctx, stage, rest, Phase::Tail).await;
        }
    }
    log_end(ctx);
}

/// The tail when no hook is in it: every tail stage is done at once. No hook can read the
/// finish time either, so the clock is not read for it here; what reports a duration reads
/// the clock itself.
pub(super) fn end_without_hooks(ctx: &mut ToolInvokeContext) {
    ctx.progress.tail.begun = ctx.progress.tail.begun.union(TAIL);
    ctx.stage = Stage::WillFinalizeInvoke;
    log_end(ctx);
}

/// Marks tail stage `stage` as begun and tells from which hook to run it: `None` when it
/// has begun before or has no hooks. A stage interrupted by the drop of the invocation
/// future goes on with the hook after the one that was running (so every hook's release
/// still runs, none twice).
#[inline]
fn begin(entry: &ToolEntry, ctx: &mut ToolInvokeContext, stage: Stage) -> Option<usize> {
    let tail = &mut ctx.progress.tail;
    let first = match tail.running {
        Some((interrupted, hook)) if interrupted == stage => hook + 1,
        _ if tail.begun.contains(stage) => return None,
        _ => 0,
    };
    tail.begun = tail.begun.with(stage);
    ctx.stage = stage;
    entry.plan.has(stage).then_some(first)
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
