//! How far an invocation got, as the engine records it in the context: the capacity it
//! acquired (whose release stages must run), whether the tool is running, and where the tail
//! stands. Nothing here is visible to hooks.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::stage::{Stage, StageSet};

/// The capacity stages an invocation passed: each one passed makes its release stage run.
#[derive(Clone, Copy, Default)]
pub(crate) struct Acquired {
    /// `will_acquire_quota` was reached: `did_release_quota` runs.
    pub quota: bool,
    /// `will_acquire_semaphore` was reached: `did_release_semaphore` runs.
    pub semaphore: bool,
}

impl Acquired {
    /// Marks the acquire stages on the way to `stage` as reached; `quota_done` when the quota
    /// was already taken before a suspension (a resumed call does not take it twice).
    #[inline]
    pub fn reach(&mut self, stage: Stage, quota_done: bool) {
        self.quota |= stage >= Stage::WillAcquireQuota && !quota_done;
        self.semaphore |= stage >= Stage::WillAcquireSemaphore;
    }
}

/// Where the tail stands. Each tail stage runs at most once; a stage interrupted by the drop
/// of the invocation future goes on with the hook after the one that was running.
#[derive(Default)]
pub(crate) struct TailState {
    /// The main phases are over (their outcome is settled).
    pub started: bool,
    /// The tail stages that have begun.
    pub begun: StageSet,
    /// The tail stage and hook index running right now.
    pub running: Option<(Stage, usize)>,
}

impl TailState {
    /// Whether the invocation is over: `will_finalize_invoke` has begun and no hook of it
    /// is still running.
    pub fn finished(&self) -> bool {
        self.begun.contains(Stage::WillFinalizeInvoke) && self.running.is_none()
    }
}

/// The engine's record of one invocation.
#[derive(Default)]
pub(crate) struct Progress {
    pub acquired: Acquired,
    /// The tool itself is running (a panic now is the tool's; a provider it looks up is
    /// one its output may depend on). Atomic only so that [`LeftTool`] can clear it
    /// through the shared borrow the tool's future holds; every access is relaxed (a plain
    /// load or store) or through `get_mut`.
    pub in_tool: AtomicBool,
    /// The stages get spans: a subscriber wants the invocation's OpenTelemetry span and the
    /// pipeline makes stage spans. Read once per stage instead of asking the subscriber for
    /// each stage's span.
    pub stage_spans: bool,
    pub tail: TailState,
}

/// Clears [`Progress::in_tool`] when the tool's future is dropped before it returned: an
/// `around_execute` wrapper (a per-attempt timeout) gave up on the attempt, and what runs
/// next — the wrapper, a retry's hooks, the tail — is not the tool. Made when the tool
/// starts and forgotten when it returns (the engine clears the flag itself then); a panic
/// of the tool keeps the flag, so that the panic is reported as the tool's.
pub(crate) struct LeftTool<'a>(pub &'a AtomicBool);

impl LeftTool<'_> {
    /// The tool returned: nothing to clear here.
    #[inline]
    pub fn returned(self) {
        std::mem::forget(self);
    }
}

impl Drop for LeftTool<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.0.store(false, Ordering::Relaxed);
        }
    }
}
