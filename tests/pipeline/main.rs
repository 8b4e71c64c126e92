//! Tests of the invocation pipeline's contract (DESIGN.md §2–6), one module per area.
//!
//! Every test names the behaviour it proves and, where the order of stages is the point,
//! asserts the full stage sequence recorded by `toolgate_test::RecordingHook`.

mod context;
mod defaults;
mod failure_modes;
mod host_providers;
mod input;
mod interest;
mod ordering;
mod paths;
mod property;
mod providers;
mod release;
mod resume;
mod tracing;

use std::sync::Once;

use serde_json::json;
use toolgate::core::InvokeOptions;
use toolgate_test::{PANIC_PAYLOAD, ScriptedTool, TestPipeline};

/// The tool every test calls unless it says otherwise.
const TOOL: &str = "t";

/// Keeps the panics these tests inject on purpose out of the test output, while every
/// other panic (a failing assertion) is still reported.
fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !message.contains(PANIC_PAYLOAD) {
                default(info);
            }
        }));
    });
}

/// A pipeline with `tool` and one hook, labelled `rec`, recording every stage.
fn recorded(
    tool: ScriptedTool,
    configure: impl FnOnce(toolgate_test::RecordingHook) -> toolgate_test::RecordingHook,
) -> TestPipeline {
    quiet_injected_panics();
    TestPipeline::new().tool(tool).recording("rec", configure)
}

/// The input every test sends unless it says otherwise.
fn input() -> serde_json::Value {
    json!({ "q": "x" })
}

/// Options with nothing set.
fn options() -> InvokeOptions {
    InvokeOptions::new()
}
