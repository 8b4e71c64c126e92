//! `GET /v1/admin/stats` and `GET /v1/admin/decisions`: what the console's tool and
//! history views show, for users with an approver role (the decisions on their tenant's
//! calls; the statistics, which cover every tenant, for approvers without a tenant only);
//! `DELETE /v1/admin/stats`, which starts the statistics over. The statistics and the
//! decisions are every replica's when the state is on Redis.

use axum::Json;
use axum::extract::{Extension, Query};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, Caller};
use crate::console::history::{MAX_DECISIONS, Viewer};

fn approvers_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.gateway.may_approve(&caller.user) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "not_an_approver",
        format!(
            "only users with an approver role (`policies.approval.approver_roles`) may see {what}"
        ),
    ))
}

/// For what covers every tenant (the per-tool statistics, the pins): an approver without
/// a tenant only. An approver of one tenant approves within it, and is refused with 403
/// `not_an_operator`: the statistics would show other tenants' use of each tool, and a
/// reset or a pin change would act on theirs.
pub(super) fn operators_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    approvers_only(caller, what)?;
    match &caller.user.tenant {
        None => Ok(()),
        Some(tenant) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_an_operator",
            format!(
                "{what} cover every tenant, so only an approver without a tenant may see or change them; you approve for tenant `{}` only",
                toolgate_core::error::shown_id(tenant)
            ),
        )),
    }
}

/// Calls, errors, refusals, waits and latency per tool, from the gateway's own counters
/// (see [`crate::console::counters`]): since the process started, or, with the state on
/// Redis, since any replica first counted, summed over every replica (`counted_by` says
/// which).
pub async fn stats(Extension(caller): Extension<Caller>) -> Result<Json<Value>, ApiError> {
    operators_only(&caller, "the per-tool statistics")?;
    Ok(Json(caller.gateway.tool_statistics().await))
}

/// Starts the per-tool statistics over: every count is forgotten, and they count from now
/// — every replica's with the state on Redis. Answers the statistics as `GET` then does.
pub async fn reset_stats(Extension(caller): Extension<Caller>) -> Result<Json<Value>, ApiError> {
    operators_only(&caller, "the per-tool statistics")?;
    let statistics = caller.gateway.reset_tool_statistics().await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stats_unavailable",
            e.to_string(),
        )
    })?;
    tracing::info!(by = %caller.user.id, "the per-tool statistics were started over");
    Ok(Json(statistics))
}

/// `?limit=` of `GET /v1/admin/decisions`, as sent.
#[derive(Deserialize)]
pub struct DecisionsQuery {
    limit: Option<String>,
}

/// The last decisions on waiting calls taken through this process, newest first
/// (`limit`: 1 to 500, 50 by default).
pub async fn decisions(
    Extension(caller): Extension<Caller>,
    Query(query): Query<DecisionsQuery>,
) -> Result<Json<Value>, ApiError> {
    approvers_only(&caller, "the decided calls")?;
    let limit = match query.limit.as_deref().map(str::trim) {
        None => 50,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_DECISIONS).contains(n))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_limit",
                    format!(
                        "`limit` must be a whole number from 1 to {MAX_DECISIONS}, not `{}`",
                        toolgate_core::error::shown_id(text)
                    ),
                )
            })?,
    };
    let viewer = match &caller.user.tenant {
        Some(tenant) => Viewer::Tenant(tenant),
        None => Viewer::Everyone,
    };
    let decisions = caller
        .gateway
        .history
        .newest(viewer, limit)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "history_unavailable",
                e.to_string(),
            )
        })?;
    // An approver of one tenant is shown the decisions on that tenant's calls.
    let decisions: Vec<_> = decisions
        .into_iter()
        .filter(|d| caller.gateway.may_approve_in(&caller.user, &d.tenant))
        .collect();
    Ok(Json(json!({ "decisions": decisions })))
}
