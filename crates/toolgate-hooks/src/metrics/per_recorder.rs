//! [`PerRecorder`]: values kept for the metrics recorder that is current, such as metric
//! handles, which belong to the recorder that registered them; and [`renew_handles`], for
//! recorders that remove the series nobody updates.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ::metrics::Recorder;
use arc_swap::ArcSwap;

/// A value kept for the metrics recorder current when it was made — typically a table of
/// metric handles, so that a hot path updates a handle instead of building a metric key
/// and looking it up in the recorder's registry on every call.
///
/// It is read without a lock and replaced, copy on write, by [`update`](Self::update).
/// Handles belong to the recorder that registered them, so when another recorder becomes
/// current (a global recorder installed after the first call, a test's local recorder),
/// the value starts again from its default. It does too after [`renew_handles`], which a
/// host whose recorder removes idle series calls.
///
/// # Examples
///
/// ```
/// use metrics::Counter;
/// use toolgate_hooks::metrics::PerRecorder;
///
/// let counters: PerRecorder<Vec<(String, Counter)>> = PerRecorder::default();
/// let count = |name: &str| {
///     let known = counters.with_current(|table| {
///         let (_, counter) = table?.iter().find(|(n, _)| n == name)?;
///         counter.increment(1);
///         Some(())
///     });
///     if known.is_none() {
///         let counter = metrics::counter!("calls_total", "name" => name.to_owned());
///         counter.increment(1);
///         counters.update(|table| {
///             if !table.iter().any(|(n, _)| n == name) {
///                 table.push((name.to_owned(), counter.clone()));
///             }
///         });
///     }
/// };
/// count("echo");
/// count("echo");
/// assert_eq!(counters.with_current(|table| table.map_or(0, Vec::len)), 1);
/// ```
pub struct PerRecorder<T> {
    scoped: ArcSwap<Scoped<T>>,
}

struct Scoped<T> {
    /// The address of the recorder `value` was made with.
    recorder: usize,
    /// The [`renew_handles`] generation `value` was made in.
    generation: u64,
    value: T,
}

impl<T> Scoped<T> {
    /// Whether `value` was made for the recorder at `recorder` in the current generation.
    fn is_current(&self, recorder: usize) -> bool {
        self.recorder == recorder && self.generation == RENEWALS.load(Ordering::Relaxed)
    }
}

/// How many times [`renew_handles`] was called in this process.
static RENEWALS: AtomicU64 = AtomicU64::new(0);

/// Makes every [`PerRecorder`] value in the process start again from its default at its
/// next use, so that metric handles kept in them (the [`Metrics`](super::Metrics) hook's,
/// a host's own) are registered with the recorder again.
///
/// A recorder may remove the series nobody updated for a while — the Prometheus
/// exporter's `idle_timeout` does — while the handles given out for them live on: a kept
/// handle then updates a value the recorder no longer shows, and the series never comes
/// back. A host whose recorder removes idle series calls this at least once every idle
/// timeout (half of it leaves a margin): a handle kept since before the last call is at
/// most that old, and a series removed for being idle that long had no update through it.
/// The next use of each value registers its series again; a removed one starts again from
/// zero, one still shown goes on counting where it was.
///
/// It costs each value one registration per series at its next use; the calls in between
/// pay nothing for it (one relaxed load of a counter, next to the recorder's address).
///
/// # Examples
///
/// ```
/// use metrics_util::debugging::DebuggingRecorder;
/// use toolgate_hooks::metrics::{PerRecorder, renew_handles};
///
/// let kept: PerRecorder<Vec<u32>> = PerRecorder::default();
/// let recorder = DebuggingRecorder::new();
/// metrics::with_local_recorder(&recorder, || {
///     kept.update(|value| value.push(1));
///     assert!(kept.with_current(|value| value.is_some()));
///     renew_handles();
///     assert!(kept.with_current(|value| value.is_none()));
/// });
/// ```
pub fn renew_handles() {
    RENEWALS.fetch_add(1, Ordering::Relaxed);
}

impl<T: Default> Default for PerRecorder<T> {
    fn default() -> Self {
        PerRecorder {
            // No recorder has the address 0: the first update starts from the default.
            scoped: ArcSwap::from_pointee(Scoped {
                recorder: 0,
                generation: 0,
                value: T::default(),
            }),
        }
    }
}

impl<T> PerRecorder<T> {
    /// Calls `read` with the value kept for the recorder current now, or with `None` when
    /// the value was made for another one or before the last [`renew_handles`].
    pub fn with_current<R>(&self, read: impl FnOnce(Option<&T>) -> R) -> R {
        let recorder = current_recorder();
        let scoped = self.scoped.load();
        read(scoped.is_current(recorder).then_some(&scoped.value))
    }
}

impl<T: Clone + Default> PerRecorder<T> {
    /// Changes the value kept for the recorder current now: `change` gets a copy of it (or
    /// the default, when the value was made for another recorder or before the last
    /// [`renew_handles`]), and the copy replaces it. `change` may run more than once when
    /// callers race.
    pub fn update(&self, change: impl Fn(&mut T)) {
        let recorder = current_recorder();
        self.scoped.rcu(|scoped| {
            // Read before the check: a renewal between the two then makes the new value
            // stale at once, never a value made before it current.
            let generation = RENEWALS.load(Ordering::Relaxed);
            let mut value = if scoped.is_current(recorder) {
                scoped.value.clone()
            } else {
                T::default()
            };
            change(&mut value);
            Arc::new(Scoped {
                recorder,
                generation,
                value,
            })
        });
    }
}

impl<T> std::fmt::Debug for PerRecorder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerRecorder").finish_non_exhaustive()
    }
}

/// The address of the recorder metrics go to on this thread now.
fn current_recorder() -> usize {
    ::metrics::with_recorder(|recorder| {
        std::ptr::from_ref::<dyn Recorder>(recorder)
            .cast::<()>()
            .addr()
    })
}
