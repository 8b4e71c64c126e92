//! [`CapacityHook`]: acquires at the capacity stages, releases at the release stages, and
//! counts both, so a test can prove that every path gives back what it took.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

/// The counters of a [`CapacityHook`], shared with the test.
#[derive(Debug, Default)]
pub struct CapacityCounters {
    quota_acquires: AtomicUsize,
    quota_releases: AtomicUsize,
    permit_acquires: AtomicUsize,
    permit_releases: AtomicUsize,
    quota_in_use: AtomicI64,
    permits_in_use: AtomicI64,
}

impl CapacityCounters {
    /// How many times `will_acquire_quota` ran.
    pub fn quota_acquires(&self) -> usize {
        self.quota_acquires.load(Ordering::SeqCst)
    }

    /// How many quota units `did_release_quota` gave back (units dropped with the context
    /// without the stage are not counted here).
    pub fn quota_releases(&self) -> usize {
        self.quota_releases.load(Ordering::SeqCst)
    }

    /// How many times `will_acquire_semaphore` ran.
    pub fn permit_acquires(&self) -> usize {
        self.permit_acquires.load(Ordering::SeqCst)
    }

    /// How many permits `did_release_semaphore` gave back.
    pub fn permit_releases(&self) -> usize {
        self.permit_releases.load(Ordering::SeqCst)
    }

    /// Quota units held now: taken and not yet given back, either by `did_release_quota`
    /// or by the drop of the context that holds their guard.
    pub fn quota_in_use(&self) -> i64 {
        self.quota_in_use.load(Ordering::SeqCst)
    }

    /// Permits held now (as [`quota_in_use`](Self::quota_in_use)).
    pub fn permits_in_use(&self) -> i64 {
        self.permits_in_use.load(Ordering::SeqCst)
    }

    /// Whether every unit taken was given back by its release stage, and nothing is held.
    pub fn is_balanced(&self) -> bool {
        self.quota_acquires() == self.quota_releases()
            && self.permit_acquires() == self.permit_releases()
            && self.quota_in_use() == 0
            && self.permits_in_use() == 0
    }

    /// Asserts [`is_balanced`](Self::is_balanced).
    ///
    /// # Panics
    ///
    /// When it is not, listing every counter.
    #[track_caller]
    pub fn assert_balanced(&self) {
        assert!(self.is_balanced(), "capacity is not balanced: {self}");
    }
}

impl fmt::Display for CapacityCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "quota acquired {} / released {} / held {}; permits acquired {} / released {} / held {}",
            self.quota_acquires(),
            self.quota_releases(),
            self.quota_in_use(),
            self.permit_acquires(),
            self.permit_releases(),
            self.permits_in_use()
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Quota,
    Permit,
}

/// A unit of capacity held by one invocation: given back when dropped, like a tokio
/// semaphore permit.
struct Held {
    kind: Kind,
    counters: Arc<CapacityCounters>,
}

/// A quota unit, held with [`ToolInvokeContext::hold`] under its own type so that releasing
/// quota never gives back a permit.
struct QuotaUnit {
    _held: Held,
}

/// A concurrency permit (as [`QuotaUnit`]).
struct PermitUnit {
    _held: Held,
}

impl Drop for Held {
    fn drop(&mut self) {
        let in_use = match self.kind {
            Kind::Quota => &self.counters.quota_in_use,
            Kind::Permit => &self.counters.permits_in_use,
        };
        in_use.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A hook that takes a quota unit at `will_acquire_quota` and a permit at
/// `will_acquire_semaphore`, keeping each as an RAII guard in the context
/// ([`ToolInvokeContext::hold`]), and gives them back at `did_release_semaphore` / `did_release_quota`.
///
/// Because the guards live in the context, they come back even when the release stages
/// never run (the context is dropped): that is the model for real capacity hooks. The
/// [`counters`](Self::counters) tell both stories — how many times each stage ran, and
/// what is held now.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{InvokeOptions, Pipeline};
/// use toolgate_test::{CapacityHook, ScriptedTool};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let capacity = CapacityHook::new("capacity");
/// let counters = capacity.counters();
///
/// let pipeline = Pipeline::builder()
///     .tool(ScriptedTool::new("t").into_erased())
///     .hook(capacity)
///     .build()
///     .unwrap();
///
/// pipeline.invoke("t", json!({}), InvokeOptions::new()).await.unwrap();
/// assert_eq!((counters.quota_acquires(), counters.permit_acquires()), (1, 1));
/// counters.assert_balanced();
/// # }
/// ```
pub struct CapacityHook {
    label: Arc<str>,
    priority: i32,
    counters: Arc<CapacityCounters>,
}

impl CapacityHook {
    /// A capacity hook labelled `label`, priority 0.
    pub fn new(label: impl Into<Arc<str>>) -> Self {
        CapacityHook {
            label: label.into(),
            priority: 0,
            counters: Arc::default(),
        }
    }

    /// Sets the priority.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The counters, shared with the hook.
    pub fn counters(&self) -> Arc<CapacityCounters> {
        Arc::clone(&self.counters)
    }

    fn acquire(&self, ctx: &mut ToolInvokeContext, kind: Kind) {
        let (acquires, in_use) = match kind {
            Kind::Quota => (&self.counters.quota_acquires, &self.counters.quota_in_use),
            Kind::Permit => (
                &self.counters.permit_acquires,
                &self.counters.permits_in_use,
            ),
        };
        acquires.fetch_add(1, Ordering::SeqCst);
        in_use.fetch_add(1, Ordering::SeqCst);
        let held = Held {
            kind,
            counters: Arc::clone(&self.counters),
        };
        match kind {
            Kind::Quota => ctx.hold(self, QuotaUnit { _held: held }),
            Kind::Permit => ctx.hold(self, PermitUnit { _held: held }),
        }
    }

    fn release(&self, ctx: &mut ToolInvokeContext, kind: Kind) {
        let releases = match kind {
            Kind::Quota => &self.counters.quota_releases,
            Kind::Permit => &self.counters.permit_releases,
        };
        // The release stage runs once the acquire stage was reached, even when an earlier
        // hook at that stage stopped it before this hook acquired anything: give back
        // only what is held.
        let released = match kind {
            Kind::Quota => ctx.release::<QuotaUnit>(self),
            Kind::Permit => ctx.release::<PermitUnit>(self),
        };
        releases.fetch_add(released, Ordering::SeqCst);
    }
}

impl fmt::Debug for CapacityHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapacityHook")
            .field("label", &self.label)
            .field("priority", &self.priority)
            .field("counters", &format_args!("{}", self.counters))
            .finish()
    }
}

#[hook]
impl Hook for CapacityHook {
    fn name(&self) -> &str {
        &self.label
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn will_acquire_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.acquire(ctx, Kind::Quota);
        Ok(())
    }

    fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.acquire(ctx, Kind::Permit);
        Ok(())
    }

    fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.release(ctx, Kind::Permit);
        Ok(())
    }

    fn did_release_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.release(ctx, Kind::Quota);
        Ok(())
    }
}
