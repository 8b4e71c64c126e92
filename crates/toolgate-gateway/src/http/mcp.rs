//! `/mcp`: the MCP streamable HTTP endpoint of the current configuration.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::json;
use tower_service::Service;

use super::accept;
use super::body::{closing_if, has_body};
use super::{ApiError, AppState, Caller};
use crate::config::WebOrigin;
use crate::identity::scopes::{self, INSUFFICIENT_SCOPE};
use crate::identity::{Route, metadata};
use crate::process::mcp_sessions::Refused;

/// The header carrying the MCP session id rmcp issues at `initialize`.
const MCP_SESSION_ID: &str = "mcp-session-id";

/// JSON-RPC: the first of the codes left to servers for their own errors.
const SERVER_ERROR: i64 = -32000;

/// A 2026-07-28 `tools/call` of a tool whose scopes the caller's token lacks, named in the
/// request's `Mcp-Method` and `Mcp-Name` headers: answered 403 with the
/// `insufficient_scope` challenge naming the tool's scopes, so that an OAuth client can
/// ask for a token with them and call again (step-up authorization). A request without
/// those headers (2025-11-25) sees the tool as it is listed to it: not at all, and a call
/// is `unknown_tool`. Either way the `tool_scopes` hook refuses the call in the pipeline;
/// this only tells the client how to get through.
fn step_up(caller: &Caller, request: &Request) -> Option<Response> {
    let headers = request.headers();
    if headers.get("mcp-method")?.as_bytes() != b"tools/call" {
        return None;
    }
    let tool = headers.get("mcp-name")?.to_str().ok()?;
    let missing = caller.gateway.missing_tool_scopes(&caller.user, tool);
    if missing.is_empty() {
        return None;
    }
    let oauth = caller.gateway.identity.oauth()?;
    let reason = scopes::lacks_scope(&missing, tool);
    let mut response =
        ApiError::new(StatusCode::FORBIDDEN, INSUFFICIENT_SCOPE, reason).into_response();
    let challenge =
        metadata::insufficient_scope(oauth, Route::Mcp, caller.gateway.tool_scopes(tool));
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    Some(response)
}

/// Hands the request to the MCP server of the caller's configuration. The caller's user is
/// in the request's extensions, where the MCP server finds it. The endpoint reads the body
/// within `server.body_limit` (413 past it) and answers a body that is not JSON-RPC with
/// 400 and a JSON-RPC error.
///
/// Each session belongs to the user who opened it (the same id in the same tenant: `ann`
/// of another tenant is another user): a request with another user's `Mcp-Session-Id`, or
/// with an id the gateway never issued, is answered 404 as for an unknown session. A
/// `DELETE` that ends a session is answered 204.
///
/// An `Accept` that accepts the types the request is answered with through wildcards
/// (`*/*`, `application/*, text/*`), or no `Accept` at all, is taken as naming them; one
/// that refuses one of them (`*/*, text/event-stream;q=0`) is answered 406.
///
/// A request from a browser page (with an `Origin` header) is answered 403 unless the page
/// is served from this host's loopback interface or its origin is in
/// `server.mcp_allowed_origins`: a page on another site cannot reach a gateway on
/// `localhost` by rebinding its own host name to it.
///
/// Every session the MCP server opens is bound to its user here, or closed: the session of
/// an `initialize` whose client hangs up before the answer is closed inside the MCP server
/// (see `McpHttpService`), and an answer that reaches this handler is bound (or refused
/// past the caps, and closed) before anything else can drop it.
///
/// A `tools/call` still running when the shutdown grace ends is cancelled through the
/// pipeline and answered, on the stream its client waits on, with a tool result with
/// `isError: true` whose `_meta` carries code `shutting_down` and status 503.
pub async fn endpoint(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    mut request: Request,
) -> Response {
    // A refusal before the MCP server reads the body closes the connection (see
    // `closing_if`).
    let has_body = has_body(request.headers());
    if let Some(origin) = request.headers().get(header::ORIGIN)
        && !origin_allowed(origin, &caller.gateway.config.server.mcp_allowed_origins)
    {
        let refused = ApiError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            "pages of this origin may not call /mcp: add the origin to `server.mcp_allowed_origins` to allow them",
        );
        return closing_if(has_body, refused.into_response());
    }
    let Some(served) = state.mcp.served() else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "mcp_disabled",
            "the MCP endpoint is turned off (`server.mcp: false`)",
        )
        .into_response();
    };
    if let Some(step_up) = step_up(&caller, &request) {
        return step_up;
    }
    let (mut service, sessions) = (served.service.clone(), &served.sessions);
    // A session is the caller's: the user id in its tenant.
    let user = &*caller.user;
    let session = match request.headers().get(MCP_SESSION_ID) {
        None => None,
        Some(id) => match id.to_str().ok().and_then(|id| {
            sessions
                .claim(id, user)
                .map(|in_use| (id.to_owned(), in_use))
        }) {
            Some(claimed) => Some(claimed),
            None => return closing_if(has_body, unknown_session()),
        },
    };
    let ends_session = request.method() == Method::DELETE;
    request.extensions_mut().insert(caller.user.clone());
    if let Some(token) = &caller.token {
        request.extensions_mut().insert(token.clone());
    }
    if let Some(client) = caller
        .gateway
        .audited_client(request.extensions(), request.headers())
    {
        request.extensions_mut().insert(client);
    }
    request
        .extensions_mut()
        .insert(state.drain.mcp_shutdown().clone());
    // The MCP library takes only an `Accept` that names its types; `*/*` accepts them too.
    accept::name_accepted_types(&mut request);
    // Nothing is awaited between the answer and the bind below: a session the answer
    // carries is bound (or refused, and closed) even when its client is gone by now.
    let mut response = match service.call(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    };
    match session {
        // rmcp's own unknown-session answer is plain text; a JSON-RPC error it answers
        // 404 (an unknown method) leaves the session open.
        Some((id, in_use))
            if response.status() == StatusCode::NOT_FOUND
                && !response.headers().contains_key(header::CONTENT_TYPE) =>
        {
            // rmcp no longer holds it (its own keep-alive): unknown, in the gateway's words.
            drop(in_use);
            sessions.unbind(&id);
            return closing_if(has_body, unknown_session());
        }
        Some((id, in_use)) if ends_session && response.status().is_success() => {
            drop(in_use);
            sessions.unbind(&id);
            // rmcp answers 202, which MCP clients take for a warning; the session is gone.
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        // The session is in use until its answer has been sent, which for a stream can
        // be long after this returns: the body holds it.
        Some((_, in_use)) => {
            response = response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _held = &in_use;
                    frame
                }))
            });
        }
        None => {
            if let Some(id) = response
                .headers()
                .get(MCP_SESSION_ID)
                .and_then(|id| id.to_str().ok())
                && let Err(refused) = sessions.bind(id, user)
            {
                return too_many_sessions(&refused);
            }
        }
    }
    response
}

/// The answer to an `initialize` whose session the gateway does not keep (the session
/// rmcp opened for it is closed): 429 when the caller holds as many sessions as one user
/// may, 503 when all users together do, with `Retry-After` and a JSON-RPC error like the
/// endpoint's other refusals of a request (its id is not known here, so it is null).
fn too_many_sessions(refused: &Refused) -> Response {
    let (status, code) = match refused {
        Refused::PerUser { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_sessions"),
        Refused::Full { .. } => (StatusCode::SERVICE_UNAVAILABLE, "mcp_sessions_full"),
    };
    let retry_after = refused.retry_after();
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": SERVER_ERROR,
            "message": refused.to_string(),
            "data": {"code": code, "retry_after_ms": retry_after.as_millis()},
        },
    });
    let mut response = (status, Json(body)).into_response();
    // Whole seconds, rounded up: a client that waits this long may find a slot.
    let seconds = retry_after.as_millis().div_ceil(1000).max(1);
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// 404 for a session id that is unknown, ended, or someone else's: the answer is the same
/// for all three, so it does not reveal that a session exists.
fn unknown_session() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_session",
        "no MCP session with this `Mcp-Session-Id` is open for you: send `initialize` without it to open one",
    )
    .into_response()
}

/// Whether a page of `origin` may call `/mcp`.
fn origin_allowed(origin: &HeaderValue, allowed: &[WebOrigin]) -> bool {
    let Some(origin) = origin.to_str().ok().and_then(WebOrigin::parse) else {
        return false;
    };
    origin.is_loopback() || allowed.contains(&origin)
}
