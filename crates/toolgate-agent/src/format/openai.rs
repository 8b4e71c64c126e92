//! OpenAI: chat completions (`tools`, `tool_calls`, `role: "tool"` messages) and the
//! Responses API (`function_call` and `function_call_output` items).

use serde_json::{Value, json};
use toolgate_core::tool::ToolDefinition;

use super::{FormatError, arguments_of, call, parameters, shape_error, str_field};
use crate::{ToolCall, ToolResult};

const CHAT: &str = "openai chat completions";
const RESPONSES: &str = "openai responses";

/// The `tools` array of a chat completions request.
///
/// ```
/// use toolgate_core::tool::{ToolAnnotations, ToolDefinition, ToolSource};
/// use serde_json::json;
///
/// let def = ToolDefinition {
///     name: "get_weather".into(), title: None, description: "Weather.".into(), version: "1".into(),
///     input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
///     output_schema: None, annotations: ToolAnnotations::default(), tags: vec![], source: ToolSource::Local,
/// };
/// let tools = toolgate_agent::format::openai::chat_tools([&def]);
/// assert_eq!(tools[0]["function"]["name"], "get_weather");
/// ```
pub fn chat_tools<'a>(definitions: impl IntoIterator<Item = &'a ToolDefinition>) -> Value {
    definitions
        .into_iter()
        .map(|d| {
            json!({
                "type": "function",
                "function": {
                    "name": d.name,
                    "description": d.description,
                    "parameters": parameters(&d.input_schema),
                }
            })
        })
        .collect()
}

/// The `tools` array of a Responses API request. `strict` is set to `false`, because the
/// Responses API defaults to strict schemas, which ordinary JSON Schemas do not meet.
pub fn responses_tools<'a>(definitions: impl IntoIterator<Item = &'a ToolDefinition>) -> Value {
    definitions
        .into_iter()
        .map(|d| {
            json!({
                "type": "function",
                "name": d.name,
                "description": d.description,
                "parameters": parameters(&d.input_schema),
                "strict": false,
            })
        })
        .collect()
}

/// The tool calls of a chat completions answer: pass the assistant message, or the whole
/// response (its first choice's message is read). No `tool_calls` means no calls.
///
/// # Errors
///
/// [`FormatError`] when a call lacks its id or function name.
pub fn parse_chat_tool_calls(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let message = match message.get("choices") {
        Some(choices) => choices
            .get(0)
            .and_then(|c| c.get("message"))
            .ok_or_else(|| shape_error(CHAT, "choices[0].message", "an object"))?,
        None => message,
    };
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(shape_error(CHAT, "tool_calls", "an array")),
    };
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = format!("tool_calls[{i}]");
            let id = str_field(c, "id", CHAT, &path)?;
            let function = c
                .get("function")
                .ok_or_else(|| shape_error(CHAT, format!("{path}.function"), "an object"))?;
            let name = str_field(function, "name", CHAT, &format!("{path}.function"))?;
            Ok(call(id, name, arguments_of(function.get("arguments"))))
        })
        .collect()
}

/// The `role: "tool"` message that answers one call in chat completions.
pub fn chat_tool_message(result: &ToolResult) -> Value {
    json!({
        "role": "tool",
        "tool_call_id": result.call_id,
        "content": result.content_text(),
    })
}

/// The function calls of a Responses API answer: pass the response (its `output` is
/// read) or the `output` array itself.
///
/// # Errors
///
/// [`FormatError`] when `output` is missing or a function call lacks its `call_id` or name.
pub fn parse_responses_output(response: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let items = match response {
        Value::Array(items) => items,
        _ => response
            .get("output")
            .and_then(Value::as_array)
            .ok_or_else(|| shape_error(RESPONSES, "output", "an array"))?,
    };
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.get("type").and_then(Value::as_str) == Some("function_call"))
        .map(|(i, item)| {
            let path = format!("output[{i}]");
            let id = str_field(item, "call_id", RESPONSES, &path)?;
            let name = str_field(item, "name", RESPONSES, &path)?;
            Ok(call(id, name, arguments_of(item.get("arguments"))))
        })
        .collect()
}

/// The `function_call_output` input item that answers one call in the Responses API.
pub fn responses_tool_output(result: &ToolResult) -> Value {
    json!({
        "type": "function_call_output",
        "call_id": result.call_id,
        "output": result.content_text(),
    })
}
