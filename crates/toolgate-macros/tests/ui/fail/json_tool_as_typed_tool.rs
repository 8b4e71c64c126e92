use serde_json::json;
use toolgate_core::{JsonTool, Pipeline, ToolError};

fn main() {
    let echo = JsonTool::new("echo", "Echoes.", json!({"type": "object"}), |input, _ctx| {
        Box::pin(async move { Ok::<_, ToolError>(input.clone()) })
    });
    let mut builder = Pipeline::builder();
    let _ = builder.tool(echo);
}
