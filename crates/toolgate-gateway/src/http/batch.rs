//! `POST /v1/tool-calls`: a batch of a model's tool calls, answered in the model's format.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{Extensions, HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_agent::format::{anthropic, gemini, openai};
use toolgate_agent::{ExecuteOptions, ToolCall, ToolResult, check_call_id};
use toolgate_core::User;
use toolgate_hooks::audit::ClientAddress;
use toolgate_http::UnusableId;
use toolgate_mcp::CallerAccessToken;

use super::body::json_value;
use super::{ApiError, AppState, Caller, request_timeout};

/// The header naming a batch's thread, when `?thread=` does not.
const X_THREAD_ID: &str = "x-thread-id";

/// `?format=` and `?thread=` of a batch.
#[derive(Deserialize)]
pub struct BatchQuery {
    format: Option<String>,
    thread: Option<String>,
}

/// Runs the calls of one model message with agent-layer semantics — every call gets a
/// result, in call order, whatever happens to the others — and answers with the
/// provider-format results (`messages`, `message` or `content`) and the `results` with
/// their status (`success`, `error`, `suspended` with its suspension id).
///
/// The body is, by `format`: `openai` (default) an assistant message with `tool_calls`;
/// `anthropic` an assistant message with `tool_use` blocks; `gemini` a response or content
/// with `functionCall` parts.
///
/// Each call carries the caller's access token, when it presented one, like a single
/// call (`/v1/tools/{name}/invoke`) does.
///
/// The calls run in the session of the batch's thread within the caller's own sessions
/// (see [`thread_session`]): a thread id is the client's word, and another user who sends
/// the same one never shares what is bound in it.
///
/// The whole batch has the request's deadline (`server.request_timeout`, or a shorter
/// `x-toolgate-timeout-ms`): a call still running then times out, and one that has not
/// started by then does not run and is answered as timed out.
///
/// Calls still running when the shutdown grace ends are cancelled; their results are
/// errors with code `shutting_down`, and the calls that finished keep theirs.
pub async fn tool_calls(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<BatchQuery>,
    extensions: Extensions,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    // The batch's time runs from here, once its body has arrived (which `body_timeout`
    // bounds): parsing, waiting for a turn and running all count.
    let started = tokio::time::Instant::now();
    let message = json_value(body)?;
    let format = query.format.as_deref().unwrap_or("openai");
    let calls: Vec<ToolCall> = match format {
        "openai" => openai::parse_chat_tool_calls(&message),
        "anthropic" => anthropic::parse_tool_uses(&message),
        "gemini" => gemini::parse_function_calls(&message),
        other => {
            return Err(super::invoke::unknown_format(
                other,
                "openai, anthropic or gemini",
            ));
        }
    }
    .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_tool_calls", e.to_string()))?;
    let max = caller.gateway.config.server.max_batch;
    if calls.len() > max {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "batch_too_large",
            format!(
                "the batch has {} calls, over the limit of {max} (`server.max_batch`): split it",
                calls.len()
            ),
        ));
    }
    check_call_ids(&calls)?;
    let thread = thread_session(query.thread.as_deref(), &headers, &caller.user)?;
    let timeout = request_timeout(&caller.gateway, &headers)?;
    let mut options = ExecuteOptions::new()
        .user(caller.user.clone())
        .timeout(timeout)
        .cancellation(state.drain.call_token());
    // The deadline is the whole request's, not each call's: without it a batch would last
    // one timeout per round of `batch_concurrency` calls.
    if let Some(deadline) = started.checked_add(timeout) {
        options = options.deadline(deadline);
    }
    // Every call of the batch carries the caller's token, as a single call does, for the
    // upstreams that exchange it.
    if let Some(token) = &caller.token {
        options = options.provide::<CallerAccessToken>(token.clone());
    }
    if let Some(client) = caller.gateway.audited_client(&extensions, &headers) {
        options = options.provide::<ClientAddress>(client);
    }
    let mut results = caller
        .gateway
        .system
        .execute_tools(&thread, calls, options)
        .await;
    for result in &mut results {
        state.drain.explain_result(result);
    }
    Ok(Json(render(format, &results)))
}

/// Refuses a batch whose results could not be told apart or would repeat what no model
/// sends: a call without an id (an empty one: its result could not be matched to it), two
/// calls with one id (the caller could not tell which result is whose, and a tool would
/// run twice for one answer), or an id over
/// [`MAX_CALL_ID_BYTES`](toolgate_agent::MAX_CALL_ID_BYTES) bytes — the agent layer's
/// check ([`check_call_id`]), so that a batch and the agent refuse the same ids.
///
/// Ids are opaque: compared byte for byte, so ids that differ only in case or in how
/// their Unicode is written are different ids.
///
/// # Errors
///
/// 400 `bad_tool_calls`, naming the call, and the repeated id as far as an id is shown.
fn check_call_ids(calls: &[ToolCall]) -> Result<(), ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_tool_calls", message);
    let mut seen = std::collections::HashMap::with_capacity(calls.len());
    for (position, call) in calls.iter().enumerate().map(|(i, call)| (i + 1, call)) {
        if let Err(unusable) = check_call_id(&call.id) {
            return Err(bad(format!("call {position} {unusable}; nothing ran")));
        }
        if let Some(first) = seen.insert(call.id.as_str(), position) {
            return Err(bad(format!(
                "calls {first} and {position} have the same id `{}`: give each call an id of its own, so that each result can be matched to its call; nothing ran",
                toolgate_core::error::shown_id(&call.id)
            )));
        }
    }
    Ok(())
}

/// The session the calls of `user`'s batch run in, and the thread the agent layer runs
/// them in: the thread the client named (`?thread=`, else `x-thread-id`, else the user's
/// id), qualified by the user and their tenant as `x-session-id` is on a single call
/// ([`toolgate_http::session_key`], `[tenant, user, thread]`). Without it, `ann` of another
/// tenant, or any user who sends `?thread=alice` (alice's default), would run in alice's
/// session: read what a hook binds for it, and appear in it in the audit trail.
///
/// # Errors
///
/// 400 `bad_thread_id` for a thread id that is empty, over 128 bytes or holds anything but
/// visible ASCII, or an `x-thread-id` sent twice.
fn thread_session(
    query: Option<&str>,
    headers: &HeaderMap,
    user: &User,
) -> Result<String, ApiError> {
    let bad = |message: &str| ApiError::new(StatusCode::BAD_REQUEST, "bad_thread_id", message);
    let unusable = "the thread id (`?thread=` or `x-thread-id`) must be 1 to 128 visible ASCII characters (letters, digits, `-`, `_`, `.`, …, no spaces): send a usable id, or none to use your own thread";
    let named = match query {
        Some(thread) if !toolgate_http::is_usable_id(thread) => return Err(bad(unusable)),
        Some(thread) => Some(thread),
        None => toolgate_http::header_id(headers, X_THREAD_ID).map_err(|why| match why {
            UnusableId::SentTwice => {
                bad("the request carries `x-thread-id` more than once: send it once")
            }
            UnusableId::NotAnId => bad(unusable),
        })?,
    };
    Ok(toolgate_http::session_key(user, named.unwrap_or(&user.id)))
}

/// The results in the provider's format, with the results themselves alongside.
pub(super) fn render(format: &str, results: &[ToolResult]) -> Value {
    match format {
        "anthropic" => json!({
            "message": anthropic::tool_results_message(results),
            "results": results,
        }),
        "gemini" => json!({
            "content": gemini::function_responses_content(results),
            "results": results,
        }),
        _ => json!({
            "messages": results.iter().map(openai::chat_tool_message).collect::<Vec<_>>(),
            "results": results,
        }),
    }
}
