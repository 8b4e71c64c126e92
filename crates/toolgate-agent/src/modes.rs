//! Execution modes: functional, blocking (a person completes the call), display.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_core::control::SuspendRequest;
use toolgate_core::hook::Interest;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Control, Hook, HookResult, ToolInvokeContext, hook};

/// How a tool's call is carried out and what its output is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionMode {
    /// The tool runs and its output goes back to the model. The default.
    #[default]
    Functional,
    /// A person carries out the call: it is suspended before the tool runs, and resuming
    /// with [`ResumeDecision::Complete`] makes the person's answer the output without
    /// running the tool. Resuming with `Approve` runs the tool after all; `Reject` fails
    /// the call.
    Blocking,
    /// The tool runs and its output is meant for rendering (a chart, a card), not for the
    /// model: results and observations are marked `display`.
    Display,
}

impl ExecutionMode {
    /// `functional`, `blocking` or `display`, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Functional => "functional",
            ExecutionMode::Blocking => "blocking",
            ExecutionMode::Display => "display",
        }
    }
}

/// The metadata key with which a blocking call marks its own suspension (removed before
/// the metadata reaches a result).
pub(crate) const AWAITING_PERSON: &str = "toolgate_agent.awaiting_person";

/// The hook that makes blocking tools wait for a person: it suspends at `will_execute`,
/// after every policy and input stage has run, so nothing before it runs again on resume.
/// The tool system installs it; it runs last among `will_execute` hooks.
pub(crate) struct BlockingHook {
    tools: HashSet<String>,
}

impl BlockingHook {
    pub(crate) fn new(tools: HashSet<String>) -> Self {
        BlockingHook { tools }
    }
}

#[hook]
impl Hook for BlockingHook {
    fn name(&self) -> &str {
        "toolgate_agent::blocking"
    }

    fn priority(&self) -> i32 {
        i32::MIN
    }

    /// Only blocking tools have this hook in their plan.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(self.tools.contains(&tool.name))
    }

    fn will_execute(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        // The marker tells this suspension from an earlier one (an approval policy's): only
        // an approve of the person's own wait runs the tool.
        let awaited = ctx.metadata_mut().remove(AWAITING_PERSON).is_some();
        if awaited && matches!(ctx.resumed(), Some(ResumeDecision::Approve)) {
            return Ok(());
        }
        ctx.metadata_mut()
            .insert(AWAITING_PERSON.to_owned(), Value::Bool(true));
        let request = SuspendRequest::new(format!(
            "waiting for a person to complete `{}`",
            ctx.tool_name()
        ))
        // The arguments are not repeated here: the stored call keeps them once, as its
        // `input`, which is what the person completes the call from. (Calls an earlier
        // version kept carry them here too, and resume all the same.)
        .with_payload(json!({ "tool": ctx.tool_name() }));
        Err(Control::Suspend(request))
    }
}
