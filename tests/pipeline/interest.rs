//! `Hook::interest`: asked once per tool when the plans are built; `never` leaves the hook
//! out of the tool's plan, `always` skips its filter, `sometimes` keeps the filter per call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use toolgate::core::hook::{Interest, Next};
use toolgate::core::tool::{ToolAnnotations, ToolDefinition};
use toolgate::core::{Hook, HookResult, Pipeline, Stage, ToolInvokeContext, hook};
use toolgate_test::ScriptedTool;

use crate::{input, options};

/// A hook at `will_authorize` and around execution that answers `interest` from the tool's
/// name and counts what the pipeline asks of it.
#[derive(Default)]
struct Probe {
    /// The tools it answers `never` for.
    never: Vec<&'static str>,
    /// The tools it answers `always` for; `sometimes` for the others.
    always: Vec<&'static str>,
    /// The tools `interest` was asked about, in order.
    asked: Mutex<Vec<String>>,
    filtered: AtomicUsize,
    authorized: AtomicUsize,
    wrapped: AtomicUsize,
}

impl Probe {
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
    fn count(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

#[hook]
impl Hook for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    fn interest(&self, tool: &ToolDefinition) -> Interest {
        self.asked.lock().unwrap().push(tool.name.clone());
        if self.never.contains(&tool.name.as_str()) {
            Interest::never()
        } else if self.always.contains(&tool.name.as_str()) {
            Interest::always()
        } else {
            Interest::sometimes()
        }
    }

    fn filter(&self, _ctx: &ToolInvokeContext) -> bool {
        self.filtered.fetch_add(1, Ordering::SeqCst);
        true
    }

    fn will_authorize(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        self.authorized.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        self.wrapped.fetch_add(1, Ordering::SeqCst);
        next.run(ctx).await
    }
}

/// A pipeline serving `a`, `b` and `c` with `probe` registered for every tool.
fn three_tools(probe: std::sync::Arc<Probe>) -> Pipeline {
    Pipeline::builder()
        .tool(ScriptedTool::new("a").into_erased())
        .tool(ScriptedTool::new("b").into_erased())
        .tool(ScriptedTool::new("c").into_erased())
        .hook(toolgate::core::hook::HookRegistration::shared(probe))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_hook_never_interested_in_a_tool_is_not_in_its_plan_and_never_runs_for_it() {
    let probe = std::sync::Arc::new(Probe {
        never: vec!["a"],
        ..Probe::default()
    });
    let pipeline = three_tools(probe.clone());

    assert_eq!(pipeline.plan("a"), Some(vec![]), "nothing runs for `a`");
    let plan_b = pipeline.plan("b").unwrap();
    assert_eq!(
        plan_b,
        [
            (Stage::WillAuthorize, vec!["probe".to_owned()]),
            (Stage::AroundExecute, vec!["probe".to_owned()]),
        ]
    );

    pipeline.invoke("a", input(), options()).await.unwrap();
    assert_eq!(Probe::count(&probe.filtered), 0, "not even its filter runs");
    assert_eq!(Probe::count(&probe.authorized), 0);
    assert_eq!(Probe::count(&probe.wrapped), 0);

    pipeline.invoke("b", input(), options()).await.unwrap();
    assert_eq!(Probe::count(&probe.authorized), 1);
    assert_eq!(Probe::count(&probe.wrapped), 1);
}

#[tokio::test]
async fn a_hook_always_interested_in_a_tool_runs_without_its_filter_being_asked() {
    let probe = std::sync::Arc::new(Probe {
        always: vec!["a"],
        ..Probe::default()
    });
    let pipeline = three_tools(probe.clone());

    pipeline.invoke("a", input(), options()).await.unwrap();
    pipeline.invoke("a", input(), options()).await.unwrap();

    assert_eq!(Probe::count(&probe.filtered), 0);
    assert_eq!(Probe::count(&probe.authorized), 2);
    assert_eq!(Probe::count(&probe.wrapped), 2);
}

#[tokio::test]
async fn a_hook_sometimes_interested_is_filtered_before_each_of_its_stages() {
    let probe = std::sync::Arc::new(Probe::default());
    let pipeline = three_tools(probe.clone());

    pipeline.invoke("c", input(), options()).await.unwrap();

    // Once at `will_authorize`, once for its `around_execute`.
    assert_eq!(Probe::count(&probe.filtered), 2);
    assert_eq!(Probe::count(&probe.authorized), 1);
}

#[tokio::test]
async fn interest_is_asked_once_per_tool_when_the_pipeline_is_built_and_never_per_call() {
    let probe = std::sync::Arc::new(Probe {
        never: vec!["a"],
        always: vec!["b"],
        ..Probe::default()
    });
    let pipeline = three_tools(probe.clone());
    assert_eq!(probe.asked(), ["a", "b", "c"]);

    for tool in ["a", "b", "c", "b"] {
        pipeline.invoke(tool, input(), options()).await.unwrap();
    }
    assert_eq!(probe.asked(), ["a", "b", "c"]);
}

/// Wants `will_check_consent` for destructive tools only.
struct DestructiveOnly;

#[hook]
impl Hook for DestructiveOnly {
    fn name(&self) -> &str {
        "destructive_only"
    }

    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(tool.annotations.destructive)
    }

    fn will_check_consent(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.abort("ask a person first", "approval_required", 403)
    }
}

#[tokio::test]
async fn interest_is_asked_again_when_a_rebuilt_pipeline_serves_a_changed_definition() {
    let build = |annotations: ToolAnnotations| {
        Pipeline::builder()
            .tool(
                ScriptedTool::new("wipe")
                    .annotations(annotations)
                    .into_erased(),
            )
            .hook(DestructiveOnly)
            .build()
            .unwrap()
    };

    let before = build(ToolAnnotations::default());
    assert_eq!(before.plan("wipe"), Some(vec![]));
    before.invoke("wipe", input(), options()).await.unwrap();

    // The definition changed (a reload serving an upstream's new tool list, say): the
    // pipeline built for it asks again.
    let after = build(ToolAnnotations {
        destructive: true,
        ..ToolAnnotations::default()
    });
    assert_eq!(
        after.plan("wipe"),
        Some(vec![(
            Stage::WillCheckConsent,
            vec!["destructive_only".to_owned()]
        )])
    );
    let err = after.invoke("wipe", input(), options()).await.unwrap_err();
    assert_eq!(err.code(), "approval_required");
}

/// A hook under `#[hook]` that writes neither `interest` nor `filter`: it answers always.
struct Plain;

#[hook]
impl Hook for Plain {
    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

#[test]
fn a_switched_off_hook_is_never_interested_and_a_switched_on_one_answers_for_itself() {
    let tool = ScriptedTool::new("t").into_erased().definition();
    assert_eq!(None::<Plain>.interest(&tool), Interest::never());
    assert_eq!(Some(Plain).interest(&tool), Interest::always());
    assert_eq!(Box::new(Plain).interest(&tool), Interest::always());
}
