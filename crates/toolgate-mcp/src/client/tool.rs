//! [`ImportedTool`]: a tool of an upstream MCP server, registered like any other tool.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::CallToolResult;
use serde_json::Value;
use tokio::time::Instant;
use toolgate_core::{
    ErasedTool, InputViolations, PreparedInput, ToolDefinition, ToolError, ToolInvokeContext,
};

use super::link::Link;

/// A tool that lives in an upstream MCP server. Its input is checked against its JSON
/// Schema by the pipeline's validation policy (not here); a call goes upstream with a
/// deadline — the earlier of the invocation's and the upstream's call timeout — and is
/// cancelled upstream when the invocation is cancelled.
pub struct ImportedTool {
    link: Arc<Link>,
    definition: ToolDefinition,
    remote_name: String,
}

impl ImportedTool {
    pub(crate) fn new(link: Arc<Link>, definition: ToolDefinition, remote_name: String) -> Self {
        ImportedTool {
            link,
            definition,
            remote_name,
        }
    }

    /// The tool's definition (its name includes the upstream's prefix).
    pub fn definition_ref(&self) -> &ToolDefinition {
        &self.definition
    }

    /// The tool's name on the upstream server.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }
}

impl std::fmt::Debug for ImportedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedTool")
            .field("name", &self.definition.name)
            .field("server", &self.link.config.name)
            .field("remote_name", &self.remote_name)
            .finish()
    }
}

impl ErasedTool for ImportedTool {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, _input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        Ok(None)
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let arguments = match ctx.input() {
                Value::Object(map) => map.clone(),
                Value::Null => Default::default(),
                _ => {
                    return Err(ToolError::InvalidInput(InputViolations::one(
                        "",
                        "the arguments of an MCP tool must be a JSON object",
                    )));
                }
            };
            let mut deadline = Instant::now() + self.link.config.call_timeout;
            if let Some(invocation) = ctx.deadline() {
                deadline = deadline.min(invocation);
            }
            let result = self
                .link
                .call(&self.remote_name, arguments, deadline)
                .await
                .and_then(|result| output_from_result(&self.link.config.name, result));
            self.link.scrub(result)
        })
    }
}

/// An upstream result as a toolgate output: `structuredContent` when present, else the
/// text of a single text block, else the content blocks as JSON. `isError` results
/// become [`ToolError::Execution`] with the upstream's text.
fn output_from_result(server: &str, result: CallToolResult) -> Result<Value, ToolError> {
    let text = || {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if result.is_error == Some(true) {
        return Err(ToolError::execution(format!(
            "MCP server `{server}`: {}",
            text()
        )));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    match result.content.as_slice() {
        [single] if single.as_text().is_some() => Ok(Value::String(text())),
        [] => Ok(Value::Null),
        blocks => serde_json::to_value(blocks).map_err(|e| {
            ToolError::internal(format!(
                "the result of MCP server `{server}` could not be read: {e}"
            ))
        }),
    }
}
