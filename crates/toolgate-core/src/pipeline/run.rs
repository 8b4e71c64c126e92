//! One invocation from start to end: every path of DESIGN.md §2.
//!
//! The main phases ([`walk`]) run under the deadline, the caller's cancellation token and a
//! panic boundary. Whatever they end with, the [`tail`] runs. If the invocation future is
//! dropped before the tail is done — or the caller's deadline passes while a tail hook
//! still works — its [`Guard`] hands the context to a task that runs the rest of the tail;
//! RAII guards kept in the context come back in every case.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tracing::Instrument;

use super::telemetry::{self, Printable};
use super::walk::{self, Start};
use super::{ToolEntry, tail};
use crate::context::{ContextParts, ToolInvokeContext};
use crate::control::{Control, HookResult, SuspendRequest};
use crate::error::ToolError;
use crate::stage::Stage;
use crate::suspension::{SuspendedInvocation, new_suspension_id};

/// What an ended invocation tells beyond its result, read only by a caller that asks.
pub(super) enum Details<'a> {
    /// The finished context.
    Context(&'a mut ToolInvokeContext),
    /// A copy, taken when the tail goes on in the background.
    Copied {
        metadata: Map<String, Value>,
        runs: u32,
        duration: Duration,
    },
}

impl Details<'_> {
    /// The metadata, how many times the tool itself ran, and how long the call took.
    pub(super) fn into_parts(self) -> (Map<String, Value>, u32, Duration) {
        match self {
            Details::Context(ctx) => (ctx.take_metadata(), ctx.runs, ctx.elapsed()),
            Details::Copied {
                metadata,
                runs,
                duration,
            } => (metadata, runs, duration),
        }
    }
}

/// How the main phases ended: by themselves (`Ok`), or cut short.
type MainEnd = Result<HookResult, Cut>;

/// What cut the main phases short.
enum Cut {
    Panicked,
    TimedOut,
    Cancelled,
}

/// Owns the context while the invocation runs; finishes the tail if the invocation future
/// is dropped first. The context lives here, inside the invocation future, from the start
/// of the run to its end: no allocation for it, and the futures of the run hold a
/// reference to it, never a copy.
struct Guard<'a> {
    ctx: Option<ToolInvokeContext>,
    entry: &'a Arc<ToolEntry>,
    /// The invocation's spans, owned by the invocation future: cloned only when the
    /// tail goes on in a task of its own.
    span: &'a tracing::Span,
    /// The OpenTelemetry span of the invocation (disabled unless a subscriber wants it).
    otel: &'a tracing::Span,
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Done, unless dropped while a `will_finalize_invoke` hook ran: the hooks after it
        // still get their turn. A finished context is dropped where it is, not moved.
        if (self.ctx.as_ref()).is_none_or(|ctx| ctx.progress.tail.finished()) {
            return;
        }
        self.finish_in_background();
    }
}

impl Guard<'_> {
    /// The invocation future was dropped before its tail was done: a task runs the rest.
    #[cold]
    fn finish_in_background(&mut self) {
        let mut ctx = self
            .ctx
            .take()
            .expect("called while the guard holds the context");
        if !ctx.progress.tail.started {
            ctx.error = Some(ToolError::Cancelled);
            ctx.cancel_if_watched();
            tracing::debug!(parent: self.span, stage = %ctx.stage, "invocation dropped; finishing its tail in the background");
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let entry = Arc::clone(self.entry);
                let otel = self.otel.clone();
                handle.spawn(
                    async move {
                        let mut ctx = ctx;
                        ctx.progress.tail.started = true;
                        tail::run(&entry, &mut ctx).await;
                        if !otel.is_disabled() {
                            telemetry::record_end(&otel, &ctx, entry.shared.span_values);
                        }
                    }
                    .instrument(self.span.clone())
                    .instrument(self.otel.clone()),
                );
            }
            Err(_) => {
                tracing::warn!(parent: self.span, "invocation dropped outside a tokio runtime: release and finalize hooks did not run (guards in the context were still released)");
            }
        }
    }
}

/// Runs one invocation of the tool of `entry` (the one `ctx` was made for) to its end;
/// `conclude` makes the caller's answer.
///
/// A plain function that hands back its future, not an `async fn`: an `async fn` moves
/// its arguments into its body when first polled, one more copy of the context's parts.
#[allow(clippy::manual_async_fn)]
pub(super) fn run_to_end<R>(
    entry: &Arc<ToolEntry>,
    mut parts: ContextParts,
    start: Start,
    conclude: impl FnOnce(Result<Value, ToolError>, Details<'_>) -> R,
) -> impl Future<Output = R> {
    async move {
        let otel = telemetry::invocation_span(
            &entry.scope.definition.name,
            &entry.scope.definition.description,
            &parts.request_id,
        );
        // The log span, inside the OpenTelemetry span when there is one: so that, in any
        // subscriber, the stage spans (made inside the log span) descend from `execute_tool`.
        let log_span = || {
            tracing::info_span!(
                "toolgate.invoke",
                tool = %entry.scope.definition.name,
                request_id = %Printable(&parts.request_id),
                session_id = parts.session_id.as_deref().unwrap_or(""),
                user_id = %Printable(&parts.user.as_deref().unwrap_or(&crate::user::ANONYMOUS).id),
            )
        };
        let span = if otel.is_disabled() {
            log_span()
        } else {
            otel.in_scope(log_span)
        };
        debug_assert!(Arc::ptr_eq(&entry.scope, &parts.scope));
        let (guard_span, guard_otel) = (&span, &otel);
        let restored = parts.restored.take();
        let run = std::pin::pin!(async move {
            // The context is made here, in the invocation future, where it stays to the end.
            let mut guard = Guard {
                ctx: Some(ToolInvokeContext::new(parts)),
                entry,
                span: guard_span,
                otel: guard_otel,
            };
            let entry = &**guard.entry;
            let ctx = guard
                .ctx
                .as_mut()
                .expect("the guard holds the context until the end");
            if let Some(restored) = restored {
                ctx.restore(*restored);
            }
            ctx.progress.stage_spans = entry.shared.stage_spans && !guard.otel.is_disabled();
            let deadline = ctx.deadline();
            let cancel = ctx.cancellation_if_given();
            // The clock is read only when a deadline needs it (for the `Timeout` error), and
            // the main future is pinned where it is built: moving it into an `.await` or into
            // `select!` would copy it, and it is the largest state of the invocation.
            let started = deadline.map(|_| Instant::now());
            let ended = {
                let main =
                    std::pin::pin!(AssertUnwindSafe(walk::walk(entry, ctx, start)).catch_unwind());
                if deadline.is_none() && cancel.is_none() {
                    main.await.map_err(|_| Cut::Panicked)
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
                        result = main => result.map_err(|_| Cut::Panicked),
                        () = expired => Err(Cut::TimedOut),
                        () = cancelled => Err(Cut::Cancelled),
                    }
                }
            };
            let outcome = main_outcome(ctx, ended, deadline.zip(started));
            ctx.progress.tail.started = true;
            match outcome {
                Err(Control::Suspend(request)) => {
                    ctx.error = Some(suspend(entry, ctx, request).await.unwrap_or_else(|e| e));
                }
                Ok(()) => {}
                Err(Control::Respond(value)) => ctx.set_output(value),
                Err(Control::Error(error)) => {
                    if let ToolError::Provider(wiring) = &error {
                        // The caller is told only that the server is misconfigured
                        // (`ToolError::caller_message`): the operator reads what here.
                        tracing::error!(stage = %ctx.stage, error = %wiring, "a provider the call needs is missing");
                    }
                    ctx.error = Some(error)
                }
            }
            // The tail, but not past the caller's deadline. A tail that finishes at its first
            // poll never reads the clock for it.
            let cut = if tail::has_hooks(entry, ctx) {
                // A tail whose hooks all finish at once runs in place: no future for it.
                if tail::run_in_place(entry, ctx) {
                    false
                } else {
                    let mut tail = std::pin::pin!(tail::run(entry, ctx));
                    match deadline {
                        Some(deadline) if futures::poll!(tail.as_mut()).is_pending() => {
                            tokio::select! {
                                biased;
                                () = tail => false,
                                () = tokio::time::sleep_until(deadline) => true,
                            }
                        }
                        Some(_) => false,
                        None => {
                            tail.await;
                            false
                        }
                    }
                }
            } else {
                tail::end_without_hooks(ctx);
                false
            };
            if cut {
                // The caller's deadline passed while a tail hook still worked: the caller is
                // answered now with a copy, the hook then running is abandoned, and the guard
                // finishes the rest of the tail in the background.
                tracing::warn!(
                    "the caller's deadline passed while a tail hook still worked: the caller is answered, that hook is abandoned and the rest of the tail runs in the background"
                );
                let result = match &ctx.error {
                    Some(error) => Err(error.clone()),
                    None => Ok(ctx.output().cloned().unwrap_or(Value::Null)),
                };
                let details = Details::Copied {
                    metadata: ctx.metadata().clone(),
                    runs: ctx.runs,
                    duration: ctx.elapsed(),
                };
                // The span's end is recorded by the guard's task, when the tail is done.
                drop(guard);
                return conclude(result, details);
            }
            if !guard.otel.is_disabled() {
                telemetry::record_end(guard.otel, ctx, entry.shared.span_values);
            }
            let result = match ctx.error.take() {
                Some(error) => Err(error),
                None => Ok(ctx.take_output().unwrap_or(Value::Null)),
            };
            conclude(result, Details::Context(ctx))
        });
        // A span no subscriber is interested in is disabled for good: entering it on every
        // poll would do nothing, so the invocation runs without the wrapper.
        match (span.is_disabled(), otel.is_disabled()) {
            (true, true) => run.await,
            (false, true) => run.instrument(span.clone()).await,
            (true, false) => run.instrument(otel.clone()).await,
            (false, false) => run.instrument(span.clone()).instrument(otel.clone()).await,
        }
    }
}

/// What the main phases ended with, as the invocation's outcome: a contained panic, the
/// deadline (`timed`: the deadline and when the phases started) and cancellation become
/// errors.
///
/// In place, for the phases that ended by themselves; the rest is [`cut_short`].
#[inline]
fn main_outcome(
    ctx: &mut ToolInvokeContext,
    ended: MainEnd,
    timed: Option<(Instant, Instant)>,
) -> HookResult {
    let in_tool = std::mem::take(ctx.progress.in_tool.get_mut());
    match ended {
        // Written out, so that the common outcome is made, not copied.
        Ok(Ok(())) => Ok(()),
        Ok(result) => result,
        Err(cut) => Err(cut_short(ctx, cut, timed, in_tool)),
    }
}

/// The main phases did not end by themselves: a panic (`in_tool`: the tool's), the
/// deadline or cancellation, as the invocation's error.
#[cold]
fn cut_short(
    ctx: &mut ToolInvokeContext,
    cut: Cut,
    timed: Option<(Instant, Instant)>,
    in_tool: bool,
) -> Control {
    match cut {
        Cut::Panicked => {
            let message = if in_tool {
                "the tool panicked; the panic was contained".to_owned()
            } else {
                format!(
                    "a hook panicked at stage `{}`; the panic was contained",
                    ctx.stage
                )
            };
            tracing::error!(stage = %ctx.stage, "{message}");
            ToolError::internal(message).into()
        }
        Cut::TimedOut => {
            ctx.cancel_if_watched();
            let after = timed.map_or_else(Default::default, |(deadline, started)| {
                deadline.saturating_duration_since(started)
            });
            ToolError::Timeout { after }.into()
        }
        Cut::Cancelled => ToolError::Cancelled.into(),
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
    let definition = &entry.scope.definition;
    let saved = SuspendedInvocation {
        id: id.clone(),
        tool: definition.name.clone(),
        tool_version: definition.version.clone(),
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
        binding: Some(entry.binding(ctx.user(), ctx.input())),
    };
    entry.shared.suspensions.save(saved).await?;
    tracing::info!(stage = %stage, suspension_id = %id, "invocation suspended");
    Ok(ToolError::Suspended {
        suspension_id: id,
        reason: request.reason,
    })
}
