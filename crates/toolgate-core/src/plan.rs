//! Plans: for one tool and each stage, the ordered hooks — compiled once, when the pipeline
//! is built, so an invocation never sorts and never builds a hook list.

use std::any::{Any, TypeId};
use std::cmp::Reverse;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::definition::ToolDefinition;
use crate::hook::{FailureMode, Hook, HookOptions};
use crate::hook::{StageMethod, stage_method};
use crate::stage::{STAGE_COUNT, Stage, StageSet};

/// A hook as registered: shared instance, options, and where it was registered.
#[derive(Clone)]
pub(crate) struct Registration {
    pub hook: Arc<dyn Hook>,
    pub options: HookOptions,
    /// `None` for a global hook, the tool's name for a per-tool hook.
    pub tool: Option<String>,
    pub order: usize,
}

/// One hook in a stage's list.
pub(crate) struct PlannedHook {
    pub hook: Arc<dyn Hook>,
    /// Calls the hook's method for the stage of the list.
    pub call: StageMethod,
    pub name: Arc<str>,
    pub failure: FailureMode,
    /// Its method at this stage always finishes at once ([`Hook::synchronous_stages`]).
    pub synchronous: bool,
    /// The type of the hook behind `hook`: what tells the future of its own default
    /// method from any other
    /// ([`HookFuture::is_default_method`](crate::hook::HookFuture::is_default_method)).
    pub type_id: TypeId,
    /// Whether its [`Hook::filter`] is asked per call: its [interest](Hook::interest) in
    /// the tool was `sometimes`.
    pub filtered: bool,
    /// Neither filtered nor a hook whose panic is contained (it fails the call): the
    /// common hook, which the stage runner calls after one test.
    pub plain: bool,
}

/// The compiled plan of one tool.
pub(crate) struct ToolPlan {
    stages: [Box<[PlannedHook]>; STAGE_COUNT],
    present: StageSet,
    /// The stages with hooks where every hook's method finishes at once (each declares
    /// the stage synchronous), and those learnt so at a call (each hook there declared it
    /// or answered with the trait's default method, which finishes at once on every
    /// call): they run without a future. A [`StageSet`]'s bits; a stage is only ever
    /// added, and a stale read only makes the stage's future once more.
    synchronous: AtomicU64,
    /// Every `around_execute` wrapper of the tool was found keeping the trait's default,
    /// which hands the rest of the chain back unstarted on every call: execution runs as
    /// if there were no wrapper. Learnt at a call, as a stage is learnt synchronous.
    wrappers_kept_default: AtomicBool,
    /// How many stages with hooks record a duration (all but `around_execute`).
    timed: usize,
    /// Whether invocations record stage durations: the builder asked for them, or a hook
    /// of this tool reads them.
    record_durations: bool,
    /// Whether invocations record how long each hook took (the builder asked for it).
    record_hook_timings: bool,
}

impl ToolPlan {
    /// Compiles the plan of the tool defined by `tool` from every registration: the hooks
    /// registered for it, less those whose [interest](Hook::interest) in it is `never`.
    pub fn compile(
        tool: &ToolDefinition,
        registrations: &[Registration],
        record_durations: bool,
        record_hook_timings: bool,
    ) -> ToolPlan {
        let mut mine: Vec<(&Registration, i32, StageSet, bool)> = registrations
            .iter()
            .filter(|r| r.tool.as_deref().is_none_or(|t| t == tool.name))
            .filter_map(|r| {
                let interest = r.hook.interest(tool);
                if interest.is_never() {
                    return None;
                }
                let priority = r.options.priority.unwrap_or_else(|| r.hook.priority());
                Some((r, priority, r.hook.stages(), interest.is_sometimes()))
            })
            .collect();
        // Higher priority first; at equal priority global before per-tool, then
        // registration order.
        mine.sort_by_key(|(r, priority, _, _)| (Reverse(*priority), r.tool.is_some(), r.order));

        let mut present = StageSet::EMPTY;
        let mut synchronous = StageSet::EMPTY;
        let stages = Stage::ALL.map(|stage| {
            let mut hooks: Vec<PlannedHook> = mine
                .iter()
                .filter(|(_, _, set, _)| set.contains(stage))
                .map(|&(r, _, _, filtered)| PlannedHook {
                    type_id: Any::type_id(&*r.hook),
                    hook: Arc::clone(&r.hook),
                    call: stage_method(stage),
                    name: Arc::from(r.hook.name()),
                    failure: r.options.failure,
                    synchronous: r.hook.synchronous_stages().contains(stage),
                    filtered,
                    plain: !filtered && r.options.failure == FailureMode::FailCall,
                })
                .collect();
            if stage.is_did() {
                hooks.reverse();
            }
            if !hooks.is_empty() {
                present = present.with(stage);
                if hooks.iter().all(|h| h.synchronous) {
                    synchronous = synchronous.with(stage);
                }
            }
            hooks.into_boxed_slice()
        });
        let timed = present
            .iter()
            .filter(|&s| s != Stage::AroundExecute)
            .count();
        let record_durations = record_durations
            || mine
                .iter()
                .any(|(r, _, _, _)| r.hook.wants_stage_durations());
        ToolPlan {
            stages,
            present,
            synchronous: AtomicU64::new(synchronous.bits()),
            wrappers_kept_default: AtomicBool::new(false),
            timed,
            record_durations,
            record_hook_timings,
        }
    }

    /// How many stage durations an invocation records, retries aside: the capacity its
    /// context reserves, so that recording them reallocates nothing (0 when it records
    /// none).
    #[inline]
    pub fn timed_stages(&self) -> usize {
        if self.record_durations { self.timed } else { 0 }
    }

    /// Whether invocations of this tool record how long each stage with hooks took.
    #[inline]
    pub fn records_durations(&self) -> bool {
        self.record_durations
    }

    /// Whether invocations of this tool record how long each hook took.
    #[inline]
    pub fn records_hook_timings(&self) -> bool {
        self.record_hook_timings
    }

    /// Whether invocations of this tool time nothing: neither stages nor hooks.
    #[inline]
    pub fn times_nothing(&self) -> bool {
        !self.record_durations && !self.record_hook_timings
    }

    /// The hooks at `stage`, in the order they run.
    #[inline]
    pub fn hooks(&self, stage: Stage) -> &[PlannedHook] {
        &self.stages[stage.index()]
    }

    /// The stages where hooks run.
    #[inline]
    pub fn present(&self) -> StageSet {
        self.present
    }

    /// Whether every hook at `stage` finishes at once, so that the stage runs without a
    /// future: true for a stage without hooks too.
    #[inline]
    pub fn is_synchronous(&self, stage: Stage) -> bool {
        !self.present.contains(stage)
            || StageSet::from_bits(self.synchronous.load(Ordering::Relaxed)).contains(stage)
    }

    /// Marks `stage` synchronous from now on: at a call, every hook there declared it so
    /// or answered with the trait's default method.
    #[cold]
    pub fn learn_synchronous(&self, stage: Stage) {
        let bits = StageSet::from(stage).bits();
        self.synchronous.fetch_or(bits, Ordering::Relaxed);
    }

    /// Whether every `around_execute` wrapper of the tool keeps the trait's default, so
    /// that execution runs as if it had none: learnt at a call
    /// ([`learn_wrappers_kept_default`](Self::learn_wrappers_kept_default)).
    #[inline]
    pub fn wrappers_kept_default(&self) -> bool {
        self.wrappers_kept_default.load(Ordering::Relaxed)
    }

    /// Marks the tool's `around_execute` wrappers as all keeping the trait's default: at
    /// a call, each was called and answered with the default's future, naming its type.
    #[cold]
    pub fn learn_wrappers_kept_default(&self) {
        self.wrappers_kept_default.store(true, Ordering::Relaxed);
    }

    /// Whether any hook runs at `stage`.
    #[inline]
    pub fn has(&self, stage: Stage) -> bool {
        self.present.contains(stage)
    }

    /// The stages with hooks, and the hooks' names in order.
    pub fn describe(&self) -> Vec<(Stage, Vec<String>)> {
        self.present
            .iter()
            .map(|stage| {
                let names = self
                    .hooks(stage)
                    .iter()
                    .map(|h| h.name.to_string())
                    .collect();
                (stage, names)
            })
            .collect()
    }
}
