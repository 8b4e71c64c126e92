//! [`assert_stacks_twice`]: two instances of one hook on a call keep what each holds.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::json;
use toolgate_core::hook::{HookRegistration, hook_fn_sync};
use toolgate_core::stage::StageSet;
use toolgate_core::{Hook, InvokeOptions, Stage};

use crate::{Inject, ScriptedTool, Step, TestPipeline};

/// How a call of [`assert_stacks_twice`] ends.
const PATHS: [&str; 4] = [
    "the call succeeds",
    "the tool fails",
    "a later stage aborts",
    "the caller drops the call while the tool runs",
];

/// Asserts that two instances of one hook type, stacked on one call (a global cap and a
/// per-tool cap, say), each hold what they acquired until the call releases it, and that
/// everything comes back — on success, when the tool fails, when a later stage aborts,
/// and when the caller drops the call half-way.
///
/// `in_use` tells how many units an instance holds right now (permits taken from its
/// semaphore, leases out of its pool). Just before the tool runs, each instance must hold
/// at least one unit, and as many as the other; once the call has ended, each must be
/// back where it started.
///
/// The classic mistake this catches: keeping a guard in the scratchpad under a key of its
/// *type*, so the second instance's insert drops the first instance's guard. Keep guards
/// with [`ToolInvokeContext::hold`](toolgate_core::ToolInvokeContext::hold), which keys
/// them by instance.
///
/// # Panics
///
/// With a message naming the path and the instance, when an instance holds nothing (or
/// less than the other) while the tool runs, or has not given everything back after the
/// call.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tokio::sync::{OwnedSemaphorePermit, Semaphore};
/// use toolgate_core::{hook, Hook, HookResult, ToolInvokeContext};
/// use toolgate_test::assert_stacks_twice;
///
/// struct InFlightLimit(Arc<Semaphore>, usize);
///
/// #[hook]
/// impl Hook for InFlightLimit {
///     fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
///         let Ok(permit) = Arc::clone(&self.0).try_acquire_owned() else {
///             return ctx.abort("too many calls at once", "busy", 503);
///         };
///         ctx.hold(self, permit);
///         Ok(())
///     }
///
///     fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
///         ctx.release::<OwnedSemaphorePermit>(self);
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let global = Arc::new(InFlightLimit(Arc::new(Semaphore::new(10)), 10));
/// let per_tool = Arc::new(InFlightLimit(Arc::new(Semaphore::new(2)), 2));
/// assert_stacks_twice(global, per_tool, |h| h.1 - h.0.available_permits()).await;
/// # }
/// ```
pub async fn assert_stacks_twice<H: Hook>(
    first: Arc<H>,
    second: Arc<H>,
    in_use: impl Fn(&H) -> usize + Send + Sync + 'static,
) {
    let in_use = Arc::new(in_use);
    let start = [in_use(&first), in_use(&second)];
    for path in PATHS {
        let seen = Arc::new(Mutex::new(None));
        let tool = match path {
            "the tool fails" => ScriptedTool::new("stacked").then(Step::permanent("it broke")),
            "the caller drops the call while the tool runs" => {
                ScriptedTool::new("stacked").then(Step::Hang)
            }
            _ => ScriptedTool::returning("stacked", json!("done")),
        };
        let probe = {
            let (first, second, in_use, seen) = (
                Arc::clone(&first),
                Arc::clone(&second),
                Arc::clone(&in_use),
                Arc::clone(&seen),
            );
            // The lowest priority runs last at `will_execute`, after anything the hooks
            // take there.
            hook_fn_sync(Stage::WillExecute, move |_| {
                *seen.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some([in_use(&first), in_use(&second)]);
                Ok(())
            })
            .named("stacking_probe")
            .with_priority(i32::MIN)
        };
        let mut test = TestPipeline::new()
            .tool(tool.clone())
            .hook(HookRegistration::shared(Arc::clone(&first) as Arc<dyn Hook>))
            .hook(HookRegistration::shared(
                Arc::clone(&second) as Arc<dyn Hook>
            ))
            .hook(probe)
            .recording("stacking_end", |h| {
                h.with_stages(StageSet::of(&[Stage::WillFinalizeInvoke]))
            });
        if path == "a later stage aborts" {
            test = test.recording("aborts_late", |h| {
                h.with_stages(StageSet::of(&[Stage::WillRedactOutput])).at(
                    Stage::WillRedactOutput,
                    Inject::abort("refused late", "late", 403),
                )
            });
        }
        let log = test.log();
        let pipeline = test.build();

        let call = pipeline.invoke("stacked", json!({}), InvokeOptions::new());
        if path == "the caller drops the call while the tool runs" {
            let dropped = tokio::time::timeout(Duration::from_secs(1), call).await;
            assert!(dropped.is_err(), "{path}: the hanging tool finished");
        } else {
            let _ = call.await;
        }
        assert!(
            log.wait_for(Stage::WillFinalizeInvoke, Duration::from_secs(60))
                .await,
            "{path}: the call never reached `will_finalize_invoke`"
        );

        let during = seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .expect("the probe ran just before the tool");
        for (which, held) in ["first", "second"].into_iter().zip(during) {
            assert!(
                held > 0,
                "{path}: the {which} instance held nothing while the tool ran (units in \
                 use: first {}, second {}); a guard kept under a key of its type is dropped \
                 when the other instance stores its own: keep it with `ctx.hold(self, guard)`",
                during[0],
                during[1],
            );
        }
        assert_eq!(
            during[0], during[1],
            "{path}: the two instances held different amounts while the tool ran"
        );
        let after = [in_use(&first), in_use(&second)];
        assert_eq!(
            after, start,
            "{path}: units in use after the call (first, second) are not what they were \
             before it: something was not given back, or was given back twice"
        );
    }
}
