//! OpenAI: chat completions (`tools`, `tool_calls`, `role: "tool"` messages, and the legacy
//! `function_call` answered by a `role: "function"` message) and the Responses API
//! (`function_call` and `function_call_output` items).

use serde_json::{Value, json};
use toolgate_core::tool::ToolDefinition;

use super::{
    FormatError, arguments_of, call, json_kind, no_other_calls, parameters, shape_error, str_field,
};
use crate::{ToolCall, ToolResult};

const CHAT: &str = "openai chat completions";
const RESPONSES: &str = "openai responses";

/// The prefix of the id given to a legacy `function_call` of chat completions, which
/// arrives without one: such a call is answered with a `role: "function"` message (by its
/// name), since OpenAI never issued the id. A `tool_calls` id that starts with it is
/// refused, so that a given id is never taken for a made one.
pub const SYNTHETIC_ID_PREFIX: &str = "openai-call-";

/// The output items of a Responses API answer that are calls toolgate cannot run: a call
/// of a custom tool (free-form text input), and items that ask the application itself to
/// act. Items OpenAI runs itself (`web_search_call`, `file_search_call`, `mcp_call`,
/// `code_interpreter_call`, `image_generation_call`) are not calls for the application,
/// and are skipped with messages and reasoning.
const UNRUNNABLE_ITEMS: [&str; 6] = [
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "mcp_approval_request",
];

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

/// What a payload without calls is told it should have been.
const NO_MESSAGE: &str = "an array of calls, in an assistant message (an object with `role`) or a chat completion (an object with `choices`)";

/// The tool calls of a chat completions answer: pass the assistant message, the whole
/// response (its first choice's message is read), or the message's `tool_calls` array. A
/// message (an object with `role`) without `tool_calls` has no calls; an object that is
/// neither a message nor a response is refused.
///
/// A message's legacy `function_call` (the single call of the `functions` API, which has
/// no id) is read as one call with the id [`SYNTHETIC_ID_PREFIX`]`0`, which
/// [`chat_tool_message`] answers with a `role: "function"` message; a `null` there is no
/// call (as OpenAI's SDKs write every field of a message).
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
/// // An assistant message that answers in words has no calls; an object that is no
/// // message at all (a typo) is refused.
/// let words = json!({"role": "assistant", "content": "hi"});
/// assert!(parse_chat_tool_calls(&words).unwrap().is_empty());
/// assert!(parse_chat_tool_calls(&json!({"calls": [call]})).is_err());
/// // The legacy `function_call` is one call, with an id of toolgate's.
/// let legacy = json!({"role": "assistant", "content": null,
///                     "function_call": {"name": "ping", "arguments": "{}"}});
/// assert_eq!(parse_chat_tool_calls(&legacy).unwrap()[0].id, "openai-call-0");
/// ```
///
/// # Errors
///
/// [`FormatError`] when the payload is not a JSON object or array, when an object is
/// neither a message (no `role`) nor a response (no `choices`) and has no `tool_calls`,
/// when a call lacks its id or function name, when an id starts with
/// [`SYNTHETIC_ID_PREFIX`], when a message holds calls under both `tool_calls` and
/// `function_call`, when a call is of a custom tool (free-form text input, which
/// toolgate's tools cannot take), and when a message without calls holds calls in another
/// provider's shape (a Responses API response's `function_call` items, Anthropic's
/// `tool_use` blocks, Gemini's function call parts), which would otherwise be read as a
/// message with no calls and silently not run.
pub fn parse_chat_tool_calls(message: &Value) -> Result<Vec<ToolCall>, FormatError> {
    // Whether the payload is a message of its own, which may have no calls: an object
    // that is neither one nor a response (a typo, `calls` for `tool_calls`) is refused,
    // never read as a message with no calls and answered with nothing run.
    let mut is_message = true;
    let message = match message {
        // The message's `tool_calls` array itself.
        Value::Array(calls) => return chat_calls(calls),
        Value::Object(object) => match object.get("choices") {
            Some(choices) => choices
                .get(0)
                .and_then(|c| c.get("message"))
                .filter(|m| m.is_object())
                .ok_or_else(|| shape_error(CHAT, "choices[0].message", "an object"))?,
            None => {
                is_message = object.contains_key("role");
                message
            }
        },
        other => {
            return Err(FormatError::NotAMessage {
                provider: CHAT,
                found: json_kind(other),
            });
        }
    };
    let legacy = message.get("function_call").filter(|call| !call.is_null());
    match (message.get("tool_calls"), legacy) {
        (Some(Value::Array(calls)), Some(_)) if !calls.is_empty() => Err(shape_error(
            CHAT,
            "function_call",
            "absent beside `tool_calls` (a message holds its calls under one of them)",
        )),
        (None | Some(Value::Null | Value::Array(_)), Some(function)) => {
            let name = str_field(function, "name", CHAT, "function_call")?;
            let id = format!("{SYNTHETIC_ID_PREFIX}0");
            Ok(vec![call(
                id,
                name,
                arguments_of(function.get("arguments")),
            )])
        }
        (None | Some(Value::Null), None) => {
            no_other_calls(message, CHAT, super::CHAT)?;
            if !is_message {
                return Err(shape_error(CHAT, "tool_calls", NO_MESSAGE));
            }
            Ok(Vec::new())
        }
        (Some(Value::Array(calls)), None) => chat_calls(calls),
        (Some(_), _) => Err(shape_error(CHAT, "tool_calls", "an array")),
    }
}

/// The calls of a `tool_calls` array.
fn chat_calls(calls: &[Value]) -> Result<Vec<ToolCall>, FormatError> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = format!("tool_calls[{i}]");
            if c.get("type").and_then(Value::as_str) == Some("custom") {
                return Err(FormatError::UnrunnableCall {
                    provider: CHAT,
                    path,
                    kind: "custom",
                });
            }
            let id = str_field(c, "id", CHAT, &path)?;
            if id.starts_with(SYNTHETIC_ID_PREFIX) {
                return Err(FormatError::ReservedId {
                    provider: CHAT,
                    path: format!("{path}.id"),
                    prefix: SYNTHETIC_ID_PREFIX,
                });
            }
            let function = c
                .get("function")
                .ok_or_else(|| shape_error(CHAT, format!("{path}.function"), "an object"))?;
            let name = str_field(function, "name", CHAT, &format!("{path}.function"))?;
            Ok(call(id, name, arguments_of(function.get("arguments"))))
        })
        .collect()
}

/// The `role: "tool"` message that answers one call in chat completions, or, for a legacy
/// `function_call` (its id starts with [`SYNTHETIC_ID_PREFIX`]), the `role: "function"`
/// message that answers it by name.
pub fn chat_tool_message(result: &ToolResult) -> Value {
    if result.call_id.starts_with(SYNTHETIC_ID_PREFIX) {
        return json!({
            "role": "function",
            "name": result.tool_name,
            "content": result.content_text(),
        });
    }
    json!({
        "role": "tool",
        "tool_call_id": result.call_id,
        "content": result.content_text(),
    })
}

/// The function calls of a Responses API answer: pass the response (its `output` is
/// read) or the `output` array itself. Items that are not calls for the application
/// (messages, reasoning, and the calls OpenAI runs itself: `web_search_call`,
/// `file_search_call`, `mcp_call`, `code_interpreter_call`, `image_generation_call`) are
/// skipped; items that are calls toolgate cannot run are refused (see below).
///
/// ```
/// use serde_json::json;
/// use toolgate_agent::format::openai::parse_responses_output;
///
/// let item = json!({"type": "function_call", "call_id": "c1", "name": "ping", "arguments": "{}"});
/// assert_eq!(parse_responses_output(&json!({"output": [item.clone()]})).unwrap()[0].id, "c1");
/// // A chat completions `tool_calls` array is refused, not read as "no calls".
/// let chat = json!([{"id": "c1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}]);
/// assert!(parse_responses_output(&chat).is_err());
/// // A custom tool's call, whose input is free-form text, is refused, not skipped.
/// let custom = json!({"type": "custom_tool_call", "call_id": "c2", "name": "ping", "input": "x"});
/// assert!(parse_responses_output(&json!([custom])).is_err());
/// ```
///
/// # Errors
///
/// [`FormatError`] when the payload is not a JSON object or array, when `output` is
/// missing, when a function call lacks its `call_id` or name, when an item is a call
/// toolgate cannot run ([`FormatError::UnrunnableCall`]: `custom_tool_call`, whose input
/// is free-form text, and `computer_call`, `local_shell_call`, `shell_call`,
/// `apply_patch_call` and `mcp_approval_request`, which ask the application itself to
/// act), and when, without a function call, the payload holds calls in another provider's shape (chat completions
/// `tool_calls`, Anthropic's `tool_use` blocks, Gemini's function call parts), which would
/// otherwise be read as no calls and silently not run.
pub fn parse_responses_output(response: &Value) -> Result<Vec<ToolCall>, FormatError> {
    let other_format = |payload: &Value| no_other_calls(payload, RESPONSES, super::RESPONSES);
    let items = match response {
        Value::Array(items) => items,
        Value::Object(_) => match response.get("output").and_then(Value::as_array) {
            Some(items) => items,
            None => {
                other_format(response)?;
                return Err(shape_error(RESPONSES, "output", "an array"));
            }
        },
        other => {
            return Err(FormatError::NotAMessage {
                provider: RESPONSES,
                found: json_kind(other),
            });
        }
    };
    let mut calls = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("output[{i}]");
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let id = str_field(item, "call_id", RESPONSES, &path)?;
                let name = str_field(item, "name", RESPONSES, &path)?;
                calls.push(call(id, name, arguments_of(item.get("arguments"))));
            }
            Some(kind) => {
                if let Some(kind) = UNRUNNABLE_ITEMS.into_iter().find(|k| *k == kind) {
                    return Err(FormatError::UnrunnableCall {
                        provider: RESPONSES,
                        path,
                        kind,
                    });
                }
            }
            None => {}
        }
    }
    if calls.is_empty() {
        other_format(response)?;
    }
    Ok(calls)
}

/// The `function_call_output` input item that answers one call in the Responses API.
pub fn responses_tool_output(result: &ToolResult) -> Value {
    json!({
        "type": "function_call_output",
        "call_id": result.call_id,
        "output": result.content_text(),
    })
}
