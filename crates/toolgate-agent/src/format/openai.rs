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

/// The tool calls of a chat completions answer: pass the assistant message, the whole
/// response (its first choice's message is read), or the message's `tool_calls` array. A
/// message without `tool_calls` has no calls.
///
/// ```
/// use serde_json::json;
/// use toolgate_agent::format::openai::parse_chat_tool_calls;
///
/// let call = json!({"id": "c1", "type": "function",
///                   "function": {"name": "ping", "arguments": "{}"}});
/// let message = json!({"role": "assistant", "tool_calls": [call.clone()]});
/// assert_eq!(parse_chat_tool_calls(&message).unwrap()[0].name, "ping");
/// assert_eq!(parse_chat_tool_calls(&json!([call])).unwrap()[0].id, "c1");
/// // Calls in another provider's shape are refused, not read as "no calls".
/// let anthropic = json!({"role": "assistant",
///                        "content": [{"type": "tool_use", "id": "t", "name": "ping", "input": {}}]});
/// assert!(parse_chat_tool_calls(&anthropic).is_err());
/// ```
///
/// # Errors
///
/// [`FormatError`] when the payload is not a JSON object or array, when a call lacks its id
/// or function name, and when a message without `tool_calls` holds calls in another
/// provider's shape (Anthropic's `tool_use` blocks, Gemini's `functionCall` parts), which
/// would otherwise be read as a message with no calls and silently not run.
pub fn parse_chat_tool_calls(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let message = match message {
        // The message's `tool_calls` array itself.
        Value::Array(calls) => return chat_calls(calls),
        Value::Object(object) => match object.get("choices") {
            Some(choices) => choices
                .get(0)
                .and_then(|c| c.get("message"))
                .filter(|m| m.is_object())
                .ok_or_else(|| shape_error(CHAT, "choices[0].message", "an object"))?,
            None => message,
        },
        other => {
            return Err(FormatError::NotAMessage {
                provider: CHAT,
                found: json_kind(other),
            });
        }
    };
    match message.get("tool_calls") {
        None | Some(Value::Null) => {
            if let Some(format) = other_format(message) {
                return Err(FormatError::OtherFormat {
                    provider: CHAT,
                    format,
                });
            }
            Ok(Vec::new())
        }
        Some(Value::Array(calls)) => chat_calls(calls),
        Some(_) => Err(shape_error(CHAT, "tool_calls", "an array")),
    }
}

/// The provider whose calls `message`, a chat completions message without `tool_calls`,
/// holds: Anthropic's `tool_use` content blocks, or Gemini's `functionCall` parts (of a
/// content, or of a response's first candidate).
fn other_format(message: &Value) -> Option<&'static str> {
    let holds = |items: Option<&Value>, test: &dyn Fn(&Value) -> bool| {
        items
            .and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(test))
    };
    if holds(message.get("content"), &|block| {
        block.get("type").and_then(Value::as_str) == Some("tool_use")
    }) {
        return Some("anthropic");
    }
    let content = message
        .get("candidates")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("content"))
        .unwrap_or(message);
    holds(content.get("parts"), &|part| {
        part.get("functionCall").is_some()
    })
    .then_some("gemini")
}

/// What a JSON value is, in words.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The calls of a `tool_calls` array.
fn chat_calls(calls: &[Value]) -> Result<Vec<ToolCall>, FormatError> {
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
