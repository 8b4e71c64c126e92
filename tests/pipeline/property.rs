//! Property: whatever hooks there are, whatever their priorities, and whatever outcome is
//! injected at whatever stage — including a panic and the drop of the invocation future —
//! every unit of capacity taken is given back by its release stage, nothing stays held, and
//! `will_finalize_invoke` runs exactly once for every hook.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use toolgate::core::external::CancellationToken;
use toolgate::core::{InvokeOptions, Stage, Stage::*, ToolError};
use toolgate_test::{
    Around, CapacityCounters, CapacityHook, Inject, RecordingHook, ScriptedTool, StageLog, Step,
    TestPipeline,
};

use crate::{TOOL, input, quiet_injected_panics};

/// The stages of the tail, where a hang would never end (the tail is not under the
/// deadline), so a delay is injected there instead.
const TAIL: [Stage; 7] = [
    OnError,
    WillAudit,
    DidAudit,
    OnMetrics,
    DidReleaseSemaphore,
    DidReleaseQuota,
    WillFinalizeInvoke,
];

#[derive(Clone, Debug)]
enum Outcome {
    Respond,
    Abort,
    RetryAfter,
    Suspend,
    Fail,
    Panic,
    Hang,
    Delay(u64),
}

impl Outcome {
    fn inject(&self, stage: Stage) -> Inject {
        match self {
            Outcome::Respond => Inject::Respond(json!("responded")),
            Outcome::Abort => Inject::abort("no", "forbidden", 403),
            Outcome::RetryAfter => Inject::RetryAfter(Duration::from_millis(500)),
            Outcome::Suspend => Inject::suspend("approval"),
            Outcome::Fail => Inject::Fail(ToolError::internal("hook broke")),
            Outcome::Panic => Inject::Panic,
            Outcome::Hang if TAIL.contains(&stage) => Inject::Delay(Duration::from_millis(20)),
            Outcome::Hang => Inject::Hang,
            Outcome::Delay(ms) => Inject::Delay(Duration::from_millis(*ms)),
        }
    }
}

#[derive(Clone, Debug)]
enum Ending {
    /// Await the call to its end.
    Complete,
    /// Drop the invocation future after this many milliseconds.
    Drop(u64),
    /// Give the call a deadline this many milliseconds away.
    Deadline(u64),
    /// Cancel the call's token after this many milliseconds.
    Cancel(u64),
}

#[derive(Clone, Debug)]
struct Case {
    recording_priorities: Vec<i32>,
    capacity_priorities: Vec<i32>,
    injected_into: usize,
    stage: Stage,
    outcome: Outcome,
    tool: Step,
    around: Around,
    ending: Ending,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Respond),
        Just(Outcome::Abort),
        Just(Outcome::RetryAfter),
        Just(Outcome::Suspend),
        Just(Outcome::Fail),
        Just(Outcome::Panic),
        Just(Outcome::Hang),
        (1u64..40).prop_map(Outcome::Delay),
    ]
}

fn tool_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::ok(json!("tool output"))),
        Just(Step::transient("flaky")),
        Just(Step::permanent("broken")),
        Just(Step::Panic),
        Just(Step::Hang),
        (1u64..40).prop_map(|ms| Step::sleep(Duration::from_millis(ms), Step::ok(json!("slow")))),
    ]
}

fn around() -> impl Strategy<Value = Around> {
    prop_oneof![
        Just(Around::Once),
        Just(Around::Respond(json!("wrapped"))),
        (1u32..4).prop_map(Around::Retry),
        (1u32..3).prop_map(Around::Repeat),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        Just(Ending::Complete),
        (0u64..60).prop_map(Ending::Drop),
        (0u64..60).prop_map(Ending::Deadline),
        (0u64..60).prop_map(Ending::Cancel),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(-3i32..=3, 1..4),
        prop::collection::vec(-3i32..=3, 1..3),
        any::<prop::sample::Index>(),
        prop::sample::select(Stage::ALL.to_vec()),
        outcome(),
        tool_step(),
        around(),
        ending(),
    )
        .prop_map(
            |(
                recording_priorities,
                capacity_priorities,
                index,
                stage,
                outcome,
                tool,
                around,
                ending,
            )| Case {
                injected_into: index.index(recording_priorities.len()),
                recording_priorities,
                capacity_priorities,
                stage,
                outcome,
                tool,
                around,
                ending,
            },
        )
}

struct Run {
    log: StageLog,
    labels: Vec<String>,
    counters: Vec<Arc<CapacityCounters>>,
}

/// Runs one invocation of `case` on a paused clock and waits until its tail is done.
fn run(case: &Case) -> Run {
    quiet_injected_panics();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let log = StageLog::new();
        let mut test =
            TestPipeline::new().tool(ScriptedTool::new(TOOL).otherwise(case.tool.clone()));
        let mut labels = Vec::new();
        for (i, priority) in case.recording_priorities.iter().enumerate() {
            let label = format!("rec{i}");
            let mut hook = RecordingHook::new(label.as_str(), &log)
                .with_priority(*priority)
                .around(case.around.clone());
            if i == case.injected_into {
                hook = hook.at(case.stage, case.outcome.inject(case.stage));
            }
            labels.push(label);
            test = test.hook(hook);
        }
        let mut counters = Vec::new();
        for (i, priority) in case.capacity_priorities.iter().enumerate() {
            let hook = CapacityHook::new(format!("cap{i}")).with_priority(*priority);
            counters.push(hook.counters());
            test = test.hook(hook);
        }
        let pipeline = test.build();

        let mut options = InvokeOptions::new();
        let mut drop_after = Duration::from_secs(3600);
        match case.ending {
            Ending::Complete => {}
            Ending::Drop(ms) => drop_after = Duration::from_millis(ms),
            Ending::Deadline(ms) => options = options.timeout(Duration::from_millis(ms)),
            Ending::Cancel(ms) => {
                let token = CancellationToken::new();
                let canceller = token.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    canceller.cancel();
                });
                options = options.cancellation(token);
            }
        }
        let _ = tokio::time::timeout(drop_after, pipeline.invoke(TOOL, input(), options)).await;
        // A dropped call finishes its tail on a spawned task: wait for it (and a little more
        // for the last hooks of the stage), on the paused clock.
        log.wait_for(WillFinalizeInvoke, Duration::from_secs(3600))
            .await;
        let settle = async {
            while labels
                .iter()
                .any(|l| !log.stages_of(l).contains(&WillFinalizeInvoke))
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(60), settle).await;
        Run {
            log,
            labels,
            counters,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Keep the seeds of past failures next to this file.
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn capacity_balances_and_finalize_runs_once_whatever_happens(case in case()) {
        let Run { log, labels, counters } = run(&case);

        for (i, counters) in counters.iter().enumerate() {
            prop_assert!(counters.is_balanced(), "cap{}: {}\nlog: {:?}", i, counters, log);
        }
        let quota_reached = log.count(WillAcquireQuota) > 0;
        let semaphore_reached = log.count(WillAcquireSemaphore) > 0;
        for label in &labels {
            let stages = log.stages_of(label);
            let count = |stage: Stage| stages.iter().filter(|s| **s == stage).count();
            prop_assert_eq!(count(WillFinalizeInvoke), 1, "{} finalized once\nlog: {:?}", label, log);
            prop_assert_eq!(count(DidReleaseQuota), usize::from(quota_reached), "{} released quota\nlog: {:?}", label, log);
            prop_assert_eq!(count(DidReleaseSemaphore), usize::from(semaphore_reached), "{} released permit\nlog: {:?}", label, log);
            prop_assert_eq!(stages.last(), Some(&WillFinalizeInvoke), "{} ended with finalize\nlog: {:?}", label, log);
        }
    }
}
