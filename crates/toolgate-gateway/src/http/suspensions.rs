//! `GET /v1/suspensions`, `GET /v1/suspensions/{id}` and `POST /v1/suspensions/{id}/resume`.
//!
//! Once decided, a call's outcome stays readable by its caller at
//! `GET /v1/suspensions/{id}` (`"status": "decided"`), see [`crate::outcomes`]; while a
//! decided call still runs, `"status": "running"`. A call its caller withdrew while it ran
//! is `decided` with the error code `withdrawn` from the withdrawal on, whatever it ends
//! with. An outcome the store fails to keep as the call ends is kept again in the
//! background for up to [`KEPT_AGAIN_WITHIN`] ([`keep_again`]).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_agent::{ResumeError, ResumeOptions, ToolResult, ToolStatus};
use toolgate_core::suspension::{
    DecidedCall, ResumeDecision, RunningRecord, SuspendedInvocation, SuspensionFilter,
    SuspensionStore, SuspensionStoreError, decision_token,
};
use toolgate_core::{CallerId, ToolError};
use tracing::Instrument;

use super::body::json_body;
use super::{ApiError, AppState, Caller, request_timeout};
use crate::config::name_fault;
use crate::console::history::Decided;
use crate::drain::Drain;
use crate::outcomes::{Kept, LOST_AFTER, is_running_record, read, running_record};
use crate::webhooks::DecisionSummary;

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_suspension",
        format!(
            "no suspended call with id `{}`: it was never suspended or has already been resumed",
            toolgate_core::error::shown_id(id)
        ),
    )
}

fn expired(id: &str) -> ApiError {
    ApiError::from(&ToolError::SuspensionExpired { id: id.to_owned() })
}

/// The waiting call with this id: 404 when there is none, 410 when it expired — to those
/// who could see it while it waited (see [`expired_or_unknown`]).
async fn waiting(caller: &Caller, id: &str) -> Result<SuspendedInvocation, ApiError> {
    match caller.gateway.pipeline().suspended(id).await {
        Ok(found) => found.ok_or_else(|| not_found(id)),
        Err(ToolError::SuspensionExpired { .. }) => Err(expired_or_unknown(caller, id).await),
        Err(e) => Err(ApiError::from(&e)),
    }
}

/// The answer for the expired call `id`: 410 to whoever could see it while it waited — its
/// caller, or an approver —, and to anyone else exactly the 404 of an id never suspended,
/// so that nobody learns that another user's call existed and expired.
///
/// The store keeps who made an expired call with its id. When it cannot say — an id an
/// earlier version remembered as expired without its owner, a store that keeps no owners,
/// or a store that fails now — the call is taken as nobody's: 404 to everyone but
/// approvers without a tenant (who may see every call, so 410 tells them nothing they
/// could not see). Its caller then gets 404 too, which is safe: a 410 to the wrong user
/// would leak. An approver of a tenant gets 410 for a call of their tenant only: another
/// tenant's expired call is as unknown to them as its waiting one was.
async fn expired_or_unknown(caller: &Caller, id: &str) -> ApiError {
    let gateway = &caller.gateway;
    if gateway.may_approve(&caller.user) && caller.user.tenant.is_none() {
        return expired(id);
    }
    match gateway.suspensions.expired_owner(id).await {
        Ok(Some(owner))
            if owner.is_same_caller(&caller.user)
                || gateway.may_approve_in(&caller.user, &owner.tenant) =>
        {
            expired(id)
        }
        Ok(_) => not_found(id),
        Err(error) => {
            tracing::warn!(suspension_id = %id, %error, "who made an expired call could not be read: it is answered as unknown");
            not_found(id)
        }
    }
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
            let decided = caller
                .gateway
                .suspensions
                .outcome(&id)
                .await
                .map_err(|e| ApiError::from(&ToolError::from(e)))?;
            return match decided {
                Some(outcome)
                    if outcome.is_for(&caller.user)
                        || (caller.gateway).may_approve_in(&caller.user, &outcome.tenant) =>
                {
                    // A running record stands for a call that is neither waiting nor
                    // expired: one left by a decision that did not take the call after
                    // all is not what the call is.
                    let taken = not_waiting.status() == StatusCode::NOT_FOUND;
                    let decided = |result: &Value| {
                        json!({
                            "id": id,
                            "status": "decided",
                            "user": outcome.user,
                            "result": result,
                        })
                    };
                    let shown = match read(&outcome, std::time::SystemTime::now()) {
                        Kept::Ended(result) => decided(result),
                        Kept::Lost(result) if taken => decided(&result),
                        Kept::Running(record) if taken => running_json(&outcome, record),
                        Kept::Lost(_) | Kept::Running(_) => return Err(not_waiting),
                    };
                    Ok(Json(with_tenant(&outcome.tenant, shown)))
                }
                _ => Err(not_waiting),
            };
        }
    };
    // Someone else's suspension is as invisible as a missing one; so is another tenant's
    // to an approver of one tenant.
    if !saved.user.is_same_caller(&caller.user)
        && !(caller.gateway).may_approve_in(&caller.user, &saved.user.tenant)
    {
        return Err(not_found(&id));
    }
    Ok(Json(waiting_json(&saved)))
}

/// A waiting call as `show` and the listing answer it: the input is the validated and
/// redacted one the call waits with.
fn waiting_json(saved: &SuspendedInvocation) -> Value {
    with_tenant(
        &saved.user.tenant,
        json!({
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
        }),
    )
}

/// A decided call that still runs, as `show` and the listing answer it: its tool, its
/// caller, the decision and who took it, since when it runs and its deadline.
fn running_json(kept: &DecidedCall, record: &Value) -> Value {
    json!({
        "id": kept.id,
        "status": crate::outcomes::RUNNING,
        "tool": record["tool_name"],
        "user": kept.user,
        "decision": record["decision"],
        "decided_by": record["decided_by"],
        "running_since": record["running_since"],
        "deadline": record["deadline"],
    })
}

/// `call` with `tenant` beside its `user`, when the caller had one: `ann` of `acme` and
/// `ann` of `globex` are two callers.
fn with_tenant(tenant: &Option<String>, mut call: Value) -> Value {
    if let (Some(tenant), Some(call)) = (tenant, call.as_object_mut()) {
        call.insert("tenant".to_owned(), Value::from(tenant.as_str()));
    }
    call
}

/// How many waiting calls a page lists unless `limit` says otherwise.
const DEFAULT_PAGE: usize = 50;

/// The most waiting calls one page lists.
const MAX_PAGE: usize = 500;

/// The filters and paging of `GET /v1/suspensions`, as sent: each is checked by hand, so
/// that a bad one is refused with its own code.
#[derive(Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    tool: Option<String>,
    user: Option<String>,
    tenant: Option<String>,
    no_tenant: Option<String>,
    since: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// The longest `reason` an approver may give, in characters: a decision's reason is kept
/// in the decided history (hundreds of decisions), sent to webhooks and logged, so one
/// approver's paste must not fill memory or the log.
pub const MAX_REASON_CHARS: usize = 2000;

/// Refuses an approver's `reason` that is too long ([`MAX_REASON_CHARS`]) or holds a
/// character that could forge a line or disguise text ([`hides_text`], the rule of ids):
/// it is repeated as it is in the audit record, the decided history, the log and the
/// caller's error message.
///
/// [`hides_text`]: toolgate_core::error::hides_text
fn check_reason(reason: &str) -> Result<(), ApiError> {
    let length = reason.chars().count();
    if length > MAX_REASON_CHARS {
        return Err(bad_request(
            "reason_too_long",
            format!(
                "`reason` is {length} characters long; keep it to {MAX_REASON_CHARS} (it is kept in the decided history and every log line of the decision)"
            ),
        ));
    }
    let hidden = reason
        .chars()
        .enumerate()
        .find(|(_, c)| toolgate_core::error::hides_text(*c));
    if let Some((at, c)) = hidden {
        return Err(bad_request(
            "bad_reason",
            format!(
                "`reason` holds `{}` (U+{:04X}) at character {}: a reason may not hold control characters (a line break, an escape) or invisible formatting characters (a zero-width space, a bidirectional override), for it is repeated as it is in the audit record, the decided history and the caller's error message; send it as plain text on one line",
                c.escape_default(),
                u32::from(c),
                at + 1
            ),
        ));
    }
    Ok(())
}

fn bad_request(code: &str, message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

/// `limit`: a whole number from 1 to [`MAX_PAGE`].
fn page_size(limit: Option<&str>) -> Result<usize, ApiError> {
    let Some(text) = limit else {
        return Ok(DEFAULT_PAGE);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        _ => Err(bad_request(
            "bad_limit",
            format!(
                "`limit` must be a whole number from 1 to {MAX_PAGE}, not `{}`",
                toolgate_core::error::shown_id(text)
            ),
        )),
    }
}

/// `cursor`: the `next_cursor` of a previous page, which is the id of that page's last
/// call (clients treat it as opaque).
fn after(cursor: Option<&str>) -> Result<Option<&str>, ApiError> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let hex = cursor.strip_prefix("susp-").unwrap_or_default();
    if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(Some(cursor))
    } else {
        Err(bad_request(
            "bad_cursor",
            format!(
                "`cursor` `{}` is not one this API gave: pass the `next_cursor` of the previous page unchanged, or leave it out for the first page",
                toolgate_core::error::shown_id(cursor)
            ),
        ))
    }
}

/// `tenant=` or `no_tenant=true`: the tenant whose callers' calls a listing asks for
/// (`Some(None)`: callers of no tenant), or `None` when it asks for no tenant in particular.
///
/// A tenant name may be any text a tenant can be (`users:` and token claims meet
/// [`name_fault`]'s rule), so no value of `tenant=` could stand for "no tenant" without
/// meaning some tenant too: callers of no tenant are asked for with `no_tenant=true`.
fn asked_tenant(
    tenant: Option<&str>,
    no_tenant: Option<&str>,
) -> Result<Option<Option<String>>, ApiError> {
    let no_tenant = match no_tenant {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(bad_request(
                "bad_tenant",
                format!(
                    "`no_tenant` is `true` (only the calls of callers of no tenant) or `false`, not `{}`",
                    toolgate_core::error::shown_id(other)
                ),
            ));
        }
    };
    match (tenant, no_tenant) {
        (None, false) => Ok(None),
        (None, true) => Ok(Some(None)),
        (Some(_), true) => Err(bad_request(
            "bad_tenant",
            "pass `tenant=<name>` for the calls of one tenant or `no_tenant=true` for those of callers of no tenant, not both".to_owned(),
        )),
        (Some(tenant), false) => match name_fault(tenant) {
            None => Ok(Some(Some(tenant.to_owned()))),
            Some(fault) => {
                // A blank value is named as such, not quoted as nothing.
                let asked = if tenant.trim().is_empty() {
                    "an empty `tenant`".to_owned()
                } else {
                    format!("`tenant` `{}`", toolgate_core::error::shown_id(tenant))
                };
                Err(bad_request(
                    "bad_tenant",
                    format!(
                        "{asked} is not a tenant's name: a tenant {fault}; send the tenant exactly as `users:` or the token names it, or `no_tenant=true` for the calls of callers of no tenant"
                    ),
                ))
            }
        },
    }
}

/// A tenant in a message: "tenant `acme`", or "no tenant".
fn tenant_in_words(tenant: &Option<String>) -> String {
    match tenant {
        Some(tenant) => format!("tenant `{}`", toolgate_core::error::shown_id(tenant)),
        None => "no tenant".to_owned(),
    }
}

/// A decided call as the listing answers it: who made it, its tool, when it was decided,
/// and its outcome as `GET /v1/suspensions/{id}` gives it (`running` while it runs).
fn decided_json(decided: &DecidedCall) -> Value {
    let result = match read(decided, std::time::SystemTime::now()) {
        Kept::Running(record) => {
            return with_tenant(&decided.tenant, running_json(decided, record));
        }
        Kept::Lost(result) => result,
        Kept::Ended(result) => result.clone(),
    };
    with_tenant(
        &decided.tenant,
        json!({
            "id": decided.id,
            "status": "decided",
            "tool": decided.result["tool_name"],
            "user": decided.user,
            "decided_at": rfc3339(decided.decided_at),
            "result": result,
        }),
    )
}

/// Whether the call `id` is still in the store, waiting (or expired waiting): a decision
/// that ended without taking it left it there (and a running record it kept says nothing).
async fn still_waits(caller: &Caller, id: &str) -> bool {
    match caller.gateway.pipeline().suspended(id).await {
        Ok(found) => found.is_some(),
        Err(ToolError::SuspensionExpired { .. }) => true,
        Err(_) => false,
    }
}

/// The calls that waited for approval, by id, a page at a time: those still waiting
/// (`status=waiting`, the default) or those decided whose outcome is still kept
/// (`status=decided`). Approvers see every user's calls (an approver with a tenant, those
/// of that tenant); anyone else sees their own, and asking for another user's is refused
/// (403). Filters: `tool`, `user`, `tenant` (or `no_tenant=true` for callers of no
/// tenant: an operator's filter; an approver of one tenant may name only theirs, anyone
/// else only their own, else 403), `since` (RFC 3339,
/// UTC: suspended at or after it for waiting calls, decided at or after it for decided
/// ones); paging: `limit` (1 to 500, 50 by default) and `cursor` (the `next_cursor` of
/// the previous page of the same listing).
pub async fn list(
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let decided = match query.status.as_deref() {
        None | Some("waiting") => false,
        Some("decided") => true,
        Some(other) => {
            return Err(bad_request(
                "bad_status",
                format!(
                    "unknown status `{}`: use `waiting` or `decided`",
                    toolgate_core::error::shown_id(other)
                ),
            ));
        }
    };
    let since = query
        .since
        .as_deref()
        .map(|text| {
            humantime::parse_rfc3339(text.trim()).map_err(|_| {
                bad_request(
                    "bad_since",
                    format!(
                        "`since` must be an RFC 3339 instant in UTC, such as `2026-11-28T03:00:00Z`, not `{}`",
                        toolgate_core::error::shown_id(text)
                    ),
                )
            })
        })
        .transpose()?;
    let limit = page_size(query.limit.as_deref())?;
    let after = after(query.cursor.as_deref())?;
    let tenant = asked_tenant(query.tenant.as_deref(), query.no_tenant.as_deref())?;
    // Anyone but an approver lists their own calls only, in their own tenant; an approver
    // of one tenant lists that tenant's calls; an operator, those of the tenant asked for.
    // Asking for what one may not list is refused rather than answered with nothing, as
    // `user=` is: an empty page would read as "nothing waits there".
    let own = &caller.user.tenant;
    let filter = if caller.gateway.may_approve(&caller.user) {
        if own.is_some() && tenant.as_ref().is_some_and(|asked| asked != own) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_an_approver_of_tenant",
                format!(
                    "you approve the calls of {} only, and may not list those of {}: leave out `tenant` to list your tenant's; an approver without a tenant lists every tenant's",
                    tenant_in_words(own),
                    tenant_in_words(tenant.as_ref().unwrap_or(own)),
                ),
            ));
        }
        SuspensionFilter {
            user: query.user,
            tenant: own.clone().map(Some).or(tenant),
            ..SuspensionFilter::default()
        }
    } else {
        if let Some(other) = query.user.as_ref().filter(|user| **user != caller.user.id) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_an_approver",
                format!(
                    "only approvers (`policies.approval.approver_roles`) may list the calls of `{}`: leave out `user` to list your own",
                    toolgate_core::error::shown_id(other)
                ),
            ));
        }
        if let Some(asked) = tenant.as_ref().filter(|asked| *asked != own) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_an_approver",
                format!(
                    "only approvers (`policies.approval.approver_roles`) may list the calls of {}: leave out `tenant` to list your own",
                    tenant_in_words(asked)
                ),
            ));
        }
        SuspensionFilter::of_caller(&caller.user)
    };
    let filter = SuspensionFilter {
        tool: query.tool,
        since,
        ..filter
    };
    let failed = |e: SuspensionStoreError| match e {
        SuspensionStoreError::CannotList => {
            ApiError::new(StatusCode::NOT_IMPLEMENTED, "cannot_list", e.to_string())
        }
        other => ApiError::from(&ToolError::from(other)),
    };
    // One more than the page, to know whether another page follows.
    let mut listed: Vec<(String, Option<Value>)> = if decided {
        let outcomes = caller
            .gateway
            .suspensions
            .list_outcomes(&filter, after, limit + 1)
            .await
            .map_err(failed)?;
        let mut listed = Vec::with_capacity(outcomes.len());
        for outcome in &outcomes {
            // Left out of the page, though it moves the cursor on: the call is listed
            // with the waiting ones.
            let shown = (!is_running_record(&outcome.result)
                || !still_waits(&caller, &outcome.id).await)
                .then(|| decided_json(outcome));
            listed.push((outcome.id.clone(), shown));
        }
        listed
    } else {
        let calls = caller
            .gateway
            .pipeline()
            .list_suspended(&filter, after, limit + 1)
            .await
            .map_err(failed)?;
        calls
            .iter()
            .map(|c| (c.id.clone(), Some(waiting_json(c))))
            .collect()
    };
    let next_cursor = if listed.len() > limit {
        listed.truncate(limit);
        listed.last().map(|(id, _)| id.clone())
    } else {
        None
    };
    Ok(Json(json!({
        "suspensions": listed.into_iter().filter_map(|(_, call)| call).collect::<Vec<_>>(),
        "next_cursor": next_cursor,
    })))
}

/// A person's decision: the body of `POST /v1/suspensions/{id}/resume`, an object whose
/// `decision` names it, with `reason` (approve, reject) or `output` (complete) beside it.
#[derive(Deserialize)]
#[serde(try_from = "DecisionBody")]
pub enum Decision {
    /// Run the call.
    Approve {
        /// Why (kept in the decided history and the log).
        reason: Option<String>,
    },
    /// Refuse it.
    Reject {
        /// Why (shown to the caller).
        reason: Option<String>,
    },
    /// Answer it without running the tool.
    Complete {
        /// The output (an object naming a key twice is refused, as in a call's input).
        output: Value,
    },
    /// Approve it for its caller to make again: the call ends, and the caller's next
    /// identical call runs once, within `policies.approval.run_within`.
    ApproveRetry,
}

impl Decision {
    /// The decision's name, as the body gives it.
    fn name(&self) -> &'static str {
        match self {
            Decision::Approve { .. } => "approve",
            Decision::Reject { .. } => "reject",
            Decision::Complete { .. } => "complete",
            Decision::ApproveRetry => "approve_retry",
        }
    }
}

/// A decision's body as sent, read field by field so that a wrong value is named by its
/// field (`decision`, `reason`, `output`) in words a person knows.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default, deserialize_with = "some_with_unique_keys")]
    output: Option<Value>,
}

fn some_with_unique_keys<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    toolgate_core::json::unique_keys(deserializer).map(Some)
}

impl TryFrom<DecisionBody> for Decision {
    type Error = String;

    fn try_from(body: DecisionBody) -> Result<Self, String> {
        let DecisionBody {
            decision,
            reason,
            output,
        } = body;
        let only = |field: &str, with: &str| {
            format!("`{field}` goes only with `\"decision\": {with}`: leave it out")
        };
        match (decision.as_str(), reason, output) {
            ("approve" | "reject" | "approve_retry", _, Some(_)) => {
                Err(only("output", "\"complete\""))
            }
            ("complete" | "approve_retry", Some(_), _) => {
                Err(only("reason", "\"approve\" or \"reject\""))
            }
            ("approve", reason, None) => Ok(Decision::Approve { reason }),
            ("reject", reason, None) => Ok(Decision::Reject { reason }),
            ("complete", None, Some(output)) => Ok(Decision::Complete { output }),
            ("complete", None, None) => Err(
                "`\"decision\": \"complete\"` needs an `output`: what the call answers in place of the tool".to_owned(),
            ),
            ("approve_retry", None, None) => Ok(Decision::ApproveRetry),
            (other, _, _) => Err(format!(
                "`decision` must be `approve`, `reject`, `complete` or `approve_retry`, not `{}`",
                toolgate_core::error::shown_id(other)
            )),
        }
    }
}

/// `?format=` of the answer.
#[derive(Deserialize)]
pub struct ResumeQuery {
    format: Option<String>,
}

/// The formats a resume answers in: `toolgate` (the default) as
/// `POST /v1/tools/{name}/invoke` answers, the others as a batch of one
/// (`POST /v1/tool-calls`) does.
const RESUME_FORMATS: [&str; 4] = ["toolgate", "openai", "anthropic", "gemini"];

/// The result of a resumed call, in `format` (one of [`RESUME_FORMATS`]).
fn answer(format: &str, result: &ToolResult) -> Response {
    if format != "toolgate" {
        return Json(super::batch::render(format, std::slice::from_ref(result))).into_response();
    }
    match (&result.status, &result.error) {
        (ToolStatus::Suspended, _) => (
            StatusCode::ACCEPTED,
            Json(json!({
                "reason": result.metadata.suspension_reason,
                "status": "suspended",
                "suspension_id": result.metadata.suspension_id,
            })),
        )
            .into_response(),
        (ToolStatus::Error, Some(error)) => ApiError::from(error).into_response(),
        _ => {
            let mut metadata = match serde_json::to_value(&result.metadata) {
                Ok(Value::Object(metadata)) => metadata,
                _ => serde_json::Map::new(),
            };
            metadata.remove("duration_ms");
            metadata.remove("attempts");
            Json(json!({
                "attempts": result.metadata.attempts,
                "duration_ms": result.metadata.duration_ms as f64,
                "metadata": metadata,
                "output": result.output,
            }))
            .into_response()
        }
    }
}

/// Resumes a suspended call with an approver's decision and answers with its result. The
/// decision holds even if the approver goes away before the answer: the call runs and is
/// recorded all the same (see [`settle`]). The approver's deadline (`x-toolgate-timeout-ms`,
/// or `server.request_timeout`) bounds only how long they wait for the answer: a call still
/// running then is answered 202 `running` ([`still_running`]) and goes on under its own
/// deadline. A resumed call still running when the shutdown grace ends is cancelled; its
/// result is an error with code `shutting_down`. One its caller withdraws while it runs
/// (MCP `tasks/cancel`, on any replica) is stopped within [`WITHDRAWAL_CHECKED_EVERY`]
/// and answered 409 `withdrawn`.
pub async fn resume(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(query): Query<ResumeQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if !caller.gateway.may_approve(&caller.user) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_an_approver",
            "only users with an approver role (`policies.approval.approver_roles`) may resume calls",
        ));
    }
    // Checked before the decision is taken: a bad format must not use up the call.
    let format = query.format.as_deref().unwrap_or("toolgate");
    if !RESUME_FORMATS.contains(&format) {
        return Err(super::invoke::unknown_format(
            format,
            "toolgate, openai, anthropic or gemini",
        ));
    }
    // So is a bad `x-toolgate-timeout-ms`. It bounds the approver's wait for the answer,
    // never the call they decide (see `settle`).
    let answer_within = request_timeout(&caller.gateway, &headers)?;
    let decision = json_body::<Decision>(body)?;
    if let Decision::Approve {
        reason: Some(reason),
    }
    | Decision::Reject {
        reason: Some(reason),
    } = &decision
    {
        check_reason(reason)?;
    }
    // Four eyes: whoever made the call may withdraw it, not wave it through. Checked
    // before anything runs, so the call keeps waiting for another approver. By the user
    // id alone, in any tenant: one person signed in to another organization keeps their
    // subject, and must not approve their own call from there.
    let saved = waiting(&caller, &id).await?;
    if !(caller.gateway).may_approve_in(&caller.user, &saved.user.tenant) {
        return Err(not_found(&id));
    }
    let settles = !matches!(decision, Decision::Reject { .. });
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
    // The call runs as its caller is now: demoted while it waited, they are authorized
    // as what they are; gone from `users:`, it cannot run at all.
    let caller_now = if settles {
        let now = caller.gateway.caller_now(&saved.user).ok_or_else(|| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "caller_removed",
                format!(
                    "{}, who made this call, is no longer among this gateway's users (a user id counts in its tenant: one moved to another tenant is someone else), so the call cannot run as them: reject it instead; the call keeps waiting",
                    saved.user.named()
                ),
            )
        })?;
        Some(now)
    } else {
        None
    };
    let mut approval_reason = None;
    let decision_name = decision.name();
    let told_running = still_running(&id, &saved, decision_name);
    // A rejection ends the call at once and runs nothing; the others may run long, and
    // keep a running record meanwhile, which goes if their decision panics.
    let running = settles.then(|| running_record_of(&caller, &id, &saved, decision_name));
    let if_it_panics = end_abandoned(&caller, &state.drain, &id, &saved, running.as_ref());
    let decision = match decision {
        Decision::ApproveRetry => {
            let approved = {
                let (id, drain) = (id.clone(), state.drain.clone());
                async move { approve_retry(&caller, &drain, &id, &saved, running).await }
            };
            let drain = &state.drain;
            return settle(
                drain,
                &id,
                answer_within,
                told_running,
                approved,
                if_it_panics,
            )
            .await;
        }
        Decision::Approve { reason } => {
            approval_reason = reason.filter(|r| !r.trim().is_empty());
            ResumeDecision::Approve
        }
        Decision::Reject { reason } => ResumeDecision::Reject {
            reason: reason.unwrap_or_else(|| format!("rejected by {}", caller.user.id)),
        },
        Decision::Complete { output } => ResumeDecision::Complete { output },
    };
    let mut told = DecisionSummary::of(&decision, &caller.user);
    let mut options = ResumeOptions::new();
    if let Some(user) = caller_now {
        options = options.user(user);
    }
    if let Some(reason) = approval_reason {
        options = options.reason(reason.clone());
        told.reason = Some(reason);
    }
    // The call is its caller's, and runs under the bound of a call, counted from when it
    // runs: the gateway's deadline for a call (`server.request_timeout`, the most any
    // request may ask for) and `policies.timeouts` for the tool, which start as the tool
    // does. Not the approver's deadline, which bounds their wait for the answer only; and
    // not what was left of the caller's own `x-toolgate-timeout-ms` either: that bounded
    // their request, answered with 202 when the call began to wait (and is not kept with
    // it), and a budget spent waiting for a person would leave an approved call no time
    // to run. Neither connection bounds it (see `settle`).
    let options = options
        .decided_by(&*caller.user)
        .timeout(caller.gateway.config.server.request_timeout);
    // Cancelled by the drain's cut, and by the call's caller withdrawing it as it runs.
    let stop = state.drain.call_token();
    let decided = {
        let (id, drain, format) = (id.clone(), state.drain.clone(), format.to_owned());
        async move {
            let resumption = Resumption {
                decision,
                options,
                told,
                running,
                stop,
            };
            let result = decide(&caller, &id, &saved, resumption, &drain).await?;
            Ok(answer(&format, &result))
        }
    };
    let drain = &state.drain;
    settle(
        drain,
        &id,
        answer_within,
        told_running,
        decided,
        if_it_panics,
    )
    .await
}

/// The answer to an approver whose deadline passed while the call they decided still runs
/// (or its decision is still being recorded): 202 `running`, with where its caller reads
/// its outcome. Not an error: the decision holds, and the call goes on to its end.
fn still_running(id: &str, saved: &SuspendedInvocation, decision: &str) -> Response {
    let shown = toolgate_core::error::shown_id(id);
    let what = format!("your decision `{decision}` is still being carried out");
    let body = with_tenant(
        &saved.user.tenant,
        json!({
            "status": crate::outcomes::RUNNING,
            "suspension_id": id,
            "tool": saved.tool,
            "user": saved.user.id,
            "decision": decision,
            "message": format!(
                "{what} past this request's deadline (`x-toolgate-timeout-ms`, or `server.request_timeout`), and goes on: a call it took runs to its end under its own deadline and is recorded as usual. Read the call's state with `GET /v1/suspensions/{shown}`: `running`, then its outcome — or still `waiting` if the decision did not take it (another approver decided first, or the call changed since it began to wait)"
            ),
        }),
    );
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// Settles the decision on the waiting call `id` in a task of its own, and answers with
/// what it answers — or with `running` when that takes longer than `answer_within`, the
/// approver's deadline: it bounds their wait, not the decision, which goes on to its end.
/// A decision that panics is answered with an internal error, and runs `if_it_panics`
/// first, in its task: what it kept must not outlive it ([`end_abandoned`]).
///
/// Taking the call out of the store is the point of no return: from there on, the call
/// must run to its end and be recorded — the log line, the decided history, the webhook,
/// the outcome kept for its caller. Hyper drops a request's future when its client goes
/// away, so run inside the request, an approver who disconnected would cancel the call
/// and lose every trace of it. The task is counted by the drain as a call in flight, so
/// that a shutdown waits for it, and the end of the grace cancels it (through the call's
/// cancellation token), as it does every other call.
async fn settle(
    drain: &Drain,
    id: &str,
    answer_within: std::time::Duration,
    running: Response,
    decision: impl Future<Output = Result<Response, ApiError>> + Send + 'static,
    if_it_panics: impl Future<Output = ()> + Send + 'static,
) -> Result<Response, ApiError> {
    let in_flight = drain.hand_off();
    let settling = tokio::spawn(
        async move {
            let _in_flight = in_flight;
            match AssertUnwindSafe(decision).catch_unwind().await {
                Ok(answer) => answer,
                Err(panic) => {
                    if_it_panics.await;
                    std::panic::resume_unwind(panic)
                }
            }
        }
        .instrument(tracing::Span::current()),
    );
    // Past the deadline the task is let go of, not aborted: it runs on, counted by the drain.
    let Ok(settled) = tokio::time::timeout(answer_within, settling).await else {
        tracing::info!(suspension_id = %id, "the approver's deadline passed before the decided call ended: they are told it runs, and it goes on");
        return Ok(running);
    };
    settled.unwrap_or_else(|error| {
        // Not the panic's message, which may quote the call's input.
        tracing::error!(suspension_id = %id, panicked = error.is_panic(), "deciding a waiting call failed unexpectedly; the failure was contained");
        let shown = toolgate_core::error::shown_id(id);
        Err(ApiError::from(&ToolError::internal(format!(
            "deciding the call `{shown}` failed unexpectedly (the gateway logged why): it no longer waits, and may or may not have run; read what was kept of its outcome with `GET /v1/suspensions/{shown}`"
        ))))
    })
}

/// A decision to carry out on a waiting call ([`decide`]).
struct Resumption {
    decision: ResumeDecision,
    options: ResumeOptions,
    /// What the webhook and the decided history are told.
    told: DecisionSummary,
    /// The running record the decision keeps as it takes the call, if it keeps one (a
    /// rejection does not: it runs nothing).
    running: Option<RunningRecord>,
    /// The call's cancellation token, which `decide` puts in `options`: cancelled when
    /// its caller withdraws it while it runs ([`stop_when_withdrawn`]), and by the drain.
    stop: CancellationToken,
}

/// Resumes the waiting call `id` as `resumption` says, and records it: the decided log line,
/// the decided history, the `decided` webhook and the outcome kept for the caller. The
/// running record, if the decision keeps one, is kept by the take itself
/// ([`SuspensionStore::take_running`]): a decision that does not take the call keeps none.
///
/// [`SuspensionStore::take_running`]: toolgate_core::suspension::SuspensionStore::take_running
///
/// A call its caller withdraws while it runs (MCP `tasks/cancel`) is stopped
/// ([`stop_when_withdrawn`]) and its end is not kept over the withdrawal: the approver is
/// answered 409 `withdrawn`, and the decided history says `withdrawn`.
async fn decide(
    caller: &Caller,
    id: &str,
    saved: &SuspendedInvocation,
    resumption: Resumption,
    drain: &Drain,
) -> Result<ToolResult, ApiError> {
    let Resumption {
        decision,
        options,
        told,
        running,
        stop,
    } = resumption;
    let mut options = options.cancellation(stop.clone());
    let keeps_running = running.is_some();
    // A rejection's take keeps the rejection itself, so that its caller reads it from the
    // take on, never an unknown call before its outcome below is kept.
    let kept_at_take = match (running, &decision) {
        (Some(running), _) => Some(running),
        (None, ResumeDecision::Reject { reason }) => Some(rejection_at_take(id, saved, reason)),
        (None, _) => None,
    };
    if let Some(kept) = kept_at_take {
        options = options.running(kept);
    }
    let resuming = caller.gateway.system.resume(id, decision, options);
    let resumed = match keeps_running {
        true => stop_when_withdrawn(caller, id, &stop, resuming).await,
        false => resuming.await,
    };
    let mut result = resumed.map_err(|e| match e {
        ResumeError::UnknownSuspension { id } => not_found(&id),
        // Only approvers resume, and they may see every call: 410 tells them nothing.
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
    // A decision that did not take the call (its approval is bound to a definition that
    // changed since, say) leaves it waiting: nothing was decided, so nothing is recorded,
    // told or kept as its outcome — a caller reading it would drop a call another
    // approver can still decide.
    if let (ToolStatus::Error, Some(error)) = (&result.status, &result.error)
        && still_waits(caller, id).await
    {
        return Err(ApiError::from(error));
    }
    drain.explain_result(&mut result);
    // Kept for the caller, who fetches it with `GET /v1/suspensions/{id}` or over MCP —
    // unless they withdrew the call while it ran.
    let kept = outcome_of(id, saved, serde_json::to_value(&result));
    let withdrawn = match keeps_running {
        true => !keep_end(caller, drain, kept).await,
        false => {
            keep_outcome(caller, drain, kept).await;
            false
        }
    };
    if withdrawn {
        tracing::info!(
            suspension_id = %id,
            tool = %saved.tool,
            user = %saved.user.id,
            approver = %caller.user.id,
            decision = told.decision,
            status = result.status.as_str(),
            "a decided call was withdrawn by its caller while it ran"
        );
        remember(caller, saved, &told, "withdrawn").await;
        caller.gateway.notifications.decided(saved, told);
        return Err(withdrawn_while_running(id, saved, &result));
    }
    tracing::info!(
        suspension_id = %id,
        tool = %saved.tool,
        user = %saved.user.id,
        approver = %caller.user.id,
        decision = told.decision,
        reason = told.reason.as_deref().unwrap_or(""),
        status = result.status.as_str(),
        "a waiting call was decided"
    );
    remember(
        caller,
        saved,
        &told,
        match result.status {
            ToolStatus::Error => "error",
            ToolStatus::Suspended => "suspended",
            _ => "success",
        },
    )
    .await;
    caller.gateway.notifications.decided(saved, told);
    Ok(result)
}

/// How often a call an approver decided looks, while it runs, whether its caller withdrew
/// it: a withdrawal on any replica stops the call within this, and the store's answer.
pub const WITHDRAWAL_CHECKED_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `run`, the decided call `id`, looking every [`WITHDRAWAL_CHECKED_EVERY`] at what
/// is kept as its outcome: once that is no longer a running record, its caller withdrew it
/// (on this replica or another: a withdrawal is kept in the shared store, the only place
/// both see), and `stop`, the call's cancellation token, is cancelled — the tool is
/// cancelled as when a caller disconnects, and the call ends through its tail of hooks
/// and audit. One read of one key a second per running call; a read that fails is tried
/// again at the next look.
async fn stop_when_withdrawn<T>(
    caller: &Caller,
    id: &str,
    stop: &CancellationToken,
    run: impl Future<Output = T>,
) -> T {
    let watch = async {
        loop {
            tokio::time::sleep(WITHDRAWAL_CHECKED_EVERY).await;
            match caller.gateway.suspensions.outcome(id).await {
                Ok(Some(kept)) if !is_running_record(&kept.result) => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(suspension_id = %id, %error, "whether a running call was withdrawn could not be read; looked at again shortly");
                }
            }
        }
    };
    tokio::pin!(run);
    tokio::select! {
        ended = &mut run => ended,
        () = watch => {
            tracing::info!(suspension_id = %id, "the caller withdrew a decided call while it ran: it is stopped");
            stop.cancel();
            run.await
        }
    }
}

/// The approver's answer for the call `id` its caller withdrew while it ran, which ended
/// with `result`: 409 `withdrawn`, saying whether the tool was stopped or ended first.
fn withdrawn_while_running(id: &str, saved: &SuspendedInvocation, result: &ToolResult) -> ApiError {
    let stopped = result
        .error
        .as_ref()
        .is_some_and(|error| error.code == ToolError::Cancelled.code());
    let ended = if stopped {
        format!("`{}` was stopped", saved.tool)
    } else {
        format!("`{}` ended before the stop reached it", saved.tool)
    };
    ApiError::new(
        StatusCode::CONFLICT,
        "withdrawn",
        format!(
            "{}, who made the call `{}`, withdrew it while it ran after your decision: {ended}, and its caller reads it as withdrawn; nothing more is needed",
            saved.user.named(),
            toolgate_core::error::shown_id(id)
        ),
    )
}

/// Approves the waiting call `id` for its caller to make again. The approver is answered
/// with what the approval holds for; the caller, who reads the outcome, is told to call
/// again with the same arguments. Run by [`settle`], like every decision; `running` is
/// the running record the approval keeps as it takes the call (and removes if the call
/// goes back to wait).
async fn approve_retry(
    caller: &Caller,
    drain: &Drain,
    id: &str,
    saved: &SuspendedInvocation,
    running: Option<RunningRecord>,
) -> Result<Response, ApiError> {
    let pipeline = caller.gateway.system.pipeline();
    let approver = Some(CallerId::of(&caller.user));
    let approved = match running {
        Some(running) => pipeline.approve_retry_running(id, approver, running).await,
        None => pipeline.approve_retry(id, approver).await,
    };
    let approval = approved.map_err(|error| ApiError::from(&error))?;
    let within = approval
        .expires_at
        .duration_since(approval.decided_at)
        .unwrap_or_default();
    tracing::info!(
        suspension_id = %id,
        tool = %saved.tool,
        user = %saved.user.id,
        approver = %caller.user.id,
        decision = "approve_retry",
        "a waiting call was decided"
    );
    let told = DecisionSummary::by("approve_retry", &caller.user, None);
    remember(caller, saved, &told, "approved_for_retry").await;
    caller.gateway.notifications.decided(saved, told);
    let told = ToolError::abort(
        format!(
            "`{}` was approved by `{}` to run once when you make the same call again, with the same arguments, within {}: call it again now",
            saved.tool,
            caller.user.id,
            humantime::format_duration(within)
        ),
        "approved_for_retry",
        409,
    );
    let result = ToolResult::error(id, &saved.tool, &told);
    // Over the running record only, as every end of a call that was taken: a caller who
    // withdrew the call meanwhile (MCP `tasks/cancel`) keeps reading it as withdrawn.
    let kept = outcome_of(id, saved, serde_json::to_value(result));
    if !keep_end(caller, drain, kept).await {
        tracing::info!(suspension_id = %id, "the caller withdrew a call while it was approved for a retry: its outcome stays withdrawn");
    }
    Ok(Json(json!({
        "status": "approved_for_retry",
        "suspension_id": id,
        "tool": saved.tool,
        "user": saved.user.id,
        "expires_at": humantime::format_rfc3339_seconds(approval.expires_at).to_string(),
    }))
    .into_response())
}

/// Adds a decision to the decided history the console shows.
async fn remember(
    caller: &Caller,
    saved: &SuspendedInvocation,
    told: &DecisionSummary,
    outcome: &str,
) {
    let decided = Decided {
        id: saved.id.clone(),
        tool: saved.tool.clone(),
        user: saved.user.id.clone(),
        tenant: saved.user.tenant.clone(),
        decided_by: told.decided_by.clone(),
        decided_by_tenant: told.decided_by_tenant.clone(),
        decision: told.decision.to_owned(),
        reason: told.reason.clone(),
        decided_at: rfc3339(std::time::SystemTime::now()),
        outcome: outcome.to_owned(),
    };
    caller.gateway.history.record(decided).await;
}

/// The running record ([`crate::outcomes`]) that the decision `decision` on the call `id`
/// keeps as it takes the call, with a new token of its own: from the moment the call leaves
/// the waiting calls until its outcome replaces the record, its caller reads that it runs,
/// who decided, and until when (the deadline of an approved call,
/// `server.request_timeout`), rather than that it is unknown.
///
/// The take keeps it, in the same step of the store
/// ([`SuspensionStore::take_running`]): of two approvers deciding at once, only the one
/// whose take wins keeps a record, so the caller reads the decision that runs their call;
/// the loser keeps nothing, and never writes over the outcome of a decision that took the
/// call first (a rejection, kept at once).
///
/// [`SuspensionStore::take_running`]: toolgate_core::suspension::SuspensionStore::take_running
fn running_record_of(
    caller: &Caller,
    id: &str,
    saved: &SuspendedInvocation,
    decision: &str,
) -> RunningRecord {
    let mut record = running_record(
        id,
        &saved.user,
        &saved.tool,
        decision,
        &caller.user.id,
        std::time::SystemTime::now(),
        caller.gateway.config.server.request_timeout,
    )
    .with_suspended_at(saved.suspended_at);
    // What the call waited for, which the webhook of a withdrawal while it runs repeats.
    record.result["reason"] = Value::from(saved.reason.as_str());
    RunningRecord {
        record,
        token: decision_token(),
    }
}

/// What the decision on the call `id` that keeps `running` leaves if it panics: its
/// running record, if the take kept it and nothing has replaced it, is replaced by an
/// internal error as the call's outcome, so that its caller does not read it as running
/// until its deadline and then as lost. The record is removed by its token first, which
/// also tells that this decision took the call: one that panicked before its take leaves
/// the call waiting, and nothing is kept. An end kept already (the caller's withdrawal)
/// stays. Failing is logged.
fn end_abandoned(
    caller: &Caller,
    drain: &Drain,
    id: &str,
    saved: &SuspendedInvocation,
    running: Option<&RunningRecord>,
) -> impl Future<Output = ()> + Send + 'static {
    let token = running.map(|running| running.token.clone());
    let (caller, drain) = (caller.clone(), drain.clone());
    let (id, saved) = (id.to_owned(), saved.clone());
    async move {
        let Some(token) = token else { return };
        match caller.gateway.suspensions.remove_running(&id, &token).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(suspension_id = %id, %error, "the running record of a decision that failed unexpectedly could not be removed: its caller reads the call as running until its deadline");
                return;
            }
        }
        let shown = toolgate_core::error::shown_id(&id);
        let failed = ToolError::internal(format!(
            "deciding the call `{shown}` failed unexpectedly after it was taken (the gateway logged why): it may or may not have run; make the call again if it is still needed"
        ));
        let result = ToolResult::error(&id, &saved.tool, &failed);
        keep_end(
            &caller,
            &drain,
            outcome_of(&id, &saved, serde_json::to_value(result)),
        )
        .await;
    }
}

/// Keeps the end of the decided call `id`, which ran, for its caller: over its running
/// record, whichever decision kept it, but not over its caller's withdrawal
/// ([`SuspensionStore::keep_outcome_over_running`]). `false` when the caller withdrew the
/// call. A record that reads as running though the store took it for an outcome (one
/// kept by an earlier version, unmarked) is replaced as before. When the store fails, the
/// end is kept again in the background ([`keep_again`]), the same way, and this answers
/// `true` at once: the approver's answer does not wait for the store to come back.
///
/// [`SuspensionStore::keep_outcome_over_running`]: toolgate_core::suspension::SuspensionStore::keep_outcome_over_running
async fn keep_end(caller: &Caller, drain: &Drain, outcome: DecidedCall) -> bool {
    let store = caller.gateway.suspensions.clone();
    let failure = match keep_end_once(&*store, &outcome).await {
        Ok(kept) => return kept,
        Err(failure) => failure,
    };
    let id = outcome.id.clone();
    keep_again(drain, &id, failure, move || {
        let (store, outcome) = (store.clone(), outcome.clone());
        async move {
            if !keep_end_once(&*store, &outcome).await? {
                tracing::info!(suspension_id = %outcome.id, "the caller withdrew a decided call before its end could be kept: its outcome stays withdrawn");
            }
            Ok(())
        }
    });
    true
}

/// One try of [`keep_end`]: `Ok(false)` when the caller withdrew the call.
async fn keep_end_once(
    store: &dyn SuspensionStore,
    outcome: &DecidedCall,
) -> Result<bool, SuspensionStoreError> {
    if store.keep_outcome_over_running(outcome.clone()).await? {
        return Ok(true);
    }
    match store.outcome(&outcome.id).await? {
        Some(kept) if is_running_record(&kept.result) => {
            store.keep_outcome(outcome.clone()).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// For how long an outcome the store failed to keep is tried again, from the first
/// failure: [`LOST_AFTER`], the grace a running record is believed past its deadline. A
/// call's end comes by its deadline (plus its tail), so this reaches about as far as the
/// caller reads the call as running; an outcome kept later would only come after they were
/// told it was lost.
pub const KEPT_AGAIN_WITHIN: std::time::Duration = LOST_AFTER;

/// The pause before the first try again of an outcome the store failed to keep; each
/// next pause is twice the last, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// The longest pause between two tries of an outcome the store failed to keep.
const LONGEST_PAUSE: std::time::Duration = std::time::Duration::from_secs(10);

/// Tries `keep`, which keeps the outcome of the decided call `id` and failed with `failure`,
/// again in a task of its own until it succeeds: after [`FIRST_PAUSE`], then pauses twice as
/// long each time (up to [`LONGEST_PAUSE`]), the last try at [`KEPT_AGAIN_WITHIN`] — a
/// dozen tries in all. Giving up is logged as an error: its caller reads the call as running
/// until its deadline, then as lost (`outcome_lost`).
///
/// Like the decision that hands it over, the task is counted by the drain as a call in
/// flight: a shutdown waits for it during its grace, and the cut (the end of the grace)
/// stops it — an outcome not kept by then is given up, and logged so.
fn keep_again<Keep, Kept>(drain: &Drain, id: &str, failure: SuspensionStoreError, keep: Keep)
where
    Keep: Fn() -> Kept + Send + 'static,
    Kept: Future<Output = Result<(), SuspensionStoreError>> + Send,
{
    tracing::warn!(suspension_id = %id, error = %failure, "the outcome of a decided call could not be kept: it is tried again in the background");
    let (in_flight, cut, id) = (drain.hand_off(), drain.call_token(), id.to_owned());
    let given_up_at = tokio::time::Instant::now() + KEPT_AGAIN_WITHIN;
    tokio::spawn(
        async move {
            let _in_flight = in_flight;
            let (mut pause, mut failure, mut tries) = (FIRST_PAUSE, failure, 1u32);
            loop {
                let now = tokio::time::Instant::now();
                if now >= given_up_at {
                    tracing::error!(suspension_id = %id, error = %failure, tries, "the outcome of a decided call could not be kept, even when tried again: its caller reads the call as running until its deadline, then as lost");
                    return;
                }
                let trying = keep();
                let tried = async {
                    tokio::time::sleep_until((now + pause).min(given_up_at)).await;
                    trying.await
                };
                let tried = tokio::select! {
                    tried = tried => tried,
                    () = cut.cancelled() => {
                        tracing::error!(suspension_id = %id, error = %failure, tries, "the gateway shut down before the outcome of a decided call could be kept: its caller reads the call as running until its deadline, then as lost");
                        return;
                    }
                };
                tries += 1;
                match tried {
                    Ok(()) => {
                        tracing::info!(suspension_id = %id, tries, "the outcome of a decided call was kept when tried again");
                        return;
                    }
                    Err(again) => failure = again,
                }
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
        }
        .instrument(tracing::Span::current()),
    );
}

/// The outcome of the decided call `id`, `saved` as it waited, that ended with `result`.
fn outcome_of(
    id: &str,
    saved: &SuspendedInvocation,
    result: serde_json::Result<Value>,
) -> DecidedCall {
    DecidedCall::new(id, &saved.user, result.unwrap_or(Value::Null))
        .with_suspended_at(saved.suspended_at)
}

/// What a rejection of the call `id`, `saved` as it waited, keeps as it takes the call
/// ([`SuspensionStore::take_running`]): the rejection as its caller will read it, replaced
/// by the outcome the rejection then keeps ([`keep_outcome`]).
///
/// [`SuspensionStore::take_running`]: toolgate_core::suspension::SuspensionStore::take_running
fn rejection_at_take(id: &str, saved: &SuspendedInvocation, reason: &str) -> RunningRecord {
    let rejected = ToolError::abort(reason, "rejected", 403);
    let result = ToolResult::error(id, &saved.tool, &rejected);
    RunningRecord {
        record: outcome_of(id, saved, serde_json::to_value(result)),
        token: decision_token(),
    }
}

/// Keeps `outcome`, of a decided call, for its caller, over any running record. The
/// decision stands if it cannot be kept: it is kept again in the background
/// ([`keep_again`]), the same way, and the caller's look-up answers what the take kept
/// meanwhile.
async fn keep_outcome(caller: &Caller, drain: &Drain, outcome: DecidedCall) {
    let store = caller.gateway.suspensions.clone();
    let failure = match store.keep_outcome(outcome.clone()).await {
        Ok(()) => return,
        Err(failure) => failure,
    };
    let id = outcome.id.clone();
    keep_again(drain, &id, failure, move || {
        let (store, outcome) = (store.clone(), outcome.clone());
        async move { store.keep_outcome(outcome).await }
    });
}

#[cfg(test)]
mod races;

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

    use tokio::sync::oneshot;

    use super::*;

    /// A decision that ends once released, and notes that it ran to its end.
    fn held_decision() -> (
        oneshot::Sender<()>,
        Arc<AtomicBool>,
        impl Future<Output = Result<Response, ApiError>> + Send + 'static,
    ) {
        let (release, released) = oneshot::channel::<()>();
        let recorded = Arc::new(AtomicBool::new(false));
        let decision = {
            let recorded = recorded.clone();
            async move {
                let _ = released.await;
                recorded.store(true, SeqCst);
                Ok(StatusCode::OK.into_response())
            }
        };
        (release, recorded, decision)
    }

    #[tokio::test]
    async fn a_decision_settles_though_its_request_is_dropped_and_the_drain_waits_for_it() {
        let drain = Drain::new();
        let (release, recorded, decision) = held_decision();
        let request = tokio::spawn({
            let drain = drain.clone();
            async move {
                let wait = std::time::Duration::from_secs(60);
                let running = StatusCode::ACCEPTED.into_response();
                settle(&drain, "s-1", wait, running, decision, async {})
                    .await
                    .map(|_| ())
            }
        });
        tokio::task::yield_now().await;
        assert_eq!(drain.calls_in_flight(), 1, "the decision is counted");

        // The approver goes away: the request's future is dropped.
        request.abort();
        assert!(request.await.unwrap_err().is_cancelled());
        drain.start();
        release.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), drain.calls_finished())
            .await
            .expect("the drain ends when the decision does");
        assert!(recorded.load(SeqCst), "the decision ran to its end");
    }

    #[tokio::test]
    async fn past_the_approvers_deadline_they_are_told_it_runs_and_the_decision_goes_on() {
        let drain = Drain::new();
        let (release, recorded, decision) = held_decision();
        let wait = std::time::Duration::from_millis(20);
        let running = StatusCode::ACCEPTED.into_response();

        let answer = settle(&drain, "s-1", wait, running, decision, async {}).await;

        let answer = answer.unwrap_or_else(|_| panic!("answered with an error"));
        assert_eq!(answer.status(), StatusCode::ACCEPTED, "told it runs");
        assert_eq!(drain.calls_in_flight(), 1, "the decision still runs");
        drain.start();
        release.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), drain.calls_finished())
            .await
            .expect("the drain ends when the decision does");
        assert!(recorded.load(SeqCst), "the decision ran to its end");
    }

    #[tokio::test]
    async fn a_decision_that_panics_is_answered_with_an_internal_error_not_its_message() {
        let drain = Drain::new();
        let panicking = async { panic!("index out of bounds: the secret is 42") };
        let wait = std::time::Duration::from_secs(60);
        let running = StatusCode::ACCEPTED.into_response();
        let answer = (settle(&drain, "s-1", wait, running, panicking, async {}).await).unwrap_err();
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.code(), "internal");
        let message = &answer.body().message;
        assert!(message.contains("GET /v1/suspensions/s-1"), "{message}");
        assert!(!message.contains("secret"), "{message}");
        assert_eq!(drain.calls_in_flight(), 0);
    }
}
