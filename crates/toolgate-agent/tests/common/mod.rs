//! The fixture the agent tests share: a pipeline with a handful of tools, and a thread
//! that enables them.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolgate_agent::{ExecutionMode, InMemoryStateManager, ThreadConfig, ToolSystemBuilder};
use toolgate_core::{
    Hook, HookResult, Pipeline, PipelineBuilder, ToolError, ToolInvokeContext, hook, tool_fn,
};

pub const THREAD: &str = "thread-1";

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct Weather {
    #[garde(length(min = 1, max = 40))]
    pub city: String,
    #[garde(range(min = 1, max = 14))]
    pub days: u8,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct NoArgs {}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct Text {
    #[garde(length(max = 100_000))]
    pub text: String,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct Size {
    #[garde(range(max = 1_000_000))]
    pub chars: usize,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct Question {
    #[garde(length(min = 1, max = 200))]
    pub question: String,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct Wait {
    #[garde(range(max = 600_000))]
    pub ms: u64,
}

/// How many times each counted tool actually ran.
#[derive(Default)]
pub struct Runs {
    pub ask_user: AtomicUsize,
    pub transfer: AtomicUsize,
    pub sleep: AtomicUsize,
}

impl Runs {
    pub fn of(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

/// Suspends every call of `transfer` at the consent stage until a person approves — the
/// shape of an approval policy.
pub struct ApproveTransfers;

#[hook]
impl Hook for ApproveTransfers {
    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        ctx.tool_name() == "transfer"
    }

    fn will_check_consent(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.metadata_mut().insert(
            "repairs".to_owned(),
            json!([{ "path": "amount", "from": "10", "to": 10 }]),
        );
        ctx.suspend("a person must approve money transfers")
    }
}

/// Adds a source to every `get_weather` result, as a retrieval hook would.
pub struct CiteSources;

#[hook]
impl Hook for CiteSources {
    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        ctx.tool_name() == "get_weather"
    }

    fn did_execute(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.metadata_mut().insert(
            "sources".to_owned(),
            json!({ "sourceName": "met-office", "url": "https://example.org/forecast" }),
        );
        Ok(())
    }
}

/// The tools: `get_weather`, `echo`, `big`, `boom` (panics), `ask_user` (blocking),
/// `show_chart` (display), `transfer` (suspended by a hook), `sleep` (waits).
pub fn pipeline(runs: &Arc<Runs>) -> PipelineBuilder {
    let asks = Arc::clone(runs);
    let transfers = Arc::clone(runs);
    let sleeps = Arc::clone(runs);
    Pipeline::builder()
        .tool(tool_fn(
            "get_weather",
            "Weather forecast for a city.",
            |w: Weather| async move {
                Ok::<_, ToolError>(json!({ "city": w.city, "days": w.days, "temp_c": 21 }))
            },
        ))
        .tool(tool_fn(
            "echo",
            "Returns the text it is given.",
            |t: Text| async move { Ok::<_, ToolError>(t.text) },
        ))
        .tool(tool_fn(
            "big",
            "Returns `chars` characters.",
            |s: Size| async move { Ok::<_, ToolError>("é".repeat(s.chars)) },
        ))
        .tool(tool_fn("boom", "Always panics.", |_: Text| async move {
            if true {
                panic!("the boom tool exploded");
            }
            Ok::<_, ToolError>(())
        }))
        .tool(tool_fn(
            "ask_user",
            "Asks the user a question.",
            move |q: Question| {
                asks.ask_user.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(format!("(default answer to {})", q.question)) }
            },
        ))
        .tool(tool_fn(
            "show_chart",
            "Renders a chart for the user.",
            |t: Text| async move { Ok::<_, ToolError>(json!({ "chart": t.text })) },
        ))
        .tool(tool_fn("transfer", "Transfers money.", move |t: Text| {
            transfers.transfer.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, ToolError>(format!("transferred {}", t.text)) }
        }))
        .tool(tool_fn(
            "sleep",
            "Waits `ms` milliseconds.",
            move |w: Wait| {
                sleeps.sleep.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(w.ms)).await;
                    Ok::<_, ToolError>(w.ms)
                }
            },
        ))
        .hook(ApproveTransfers)
        .hook(CiteSources)
}

pub const ALL_TOOLS: [&str; 8] = [
    "get_weather",
    "echo",
    "big",
    "boom",
    "ask_user",
    "show_chart",
    "transfer",
    "sleep",
];

/// A thread that enables every tool.
pub fn state() -> Arc<InMemoryStateManager> {
    // Strict, so that a test that forgets a thread's configuration sees it fail.
    let state = Arc::new(InMemoryStateManager::new().refusing_unknown_threads());
    state.set_config(THREAD, ThreadConfig::enabling(ALL_TOOLS));
    state
}

/// A builder with the fixture's tools and modes.
pub fn system(runs: &Arc<Runs>, state: Arc<InMemoryStateManager>) -> ToolSystemBuilder {
    toolgate_agent::ToolSystem::builder(pipeline(runs), state)
        .mode("ask_user", ExecutionMode::Blocking)
        .mode("show_chart", ExecutionMode::Display)
}
