//! [`ImportedTool`]: a tool of an upstream MCP server, registered like any other tool.

use std::sync::Arc;

use futures::future::BoxFuture;
use jsonschema::Validator;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use tokio::time::Instant;
use toolgate_core::error::{InputViolations, error_text};
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolDefinition};
use toolgate_core::{ToolError, ToolInvokeContext};
use tracing::Instrument;

use toolgate_hooks::validation::violations_for;

use super::direct::has_header_arguments;
use super::link::Link;

/// A tool that lives in an upstream MCP server. Its arguments are checked against its
/// input schema before the call leaves (the tool's own check, at `will_validate_input`,
/// unless [`UpstreamConfig::validate_arguments`](crate::UpstreamConfig::validate_arguments)
/// is off): a wrong argument is the caller's `invalid_input` naming the field. A call goes
/// upstream with a deadline — the earlier of the invocation's and the upstream's call
/// timeout — and is cancelled upstream when the invocation is cancelled.
pub struct ImportedTool {
    link: Arc<Link>,
    definition: ToolDefinition,
    remote_name: String,
    validator: Option<Arc<Validator>>,
    /// Whether its schema sends arguments in headers too (`x-mcp-header`).
    arguments_in_headers: bool,
}

impl ImportedTool {
    pub(crate) fn new(
        link: Arc<Link>,
        definition: ToolDefinition,
        remote_name: String,
        validator: Option<Arc<Validator>>,
    ) -> Self {
        ImportedTool {
            arguments_in_headers: has_header_arguments(&definition.input_schema),
            link,
            definition,
            remote_name,
            validator,
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

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        if let Some(validator) = &self.validator {
            // A call without arguments goes upstream as an empty object.
            let empty = Value::Object(Default::default());
            let arguments = if input.is_null() { &empty } else { input };
            let violations = violations_for(validator, arguments);
            if !violations.is_empty() {
                return Err(ToolError::InvalidInput(InputViolations(violations)));
            }
        }
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
            let link = self.link.as_caller(ctx).await?;
            let span = client_span(&self.remote_name, &link.config.name);
            let result = link
                .call(
                    &self.remote_name,
                    arguments,
                    self.arguments_in_headers,
                    deadline,
                    ctx,
                )
                .instrument(span.clone())
                .await
                .and_then(|result| output_from_result(&link, result));
            if let Err(error) = &result
                && !span.is_disabled()
            {
                span.record("error.type", error.code());
                span.record("otel.status_code", "error");
            }
            link.scrub(result)
        })
    }
}

/// The client span of a call to an upstream, per the OpenTelemetry MCP conventions:
/// `tools/call {tool}` (the upstream's name of the tool), kind client. Its context is what
/// the request carries in `params._meta` ([`trace_context`](crate::trace_context)).
fn client_span(remote_name: &str, server: &str) -> tracing::Span {
    tracing::trace_span!(
        target: toolgate_core::SPAN_TARGET,
        "mcp.client",
        otel.name = %format_args!("tools/call {remote_name}"),
        otel.kind = "client",
        mcp.method.name = "tools/call",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = remote_name,
        toolgate.upstream = server,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// An upstream result as a toolgate output: the result itself, in its JSON form (see
/// [`result`](crate::result)). `isError` results become [`ToolError::Execution`] with the
/// upstream's texts, one a line, scrubbed of its credentials and cut to the bound of an
/// error's message ([`error_text`]) as they are joined, so that retry, error metrics and
/// audit see a failure of a size a caller can read.
fn output_from_result(link: &Link, mut result: CallToolResult) -> Result<Value, ToolError> {
    if result.is_error == Some(true) {
        for block in &mut result.content {
            if let ContentBlock::Text(text) = block {
                // Scrubbed whole, then cut: a cut never leaves half a credential behind.
                text.text = link.scrubbed(std::mem::take(&mut text.text));
            }
        }
        let texts = Texts(&result.content);
        return Err(ToolError::execution(error_text(format_args!(
            "MCP server `{}`: {texts}",
            link.config.name
        ))));
    }
    Ok(crate::result::output_of(result))
}

/// The text blocks of a result, one a line, written without being joined first.
struct Texts<'a>(&'a [ContentBlock]);

impl std::fmt::Display for Texts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let texts = self
            .0
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()));
        for (i, text) in texts.enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(text)?;
        }
        Ok(())
    }
}
