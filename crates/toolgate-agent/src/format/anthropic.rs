//! Anthropic Messages API: `tools`, `tool_use` content blocks, `tool_result` blocks.

use serde_json::{Value, json};
use toolgate_core::tool::ToolDefinition;

use super::{FormatError, call, parameters, shape_error, str_field};
use crate::{Arguments, ToolCall, ToolResult, ToolStatus};

const PROVIDER: &str = "anthropic messages";

/// The `tools` array of a Messages API request.
pub fn tools<'a>(definitions: impl IntoIterator<Item = &'a ToolDefinition>) -> Value {
    definitions
        .into_iter()
        .map(|d| {
            json!({
                "name": d.name,
                "description": d.description,
                "input_schema": parameters(&d.input_schema),
            })
        })
        .collect()
}

/// The `tool_use` blocks of an assistant message (the Messages API response is the
/// message). Other blocks (text, thinking) are skipped.
///
/// # Errors
///
/// [`FormatError`] when `content` is not an array or a `tool_use` block lacks its id or
/// name.
pub fn parse_tool_uses(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| shape_error(PROVIDER, "content", "an array"))?;
    blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|(i, b)| {
            let path = format!("content[{i}]");
            let id = str_field(b, "id", PROVIDER, &path)?;
            let name = str_field(b, "name", PROVIDER, &path)?;
            let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
            Ok(call(id, name, Arguments::Json { value: input }))
        })
        .collect()
}

/// The `tool_result` block that answers one `tool_use`; `is_error` is set on errors.
pub fn tool_result_block(result: &ToolResult) -> Value {
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": result.content_text(),
    });
    if result.status == ToolStatus::Error {
        block["is_error"] = Value::Bool(true);
    }
    block
}

/// The user message that answers every `tool_use` of an assistant message, in order.
pub fn tool_results_message<'a>(results: impl IntoIterator<Item = &'a ToolResult>) -> Value {
    let content: Vec<Value> = results.into_iter().map(tool_result_block).collect();
    json!({ "role": "user", "content": content })
}
