//! [`PerRecorder`]: values kept for the metrics recorder that is current, such as metric
//! handles, which belong to the recorder that registered them.

use std::sync::Arc;

use ::metrics::Recorder;
use arc_swap::ArcSwap;

/// A value kept for the metrics recorder current when it was made — typically a table of
/// metric handles, so that a hot path updates a handle instead of building a metric key
/// and looking it up in the recorder's registry on every call.
///
/// It is read without a lock and replaced, copy on write, by [`update`](Self::update).
/// Handles belong to the recorder that registered them, so when another recorder becomes
/// current (a global recorder installed after the first call, a test's local recorder),
/// the value starts again from its default.
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
    value: T,
}

impl<T: Default> Default for PerRecorder<T> {
    fn default() -> Self {
        PerRecorder {
            // No recorder has the address 0: the first update starts from the default.
            scoped: ArcSwap::from_pointee(Scoped {
                recorder: 0,
                value: T::default(),
            }),
        }
    }
}

impl<T> PerRecorder<T> {
    /// Calls `read` with the value kept for the recorder current now, or with `None` when
    /// the value was made for another one.
    pub fn with_current<R>(&self, read: impl FnOnce(Option<&T>) -> R) -> R {
        let recorder = current_recorder();
        let scoped = self.scoped.load();
        read((scoped.recorder == recorder).then_some(&scoped.value))
    }
}

impl<T: Clone + Default> PerRecorder<T> {
    /// Changes the value kept for the recorder current now: `change` gets a copy of it (or
    /// the default, when the value was made for another recorder), and the copy replaces
    /// it. `change` may run more than once when callers race.
    pub fn update(&self, change: impl Fn(&mut T)) {
        let recorder = current_recorder();
        self.scoped.rcu(|scoped| {
            let mut value = if scoped.recorder == recorder {
                scoped.value.clone()
            } else {
                T::default()
            };
            change(&mut value);
            Arc::new(Scoped { recorder, value })
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
