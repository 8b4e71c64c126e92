//! Google Gemini `generateContent`: `functionDeclarations`, `functionCall` parts,
//! `functionResponse` parts.
//!
//! Gemini's `parameters` take a subset of OpenAPI 3.0 schemas, so input schemas are
//! narrowed: keys Gemini refuses (`$schema`, `additionalProperties`, `$defs`…) are dropped,
//! a type list with `null` becomes the type plus `nullable: true`, and only the `format`
//! values Gemini knows are kept.

use serde_json::{Map, Value, json};
use toolgate_core::tool::ToolDefinition;

use super::{FormatError, arguments_of, call, json_kind, no_other_calls, shape_error, str_field};
use crate::{ToolCall, ToolResult, ToolStatus};

const PROVIDER: &str = "gemini";

const KEPT_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "properties",
    "required",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "anyOf",
    "default",
];

const KEPT_FORMATS: &[&str] = &["float", "double", "int32", "int64", "enum", "date-time"];

/// The prefix of the ids given to calls that arrive without one; such ids are not sent
/// back in `functionResponse`, since Gemini never issued them.
pub const SYNTHETIC_ID_PREFIX: &str = "gemini-call-";

/// The `tools` array of a `generateContent` request: one tool holding every declaration.
pub fn tools<'a>(definitions: impl IntoIterator<Item = &'a ToolDefinition>) -> Value {
    let declarations: Vec<Value> = definitions
        .into_iter()
        .map(|d| {
            json!({
                "name": d.name,
                "description": d.description,
                "parameters": gemini_schema(&super::parameters(&d.input_schema)),
            })
        })
        .collect();
    json!([{ "functionDeclarations": declarations }])
}

/// Narrows a JSON Schema to what Gemini's `parameters` accept.
///
/// ```
/// use serde_json::json;
/// let schema = json!({
///     "$schema": "https://json-schema.org/draft/2020-12/schema",
///     "type": "object",
///     "additionalProperties": false,
///     "properties": { "unit": { "type": ["string", "null"] }, "days": { "type": "integer", "format": "uint8" } }
/// });
/// assert_eq!(toolgate_agent::format::gemini::gemini_schema(&schema), json!({
///     "type": "object",
///     "properties": { "unit": { "type": "string", "nullable": true }, "days": { "type": "integer" } }
/// }));
/// ```
pub fn gemini_schema(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        if !KEPT_KEYS.contains(&key.as_str()) {
            continue;
        }
        match key.as_str() {
            "type" => match value {
                Value::Array(types) => {
                    let non_null: Vec<&Value> = types
                        .iter()
                        .filter(|t| t.as_str() != Some("null"))
                        .collect();
                    if non_null.len() < types.len() {
                        out.insert("nullable".to_owned(), Value::Bool(true));
                    }
                    if let Some(first) = non_null.first() {
                        out.insert("type".to_owned(), (*first).clone());
                    }
                }
                other => {
                    out.insert("type".to_owned(), other.clone());
                }
            },
            "format" => {
                if value.as_str().is_some_and(|f| KEPT_FORMATS.contains(&f)) {
                    out.insert(key.clone(), value.clone());
                }
            }
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, v)| (k.clone(), gemini_schema(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(properties));
            }
            "items" => {
                out.insert(key.clone(), gemini_schema(value));
            }
            "anyOf" => {
                let variants: Vec<Value> = value
                    .as_array()
                    .map(|a| a.iter().map(gemini_schema).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Array(variants));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// The function calls of a `generateContent` answer: pass the response (its first
/// candidate's content is read) or a `Content` object with `parts`. A call without an
/// `id` gets [`SYNTHETIC_ID_PREFIX`] followed by its position among the parts.
///
/// A part's call is read under `functionCall`, or under `function_call`, its protocol
/// buffer field name, which Gemini reads as well and Google's Python SDKs write when they
/// turn a response into a dictionary; a `null` there is no call (a text part, as SDKs
/// write every field of a part).
///
/// ```
/// use serde_json::json;
/// use toolgate_agent::format::gemini::parse_function_calls;
///
/// let response = json!({"candidates": [{"content": {"role": "model", "parts": [
///     {"text": "Let me look.", "functionCall": null},
///     {"function_call": {"id": "c1", "name": "ping", "args": {}}},
/// ]}}]});
/// assert_eq!(parse_function_calls(&response).unwrap()[0].id, "c1");
/// ```
///
/// # Errors
///
/// [`FormatError`] when the payload is not a JSON object, when there are no parts, when a
/// part holds a call under both names, when a function call lacks its name, or its `id`
/// is there but not a string, or starts with [`SYNTHETIC_ID_PREFIX`] (so that a given id
/// is never taken for a made one, nor two calls share an id); and when, without a function
/// call, the payload holds calls in another provider's shape (OpenAI's `tool_calls` or
/// `function_call` items, Anthropic's `tool_use` blocks), which would otherwise be read as
/// no calls and silently not run.
pub fn parse_function_calls(response: &Value) -> Result<Vec<ToolCall>, FormatError> {
    if !response.is_object() {
        return Err(FormatError::NotAMessage {
            provider: PROVIDER,
            found: json_kind(response),
        });
    }
    let other_format = || no_other_calls(response, PROVIDER, super::GEMINI);
    let content = match response.get("candidates") {
        Some(candidates) => candidates
            .get(0)
            .and_then(|c| c.get("content"))
            .ok_or_else(|| shape_error(PROVIDER, "candidates[0].content", "an object"))?,
        None => response,
    };
    let Some(parts) = content.get("parts").and_then(Value::as_array) else {
        other_format()?;
        return Err(shape_error(PROVIDER, "content.parts", "an array"));
    };
    let mut calls = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let Some(function) = function_call_of(part) else {
            continue;
        };
        let given = |key| part.get(key).is_some_and(|call: &Value| !call.is_null());
        if given("functionCall") && given("function_call") {
            return Err(shape_error(
                PROVIDER,
                format!("parts[{i}]"),
                "a part with one function call (under `functionCall` or `function_call`, not both)",
            ));
        }
        let key = if given("functionCall") {
            "functionCall"
        } else {
            "function_call"
        };
        let path = format!("parts[{i}].{key}");
        let name = str_field(function, "name", PROVIDER, &path)?;
        let id = match function.get("id") {
            None | Some(Value::Null) => format!("{SYNTHETIC_ID_PREFIX}{i}"),
            Some(Value::String(id)) if id.starts_with(SYNTHETIC_ID_PREFIX) => {
                return Err(FormatError::ReservedId {
                    provider: PROVIDER,
                    path: format!("{path}.id"),
                    prefix: SYNTHETIC_ID_PREFIX,
                });
            }
            Some(Value::String(id)) => id.clone(),
            Some(_) => return Err(shape_error(PROVIDER, format!("{path}.id"), "a string")),
        };
        calls.push(call(id, name, arguments_of(function.get("args"))));
    }
    if calls.is_empty() {
        other_format()?;
    }
    Ok(calls)
}

/// The function call of a part, under either of its names; `null` is no call.
pub(crate) fn function_call_of(part: &Value) -> Option<&Value> {
    ["functionCall", "function_call"]
        .into_iter()
        .find_map(|key| part.get(key).filter(|call| !call.is_null()))
}

/// The `functionResponse` part that answers one call, with the call's `id` when Gemini
/// gave it one. Its `response` object carries
/// `output` on success, `error` (code and message) on error, and `pending` (reason and
/// suspension id) while the call waits for a person.
pub fn function_response_part(result: &ToolResult) -> Value {
    let response = match result.status {
        ToolStatus::Success => json!({ "output": result.output.clone().unwrap_or(Value::Null) }),
        ToolStatus::Error => json!({ "error": {
            "code": result.error_code().unwrap_or("unknown"),
            "message": result.error.as_ref().map(|e| e.message.as_str()).unwrap_or_default(),
        }}),
        ToolStatus::Suspended => json!({ "pending": {
            "reason": result.metadata.suspension_reason,
            "suspension_id": result.metadata.suspension_id,
        }}),
    };
    let mut function_response = json!({ "name": result.tool_name, "response": response });
    if !result.call_id.starts_with(SYNTHETIC_ID_PREFIX) {
        function_response["id"] = json!(result.call_id);
    }
    json!({ "functionResponse": function_response })
}

/// The content that answers every function call of a model turn, in order.
pub fn function_responses_content<'a>(results: impl IntoIterator<Item = &'a ToolResult>) -> Value {
    let parts: Vec<Value> = results.into_iter().map(function_response_part).collect();
    json!({ "role": "user", "parts": parts })
}
