//! An imported tool's output: the upstream's MCP result itself, so that re-serving it
//! over MCP loses nothing but what policy removed.
//!
//! The output of an [`ImportedTool`](crate::ImportedTool) is the upstream's
//! `CallToolResult` in its JSON form — `content` (text, image, audio, embedded resources,
//! resource links, with their annotations and `_meta`), and `structuredContent` and
//! `_meta` when the upstream sent them:
//!
//! ```json
//! {"content": [{"type": "text", "text": "42 °C"}, {"type": "image", "data": "iVBO…", "mimeType": "image/png"}],
//!  "structuredContent": {"celsius": 42}}
//! ```
//!
//! Output hooks see and change it like any output (redaction reads the text of every
//! block, and skips the base64 payloads of images, audio and binary resources). The
//! imported tool's `output_schema` describes this object, with the upstream's own output
//! schema under `structuredContent`; [`to_mcp_tool`](crate::to_mcp_tool) lists the
//! upstream's schema again. Over MCP, an output of this form is answered as it is
//! ([`output_to_result`](crate::output_to_result)); an output a hook replaced with a
//! value of another form is answered like a local tool's.

use rmcp::model::{CallToolResult, ResultType};
use serde_json::{Map, Value, json};
use toolgate_core::tool::{ToolDefinition, ToolSource};

/// The tag of a local tool whose output is an MCP result in its JSON form, as an imported
/// tool's is (`{"content": [...], "structuredContent": ..., "_meta": ...}`): over MCP it is
/// answered as it is, so that a tool written for MCP clients can return images, audio and
/// embedded resources. Elsewhere (`/v1`, agents) the output is the object itself.
pub const MCP_RESULT_TAG: &str = "mcp-result";

/// The key of the content blocks in an imported tool's output.
pub const CONTENT: &str = "content";
/// The key of the structured content in an imported tool's output.
pub const STRUCTURED_CONTENT: &str = "structuredContent";

/// The output of an upstream result that is not an error.
pub(crate) fn output_of(result: CallToolResult) -> Value {
    let mut output = serde_json::to_value(result).unwrap_or_else(|_| json!({ CONTENT: [] }));
    if let Value::Object(map) = &mut output {
        // Errors leave as errors; a result that is an output has no error flag, and the
        // protocol's result discriminator is set again for whoever it is answered to.
        map.remove("isError");
        map.remove("resultType");
        map.entry(CONTENT).or_insert_with(|| json!([]));
        remove_hop_meta(map);
    }
    output
}

/// The `_meta` key by which a server of 2026-07-28 names its software on a response.
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Takes out of an upstream's result (an object) what described the hop between toolgate
/// and the upstream, not the answer: the upstream's name for its own software and version
/// (`_meta["io.modelcontextprotocol/serverInfo"]`). The server a caller talks to is
/// toolgate, which software runs behind it is not the caller's to learn, and a result kept
/// (cached, audited) should not carry it either. An emptied `_meta` goes too.
pub(crate) fn remove_hop_meta(result: &mut Map<String, Value>) {
    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
        meta.remove(SERVER_INFO);
        if meta.is_empty() {
            result.remove("_meta");
        }
    }
}

/// `output` as an MCP result, when it is an imported tool's output still in result form
/// (or a local tool's tagged [`MCP_RESULT_TAG`]).
pub(crate) fn passthrough(definition: &ToolDefinition, output: &Value) -> Option<CallToolResult> {
    if !matches!(definition.source, ToolSource::Mcp { .. }) && !definition.has_tag(MCP_RESULT_TAG) {
        return None;
    }
    let map = output.as_object()?;
    if !map.get(CONTENT).is_some_and(Value::is_array) {
        return None;
    }
    let mut result: CallToolResult = serde_json::from_value(output.clone()).ok()?;
    result.is_error = Some(false);
    // As the constructors do; rmcp clears it for clients of a revision before 2026-07-28.
    result.result_type = Some(ResultType::COMPLETE);
    Some(result)
}

/// The output schema of an imported tool: its result form, with the upstream's own output
/// schema (if any) describing `structuredContent`, which the upstream must then send.
pub(crate) fn output_schema(upstream: Option<Value>) -> Value {
    let mut properties = Map::new();
    properties.insert(CONTENT.to_owned(), json!({ "type": "array" }));
    let mut required = vec![json!(CONTENT)];
    if let Some(schema) = upstream {
        properties.insert(STRUCTURED_CONTENT.to_owned(), schema);
        required.push(json!(STRUCTURED_CONTENT));
    }
    json!({ "type": "object", "properties": properties, "required": required })
}

/// The upstream's own output schema of an imported tool (what MCP lists), undoing
/// [`output_schema`]; `None` for a local tool.
pub(crate) fn upstream_output_schema(definition: &ToolDefinition) -> Option<Option<&Value>> {
    if !matches!(definition.source, ToolSource::Mcp { .. }) {
        return None;
    }
    Some(
        definition
            .output_schema
            .as_ref()
            .and_then(|schema| schema.get("properties"))
            .and_then(|properties| properties.get(STRUCTURED_CONTENT)),
    )
}

#[cfg(test)]
mod tests {
    use rmcp::model::ContentBlock;

    use super::*;

    #[test]
    fn an_upstream_result_leaves_its_server_info_behind_and_keeps_the_rest_of_its_meta() {
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert(
            SERVER_INFO.to_owned(),
            json!({"name": "internal-billing", "version": "4.2.0-rc1"}),
        );
        meta.insert("com.example/trace".to_owned(), json!("t-1"));
        let result = CallToolResult::success(vec![ContentBlock::text("ok")]).with_meta(Some(meta));
        let output = output_of(result);
        assert_eq!(
            output["_meta"],
            json!({"com.example/trace": "t-1"}),
            "{output}"
        );
        assert!(!output.to_string().contains("internal-billing"));

        let mut only_server_info = json!({"messages": [], "_meta": {SERVER_INFO: {"name": "x"}}});
        remove_hop_meta(only_server_info.as_object_mut().unwrap());
        assert_eq!(only_server_info, json!({"messages": []}));
    }
}
