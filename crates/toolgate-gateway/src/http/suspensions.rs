//! `GET /v1/suspensions/{id}` and `POST /v1/suspensions/{id}/resume`.
//!
//! Once decided, a call's outcome stays readable by its caller at
//! `GET /v1/suspensions/{id}` (`"status": "decided"`), see [`crate::outcomes`].

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_agent::{ResumeError, ResumeOptions};
use toolgate_core::ToolError;
use toolgate_core::suspension::{ResumeDecision, SuspendedInvocation};

use super::body::json_body;
use super::{ApiError, AppState, Caller, request_timeout};
use crate::outcomes::Outcome;

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_suspension",
        format!(
            "no suspended call with id `{id}`: it was never suspended or has already been resumed"
        ),
    )
}

fn expired(id: &str) -> ApiError {
    ApiError::from(&ToolError::SuspensionExpired { id: id.to_owned() })
}

/// The waiting call with this id: 404 when there is none, 410 when it expired.
async fn waiting(caller: &Caller, id: &str) -> Result<SuspendedInvocation, ApiError> {
    caller
        .gateway
        .pipeline()
        .suspended(id)
        .await
        .map_err(|e| ApiError::from(&e))?
        .ok_or_else(|| not_found(id))
}

/// An instant as RFC 3339 text, to the second.
fn rfc3339(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A suspended call, for its caller or an approver: the tool, the reason, the input it
/// would run with (validated and redacted), and when it expires.
pub async fn show(
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let saved = match waiting(&caller, &id).await {
        Ok(saved) => saved,
        // Decided: its caller (or an approver) gets the outcome.
        Err(not_waiting) => {
            return match caller.gateway.outcomes.get(&id) {
                Some(outcome)
                    if *outcome.user == caller.user.id
                        || caller.gateway.may_approve(&caller.user) =>
                {
                    Ok(Json(json!({
                        "id": id,
                        "status": "decided",
                        "user": &*outcome.user,
                        "result": outcome.result,
                    })))
                }
                _ => Err(not_waiting),
            };
        }
    };
    // Someone else's suspension is as invisible as a missing one.
    if saved.user.id != caller.user.id && !caller.gateway.may_approve(&caller.user) {
        return Err(not_found(&id));
    }
    Ok(Json(json!({
        "id": saved.id,
        "status": "waiting",
        "tool": saved.tool,
        "user": saved.user.id,
        "reason": saved.reason,
        "payload": saved.payload,
        "input": saved.input,
        "stage": saved.stage,
        "suspended_at": rfc3339(saved.suspended_at),
        "expires_at": saved.expires_at.map(rfc3339),
    })))
}

/// A person's decision.
#[derive(Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Run the call.
    Approve,
    /// Refuse it.
    Reject {
        /// Why (shown to the caller).
        #[serde(default)]
        reason: Option<String>,
    },
    /// Answer it without running the tool.
    Complete {
        /// The output.
        output: Value,
    },
}

/// `?format=` of the answer.
#[derive(Deserialize)]
pub struct ResumeQuery {
    format: Option<String>,
}

/// Resumes a suspended call with an approver's decision and answers with its result. A
/// resumed call still running when the shutdown grace ends is cancelled; its result is an
/// error with code `shutting_down`.
pub async fn resume(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(query): Query<ResumeQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    if !caller.gateway.may_approve(&caller.user) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_an_approver",
            "only users with an approver role (`policies.approval.approver_roles`) may resume calls",
        ));
    }
    let decision = match json_body::<Decision>(body)? {
        Decision::Approve => ResumeDecision::Approve,
        Decision::Reject { reason } => ResumeDecision::Reject {
            reason: reason.unwrap_or_else(|| format!("rejected by {}", caller.user.id)),
        },
        Decision::Complete { output } => ResumeDecision::Complete { output },
    };
    // Four eyes: whoever made the call may withdraw it, not wave it through. Checked
    // before anything runs, so the call keeps waiting for another approver.
    let saved = waiting(&caller, &id).await?;
    let settles = !matches!(decision, ResumeDecision::Reject { .. });
    if settles && caller.gateway.four_eyes() && saved.user.id == caller.user.id {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "four_eyes",
            format!(
                "`{}` may not approve or complete their own call (`policies.approval.four_eyes`): ask another approver; the call keeps waiting",
                caller.user.id
            ),
        ));
    }
    let options = ResumeOptions::new()
        .timeout(request_timeout(&caller.gateway, &headers))
        .cancellation(state.drain.call_token());
    let mut result = caller
        .gateway
        .system
        .resume(&id, decision, options)
        .await
        .map_err(|e| match e {
            ResumeError::UnknownSuspension { id } => not_found(&id),
            ResumeError::Expired { id } => expired(&id),
            error @ ResumeError::ThreadConfigUnavailable { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "thread_config_unavailable",
                error.to_string(),
            ),
            other => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "suspension_store",
                other.to_string(),
            ),
        })?;
    state.drain.explain_result(&mut result);
    // Kept for the caller, who fetches it with `GET /v1/suspensions/{id}` or over MCP.
    caller.gateway.outcomes.keep(
        &id,
        Outcome {
            user: Arc::from(saved.user.id.as_str()),
            result: serde_json::to_value(&result).unwrap_or(Value::Null),
        },
    );
    let format = query.format.as_deref().unwrap_or("openai");
    Ok(Json(super::batch::render(
        format,
        std::slice::from_ref(&result),
    )))
}
