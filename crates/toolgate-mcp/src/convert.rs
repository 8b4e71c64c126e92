//! Mapping between toolgate's types and MCP's: tool definitions, outputs, errors.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, MetaObject, Tool};
use serde_json::{Value, json};
use toolgate_core::ToolError;
use toolgate_core::tool::{ToolAnnotations, ToolDefinition};

use crate::result;

/// The `_meta` key under which a failed call's machine-readable error is returned:
/// `{"code": "rate_limited", "status": 429, "retryAfterMs": 1200}`.
pub(crate) const ERROR_META_KEY: &str = "io.toolgate/error";

/// A tool definition as MCP lists it: name, title, description, input schema, output
/// schema (only when it describes a JSON object, as MCP requires) and annotations.
///
/// MCP arguments are always a JSON object: a tool without input (`null`) is listed with
/// an empty object schema, and a tool whose input is another type (a string, an array)
/// takes it as the argument `input`.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{JsonTool, ToolError};
/// use toolgate_core::tool::ErasedTool;
///
/// let tool = JsonTool::new("upper", "Upper-cases text.", json!({"type": "object"}),
///     |input, _ctx| Box::pin(async move { Ok::<_, ToolError>(input.clone()) }));
/// let listed = toolgate_mcp::to_mcp_tool(&tool.definition());
/// assert_eq!(listed.name, "upper");
/// assert!(listed.output_schema.is_none());
/// ```
pub fn to_mcp_tool(definition: &ToolDefinition) -> Tool {
    let mut tool = Tool::new_with_raw(
        definition.name.clone(),
        Some(definition.description.clone().into()),
        Arc::new(schema_object(&definition.input_schema)),
    );
    if let Some(title) = &definition.title {
        tool = tool.with_title(title.clone());
    }
    if let Some(schema) = object_output_schema(definition) {
        tool = tool.with_raw_output_schema(Arc::new(schema.clone()));
    }
    let ToolAnnotations {
        read_only,
        idempotent,
        destructive,
        open_world,
    } = definition.annotations;
    let mut annotations = rmcp::model::ToolAnnotations::new()
        .read_only(read_only)
        .idempotent(idempotent)
        .destructive(destructive)
        .open_world(open_world);
    annotations.title = definition.title.clone();
    tool.with_annotations(annotations)
}

/// The output schema of a tool when it describes a JSON object (the only kind MCP
/// accepts as `outputSchema`).
pub(crate) fn object_output_schema(definition: &ToolDefinition) -> Option<&JsonObject> {
    let schema = match result::upstream_output_schema(definition) {
        Some(upstream) => upstream?,
        None => definition.output_schema.as_ref()?,
    };
    let schema = schema.as_object()?;
    (schema.get("type").and_then(Value::as_str) == Some("object")).then_some(schema)
}

/// How a tool's input travels in MCP, whose arguments are always a JSON object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputShape {
    /// The input is an object: the arguments are the input.
    Object,
    /// The input is `null` (a tool without arguments): empty arguments.
    Unit,
    /// Any other input (a string, an array…) travels as the argument `input`.
    Wrapped,
}

impl InputShape {
    pub(crate) fn of(schema: &Value) -> InputShape {
        match schema.get("type").and_then(Value::as_str) {
            Some("null") => InputShape::Unit,
            Some("object") => InputShape::Object,
            Some(_) => InputShape::Wrapped,
            // No type constraint (`true`, `{}`, a `oneOf`): pass the arguments through.
            None => InputShape::Object,
        }
    }

    /// The pipeline input for these MCP arguments.
    pub(crate) fn input(self, mut arguments: JsonObject) -> Value {
        match self {
            InputShape::Object => Value::Object(arguments),
            InputShape::Unit if arguments.is_empty() => Value::Null,
            InputShape::Unit => Value::Object(arguments),
            InputShape::Wrapped => arguments.remove(WRAPPED_ARGUMENT).unwrap_or(Value::Null),
        }
    }
}

/// The argument that carries a non-object input.
const WRAPPED_ARGUMENT: &str = "input";

/// An input schema as MCP requires it: a JSON object schema of `type: object`.
fn schema_object(schema: &Value) -> JsonObject {
    let shape = InputShape::of(schema);
    match (shape, schema) {
        (InputShape::Object, Value::Object(map)) => {
            let mut map = map.clone();
            map.entry("type").or_insert_with(|| json!("object"));
            map
        }
        (InputShape::Object, _) => object_schema(json!({})),
        (InputShape::Unit, _) => {
            let mut map = object_schema(json!({}));
            map.insert("additionalProperties".to_owned(), json!(false));
            map
        }
        (InputShape::Wrapped, _) => {
            let mut map = object_schema(json!({ WRAPPED_ARGUMENT: schema }));
            map.insert("required".to_owned(), json!([WRAPPED_ARGUMENT]));
            map
        }
    }
}

fn object_schema(properties: Value) -> JsonObject {
    let mut map = JsonObject::new();
    map.insert("type".to_owned(), json!("object"));
    map.insert("properties".to_owned(), properties);
    map
}

/// A tool's output as an MCP result: the output as text content, and as
/// `structuredContent` when the tool declares an object output schema. The output of an
/// [imported tool](crate::ImportedTool), still in the upstream's result form, is the
/// result as it is (see [`result`](crate::result)).
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{JsonTool, ToolError};
/// use toolgate_core::tool::ErasedTool;
///
/// let mut tool = JsonTool::new("sum", "Adds.", json!({"type": "object"}),
///     |_input, _ctx| Box::pin(async move { Ok::<_, ToolError>(json!({"sum": 3})) }));
/// tool.definition_mut().output_schema = Some(json!({"type": "object"}));
/// let result = toolgate_mcp::output_to_result(&tool.definition(), json!({"sum": 3}));
/// assert_eq!(result.structured_content, Some(json!({"sum": 3})));
/// assert_eq!(result.is_error, Some(false));
/// ```
pub fn output_to_result(definition: &ToolDefinition, output: Value) -> CallToolResult {
    if let Some(result) = result::passthrough(definition, &output) {
        return result;
    }
    let text = match &output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if object_output_schema(definition).is_some() && output.is_object() {
        result.structured_content = Some(output);
    }
    result
}

/// A tool or policy error as an MCP result with `isError: true`: the error's message as
/// text (a retry-after says how long to wait; a call waiting for approval gives its
/// suspension id), and its code, HTTP status, retry delay and suspension id under
/// `_meta["io.toolgate/error"]` for clients that read them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::ToolError;
///
/// let result = toolgate_mcp::error_to_result(&ToolError::retry_after(Duration::from_millis(1200), "rate limited"));
/// assert_eq!(result.is_error, Some(true));
/// let text = &result.content[0].as_text().unwrap().text;
/// assert_eq!(text, "rate limited, retry after 1200 ms");
/// ```
pub fn error_to_result(error: &ToolError) -> CallToolResult {
    let mut detail = json!({ "code": error.code(), "status": error.status() });
    if let Some(delay) = error.retry_after_delay() {
        detail["retryAfterMs"] = json!(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    }
    let text = match error {
        // Said to the caller, who waits; approvers resume.
        ToolError::Suspended {
            suspension_id,
            reason,
        } => {
            detail["suspensionId"] = json!(suspension_id);
            format!(
                "this call waits for a person's approval ({reason}); its suspension id is {suspension_id}: ask for its outcome later with that id"
            )
        }
        other => other.caller_message(),
    };
    let mut meta = JsonObject::new();
    meta.insert(ERROR_META_KEY.to_owned(), detail);
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(MetaObject(meta)))
}

/// The result of a call that waited for approval and was decided, from its outcome (an
/// agent `ToolResult`: `status`, then `output` or `error` with `code` and `message`).
pub(crate) fn decided_result(definition: &ToolDefinition, outcome: &Value) -> CallToolResult {
    if outcome["status"] == "success" {
        return output_to_result(definition, outcome["output"].clone());
    }
    let error = &outcome["error"];
    let message = error["message"]
        .as_str()
        .unwrap_or("the call failed after it was approved");
    let mut meta = JsonObject::new();
    meta.insert(
        ERROR_META_KEY.to_owned(),
        json!({ "code": error["code"].as_str().unwrap_or("tool_error") }),
    );
    CallToolResult::error(vec![ContentBlock::text(message)]).with_meta(Some(MetaObject(meta)))
}

/// The JSON-RPC error for a call to a tool the caller cannot see.
pub(crate) fn unknown_tool(name: &str) -> ErrorData {
    let error = ToolError::UnknownTool {
        name: name.to_owned(),
    };
    ErrorData::invalid_params(error.to_string(), Some(json!({ "code": error.code() })))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use toolgate_core::tool::{ToolAnnotations, ToolSource};

    use super::*;

    fn definition(input_schema: Value, output_schema: Option<Value>) -> ToolDefinition {
        ToolDefinition {
            name: "t".to_owned(),
            title: Some("T".to_owned()),
            description: "A tool.".to_owned(),
            version: "1".to_owned(),
            input_schema,
            output_schema,
            annotations: ToolAnnotations::READ_ONLY,
            tags: Vec::new(),
            source: ToolSource::Local,
        }
    }

    #[test]
    fn object_input_schema_is_listed_unchanged_and_arguments_pass_through() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let tool = to_mcp_tool(&definition(schema.clone(), None));
        assert_eq!(Value::Object((*tool.input_schema).clone()), schema);
        let args = json!({"q": "x"}).as_object().cloned().unwrap_or_default();
        assert_eq!(InputShape::of(&schema).input(args), json!({"q": "x"}));
    }

    #[test]
    fn null_input_is_listed_as_an_empty_object_and_called_with_null() {
        let tool = to_mcp_tool(&definition(json!({"type": "null"}), None));
        assert_eq!(tool.input_schema["type"], json!("object"));
        assert_eq!(tool.input_schema["additionalProperties"], json!(false));
        assert_eq!(InputShape::Unit.input(JsonObject::new()), Value::Null);
        // Unexpected arguments reach the tool, whose check then names them.
        let extra = json!({"x": 1}).as_object().cloned().unwrap_or_default();
        assert_eq!(InputShape::Unit.input(extra), json!({"x": 1}));
    }

    #[test]
    fn other_inputs_travel_as_the_input_argument() {
        let tool = to_mcp_tool(&definition(json!({"type": "array"}), None));
        assert_eq!(
            tool.input_schema["properties"]["input"],
            json!({"type": "array"})
        );
        let args = json!({"input": [1, 2]})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(InputShape::Wrapped.input(args), json!([1, 2]));
        assert_eq!(InputShape::Wrapped.input(JsonObject::new()), Value::Null);
    }

    #[test]
    fn only_object_output_schemas_are_listed_and_returned_as_structured_content() {
        let objects = definition(json!({"type": "object"}), Some(json!({"type": "object"})));
        assert!(to_mcp_tool(&objects).output_schema.is_some());
        assert_eq!(
            output_to_result(&objects, json!({"a": 1})).structured_content,
            Some(json!({"a": 1}))
        );

        let numbers = definition(json!({"type": "object"}), Some(json!({"type": "integer"})));
        assert!(to_mcp_tool(&numbers).output_schema.is_none());
        let result = output_to_result(&numbers, json!(7));
        assert_eq!(result.structured_content, None);
        assert_eq!(
            result.content[0].as_text().map(|t| t.text.as_str()),
            Some("7")
        );
    }

    #[test]
    fn annotations_and_title_are_listed() {
        let tool = to_mcp_tool(&definition(json!({"type": "object"}), None));
        let hints = tool.annotations.expect("annotations");
        assert_eq!(hints.read_only_hint, Some(true));
        assert_eq!(hints.idempotent_hint, Some(true));
        assert_eq!(hints.destructive_hint, Some(false));
        assert_eq!(tool.title.as_deref(), Some("T"));
    }

    #[test]
    fn errors_carry_code_status_and_retry_delay_in_meta() {
        let result = error_to_result(&ToolError::retry_after(
            Duration::from_millis(250),
            "slow down",
        ));
        assert_eq!(result.is_error, Some(true));
        let detail = &result.meta.expect("meta").0[ERROR_META_KEY];
        assert_eq!(
            detail,
            &json!({"code": "rate_limited", "status": 429, "retryAfterMs": 250})
        );

        let result = error_to_result(&ToolError::abort("no", "forbidden", 403));
        let detail = &result.meta.expect("meta").0[ERROR_META_KEY];
        assert_eq!(detail, &json!({"code": "forbidden", "status": 403}));
    }

    #[test]
    fn unknown_tool_is_invalid_params() {
        let error = unknown_tool("nope");
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(error.message.starts_with("unknown tool `nope`"));
    }
}
