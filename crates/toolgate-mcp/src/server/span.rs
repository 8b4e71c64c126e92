//! The server span of a `tools/call`, per the OpenTelemetry MCP conventions:
//! `tools/call {tool}`, kind server. Its parent is the trace context of the request's
//! `params._meta`, else that of the HTTP request's `traceparent` header (the conventions
//! put the message's context first: one HTTP request may carry several messages), else
//! whatever context is ambient. The pipeline's `execute_tool` span is its child.

use opentelemetry::Context;
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, ErrorData};
use rmcp::service::RequestContext;
use tracing::field::Empty;

use crate::trace_context::remote_context;

/// `tools/call {tool}`, or `tools/call` for a name that is no tool the caller may call:
/// `Display` without a `String` made when nobody reads it.
struct SpanName<'a>(Option<&'a str>);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(tool) => write!(f, "tools/call {tool}"),
            None => f.write_str("tools/call"),
        }
    }
}

/// The span a `tools/call` of `tool` is served in (disabled unless an OpenTelemetry
/// subscriber wants [`SPAN_TARGET`](toolgate_core::SPAN_TARGET)). `tool` is `None` when
/// the request names no tool the caller may call: a name a caller made up goes into no
/// span name or attribute, so that made-up names do not become operations in the tracing
/// backend, one per name.
pub(super) fn tools_call(
    tool: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    if !tracing::enabled!(target: toolgate_core::SPAN_TARGET, tracing::Level::TRACE) {
        return tracing::Span::none();
    }
    // The parent is chosen when the span is made: the `_meta` context, made ambient for
    // that moment only, wins over the transport's.
    let parts = context.extensions.get::<http::request::Parts>();
    let header = |name: &str| {
        parts
            .and_then(|p| p.headers.get(name))
            .and_then(|v| v.to_str().ok())
    };
    let remote = match context.meta.get_traceparent() {
        Some(parent) => remote_context(parent, context.meta.get_tracestate()),
        None => {
            header("traceparent").and_then(|parent| remote_context(parent, header("tracestate")))
        }
    };
    let _ambient = remote.map(Context::attach);
    let session = header("mcp-session-id");
    let version = context
        .protocol_version()
        .map(|v| v.to_string())
        .unwrap_or_default();
    tracing::trace_span!(
        target: toolgate_core::SPAN_TARGET,
        "mcp.server",
        otel.name = %SpanName(tool),
        otel.kind = "server",
        mcp.method.name = "tools/call",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        jsonrpc.request.id = %context.id,
        mcp.session.id = session,
        mcp.protocol.version = version.as_str(),
        network.transport = if parts.is_some() { "tcp" } else { "pipe" },
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// Records how the call was answered: a JSON-RPC error's code, or `tool_error` for a
/// result with `isError` (as the conventions ask).
pub(super) fn record_answer(span: &tracing::Span, answer: &Result<CallToolResponse, ErrorData>) {
    if span.is_disabled() {
        return;
    }
    let error = match answer {
        Err(e) => e.code.0.to_string(),
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            "tool_error".to_owned()
        }
        Ok(_) => return,
    };
    span.record("error.type", error.as_str());
    span.record("otel.status_code", "error");
}
