//! W3C trace context from the `traceparent` and `tracestate` headers of a `/v1` or `/mcp`
//! request: the request is served with it as the ambient OpenTelemetry context, so the
//! `execute_tool` spans it starts are children of the caller's span. Mounted only when
//! `telemetry:` is configured. A malformed `traceparent` is ignored (the call starts a
//! trace of its own); an oversized or malformed `tracestate` is dropped.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::context::FutureExt;
use toolgate_mcp::trace_context::remote_context;

/// Serves `request` in the trace context its headers carry, if any.
pub(super) async fn adopt(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let remote = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(|parent| {
            let state = headers.get("tracestate").and_then(|v| v.to_str().ok());
            remote_context(parent, state)
        });
    match remote {
        Some(cx) => next.run(request).with_context(cx).await,
        None => next.run(request).await,
    }
}
