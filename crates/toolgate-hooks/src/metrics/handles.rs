//! The metric handles of the [`Metrics`](super::Metrics) hook, kept per tool.
//!
//! Recording through `counter!(name, labels)` builds the metric's key (owned label strings)
//! and looks it up in the recorder's registry on every call. The handles a recorder hands
//! out are cheap to keep and to update, so each series is registered once, the first time
//! a call records into it, and later calls find its handle by tool name. The table is read
//! without a lock and replaced, copy on write, when a call needs a series it lacks.
//!
//! Handles belong to the recorder that registered them: when another recorder becomes the
//! current one (a global recorder installed after the first call, a test's local
//! recorder), the table starts again.
//!
//! The number of series has a hard bound: the table keeps at most [`MAX_TOOLS`] tools, and
//! past [`MAX_CODES`] error codes of one tool, calls are counted under `code="other"`. A
//! full table makes room for a new tool by forgetting the tools not called for
//! [`FORGET_AFTER`]: the tool set of a long-running host changes (a reload, an upstream
//! server's new tool list), and a table that kept every tool it ever saw would count every
//! later one under `tool="other"`. Until room is made, a new tool's calls are counted under
//! `tool="other"`.
//!
//! Forgetting drops the handles, not the series: the facade cannot remove a series from a
//! recorder. A forgotten tool that is called again registers its series again, and the
//! recorder hands back the same ones, still counting. Removing the series of tools that
//! are gone is the recorder's work (an exporter's idle timeout), and the whole table starts
//! again after [`renew_handles`](super::renew_handles), so that no handle outlives the
//! series it updates.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::PerRecorder;

use ::metrics::{Counter, Histogram, Label, SharedString, counter, histogram};
use toolgate_core::Stage;
use toolgate_core::context::HookTiming;

/// The names of the hook's metrics.
#[derive(Clone, Debug)]
pub(super) struct Names {
    pub(super) calls: SharedString,
    pub(super) call_duration: SharedString,
    pub(super) hook_duration: SharedString,
    pub(super) cache_lookups: SharedString,
    pub(super) rate_limited: SharedString,
}

/// How a call ended.
#[derive(Clone, Copy)]
pub(super) enum Outcome<'a> {
    Success,
    Suspended,
    /// Waits for the caller's answers.
    InputRequired,
    /// Failed with this error code.
    Error(&'a str),
}

impl Outcome<'_> {
    fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Suspended => "suspended",
            Outcome::InputRequired => "input_required",
            Outcome::Error(_) => "error",
        }
    }

    fn code(self) -> Label {
        match self {
            Outcome::Success => Label::from_static_parts("code", "ok"),
            Outcome::Suspended => Label::from_static_parts("code", "suspended"),
            Outcome::InputRequired => Label::from_static_parts("code", "input_required"),
            Outcome::Error(code) => Label::new("code", code.to_owned()),
        }
    }
}

/// The label of every value folded into one bucket.
const OTHER: &str = "other";

/// The result of a cache lookup.
#[derive(Clone, Copy)]
pub(super) enum CacheResult {
    Hit = 0,
    Coalesced = 1,
    Miss = 2,
}

impl CacheResult {
    fn label(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::Coalesced => "coalesced",
            CacheResult::Miss => "miss",
        }
    }
}

/// What one call records.
pub(super) struct Observation<'a> {
    pub(super) outcome: Outcome<'a>,
    pub(super) elapsed: Duration,
    pub(super) hook_timings: &'a [HookTiming],
    pub(super) cache: Option<CacheResult>,
    pub(super) rate_limited: bool,
}

/// The handles of one tool's series, each registered when first needed (a series the
/// recorder has seen appears in its output, so none is registered ahead of use).
#[derive(Clone, Default)]
struct ToolHandles {
    /// Whether the tool was called since the table's last sweep.
    called: Called,
    success: Option<(Counter, Histogram)>,
    suspended: Option<(Counter, Histogram)>,
    input_required: Option<(Counter, Histogram)>,
    error_duration: Option<Histogram>,
    errors: Vec<(Box<str>, Counter)>,
    /// The calls that failed with a code past the first [`MAX_CODES`].
    other_errors: Option<Counter>,
    hooks: Vec<(Stage, Arc<str>, Histogram)>,
    cache_lookups: [Option<Counter>; 3],
    rate_limited: Option<Counter>,
}

impl ToolHandles {
    /// The counter of calls that failed with `code`: its own, or the bucket of the codes
    /// past the bound once the tool has [`MAX_CODES`].
    fn error(&self, code: &str) -> Option<&Counter> {
        let own = self
            .errors
            .iter()
            .find_map(|(c, counter)| (**c == *code).then_some(counter));
        if own.is_some() || self.errors.len() < MAX_CODES {
            own
        } else {
            self.other_errors.as_ref()
        }
    }

    fn hook(&self, timing: &HookTiming) -> Option<&Histogram> {
        self.hooks.iter().find_map(|(stage, hook, histogram)| {
            (*stage == timing.stage && **hook == *timing.hook).then_some(histogram)
        })
    }

    /// The call counter and duration histogram of an outcome.
    fn outcome(&self, outcome: Outcome<'_>) -> Option<(&Counter, &Histogram)> {
        match outcome {
            Outcome::Success => self.success.as_ref().map(|(c, h)| (c, h)),
            Outcome::Suspended => self.suspended.as_ref().map(|(c, h)| (c, h)),
            Outcome::InputRequired => self.input_required.as_ref().map(|(c, h)| (c, h)),
            Outcome::Error(code) => Some((self.error(code)?, self.error_duration.as_ref()?)),
        }
    }

    /// Records `observation`, or answers false without recording anything when a handle
    /// it needs is missing.
    fn record(&self, observation: &Observation<'_>) -> bool {
        let Some((calls, duration)) = self.outcome(observation.outcome) else {
            return false;
        };
        let cache = match observation.cache {
            Some(result) => match &self.cache_lookups[result as usize] {
                Some(counter) => Some(counter),
                None => return false,
            },
            None => None,
        };
        let rate_limited = match (observation.rate_limited, &self.rate_limited) {
            (true, Some(counter)) => Some(counter),
            (true, None) => return false,
            (false, _) => None,
        };
        if !observation
            .hook_timings
            .iter()
            .all(|timing| self.hook(timing).is_some())
        {
            return false;
        }
        calls.increment(1);
        duration.record(observation.elapsed.as_secs_f64());
        for timing in observation.hook_timings {
            if let Some(histogram) = self.hook(timing) {
                histogram.record(timing.duration.as_secs_f64());
            }
        }
        if let Some(counter) = cache {
            counter.increment(1);
        }
        if let Some(counter) = rate_limited {
            counter.increment(1);
        }
        self.called.mark();
        true
    }

    /// Registers with the current recorder what `observation` needs and is missing.
    fn register(&mut self, names: &Names, tool: &str, observation: &Observation<'_>) {
        let tool_label = || Label::new("tool", tool.to_owned());
        let outcome = observation.outcome;
        let calls_with = |code: Label| {
            counter!(
                names.calls.clone(),
                vec![
                    tool_label(),
                    Label::from_static_parts("outcome", outcome.label()),
                    code,
                ]
            )
        };
        let calls = || calls_with(outcome.code());
        let duration = || {
            histogram!(
                names.call_duration.clone(),
                vec![
                    tool_label(),
                    Label::from_static_parts("outcome", outcome.label())
                ]
            )
        };
        match outcome {
            Outcome::Success => {
                self.success.get_or_insert_with(|| (calls(), duration()));
            }
            Outcome::Suspended => {
                self.suspended.get_or_insert_with(|| (calls(), duration()));
            }
            Outcome::InputRequired => {
                self.input_required
                    .get_or_insert_with(|| (calls(), duration()));
            }
            Outcome::Error(code) => {
                if self.error(code).is_none() {
                    if self.errors.len() < MAX_CODES {
                        self.errors.push((code.into(), calls()));
                    } else {
                        self.other_errors =
                            Some(calls_with(Label::from_static_parts("code", OTHER)));
                    }
                }
                self.error_duration.get_or_insert_with(duration);
            }
        }
        for timing in observation.hook_timings {
            if self.hook(timing).is_none() {
                let histogram = histogram!(
                    names.hook_duration.clone(),
                    vec![
                        tool_label(),
                        Label::from_static_parts("stage", timing.stage.name()),
                        Label::new("hook", timing.hook.to_string()),
                    ]
                );
                self.hooks
                    .push((timing.stage, timing.hook.clone(), histogram));
            }
        }
        if let Some(result) = observation.cache {
            self.cache_lookups[result as usize].get_or_insert_with(|| {
                counter!(
                    names.cache_lookups.clone(),
                    vec![
                        tool_label(),
                        Label::from_static_parts("result", result.label())
                    ]
                )
            });
        }
        if observation.rate_limited {
            self.rate_limited
                .get_or_insert_with(|| counter!(names.rate_limited.clone(), vec![tool_label()]));
        }
    }
}

/// Whether a tool was called since the last sweep of its table. The hot path reads it and
/// writes it only when it is unset, once per tool and sweep, so that the calls of a busy
/// tool do not contend for it.
#[derive(Default)]
struct Called(AtomicBool);

impl Called {
    fn mark(&self) {
        if !self.0.load(Ordering::Relaxed) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the tool was called, unset for the next sweep.
    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// A copy of the table (for an update) keeps the marks. A call that marks the table being
/// replaced may be missed by the copy; the tool is then forgotten at the next sweep and
/// registers its series again at its next call, losing nothing.
impl Clone for Called {
    fn clone(&self) -> Self {
        Called(AtomicBool::new(self.0.load(Ordering::Relaxed)))
    }
}

/// How many tools get series of their own at once; when the table is full, the calls of a
/// further tool are counted under `tool="other"` until tools not called for
/// [`FORGET_AFTER`] make room. Tool names come from the registry, but a registry fed by
/// upstream servers has no bound of its own.
const MAX_TOOLS: usize = 4096;
/// How long a tool goes uncalled before a full table may forget it. When a tool it lacks is
/// called, a full table sweeps out the tools not called since its previous sweep, at most
/// once this long: a tool uncalled for less than this is never forgotten, and one uncalled
/// for twice as long is gone at the next sweep. A forgotten tool that comes back costs one
/// registration, so the bound is short: after a reload, the new tools wait under
/// `tool="other"` for two minutes at most.
const FORGET_AFTER: Duration = Duration::from_secs(60);
/// How many error codes of one tool get series of their own; further codes are counted
/// under `code="other"`. Codes come from tools and hooks, which may make them up.
const MAX_CODES: usize = 64;

/// The handles of every tool seen so far, registered with the current recorder.
#[derive(Default)]
pub(super) struct Handles {
    tools: PerRecorder<Table>,
}

/// The handles by tool, and those of the tools past [`MAX_TOOLS`].
#[derive(Clone, Default)]
struct Table {
    tools: HashMap<Box<str>, ToolHandles, foldhash::fast::RandomState>,
    other: ToolHandles,
    /// When the table last swept out the tools not called since the sweep before, or first
    /// became full; `None` until then.
    swept: Option<Instant>,
}

impl Table {
    /// The handles `tool` records into: its own, or the bucket of the tools past the bound
    /// while the table is full and a sweep is not due; `None` when the tool needs a place
    /// (there is room, or a sweep may make some). `now` is read only for a tool the full
    /// table lacks.
    fn get(&self, tool: &str, now: impl FnOnce() -> Instant) -> Option<&ToolHandles> {
        match self.tools.get(tool) {
            Some(handles) => Some(handles),
            None if self.tools.len() >= MAX_TOOLS && !self.sweep_due(now()) => Some(&self.other),
            None => None,
        }
    }

    fn sweep_due(&self, now: Instant) -> bool {
        self.swept
            .is_none_or(|swept| now.saturating_duration_since(swept) >= FORGET_AFTER)
    }

    /// Forgets the tools not called since the last sweep, and starts the next period.
    fn sweep(&mut self, now: Instant) {
        self.tools.retain(|_, handles| handles.called.take());
        self.swept = Some(now);
    }

    /// Starts the first period, when the table becomes full: the tools called from now on
    /// are those the first sweep keeps, so that tools idle since long before are not kept
    /// a period longer.
    fn start_sweeping(&mut self, now: Instant) {
        for handles in self.tools.values() {
            handles.called.take();
        }
        self.swept = Some(now);
    }
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles")
            .field(
                "tools",
                &self.tools.with_current(|t| t.map_or(0, |t| t.tools.len())),
            )
            .finish()
    }
}

impl Handles {
    /// Records one call of `tool`.
    pub(super) fn record(&self, names: &Names, tool: &str, observation: &Observation<'_>) {
        self.record_at(names, tool, observation, Instant::now);
    }

    /// Records one call of `tool`, reading the time from `now`, which only a tool the full
    /// table lacks needs.
    fn record_at(
        &self,
        names: &Names,
        tool: &str,
        observation: &Observation<'_>,
        now: impl Fn() -> Instant,
    ) {
        let recorded = self.tools.with_current(|table| {
            table
                .and_then(|table| table.get(tool, &now))
                .is_some_and(|handles| handles.record(observation))
        });
        if recorded {
            return;
        }
        // Registered under the table's update, so that the bounds hold when calls race
        // (the update may run more than once; registering a series twice gives the same
        // series).
        self.tools.update(|table| {
            if !table.tools.contains_key(tool) && table.tools.len() >= MAX_TOOLS {
                let now = now();
                if table.sweep_due(now) {
                    table.sweep(now);
                }
            }
            let (handles, label) = if let Some(handles) = table.tools.get_mut(tool) {
                (handles, tool)
            } else if table.tools.len() >= MAX_TOOLS {
                (&mut table.other, OTHER)
            } else {
                if table.tools.len() + 1 == MAX_TOOLS && table.swept.is_none() {
                    table.start_sweeping(now());
                }
                (table.tools.entry(tool.into()).or_default(), tool)
            };
            handles.register(names, label, observation);
        });
        // The update placed the tool, or, in a full table that could make no room, swept
        // just now: no sweep is due, and the look-up finds where it records.
        self.tools.with_current(|table| {
            if let Some(handles) = table.and_then(|table| table.get(tool, &now)) {
                let recorded = handles.record(observation);
                debug_assert!(recorded, "every handle needed was just registered");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    fn names() -> Names {
        let name = |s: &'static str| SharedString::const_str(s);
        Names {
            calls: name("calls"),
            call_duration: name("call_duration"),
            hook_duration: name("hook_duration"),
            cache_lookups: name("cache_lookups"),
            rate_limited: name("rate_limited"),
        }
    }

    fn observation(outcome: Outcome<'_>, cache: Option<CacheResult>) -> Observation<'_> {
        Observation {
            outcome,
            elapsed: Duration::from_millis(1),
            hook_timings: &[],
            cache,
            rate_limited: matches!(outcome, Outcome::Error("rate_limited")),
        }
    }

    /// (name, labels, counter value or histogram length), sorted.
    fn read(recorder: &DebuggingRecorder) -> Vec<(String, Vec<String>, u64)> {
        let mut found: Vec<_> = recorder
            .snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let labels = key
                    .key()
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                let value = match value {
                    DebugValue::Counter(c) => c,
                    DebugValue::Histogram(xs) => xs.len() as u64,
                    DebugValue::Gauge(_) => 0,
                };
                (key.key().name().to_owned(), labels, value)
            })
            .collect();
        found.sort();
        found
    }

    #[test]
    fn series_are_registered_once_per_recorder_and_counted_in_the_right_one() {
        let names = names();
        let handles = Handles::default();
        let first = DebuggingRecorder::new();
        let second = DebuggingRecorder::new();
        ::metrics::with_local_recorder(&first, || {
            for _ in 0..3 {
                handles.record(&names, "echo", &observation(Outcome::Success, None));
            }
            handles.record(
                &names,
                "echo",
                &observation(Outcome::Error("rate_limited"), Some(CacheResult::Miss)),
            );
            handles.record(
                &names,
                "echo",
                &observation(Outcome::Error("tool_error"), None),
            );
        });
        ::metrics::with_local_recorder(&second, || {
            handles.record(&names, "echo", &observation(Outcome::Suspended, None));
        });
        let s = |xs: &[&str]| xs.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            read(&first),
            vec![
                ("cache_lookups".into(), s(&["tool=echo", "result=miss"]), 1),
                (
                    "call_duration".into(),
                    s(&["tool=echo", "outcome=error"]),
                    2
                ),
                (
                    "call_duration".into(),
                    s(&["tool=echo", "outcome=success"]),
                    3
                ),
                (
                    "calls".into(),
                    s(&["tool=echo", "outcome=error", "code=rate_limited"]),
                    1
                ),
                (
                    "calls".into(),
                    s(&["tool=echo", "outcome=error", "code=tool_error"]),
                    1
                ),
                (
                    "calls".into(),
                    s(&["tool=echo", "outcome=success", "code=ok"]),
                    3
                ),
                ("rate_limited".into(), s(&["tool=echo"]), 1),
            ]
        );
        assert_eq!(
            read(&second),
            vec![
                (
                    "call_duration".into(),
                    s(&["tool=echo", "outcome=suspended"]),
                    1
                ),
                (
                    "calls".into(),
                    s(&["tool=echo", "outcome=suspended", "code=suspended"]),
                    1
                ),
            ]
        );
    }

    /// The value of the `calls` series with all of `labels`.
    fn calls(found: &[(String, Vec<String>, u64)], labels: &[&str]) -> Option<u64> {
        found
            .iter()
            .find(|(name, have, _)| {
                name == "calls" && labels.iter().all(|l| have.iter().any(|h| h == l))
            })
            .map(|(.., value)| *value)
    }

    #[test]
    fn codes_past_the_bound_are_counted_under_other() {
        let names = names();
        let handles = Handles::default();
        let recorder = DebuggingRecorder::new();
        let codes: Vec<String> = (0..MAX_CODES + 6).map(|i| format!("code_{i}")).collect();
        ::metrics::with_local_recorder(&recorder, || {
            for _ in 0..2 {
                for code in &codes {
                    handles.record(&names, "echo", &observation(Outcome::Error(code), None));
                }
            }
        });
        let found = read(&recorder);
        for code in &codes[..MAX_CODES] {
            let label = format!("code={code}");
            assert_eq!(calls(&found, &[&label]), Some(2), "{code}");
        }
        for code in &codes[MAX_CODES..] {
            let label = format!("code={code}");
            assert_eq!(
                calls(&found, &[&label]),
                None,
                "{code} has a series of its own"
            );
        }
        assert_eq!(calls(&found, &["tool=echo", "code=other"]), Some(12));
        let series = found.iter().filter(|(name, ..)| name == "calls").count();
        assert_eq!(series, MAX_CODES + 1);
    }

    #[test]
    fn tools_past_the_bound_are_counted_under_other() {
        let names = names();
        let handles = Handles::default();
        let recorder = DebuggingRecorder::new();
        let tools: Vec<String> = (0..MAX_TOOLS + 3).map(|i| format!("tool_{i}")).collect();
        ::metrics::with_local_recorder(&recorder, || {
            for tool in &tools {
                handles.record(&names, tool, &observation(Outcome::Success, None));
            }
            for tool in &tools[MAX_TOOLS..] {
                handles.record(&names, tool, &observation(Outcome::Error("made_up"), None));
            }
        });
        let found = read(&recorder);
        assert_eq!(calls(&found, &["tool=tool_0", "code=ok"]), Some(1));
        let last_own = format!("tool={}", tools[MAX_TOOLS - 1]);
        assert_eq!(calls(&found, &[&last_own, "code=ok"]), Some(1));
        let first_past = format!("tool={}", tools[MAX_TOOLS]);
        assert_eq!(calls(&found, &[&first_past]), None);
        assert_eq!(calls(&found, &["tool=other", "code=ok"]), Some(3));
        assert_eq!(calls(&found, &["tool=other", "code=made_up"]), Some(3));
        let series = found.iter().filter(|(name, ..)| name == "calls").count();
        assert_eq!(series, MAX_TOOLS + 2);
    }

    /// A clock the test moves.
    struct Clock(std::cell::Cell<Instant>);

    impl Clock {
        fn new() -> Clock {
            Clock(std::cell::Cell::new(Instant::now()))
        }

        fn now(&self) -> Instant {
            self.0.get()
        }

        fn advance(&self, by: Duration) {
            self.0.set(self.0.get() + by);
        }
    }

    #[test]
    fn a_churned_tool_set_keeps_getting_its_own_series() {
        let names = names();
        let handles = Handles::default();
        let recorder = DebuggingRecorder::new();
        let clock = Clock::new();
        let generation = |g: usize| -> Vec<String> {
            (0..MAX_TOOLS).map(|i| format!("gen{g}_tool_{i}")).collect()
        };
        let (generations, rounds) = (3_u64, 4_u64);
        ::metrics::with_local_recorder(&recorder, || {
            // Each generation replaces the whole tool set, as a reload that renames every
            // tool would; its tools are called once a period.
            for g in 0..generations as usize {
                for _ in 0..rounds {
                    for tool in &generation(g) {
                        let success = observation(Outcome::Success, None);
                        handles.record_at(&names, tool, &success, || clock.now());
                    }
                    clock.advance(FORGET_AFTER);
                }
                clock.advance(10 * FORGET_AFTER);
            }
        });
        let found = read(&recorder);
        let mut own = 0;
        for g in 0..generations as usize {
            for tool in &generation(g) {
                let label = format!("tool={tool}");
                let calls = calls(&found, &[&label, "code=ok"]).unwrap_or(0);
                // Counted under `other` for two periods at most after the reload.
                assert!(calls >= rounds - 2, "{tool} has {calls} calls of its own");
                own += calls;
            }
        }
        let other = calls(&found, &["tool=other", "code=ok"]).unwrap_or(0);
        assert_eq!(own + other, generations * rounds * MAX_TOOLS as u64);
    }

    #[test]
    fn new_tools_wait_under_other_until_the_old_ones_were_idle_long_enough() {
        let names = names();
        let handles = Handles::default();
        let recorder = DebuggingRecorder::new();
        let clock = Clock::new();
        let success = observation(Outcome::Success, None);
        let old: Vec<String> = (0..MAX_TOOLS).map(|i| format!("old_{i}")).collect();
        ::metrics::with_local_recorder(&recorder, || {
            for tool in &old {
                handles.record_at(&names, tool, &success, || clock.now());
            }
            // Still in use: the table is full of tools called within the period.
            clock.advance(FORGET_AFTER / 2);
            for tool in &old[..10] {
                handles.record_at(&names, tool, &success, || clock.now());
            }
            handles.record_at(&names, "new", &success, || clock.now());
            // A period later, the tools not called since are forgotten, the ten called
            // are kept; the new tool gets its own series.
            clock.advance(FORGET_AFTER);
            handles.record_at(&names, "new", &success, || clock.now());
            handles.record_at(&names, "newer", &success, || clock.now());
            // A forgotten tool that comes back finds its series where it was.
            handles.record_at(&names, "old_4000", &success, || clock.now());
        });
        let found = read(&recorder);
        assert_eq!(calls(&found, &["tool=other", "code=ok"]), Some(1));
        assert_eq!(calls(&found, &["tool=new", "code=ok"]), Some(1));
        assert_eq!(calls(&found, &["tool=newer", "code=ok"]), Some(1));
        assert_eq!(calls(&found, &["tool=old_0", "code=ok"]), Some(2));
        assert_eq!(calls(&found, &["tool=old_4000", "code=ok"]), Some(2));
        let kept = ::metrics::with_local_recorder(&recorder, || {
            handles.tools.with_current(|table| {
                let table = table.expect("the table of this recorder");
                (0..10).all(|i| table.tools.contains_key(format!("old_{i}").as_str()))
                    && !table.tools.contains_key("old_10")
            })
        });
        assert!(
            kept,
            "the tools called in the period are kept, the others forgotten"
        );
    }
}
