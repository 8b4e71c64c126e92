//! Calls that wait for approval as MCP tasks (the `io.modelcontextprotocol/tasks`
//! extension, SEP-2663), for callers that declare it.
//!
//! A server with an [`outcome_tool`](super::McpServer::outcome_tool) advertises the
//! extension. A `tools/call` of such a caller that waits for a person's approval answers a
//! task handle (`resultType: "task"`) whose id is the call's suspension id, status
//! `working` with the reason in `statusMessage`; `tasks/get` asks the outcome tool as the
//! caller and answers `working` while the call waits, then `completed` with the call's
//! own result (an error result for a rejection or an expiry). A call decided and still
//! running is `working` too, its status message saying who decided it; one whose outcome
//! was lost (the gateway running it stopped, or could not record how it ended: the outcome
//! tool answers the error code `outcome_lost`) is `failed`. Only the caller who made the
//! call sees its task. `tasks/cancel` withdraws a waiting call — it is rejected, as by an
//! approver, and its task is `cancelled` from then on — and a running one: its withdrawal
//! is kept over its running record, so that its task is `cancelled` from then on whatever
//! the call then answers, and the gateway running it stops it (within a second or two,
//! on whichever replica: see the gateway's suspensions API). Cancelling is eventually
//! consistent, as SEP-2663 allows: a call that ends before its withdrawal is kept stays
//! `completed`. For a task already ended, it is an empty acknowledgement.
//!
//! Reading a task is a call of the outcome tool, so the pipeline's policies apply to it:
//! when one refuses it (the authorization policy, a rate limit) or the store does not
//! answer, `tasks/get` says so ([`unreadable`]) — never that the task does not exist, which
//! would have the caller drop a call that still waits. Withdrawing is not a call of any
//! tool: a caller may always withdraw their own waiting call, which takes nothing from
//! anyone.

use std::time::{Duration, SystemTime};

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, ErrorData, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::Value;
// `RUNNING`: the `status` of a running record, which the gateway keeps as the outcome of
// a decided call while it runs (`toolgate_gateway::outcomes::RUNNING` is the same constant).
use toolgate_core::suspension::{
    DecidedCall, OUTCOME_LOST, RUNNING_STATUS as RUNNING, ResumeDecision, RunningRecord,
    SuspensionStore, SuspensionStoreError, decision_token,
};
use toolgate_core::{InvokeOptions, Pipeline, ToolError, User};

use super::{OnWithdrawal, Withdrawal, features};

/// How often a caller is asked to poll a waiting call: a person decides in minutes, not
/// milliseconds.
pub(super) const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// The task handle answered for a call that waits in suspension `id` for `reason`.
pub(super) fn created(id: &str, reason: &str) -> CreateTaskResult {
    let now = rfc3339(SystemTime::now());
    CreateTaskResult::new(
        Task::new(id, TaskStatus::Working, now.clone(), now)
            .with_status_message(waiting_message(reason))
            .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64),
    )
}

/// The task of suspension `id` from the outcome tool's answer `outcome` (`waiting`, with
/// `reason`, `suspended_at` and `expires_at` when known; `running`, with `decided_by`
/// and `running_since`; `decided`), or the result it was decided with, `result`. The
/// task was created when the call began to wait: `suspended_at`, which the outcome tool
/// answers for a call decided too when its outcome says (not one kept by an earlier
/// version); else since when it runs, else now.
pub(super) fn detailed(id: &str, outcome: &Value, result: Option<CallToolResult>) -> DetailedTask {
    let now = rfc3339(SystemTime::now());
    let created = outcome["suspended_at"]
        .as_str()
        .or_else(|| outcome["running_since"].as_str())
        .map_or_else(|| now.clone(), str::to_owned);
    let mut task = Task::new(id, TaskStatus::Working, created, now);
    let error = &outcome["result"]["error"];
    let payload = match result {
        // Not the call's result: it never ended as far as anyone recorded.
        Some(_) if error["code"] == OUTCOME_LOST => {
            let message = error["message"].as_str().unwrap_or_default();
            task = task.with_status_message(message);
            let mut error = JsonObject::new();
            error.insert("code".to_owned(), Value::from(-32603));
            error.insert("message".to_owned(), Value::from(message));
            error.insert(
                "data".to_owned(),
                serde_json::json!({ "code": OUTCOME_LOST }),
            );
            TaskPayload::Failed { error }
        }
        Some(result) => TaskPayload::Completed {
            result: as_object(&result),
        },
        None => {
            let message = if outcome["status"] == RUNNING {
                running_message(outcome)
            } else {
                waiting_message(outcome["reason"].as_str().unwrap_or_default())
            };
            task = task
                .with_status_message(message)
                .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64);
            TaskPayload::Working
        }
    };
    DetailedTask::new(task, payload)
}

/// The status message of a call decided and still running: "approved by `alice`;
/// running since …".
fn running_message(outcome: &Value) -> String {
    let by =
        toolgate_core::error::shown_id(outcome["decided_by"].as_str().unwrap_or("?")).into_owned();
    let decided = match outcome["decision"].as_str() {
        Some("approve") | None => format!("approved by `{by}`"),
        Some(decision) => format!("decided by `{by}` (`{decision}`)"),
    };
    match outcome["running_since"].as_str() {
        Some(since) => format!("{decided}; running since {since}"),
        None => format!("{decided}; running"),
    }
}

/// The code of the outcome of a call its caller withdrew.
const WITHDRAWN: &str = "withdrawn";

/// `tasks/cancel` of task `id` by `user`: their waiting call is rejected and its outcome
/// kept as withdrawn; a call of theirs decided and running is withdrawn as it runs
/// ([`withdraw_running`]); one that ended is left as it is (the cancel is acknowledged, as
/// for any ended task).
///
/// # Errors
///
/// `invalid params` for an id that is not one of `user`'s calls; `internal error` when the
/// store fails.
pub(super) async fn withdraw(
    pipeline: &Pipeline,
    id: &str,
    user: &User,
    told: Option<&OnWithdrawal>,
) -> Result<(), ErrorData> {
    let store = pipeline.suspension_store();
    let failed = |e: SuspensionStoreError| store_failed(&e);
    let waiting = match pipeline.suspended(id).await {
        Ok(waiting) => waiting,
        // Ended by its expiry: nothing left to cancel — for its caller. To anyone else it
        // is as unknown as it was while it waited.
        Err(ToolError::SuspensionExpired { .. }) => {
            return match store.expired_owner(id).await.map_err(failed)? {
                Some(owner) if owner.is_same_caller(user) => Ok(()),
                _ => Err(unknown(id)),
            };
        }
        Err(error) => return Err(ErrorData::internal_error(error.caller_message(), None)),
    };
    let Some(waiting) = waiting.filter(|w| w.user.is_same_caller(user)) else {
        return match store.outcome(id).await.map_err(failed)? {
            Some(decided) if decided.is_for(user) => {
                withdraw_running(&**store, decided, user, told).await
            }
            _ => Err(unknown(id)),
        };
    };
    let reason = format!("withdrawn by `{}`, who made the call", user.id);
    let outcome = DecidedCall::new(
        id,
        user,
        serde_json::json!({
            "tool_name": waiting.tool,
            "status": "error",
            "error": { "code": WITHDRAWN, "message": reason },
        }),
    )
    .with_suspended_at(waiting.suspended_at);
    // The take keeps the withdrawal at once, so that the caller reads it from then on,
    // never an unknown call before it is kept again below.
    let at_take = RunningRecord {
        record: outcome.clone(),
        token: decision_token(),
    };
    let withdrawn = pipeline
        .resume(
            id,
            ResumeDecision::Reject {
                reason: reason.clone(),
            },
            InvokeOptions::new().decided_by(user).running(at_take),
        )
        .await;
    match withdrawn {
        // Rejected now: told like any decision.
        Err(ToolError::Aborted { .. }) | Ok(_) => {
            if let Some(told) = told {
                told(Withdrawal::Waiting(&waiting), user, &reason);
            }
        }
        // Decided by an approver a moment before: that decision keeps its outcome, and a
        // call it runs is withdrawn as it runs.
        Err(ToolError::UnknownSuspension { .. }) => {
            return match store.outcome(id).await.map_err(failed)? {
                Some(decided) if decided.is_for(user) => {
                    withdraw_running(&**store, decided, user, told).await
                }
                _ => Ok(()),
            };
        }
        // The store failed as the withdrawal took the call: nothing was withdrawn, and the
        // call waits as before. In the words of the one who cancelled, not an approver's.
        Err(ToolError::NotDecided { message, .. }) => {
            return Err(ErrorData::internal_error(
                format!(
                    "call `{}` was not cancelled, because the suspension store failed: {}. Nothing was withdrawn and the call goes on waiting: send `tasks/cancel` again once the store answers",
                    toolgate_core::error::shown_id(id),
                    toolgate_core::error::error_text(format_args!("{message}"))
                ),
                Some(serde_json::json!({ "code": "suspension_store_unavailable", "status": 503 })),
            ));
        }
        Err(error) => return Err(ErrorData::internal_error(error.caller_message(), None)),
    }
    store.keep_outcome(outcome).await.map_err(failed)
}

/// Withdraws the call whose kept outcome is `decided`, by `user` who made it, if it runs:
/// keeps its withdrawal over its running record, and only over it
/// ([`SuspensionStore::keep_outcome_over_running`]), so that from then on it reads as
/// withdrawn — its task `cancelled` — and the call's own end, kept after, does not replace
/// that. The gateway running the call sees the withdrawal and stops it, and `told` is told
/// ([`Withdrawal::Running`]) — only when this withdrawal was kept. A call that ended first,
/// or was withdrawn already, keeps its end, and the cancel is acknowledged all the same.
///
/// # Errors
///
/// `internal error` when the store fails.
///
/// [`SuspensionStore::keep_outcome_over_running`]: toolgate_core::suspension::SuspensionStore::keep_outcome_over_running
async fn withdraw_running(
    store: &dyn SuspensionStore,
    decided: DecidedCall,
    user: &User,
    told: Option<&OnWithdrawal>,
) -> Result<(), ErrorData> {
    if decided.result["status"] != RUNNING {
        return Ok(());
    }
    let by = match decided.result["decided_by"].as_str() {
        Some(approver) => format!(" after `{approver}` decided it"),
        None => String::new(),
    };
    let reason = format!(
        "withdrawn by `{}`, who made the call, while it ran{by}: the gateway running it stops it, and what it answers is not kept",
        user.id
    );
    let withdrawal = serde_json::json!({
        "tool_name": decided.result["tool_name"],
        "status": "error",
        "error": { "code": WITHDRAWN, "message": reason },
    });
    let mut outcome = DecidedCall::new(&decided.id, user, withdrawal);
    outcome.suspended_at = decided.suspended_at;
    match store.keep_outcome_over_running(outcome).await {
        Ok(kept) => {
            if let (true, Some(told)) = (kept, told) {
                told(Withdrawal::Running(&decided), user, &reason);
            }
            Ok(())
        }
        Err(error) => Err(store_failed(&error)),
    }
}

/// The error answered when the suspension store fails, its words kept within the bound of
/// an error's message: a store's error may quote what it was sent.
fn store_failed(error: &SuspensionStoreError) -> ErrorData {
    ErrorData::internal_error(
        toolgate_core::error::error_text(format_args!("{error}")),
        None,
    )
}

/// Whether the outcome tool's answer `outcome` is that of a call its caller withdrew.
pub(super) fn was_withdrawn(outcome: &Value) -> bool {
    outcome["status"] == "decided" && outcome["result"]["error"]["code"] == WITHDRAWN
}

/// The task of a call its caller withdrew, created when the call began to wait
/// (`suspended_at` of the outcome tool's answer, now for a withdrawal kept by an earlier
/// version).
pub(super) fn cancelled(id: &str, outcome: &Value) -> DetailedTask {
    let now = rfc3339(SystemTime::now());
    let created = outcome["suspended_at"]
        .as_str()
        .map_or_else(|| now.clone(), str::to_owned);
    let message = outcome["result"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    DetailedTask::new(
        Task::new(id, TaskStatus::Cancelled, created, now).with_status_message(message),
        TaskPayload::Cancelled,
    )
}

/// The answer to `tasks/get` for an id that is not one of the caller's waiting or decided
/// calls.
pub(super) fn unknown(id: &str) -> ErrorData {
    let id = toolgate_core::error::shown_id(id);
    ErrorData::invalid_params(
        format!(
            "no task `{id}` of yours: it was never one, its outcome is no longer kept, or it is another caller's"
        ),
        None,
    )
}

/// The code of a refusal by an authorization policy (rules, Cedar).
const FORBIDDEN: &str = "forbidden";

/// The error for a caller asking about their waiting call `id` — with `tasks/get`, or
/// again with its `requestState` — when running the outcome tool `tool` for it failed
/// with `error` for any reason but the call's own end (an unknown or expired id, answered
/// apart). Nothing about the call changed: a refusal by the authorization policy says which
/// tool to have allowed, a rate limit or a busy server keeps its retry delay in `data`, a
/// store that does not answer is an internal error to try again.
pub(super) fn unreadable(id: &str, tool: &str, error: &ToolError) -> ErrorData {
    let shown = toolgate_core::error::shown_id(id);
    let mut answer = features::request_error(error);
    answer.message = if error.code() == FORBIDDEN {
        format!(
            "the state of call `{shown}` cannot be read: reading it runs the tool `{tool}` as you, and the authorization policy does not allow you that tool; ask an operator to allow `{tool}` to the users whose calls wait for approval (a call that waits is unaffected)"
        )
    } else {
        format!(
            "the state of call `{shown}` could not be read (a call that waits is unaffected): {}",
            answer.message
        )
    }
    .into();
    answer
}

fn waiting_message(reason: &str) -> String {
    if reason.is_empty() {
        "waiting for a person's approval".to_owned()
    } else {
        format!("waiting for a person's approval: {reason}")
    }
}

fn as_object(result: &CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

/// `time` as RFC 3339 in UTC, to the second.
fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_waiting_call_is_a_working_task_and_a_decided_one_completed_with_its_result() {
        let handle = serde_json::to_value(created("susp-1", "wipes need a yes")).unwrap();
        assert_eq!(handle["resultType"], "task");
        assert_eq!(handle["taskId"], "susp-1");
        assert_eq!(handle["status"], "working");
        assert_eq!(handle["pollIntervalMs"], 5000);
        assert!(
            handle["statusMessage"]
                .as_str()
                .unwrap()
                .contains("wipes need a yes")
        );

        let waiting =
            json!({"status": "waiting", "reason": "r", "suspended_at": "2026-11-28T05:00:00Z"});
        let working = serde_json::to_value(detailed("susp-1", &waiting, None)).unwrap();
        assert_eq!(
            (working["status"].as_str(), working["createdAt"].as_str()),
            (Some("working"), Some("2026-11-28T05:00:00Z"))
        );

        let done = CallToolResult::success(vec![rmcp::model::ContentBlock::text("ok")]);
        let completed = serde_json::to_value(detailed("susp-1", &json!({}), Some(done))).unwrap();
        assert_eq!(completed["status"], "completed");
        assert_eq!(completed["result"]["content"][0]["text"], "ok");
    }

    #[test]
    fn a_running_call_is_a_working_task_saying_who_approved_it_and_a_lost_one_failed() {
        let running = json!({
            "status": "running",
            "tool_name": "sleep",
            "decision": "approve",
            "decided_by": "alice",
            "running_since": "2026-11-28T05:00:00Z",
        });
        let working = serde_json::to_value(detailed("susp-1", &running, None)).unwrap();
        assert_eq!(working["status"], "working", "{working}");
        assert_eq!(
            working["statusMessage"], "approved by `alice`; running since 2026-11-28T05:00:00Z",
            "{working}"
        );
        assert_eq!(working["pollIntervalMs"], 5000, "{working}");

        let said = "the call was approved and began to run at 2026-11-28T05:00:00Z, but no outcome was recorded by its deadline";
        let lost = json!({
            "status": "decided",
            "result": {
                "tool_name": "sleep",
                "status": "error",
                "error": { "code": OUTCOME_LOST, "message": said },
            },
        });
        let as_kept = CallToolResult::error(vec![rmcp::model::ContentBlock::text(said)]);
        let failed = serde_json::to_value(detailed("susp-1", &lost, Some(as_kept))).unwrap();
        assert_eq!(failed["status"], "failed", "{failed}");
        assert_eq!(failed["statusMessage"], said, "{failed}");
        assert_eq!(failed["error"]["data"]["code"], OUTCOME_LOST, "{failed}");
    }

    #[test]
    fn an_ended_task_is_created_when_its_call_began_to_wait() {
        let made = "2026-11-28T05:00:00Z";
        let withdrawn = json!({
            "status": "decided",
            "suspended_at": made,
            "result": { "status": "error", "error": { "code": WITHDRAWN, "message": "withdrawn" } },
        });
        let task = serde_json::to_value(cancelled("susp-1", &withdrawn)).unwrap();
        assert_eq!(task["status"], "cancelled", "{task}");
        assert_eq!(task["createdAt"], made, "{task}");

        let decided = json!({ "status": "decided", "suspended_at": made, "result": {} });
        let done = CallToolResult::success(vec![rmcp::model::ContentBlock::text("ok")]);
        let task = serde_json::to_value(detailed("susp-1", &decided, Some(done))).unwrap();
        assert_eq!(task["createdAt"], made, "{task}");
    }

    #[test]
    fn a_refused_or_failed_read_says_why_and_never_that_the_task_is_unknown() {
        let tool = "toolgate.outcome";
        let forbidden = unreadable(
            "susp-1",
            tool,
            &ToolError::abort("user bob may not call `toolgate.outcome`", "forbidden", 403),
        );
        let said = forbidden.message.to_string();
        assert!(said.contains("the state of call `susp-1`"), "{said}");
        assert!(
            said.contains("authorization policy does not allow you that tool"),
            "{said}"
        );
        assert!(
            said.contains("ask an operator to allow `toolgate.outcome`"),
            "{said}"
        );
        assert_eq!(forbidden.data.as_ref().unwrap()["code"], "forbidden");

        let limited = unreadable(
            "susp-1",
            tool,
            &ToolError::retry_after(Duration::from_millis(1200), "rate limited"),
        );
        assert!(
            limited
                .message
                .ends_with("rate limited, retry after 1200 ms"),
            "{}",
            limited.message
        );
        assert_eq!(limited.data.as_ref().unwrap()["retryAfterMs"], 1200);

        let store = SuspensionStoreError::Unavailable("redis does not answer".to_owned());
        let unavailable = unreadable("susp-1", tool, &store.into());
        assert_eq!(unavailable.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
        let data = unavailable.data.unwrap();
        assert_eq!(
            (data["code"].as_str(), data["status"].as_u64()),
            (Some("suspension_store_unavailable"), Some(503))
        );
        for error in [forbidden.message, limited.message, unavailable.message] {
            assert!(!error.contains("no task"), "{error}");
            assert!(error.contains("a call that waits is unaffected"), "{error}");
        }
    }

    #[test]
    fn an_unknown_task_error_repeats_a_long_id_cut_short() {
        let long = "x".repeat(1_000_000);
        let message = unknown(&long).message.to_string();
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(message.contains(&format!("{}…", "x".repeat(64))));
        assert!(unknown("susp-1").message.contains("`susp-1`"));
    }

    /// A suspension store that fails with ten megabytes of words — but for the call
    /// `expired`, which expired, and whose owner it then fails to read.
    struct LoudStore;

    /// What ends every failure of [`LoudStore`], and must never be read.
    const END: &str = "END-OF-THE-FAILURE";

    fn loud() -> SuspensionStoreError {
        SuspensionStoreError::Unavailable(format!("{} {END}", "x".repeat(10_000_000)))
    }

    #[async_trait::async_trait]
    impl SuspensionStore for LoudStore {
        async fn save(
            &self,
            _: toolgate_core::suspension::SuspendedInvocation,
        ) -> Result<(), SuspensionStoreError> {
            Err(loud())
        }

        async fn take(
            &self,
            _: &str,
        ) -> Result<Option<toolgate_core::suspension::SuspendedInvocation>, SuspensionStoreError>
        {
            Err(loud())
        }

        async fn get(
            &self,
            id: &str,
        ) -> Result<Option<toolgate_core::suspension::SuspendedInvocation>, SuspensionStoreError>
        {
            match id {
                "expired" => Err(SuspensionStoreError::Expired { id: id.to_owned() }),
                _ => Err(loud()),
            }
        }

        async fn expired_owner(&self, _: &str) -> Result<Option<User>, SuspensionStoreError> {
            Err(loud())
        }
    }

    #[tokio::test]
    async fn a_store_s_huge_failure_reaches_the_caller_who_withdraws_cut() {
        let pipeline = Pipeline::builder()
            .suspension_store(std::sync::Arc::new(LoudStore))
            .build()
            .unwrap();
        let ann = User::new("ann");
        for id in ["susp-1", "expired"] {
            let error = withdraw(&pipeline, id, &ann, None).await.unwrap_err();
            let message = error.message.to_string();
            assert!(
                message.chars().count() <= toolgate_core::error::MAX_ERROR_CHARS,
                "{id}: {} characters",
                message.chars().count()
            );
            assert!(!message.contains(END), "{id}: the end of the failure");
            assert!(message.contains("the suspension store failed: xxx"), "{id}");
            assert!(message.contains("the message was 10,000,"), "{id}");
        }
    }

    /// The in-memory store, but for what the tests make happen at chosen steps: with
    /// `approver_first`, an approver's take (carol's, with her running record) lands just
    /// before each take; at each outcome kept over anything, what a caller reading the id
    /// then would find is noted in `read_before_kept`.
    struct Racing {
        inner: toolgate_core::suspension::InMemorySuspensionStore,
        approver_first: bool,
        read_before_kept: std::sync::Mutex<Vec<Option<DecidedCall>>>,
        /// The next take fails as a store past its deadline does, before taking anything.
        losing_a_take: std::sync::atomic::AtomicBool,
    }

    impl Racing {
        fn new(approver_first: bool) -> Self {
            Racing {
                inner: toolgate_core::suspension::InMemorySuspensionStore::new(
                    toolgate_core::suspension::SuspensionLimits::default(),
                ),
                approver_first,
                read_before_kept: std::sync::Mutex::default(),
                losing_a_take: std::sync::atomic::AtomicBool::new(false),
            }
        }

        async fn approver_takes(&self, id: &str) {
            if !self.approver_first {
                return;
            }
            let carols = json!({
                "status": RUNNING,
                "tool_name": "deploy",
                "decision": "approve",
                "decided_by": "carol",
            });
            let record = DecidedCall::new(id, &User::new("ann"), carols);
            let taken = self.inner.take_running(id, record, "carols").await;
            assert!(taken.expect("the store").is_some(), "carol took the call");
        }
    }

    #[async_trait::async_trait]
    impl SuspensionStore for Racing {
        async fn save(
            &self,
            call: toolgate_core::suspension::SuspendedInvocation,
        ) -> Result<(), SuspensionStoreError> {
            self.inner.save(call).await
        }

        async fn take(
            &self,
            id: &str,
        ) -> Result<Option<toolgate_core::suspension::SuspendedInvocation>, SuspensionStoreError>
        {
            self.approver_takes(id).await;
            self.inner.take(id).await
        }

        async fn take_running(
            &self,
            id: &str,
            record: DecidedCall,
            token: &str,
        ) -> Result<Option<toolgate_core::suspension::SuspendedInvocation>, SuspensionStoreError>
        {
            self.approver_takes(id).await;
            if self
                .losing_a_take
                .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                return Err(SuspensionStoreError::Unavailable(
                    "Redis gave no answer in time".to_owned(),
                ));
            }
            self.inner.take_running(id, record, token).await
        }

        async fn get(
            &self,
            id: &str,
        ) -> Result<Option<toolgate_core::suspension::SuspendedInvocation>, SuspensionStoreError>
        {
            self.inner.get(id).await
        }

        async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
            self.inner.expired_owner(id).await
        }

        async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
            let read = self.inner.outcome(&outcome.id).await?;
            self.read_before_kept.lock().unwrap().push(read);
            self.inner.keep_outcome(outcome).await
        }

        async fn keep_outcome_over_running(
            &self,
            outcome: DecidedCall,
        ) -> Result<bool, SuspensionStoreError> {
            self.inner.keep_outcome_over_running(outcome).await
        }

        async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
            self.inner.outcome(id).await
        }
    }

    /// A pipeline on `store`, where ann's call `susp-1` of `deploy` waits.
    async fn ann_waits(store: std::sync::Arc<Racing>) -> Pipeline {
        let now = SystemTime::now();
        let call = toolgate_core::suspension::SuspendedInvocation {
            id: "susp-1".into(),
            tool: "deploy".into(),
            tool_version: "1".into(),
            session_id: None,
            request_id: "susp-1".into(),
            user: User::new("ann"),
            input: json!({}),
            output: None,
            metadata: serde_json::Map::new(),
            stage: toolgate_core::Stage::WillRedactInput,
            reason: "needs approval".into(),
            payload: json!(null),
            suspended_at: now,
            expires_at: None,
            binding: None,
        };
        store.save(call).await.expect("saved");
        Pipeline::builder()
            .suspension_store(store)
            .build()
            .expect("the pipeline")
    }

    /// An [`OnWithdrawal`] that notes each withdrawal it is told of, and the notes.
    fn noting() -> (OnWithdrawal, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let notes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let told: OnWithdrawal = std::sync::Arc::new({
            let notes = notes.clone();
            move |withdrawal, user, _reason| {
                let note = match withdrawal {
                    Withdrawal::Waiting(call) => {
                        format!("{} withdrew waiting {}", user.id, call.id)
                    }
                    Withdrawal::Running(record) => {
                        format!("{} withdrew running {}", user.id, record.id)
                    }
                };
                notes.lock().unwrap().push(note);
            }
        });
        (told, notes)
    }

    #[tokio::test]
    async fn a_caller_reads_its_withdrawn_call_as_withdrawn_from_the_take_on_never_unknown() {
        let store = std::sync::Arc::new(Racing::new(false));
        let pipeline = ann_waits(store.clone()).await;
        let (told, notes) = noting();

        withdraw(&pipeline, "susp-1", &User::new("ann"), Some(&told))
            .await
            .expect("withdrawn");

        // Between the take and the outcome kept after it, the caller read the withdrawal.
        let read = store.read_before_kept.lock().unwrap().clone();
        let [Some(read)] = read.as_slice() else {
            panic!("between the take and the outcome the call read as unknown: {read:?}");
        };
        assert_eq!(read.result["error"]["code"], WITHDRAWN, "{}", read.result);
        let kept = store.outcome("susp-1").await.unwrap().expect("kept");
        assert_eq!(kept.result["error"]["code"], WITHDRAWN, "{}", kept.result);
        assert_eq!(*notes.lock().unwrap(), ["ann withdrew waiting susp-1"]);
    }

    #[tokio::test]
    async fn a_cancel_that_finds_its_call_just_taken_by_an_approver_withdraws_it_as_it_runs() {
        let store = std::sync::Arc::new(Racing::new(true));
        let pipeline = ann_waits(store.clone()).await;
        let (told, notes) = noting();
        let ann = User::new("ann");

        // The call waits as ann cancels; carol's approval takes it just before ann's take.
        withdraw(&pipeline, "susp-1", &ann, Some(&told))
            .await
            .expect("withdrawn");

        // Withdrawn over carol's running record: the gateway running the call stops it.
        let kept = store.outcome("susp-1").await.unwrap().expect("kept");
        assert_eq!(kept.result["error"]["code"], WITHDRAWN, "{}", kept.result);
        let said = kept.result["error"]["message"].as_str().unwrap_or_default();
        assert!(
            said.contains("while it ran after `carol` decided it"),
            "{said}"
        );
        assert!(
            store.read_before_kept.lock().unwrap().is_empty(),
            "nothing kept over the running record but the withdrawal"
        );
        // Told once, as a running call's withdrawal; a second cancel keeps and tells nothing.
        withdraw(&pipeline, "susp-1", &ann, Some(&told))
            .await
            .expect("acknowledged");
        assert_eq!(*notes.lock().unwrap(), ["ann withdrew running susp-1"]);
        let still = store.outcome("susp-1").await.unwrap().expect("kept");
        assert_eq!(still, kept);
    }

    /// A withdrawal whose take the store failed withdrew nothing: its caller is told so,
    /// nothing is told to the host or kept as the call's outcome, and the call waits.
    #[tokio::test]
    async fn a_withdrawal_whose_take_failed_withdraws_nothing_and_the_call_waits() {
        let store = std::sync::Arc::new(Racing::new(false));
        store
            .losing_a_take
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let pipeline = ann_waits(store.clone()).await;
        let (told, notes) = noting();

        let failed = withdraw(&pipeline, "susp-1", &User::new("ann"), Some(&told))
            .await
            .expect_err("the take failed");

        assert!(
            failed
                .message
                .starts_with("call `susp-1` was not cancelled")
                && failed.message.contains("Nothing was withdrawn")
                && failed.message.contains("send `tasks/cancel` again"),
            "{}",
            failed.message
        );
        assert_eq!(
            failed.data,
            Some(serde_json::json!({"code": "suspension_store_unavailable", "status": 503}))
        );
        assert!(notes.lock().unwrap().is_empty(), "told of a withdrawal");
        assert_eq!(
            store.outcome("susp-1").await.unwrap(),
            None,
            "an outcome kept"
        );
        assert!(
            store.get("susp-1").await.unwrap().is_some(),
            "the call waits"
        );
        withdraw(&pipeline, "susp-1", &User::new("ann"), Some(&told))
            .await
            .expect("withdrawn once the store answers");
        assert_eq!(*notes.lock().unwrap(), ["ann withdrew waiting susp-1"]);
    }
}
