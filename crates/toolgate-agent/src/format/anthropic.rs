//! Anthropic Messages API: `tools`, `tool_use` content blocks, `tool_result` blocks.

use serde_json::{Value, json};
use toolgate_core::tool::ToolDefinition;

use super::{FormatError, call, json_kind, no_other_calls, parameters, shape_error, str_field};
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
/// message). Other blocks (text, thinking, server tools' blocks) are skipped.
///
/// ```
/// use serde_json::json;
/// use toolgate_agent::format::anthropic::parse_tool_uses;
///
/// let message = json!({"role": "assistant", "content": [
///     {"type": "text", "text": "Let me look."},
///     {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {}},
/// ]});
/// assert_eq!(parse_tool_uses(&message).unwrap()[0].id, "toolu_1");
/// // Calls in another provider's shape are refused, not read as "no calls".
/// let openai = json!({"role": "assistant", "content": [{"type": "text", "text": "…"}],
///                     "tool_calls": [{"id": "c1", "type": "function",
///                                     "function": {"name": "ping", "arguments": "{}"}}]});
/// assert!(parse_tool_uses(&openai).is_err());
/// ```
///
/// # Errors
///
/// [`FormatError`] when the payload is not a JSON object, when `content` is not an array,
/// when a block has no `type` (every Anthropic block has one: a block without it, such as
/// Bedrock's `toolUse`, is another format), when a `tool_use` block lacks its id or name,
/// and when, without a `tool_use` block, the message holds calls in another provider's
/// shape (OpenAI's `tool_calls`, Gemini's function call parts), which would otherwise be
/// read as no calls and silently not run.
pub fn parse_tool_uses(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    if !message.is_object() {
        return Err(FormatError::NotAMessage {
            provider: PROVIDER,
            found: json_kind(message),
        });
    }
    let other_format = || no_other_calls(message, PROVIDER, super::ANTHROPIC);
    let Some(blocks) = message.get("content").and_then(Value::as_array) else {
        other_format()?;
        return Err(shape_error(PROVIDER, "content", "an array"));
    };
    let mut calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let path = format!("content[{i}]");
        let kind = str_field(block, "type", PROVIDER, &path)?;
        if kind != "tool_use" {
            continue;
        }
        let id = str_field(block, "id", PROVIDER, &path)?;
        let name = str_field(block, "name", PROVIDER, &path)?;
        let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
        calls.push(call(id, name, Arguments::Json { value: input }));
    }
    if calls.is_empty() {
        other_format()?;
    }
    Ok(calls)
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
