//! `/mcp`: the MCP streamable HTTP endpoint of the current configuration.

use axum::body::Body;
use axum::extract::{Extension, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tower_service::Service;

use super::{ApiError, Caller};

/// Hands the request to the MCP server of the caller's configuration. The caller's user is
/// in the request's extensions, where the MCP server finds it. The endpoint reads the body
/// within `server.body_limit` (413 past it) and answers a body that is not JSON-RPC with
/// 400 and a JSON-RPC error.
pub async fn endpoint(Extension(caller): Extension<Caller>, mut request: Request) -> Response {
    let Some(mut service) = caller.gateway.mcp.clone() else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "mcp_disabled",
            "the MCP endpoint is turned off (`server.mcp: false`)",
        )
        .into_response();
    };
    request.extensions_mut().insert(caller.user.clone());
    match service.call(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}
