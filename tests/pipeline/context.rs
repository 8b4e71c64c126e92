//! What the context tells hooks: timing set on every path, the attempt number, input and
//! output histories — and one shared hook instance serving every call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use toolgate::core::hook::HookRegistration;
use toolgate::core::stage::StageSet;
use toolgate::core::{Hook, HookResult, Stage, ToolInvokeContext, hook};
use toolgate_test::{Around, Inject, ScriptedTool, Step, TestPipeline};

use crate::{TOOL, input, options, quiet_injected_panics};

/// What a hook saw of the context at `will_audit`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Seen {
    finished: bool,
    timed_stages: Vec<Stage>,
    attempt: u32,
    input_history: Vec<Value>,
    output_history: Vec<Value>,
    output: Option<Value>,
}

/// Rewrites the input at `will_normalize_input` and records what it sees at `will_audit`.
#[derive(Clone, Default)]
struct Probe {
    seen: Arc<Mutex<Option<Seen>>>,
    calls: Arc<AtomicUsize>,
}

#[hook]
impl Hook for Probe {
    fn will_normalize_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.set_input(json!({ "q": "normalized" }));
        Ok(())
    }

    fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.calls.fetch_add(1, Ordering::SeqCst);
        *self.seen.lock().unwrap() = Some(Seen {
            finished: ctx.finished().is_some(),
            timed_stages: ctx
                .stage_durations()
                .iter()
                .map(|(stage, _)| *stage)
                .collect(),
            attempt: ctx.attempt(),
            input_history: ctx.input_history().to_vec(),
            output_history: ctx.output_history().to_vec(),
            output: ctx.output().cloned(),
        });
        Ok(())
    }
}

impl Probe {
    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone().expect("will_audit ran")
    }
}

#[tokio::test]
async fn on_success_the_record_phase_sees_finish_time_attempts_and_both_histories() {
    let probe = Probe::default();
    let tool = ScriptedTool::new(TOOL)
        .then(Step::transient("once"))
        .then(Step::Echo);
    let pipeline = TestPipeline::new()
        .configure(|b| b.record_stage_durations(true))
        .tool(tool)
        .hook(probe.clone())
        .recording("retry", |h| {
            h.with_stages(StageSet::of(&[
                Stage::AroundExecute,
                Stage::WillRedactOutput,
            ]))
            .around(Around::Retry(2))
            .at(Stage::WillRedactOutput, Inject::Respond(json!("redacted")))
        })
        .build();

    let out = pipeline.invoke(TOOL, input(), options()).await.unwrap();

    assert_eq!(out, json!("redacted"));
    let seen = probe.seen();
    assert!(seen.finished, "finished is set before the record phase");
    assert_eq!(
        seen.timed_stages,
        [Stage::WillNormalizeInput, Stage::WillRedactOutput],
        "a duration for every stage with hooks that ran before the record phase"
    );
    assert_eq!(seen.attempt, 2);
    assert_eq!(
        seen.input_history,
        [input()],
        "each earlier input recorded once"
    );
    assert_eq!(
        seen.output_history,
        [json!({ "q": "normalized" })],
        "the tool echoed the normalized input"
    );
    assert_eq!(seen.output, Some(json!("redacted")));
}

#[tokio::test]
async fn on_the_error_path_the_record_phase_still_sees_the_finish_time() {
    quiet_injected_panics();
    let probe = Probe::default();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(probe.clone())
        .recording("deny", |h| {
            h.at(Stage::WillAuthorize, Inject::abort("no", "forbidden", 403))
        })
        .build();

    pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    let seen = probe.seen();
    assert!(seen.finished);
    assert_eq!(seen.attempt, 0, "the tool never ran");
    assert!(seen.input_history.is_empty());
}

#[tokio::test]
async fn one_shared_hook_instance_serves_every_invocation() {
    let probe = Probe::default();
    let shared: Arc<dyn Hook> = Arc::new(probe.clone());
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(HookRegistration::shared(Arc::clone(&shared)))
        .build();
    let references = Arc::strong_count(&shared);

    for _ in 0..3 {
        pipeline.invoke(TOOL, input(), options()).await.unwrap();
    }

    assert_eq!(probe.calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        Arc::strong_count(&shared),
        references,
        "no instance is built or cloned per call"
    );
}

/// Records who each call is made by.
#[derive(Clone, Default)]
struct Callers(Arc<Mutex<Vec<String>>>);

#[hook]
impl Hook for Callers {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.0.lock().unwrap().push(ctx.user().id.clone());
        Ok(())
    }
}

#[tokio::test]
async fn a_call_without_a_user_is_made_by_the_anonymous_user_and_a_named_user_is_kept() {
    let callers = Callers::default();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(HookRegistration::shared(Arc::new(callers.clone())))
        .build();

    pipeline
        .invoke(TOOL, input(), toolgate::core::InvokeOptions::new())
        .await
        .unwrap();
    pipeline
        .invoke(
            TOOL,
            input(),
            toolgate::core::InvokeOptions::new().user(toolgate::core::User::new("alice")),
        )
        .await
        .unwrap();

    assert_eq!(*callers.0.lock().unwrap(), ["anonymous", "alice"]);
}

/// What the record phase reads of the clocks, as the standard library's types.
#[derive(Clone, Copy)]
struct ClockReading {
    started: Instant,
    finished: Instant,
    started_at: SystemTime,
    elapsed: Duration,
}

/// Keeps the clock reading of the last call's record phase.
#[derive(Clone, Default)]
struct Clocks(Arc<Mutex<Option<ClockReading>>>);

#[hook]
impl Hook for Clocks {
    fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        *self.0.lock().unwrap() = Some(ClockReading {
            started: ctx.started(),
            finished: ctx.finished().expect("set before the record phase"),
            started_at: ctx.started_at(),
            elapsed: ctx.elapsed(),
        });
        Ok(())
    }
}

#[tokio::test]
async fn start_and_finish_read_as_standard_instants_and_wall_time_in_call_order() {
    let clocks = Clocks::default();
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .hook(HookRegistration::shared(Arc::new(clocks.clone())))
        .build();

    let (wall_before, before) = (SystemTime::now(), Instant::now());
    pipeline.invoke(TOOL, input(), options()).await.unwrap();
    let (after, wall_after) = (Instant::now(), SystemTime::now());

    let seen = clocks.0.lock().unwrap().expect("audited");
    // The invocation clock and the standard ones are read a few nanoseconds apart when
    // converting, so the bounds allow a millisecond.
    let slack = Duration::from_millis(1);
    assert!(before <= seen.started + slack);
    assert!(seen.started <= seen.finished && seen.finished <= after + slack);
    assert!(wall_before <= seen.started_at + slack && seen.started_at <= wall_after + slack);
    assert!(seen.elapsed <= after - before + slack);
}
