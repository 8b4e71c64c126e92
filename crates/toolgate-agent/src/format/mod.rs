//! Provider formats: tool definitions out, tool calls back in, results rendered back.
//!
//! One module per provider, each with the same three jobs:
//!
//! | provider | definitions | calls parsed from | results rendered as |
//! |---|---|---|---|
//! | [`openai`] chat completions | `tools` | the assistant message's `tool_calls` (or legacy `function_call`) | `role: "tool"` messages (`role: "function"` for a legacy call) |
//! | [`openai`] responses | `tools` | `function_call` output items | `function_call_output` items |
//! | [`anthropic`] messages | `tools` | `tool_use` content blocks | `tool_result` blocks in a user message |
//! | [`gemini`] generateContent | `functionDeclarations` | `functionCall` parts | `functionResponse` parts |
//! | [`mcp`] | `tools/list` result | a `tools/call` request | a `CallToolResult` |
//!
//! Arguments that arrive as a JSON string (OpenAI) are parsed; text that is not JSON is
//! kept in [`Arguments::Unparseable`] and the tool system
//! answers the call with an error result the model can correct from.

pub mod anthropic;
pub mod gemini;
pub mod mcp;
pub mod openai;

use serde_json::Value;

use crate::{Arguments, ToolCall};

/// A provider payload did not have the shape its format requires.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A field is missing or of the wrong type.
    #[error(
        "{provider} payload: `{path}` is missing or is not {expected}; pass the provider's response as it was received"
    )]
    Shape {
        /// The provider format.
        provider: &'static str,
        /// Where in the payload.
        path: String,
        /// What was expected there.
        expected: &'static str,
    },
    /// The payload is not a JSON object (or, where the format takes it, an array).
    #[error(
        "{provider} payload: the payload is {found}, where a message (a JSON object) was expected; pass the provider's response as it was received"
    )]
    NotAMessage {
        /// The provider format.
        provider: &'static str,
        /// What it is instead, in words: "a string", "a number"…
        found: &'static str,
    },
    /// The payload holds tool calls in another provider's format, which this format would
    /// read as no calls at all.
    #[error(
        "{provider} payload: it holds tool calls in {format}'s format, which {provider} does not read; {}",
        other_format_hint(.format)
    )]
    OtherFormat {
        /// The provider format asked for.
        provider: &'static str,
        /// The format the calls are in: `openai` (chat completions), `openai responses`,
        /// `anthropic` or `gemini`.
        format: &'static str,
    },
    /// A call's id starts with the prefix toolgate keeps for the ids it gives calls that
    /// arrive without one ([`gemini::SYNTHETIC_ID_PREFIX`]): taken as it is, it could be
    /// confused with one of those, and never be sent back.
    #[error(
        "{provider} payload: `{path}` starts with `{prefix}`, which toolgate keeps for the ids it gives calls sent without one; pass the provider's response as it was received"
    )]
    ReservedId {
        /// The provider format.
        provider: &'static str,
        /// Where in the payload.
        path: String,
        /// The kept prefix.
        prefix: &'static str,
    },
    /// The payload holds a call toolgate cannot run: a call of a custom tool, whose input
    /// is free-form text where toolgate's tools take a JSON object, or an item that asks
    /// the application itself to act (a computer use, shell or patch call, an approval
    /// request of a remote MCP server). Read as no call, it would silently not be answered.
    #[error(
        "{provider} payload: `{path}` is a `{kind}` item, {}; nothing was run",
        unrunnable_hint(.kind)
    )]
    UnrunnableCall {
        /// The provider format.
        provider: &'static str,
        /// Where in the payload.
        path: String,
        /// The item's `type`, as the payload names it: `custom_tool_call`,
        /// `computer_call`, `local_shell_call`, `shell_call`, `apply_patch_call`,
        /// `mcp_approval_request`, or `custom` (a chat completions custom tool call).
        kind: &'static str,
    },
}

/// What a call toolgate cannot run is, and what to do with it.
fn unrunnable_hint(kind: &str) -> &'static str {
    match kind {
        "custom_tool_call" | "custom" => {
            "a call of a custom tool, whose input is free-form text, which toolgate's tools (each taking a JSON object) cannot take: declare the tool as a function tool (`type: \"function\"`), or answer this call yourself"
        }
        "mcp_approval_request" => {
            "a request to approve a call of a remote MCP server, which toolgate does not answer: answer it yourself (with an `mcp_approval_response`) and pass the function calls without it"
        }
        _ => {
            "a call of a tool the application runs itself (computer use, a shell, patches), which toolgate does not run: run it yourself and pass the function calls without it"
        }
    }
}

/// What to do with calls in `format`: parse them as that format, with the gateway's name
/// for it where the gateway's batches take it.
fn other_format_hint(format: &str) -> String {
    match format {
        RESPONSES => "parse it with `format::openai::parse_responses_output` (the gateway's `/v1/tool-calls` takes chat completions messages: send the calls as a `tool_calls` array)".to_owned(),
        format => format!("parse it as {format}'s format (the gateway: `?format={format}`)"),
    }
}

/// The name [`FormatError::OtherFormat`] gives OpenAI's chat completions format.
pub(crate) const CHAT: &str = "openai";
/// The name [`FormatError::OtherFormat`] gives OpenAI's Responses API format.
pub(crate) const RESPONSES: &str = "openai responses";
/// The name [`FormatError::OtherFormat`] gives Anthropic's Messages API format.
pub(crate) const ANTHROPIC: &str = "anthropic";
/// The name [`FormatError::OtherFormat`] gives Gemini's `generateContent` format.
pub(crate) const GEMINI: &str = "gemini";

/// Refuses `payload` with [`FormatError::OtherFormat`] when it holds calls in a format other
/// than `own`: `provider` (whose calls are in `own`) found none of its own in it, and
/// would otherwise read it as "no calls".
pub(crate) fn no_other_calls(
    payload: &Value,
    provider: &'static str,
    own: &str,
) -> Result<(), FormatError> {
    match calls_format(payload) {
        Some(format) if format != own => Err(FormatError::OtherFormat { provider, format }),
        _ => Ok(()),
    }
}

/// The format of the tool calls `payload` holds, whichever format it was passed as: a
/// chat completions message's `tool_calls` (or legacy `function_call`), a Responses API response's `function_call`
/// items, an Anthropic message's `tool_use` blocks, a Gemini content's (or a response's
/// first candidate's) function call parts; an array is read as a list of such items.
/// `None` when it holds no calls any of them would read.
///
/// Each parser asks this when it found no calls of its own: a payload in another format
/// would otherwise be read as "no calls", and none of them would run.
fn calls_format(payload: &Value) -> Option<&'static str> {
    let any = |items: Option<&Value>| {
        items
            .and_then(Value::as_array)
            .and_then(|items| items.iter().find_map(item_format))
    };
    if let Value::Array(items) = payload {
        return items.iter().find_map(item_format);
    }
    if payload
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty())
    {
        return Some(CHAT);
    }
    // A chat completions message's legacy `function_call` (Gemini's parts name theirs so
    // too, but carry `args`, and sit in a list).
    if payload
        .get("function_call")
        .is_some_and(|call| call.get("arguments").is_some())
    {
        return Some(CHAT);
    }
    let content = payload
        .get("candidates")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("content"))
        .unwrap_or(payload);
    any(payload.get("output"))
        .or_else(|| any(payload.get("content")))
        .or_else(|| any(content.get("parts")))
}

/// The format of one item of a list of calls, blocks, parts or output items, when it is a
/// tool call.
fn item_format(item: &Value) -> Option<&'static str> {
    if gemini::function_call_of(item).is_some() {
        return Some(GEMINI);
    }
    match item.get("type").and_then(Value::as_str)? {
        "function" if item.get("function").is_some_and(Value::is_object) => Some(CHAT),
        "function_call" => Some(RESPONSES),
        "tool_use" => Some(ANTHROPIC),
        _ => None,
    }
}

/// What a JSON value is, in words.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn shape_error(
    provider: &'static str,
    path: impl Into<String>,
    expected: &'static str,
) -> FormatError {
    FormatError::Shape {
        provider,
        path: path.into(),
        expected,
    }
}

/// Reads a string field.
pub(crate) fn str_field<'a>(
    value: &'a Value,
    key: &str,
    provider: &'static str,
    path: &str,
) -> Result<&'a str, FormatError> {
    value
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| shape_error(provider, format!("{path}.{key}"), "a string"))
}

/// Arguments that arrive either as JSON text or as a JSON value.
pub(crate) fn arguments_of(value: Option<&Value>) -> Arguments {
    match value {
        None | Some(Value::Null) => Arguments::Json {
            value: Value::Object(serde_json::Map::new()),
        },
        Some(Value::String(text)) => Arguments::from_json_str(text),
        Some(other) => Arguments::Json {
            value: other.clone(),
        },
    }
}

/// A tool's input schema as providers take it: without `$schema`, and a tool that takes no
/// arguments (a `null` schema, from a `()` input) as an empty object, which is what every
/// provider expects and what models send.
pub(crate) fn parameters(schema: &Value) -> Value {
    let mut schema = object_schema(schema);
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// `schema`, or an empty object schema for a tool that takes no arguments.
pub(crate) fn object_schema(schema: &Value) -> Value {
    if schema.get("type").and_then(Value::as_str) == Some("null") {
        serde_json::json!({ "type": "object", "properties": {} })
    } else {
        schema.clone()
    }
}

/// A call with an id.
pub(crate) fn call(
    id: impl Into<String>,
    name: impl Into<String>,
    arguments: Arguments,
) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}
