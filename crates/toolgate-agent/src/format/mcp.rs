//! Model Context Protocol: the `tools/list` result, `tools/call` requests and their
//! `CallToolResult`.

use serde_json::{Map, Value, json};
use toolgate_core::tool::ToolDefinition;

use super::{FormatError, arguments_of, call, shape_error, str_field};
use crate::{ToolCall, ToolResult, ToolStatus};

const PROVIDER: &str = "mcp";

/// One tool as `tools/list` lists it: name, title, description, `inputSchema`,
/// `outputSchema` (only when it describes an object, as MCP requires) and annotations.
pub fn tool(definition: &ToolDefinition) -> Value {
    let mut tool = Map::new();
    tool.insert("name".to_owned(), json!(definition.name));
    if let Some(title) = &definition.title {
        tool.insert("title".to_owned(), json!(title));
    }
    tool.insert("description".to_owned(), json!(definition.description));
    tool.insert(
        "inputSchema".to_owned(),
        super::object_schema(&definition.input_schema),
    );
    if let Some(schema) = &definition.output_schema
        && schema.get("type").and_then(Value::as_str) == Some("object")
    {
        tool.insert("outputSchema".to_owned(), schema.clone());
    }
    let a = definition.annotations;
    tool.insert(
        "annotations".to_owned(),
        json!({
            "readOnlyHint": a.read_only,
            "destructiveHint": a.destructive,
            "idempotentHint": a.idempotent,
            "openWorldHint": a.open_world,
        }),
    );
    Value::Object(tool)
}

/// The result of a `tools/list` request.
pub fn tools_list<'a>(definitions: impl IntoIterator<Item = &'a ToolDefinition>) -> Value {
    let tools: Vec<Value> = definitions.into_iter().map(tool).collect();
    json!({ "tools": tools })
}

/// A parsed `tools/call` request: the JSON-RPC id to answer with, and the call (whose id
/// is that JSON-RPC id as text).
#[derive(Clone, Debug, PartialEq)]
pub struct CallRequest {
    /// The JSON-RPC id, as sent (a number or a string).
    pub jsonrpc_id: Value,
    /// The call.
    pub call: ToolCall,
}

/// Parses a JSON-RPC `tools/call` request.
///
/// # Errors
///
/// [`FormatError`] when the method is not `tools/call`, or the id or tool name is missing.
pub fn parse_call_request(request: &Value) -> Result<CallRequest, FormatError> {
    if request.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Err(shape_error(PROVIDER, "method", "\"tools/call\""));
    }
    let jsonrpc_id = match request.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => return Err(shape_error(PROVIDER, "id", "a string or a number")),
    };
    let params = request
        .get("params")
        .ok_or_else(|| shape_error(PROVIDER, "params", "an object"))?;
    let name = str_field(params, "name", PROVIDER, "params")?;
    let id = match &jsonrpc_id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(CallRequest {
        jsonrpc_id,
        call: call(id, name, arguments_of(params.get("arguments"))),
    })
}

/// The `CallToolResult` for a result: text content, `structuredContent` when the output is
/// an object, `isError` on errors. A suspended call is not an error: its text says what it
/// waits for, and `_meta` carries `toolgate/suspension_id`.
pub fn call_result(result: &ToolResult) -> Value {
    let mut out = json!({
        "content": [{ "type": "text", "text": result.content_text() }],
        "isError": result.status == ToolStatus::Error,
    });
    if let Some(output @ Value::Object(_)) = &result.output {
        out["structuredContent"] = output.clone();
    }
    if let Some(id) = result.suspension_id() {
        out["_meta"] = json!({ "toolgate/suspension_id": id });
    }
    out
}

/// The JSON-RPC response to a `tools/call` request.
pub fn call_response(request: &CallRequest, result: &ToolResult) -> Value {
    json!({ "jsonrpc": "2.0", "id": request.jsonrpc_id, "result": call_result(result) })
}
