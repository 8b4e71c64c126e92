//! `GET /v1/tools` and `POST /v1/tools/{name}/invoke`.

use axum::Json;
use axum::body::Bytes;
use std::sync::Arc;

use axum::extract::{Extension, FromRequest, Path, Query, Request, State};
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_agent::ToolResult;
use toolgate_agent::format::{anthropic, gemini, mcp, openai};
use toolgate_core::InvokeOptions;
use toolgate_core::context::RequestId;
use toolgate_hooks::audit::ClientAddress;
use toolgate_hooks::budget::LimitReport;
use toolgate_http::{X_REQUEST_ID, invocation_response};
use toolgate_mcp::CallerAccessToken;

use super::body::json_value;
use super::{ApiError, AppState, Caller, request_timeout};
use crate::identity::scopes::INSUFFICIENT_SCOPE;
use crate::identity::{Route, metadata};

/// `?format=` of a listing.
#[derive(Deserialize)]
pub struct ListQuery {
    format: Option<String>,
}

/// The tools the caller may call, in the format asked for.
pub async fn list_tools(
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let tools = caller.gateway.visible_tools(&caller.user);
    let listed = match query.format.as_deref().unwrap_or("toolgate") {
        "toolgate" => json!({ "tools": tools }),
        "openai" => openai::chat_tools(&tools),
        "openai_responses" | "openai-responses" => openai::responses_tools(&tools),
        "anthropic" => anthropic::tools(&tools),
        "gemini" => gemini::tools(&tools),
        "mcp" => mcp::tools_list(&tools),
        other => {
            return Err(unknown_format(
                other,
                "toolgate, openai, openai-responses, anthropic, gemini or mcp",
            ));
        }
    };
    Ok(Json(listed))
}

/// 400 `unknown_format`: `?format=` is none of the formats of the route, listed in
/// `accepted` ("openai, anthropic or gemini"). Every route with a `format` refuses alike.
pub(super) fn unknown_format(format: &str, accepted: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "unknown_format",
        format!("unknown format `{format}`: use {accepted}"),
    )
}

/// One call. The body is the tool's arguments; `x-session-id`, `x-request-id` and
/// `x-toolgate-timeout-ms` are optional headers. The answer carries the `RateLimit-Policy`
/// and `RateLimit` fields of the budgets and rate limits the call met. A call still running when the shutdown
/// grace ends is cancelled and answered 503 `shutting_down`.
pub async fn invoke(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    // The headers are taken out rather than copied; reading the body needs none of them.
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let client = caller.gateway.audited_client(&parts.extensions, &headers);
    let body = Bytes::from_request(Request::from_parts(parts, body), &()).await;
    let input = match json_value(body) {
        Ok(input) => input,
        Err(error) => return error.into_response(),
    };
    let request_id = toolgate_http::request_id(&headers)
        .map(str::to_owned)
        .unwrap_or_else(|| RequestId::generate().to_string());
    let timeout = match request_timeout(&caller.gateway, &headers) {
        Ok(timeout) => timeout,
        Err(error) => return error.into_response(),
    };
    let mut options = InvokeOptions::new()
        .user(caller.user.clone())
        .request_id(request_id.clone())
        .timeout(timeout)
        .cancellation(state.drain.call_token());
    match toolgate_http::caller_session(&headers, &caller.user) {
        Ok(Some(session)) => options = options.session(session),
        Ok(None) => {}
        Err(error) => return error.into_response(),
    }
    if let Some(token) = &caller.token {
        options = options.provide::<CallerAccessToken>(token.clone());
    }
    if let Some(client) = client {
        options = options.provide::<ClientAddress>(client);
    }
    let limits = LimitReport::default();
    options = options.provide::<LimitReport>(limits.clone());
    let mut invocation = caller
        .gateway
        .pipeline()
        .invoke_detailed(&name, input, options)
        .await;
    invocation.result = invocation.result.map_err(|e| state.drain.explain(e));
    if let Some(stats) = caller.gateway.system.stats() {
        let mut result = match &invocation.result {
            Ok(output) => ToolResult::success(&request_id, &name, output.clone()),
            Err(error) => ToolResult::error(&request_id, &name, error),
        };
        result.metadata.duration_ms = invocation.duration.as_millis() as u64;
        result.metadata.attempts = invocation.attempts;
        stats.record(&result);
    }
    let mut response = invocation_response(&invocation);
    super::ratelimit::insert(response.headers_mut(), &limits.states());
    // A token without a scope the tool needs: the challenge says which (RFC 6750).
    if let Err(error) = &invocation.result
        && error.code() == INSUFFICIENT_SCOPE
        && let Some(oauth) = caller.gateway.identity.oauth()
        && let Ok(value) = HeaderValue::from_str(&metadata::insufficient_scope(
            oauth,
            Route::V1,
            caller.gateway.tool_scopes(&name),
        ))
    {
        response.headers_mut().insert(WWW_AUTHENTICATE, value);
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    response
}
