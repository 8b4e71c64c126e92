//! The outcomes of calls that waited for approval, kept for the callers who made them.
//!
//! A call that needs approval answers its caller at once — with its suspension id — and
//! is decided later by an approver. The approver gets the result of the resumed call; the
//! caller fetches it with `GET /v1/suspensions/{id}` or, over MCP, the tool
//! [`OUTCOME_TOOL`]. Outcomes live in the suspension store
//! ([`SuspensionStore::keep_outcome`]), so that with `state:` on Redis any replica answers
//! for a call decided on another: each is kept for the suspension expiry of
//! `policies.approval` (24 h by default), at most `max_pending` of them (the oldest go
//! first), and only its caller (or an approver) may read it.
//!
//! Between the decision and the call's end — an approved call may run for minutes — the
//! call is no longer waiting and has no outcome yet. So that it is not taken for unknown
//! then (a client polling `tasks/get` would drop a call that runs), a [running
//! record](running_record) is kept as its outcome until the real one replaces it. The
//! record carries the call's deadline: one still there [`LOST_AFTER`] past it outlived
//! the gateway that ran the call — or the gateway could not keep the call's end in the
//! store, though it tried again for as long —, and is read as the call's end in error
//! ([`OUTCOME_LOST`]), never as running forever.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use toolgate_agent::ToolResult;
use toolgate_core::error::InputViolations;
use toolgate_core::suspension::DecidedCall;
use toolgate_core::suspension::{SuspensionStore, SuspensionStoreError};
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolAnnotations, ToolDefinition, ToolSource};
use toolgate_core::{ToolError, ToolInvokeContext, User};
use toolgate_hooks::cache::NO_CACHE_TAG;

/// The name of the tool that fetches an outcome over MCP (and `/v1`).
pub const OUTCOME_TOOL: &str = "toolgate.outcome";

/// `toolgate.outcome`: the outcome of one of the caller's calls that waited for approval.
pub(crate) struct OutcomeTool {
    suspensions: Arc<dyn SuspensionStore>,
}

impl OutcomeTool {
    pub(crate) fn new(suspensions: Arc<dyn SuspensionStore>) -> Self {
        OutcomeTool { suspensions }
    }
}

impl ErasedTool for OutcomeTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: OUTCOME_TOOL.to_owned(),
            title: Some("Outcome of a call that waited for approval".to_owned()),
            description: "The outcome of one of your calls that waited for a person's approval, by the suspension id it answered with: `waiting` while nobody has decided, `running` once it was approved until it ends, else the call's result.".to_owned(),
            version: "1".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "id": { "type": "string", "description": "The suspension id." } },
                "required": ["id"],
                "additionalProperties": false,
            }),
            output_schema: None,
            annotations: ToolAnnotations::READ_ONLY,
            // Read-only, yet what it answers changes when an approver decides: a cached
            // `waiting` would hide the outcome for the whole TTL.
            tags: vec!["toolgate".to_owned(), NO_CACHE_TAG.to_owned()],
            source: ToolSource::Local,
        }
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        match input.get("id") {
            Some(Value::String(_)) => Ok(None),
            _ => Err(ToolError::InvalidInput(InputViolations::one(
                "id",
                "the suspension id, a string, is required",
            ))),
        }
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let id = ctx.input()["id"].as_str().unwrap_or_default();
            let unknown = || ToolError::UnknownSuspension { id: id.to_owned() };
            let decided = self.suspensions.outcome(id).await?;
            let mut running = None;
            if let Some(outcome) = decided {
                if !outcome.is_for(ctx.user()) {
                    return Err(unknown());
                }
                if !is_running_record(&outcome.result) {
                    return Ok(decided_answer(&outcome, &outcome.result));
                }
                // Kept as the decision began; a decision that did not take the call after
                // all leaves it waiting (or expired), which is what is answered then.
                running = Some(outcome);
            }
            let waiting = match self.suspensions.get(id).await {
                Ok(waiting) => waiting,
                // Only the caller who made it learns that a call expired: to anyone else
                // an expired id is as unknown as one never issued.
                Err(expired @ SuspensionStoreError::Expired { .. }) => {
                    return match self.suspensions.expired_owner(id).await {
                        Ok(Some(owner)) if owner.is_same_caller(ctx.user()) => Err(expired.into()),
                        _ => Err(unknown()),
                    };
                }
                Err(other) => return Err(other.into()),
            };
            match waiting {
                Some(waiting) if waiting.user.is_same_caller(ctx.user()) => Ok(json!({
                    "status": "waiting",
                    "reason": waiting.reason,
                    "suspended_at": humantime::format_rfc3339_seconds(waiting.suspended_at)
                        .to_string(),
                })),
                Some(_) => Err(unknown()),
                None => match running.as_ref().map(|r| (r, read(r, SystemTime::now()))) {
                    Some((kept, Kept::Running(record))) => {
                        Ok(with_suspended_at(kept, record.clone()))
                    }
                    Some((kept, Kept::Lost(result))) => Ok(decided_answer(kept, &result)),
                    Some((kept, Kept::Ended(result))) => Ok(decided_answer(kept, result)),
                    None => Err(unknown()),
                },
            }
        })
    }
}

/// What the outcome tool answers for the call `kept` is the outcome of, ended with
/// `result`: `decided`, with when the call began to wait when it was kept.
fn decided_answer(kept: &DecidedCall, result: &Value) -> Value {
    with_suspended_at(kept, json!({ "status": "decided", "result": result }))
}

/// `answer` with `suspended_at`, when the call began to wait, if `kept` says: what MCP
/// `tasks/get` answers as the task's `createdAt`. An outcome kept by an earlier version
/// does not say.
fn with_suspended_at(kept: &DecidedCall, mut answer: Value) -> Value {
    if let (Some(at), Some(fields)) = (kept.suspended_at, answer.as_object_mut()) {
        fields.insert("suspended_at".to_owned(), Value::from(rfc3339(at)));
    }
    answer
}

/// The `status` of a [running record](running_record): core's, which the MCP server's
/// tasks read too.
pub const RUNNING: &str = toolgate_core::suspension::RUNNING_STATUS;

/// The error code of a call whose running record outlived its deadline by [`LOST_AFTER`]:
/// it was decided and began, and no outcome was ever recorded — the gateway running it
/// stopped, or could not keep its end in the store, even when tried again. MCP `tasks/get`
/// answers its task `failed`.
pub const OUTCOME_LOST: &str = toolgate_core::suspension::OUTCOME_LOST;

/// How long past its deadline a running record is still believed: what the end of a
/// call takes after its deadline cuts it short (its tail of hooks and audit, the decided
/// history, keeping its outcome on a slow store — or on one that failed, tried again for
/// as long).
pub const LOST_AFTER: Duration = Duration::from_secs(60);

/// The longest bound a running record keeps as a deadline; a longer one (a
/// `request_timeout` of years) is kept as none, and such a record never reads as lost.
const LONGEST_BOUND: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The record kept as the outcome of the call `id` of `caller` from the moment
/// `decided_by` decides it (`decision`: `approve`, `complete`, `approve_retry`) until
/// its real outcome replaces it: the tool, who decided, since when it runs and the
/// deadline it runs under (`since` plus `bound`).
pub(crate) fn running_record(
    id: &str,
    caller: &User,
    tool: &str,
    decision: &str,
    decided_by: &str,
    since: SystemTime,
    bound: Duration,
) -> DecidedCall {
    let deadline = (bound <= LONGEST_BOUND)
        .then(|| since.checked_add(bound))
        .flatten()
        .map(rfc3339);
    DecidedCall {
        decided_at: since,
        ..DecidedCall::new(
            id,
            caller,
            json!({
                "status": RUNNING,
                "tool_name": tool,
                "decision": decision,
                "decided_by": decided_by,
                "running_since": rfc3339(since),
                "deadline": deadline,
            }),
        )
    }
}

/// Whether the kept result `result` is a [running record](running_record) rather than a
/// call's outcome.
pub(crate) fn is_running_record(result: &Value) -> bool {
    result["status"] == RUNNING
}

/// What a kept outcome says at `now`.
#[derive(Debug)]
pub(crate) enum Kept<'a> {
    /// The call was decided and runs: its running record.
    Running(&'a Value),
    /// The call's running record outlived its deadline: the error result it ended with.
    Lost(Value),
    /// The call ended: its result as kept.
    Ended(&'a Value),
}

/// What the kept outcome `kept` says at `now`: its result, or, for a running record,
/// that the call runs — or, [`LOST_AFTER`] past its deadline, that it ended in error
/// with [`OUTCOME_LOST`].
pub(crate) fn read(kept: &DecidedCall, now: SystemTime) -> Kept<'_> {
    let record = &kept.result;
    if !is_running_record(record) {
        return Kept::Ended(record);
    }
    let deadline = record["deadline"]
        .as_str()
        .and_then(|at| humantime::parse_rfc3339(at).ok());
    match deadline.and_then(|at| at.checked_add(LOST_AFTER)) {
        Some(given_up) if now > given_up => Kept::Lost(lost(&kept.id, record)),
        _ => Kept::Running(record),
    }
}

/// The error result of the call `id` whose running record `record` outlived its deadline.
fn lost(id: &str, record: &Value) -> Value {
    let text = |field: &str| record[field].as_str().unwrap_or("?").to_owned();
    let (tool, since, deadline) = (text("tool_name"), text("running_since"), text("deadline"));
    let began = match record["decision"].as_str() {
        Some("approve") | None => format!("the call was approved and began to run at {since}"),
        Some(decision) => format!("the decision `{decision}` on the call was taken at {since}"),
    };
    let error = ToolError::abort(
        format!(
            "{began}, but no outcome was recorded by its deadline ({deadline}): the gateway running it stopped, or could not record how it ended, so it may or may not have run to its end; run it again if it is still wanted and safe to repeat"
        ),
        OUTCOME_LOST,
        500,
    );
    serde_json::to_value(ToolResult::error(id, tool, &error)).unwrap_or(Value::Null)
}

/// An instant as RFC 3339 text, to the second.
fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn record(bound: Duration) -> (DecidedCall, SystemTime) {
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let bob = User::new("bob").with_tenant("acme");
        let kept = running_record("s-1", &bob, "sleep", "approve", "alice", since, bound);
        (kept, since)
    }

    #[test]
    fn a_running_record_reads_as_running_until_a_grace_past_its_deadline() {
        let (kept, since) = record(5 * MINUTE);
        assert!(kept.is_for(&User::new("bob").with_tenant("acme")));
        assert!(!kept.is_for(&User::new("bob")));
        let Kept::Running(said) = read(&kept, since + 6 * MINUTE) else {
            panic!("still within the grace");
        };
        assert_eq!(said["status"], "running");
        assert_eq!(said["tool_name"], "sleep");
        assert_eq!(said["decided_by"], "alice");
        assert_eq!(said["running_since"], "2027-01-15T08:00:00Z");
        assert_eq!(said["deadline"], "2027-01-15T08:05:00Z");
    }

    #[test]
    fn a_running_record_past_its_deadline_and_grace_reads_as_lost_in_words() {
        let (kept, since) = record(5 * MINUTE);
        let Kept::Lost(result) = read(&kept, since + 5 * MINUTE + LOST_AFTER + MINUTE) else {
            panic!("past the deadline and its grace, it is lost");
        };
        assert_eq!(result["status"], "error", "{result}");
        assert_eq!(result["tool_name"], "sleep", "{result}");
        assert_eq!(result["error"]["code"], OUTCOME_LOST, "{result}");
        let message = result["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("the call was approved and began to run at 2027-01-15T08:00:00Z")
                && message.contains("no outcome was recorded by its deadline")
                && message
                    .contains("the gateway running it stopped, or could not record how it ended")
                && message.contains("run it again if it is still wanted"),
            "{message}"
        );
    }

    #[test]
    fn a_kept_outcome_reads_as_itself_and_an_unbounded_record_never_as_lost() {
        let (_, since) = record(MINUTE);
        let ended = DecidedCall::new("s-2", &User::new("bob"), json!({"status": "success"}));
        assert!(
            matches!(read(&ended, since), Kept::Ended(result) if result["status"] == "success")
        );
        let (unbounded, since) = record(Duration::MAX);
        assert!(unbounded.result["deadline"].is_null());
        let years = Duration::from_secs(100 * 365 * 24 * 3600);
        assert!(matches!(read(&unbounded, since + years), Kept::Running(_)));
    }
}
