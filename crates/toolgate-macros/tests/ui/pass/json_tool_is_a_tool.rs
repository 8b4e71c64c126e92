//! A tool known only by its JSON Schema is registered like any other tool.
use serde_json::json;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError};

fn main() {
    let echo = JsonTool::new("echo", "Echoes.", json!({"type": "object"}), |input, _ctx| {
        Box::pin(async move { Ok::<_, ToolError>(input.clone()) })
    });
    let pipeline = Pipeline::builder().tool(echo).build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let out = runtime.block_on(pipeline.invoke("echo", json!({"a": 1}), InvokeOptions::new()));
    assert_eq!(out, Ok(json!({"a": 1})));
}
