//! Resuming a suspended call with a person's decision.

use toolgate_core::error::shown_id;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::{InvokeOptions, ToolError};

use super::ToolSystem;
use crate::limit::effective_limit;
use crate::{ExecutionMode, Observation, ResumeOptions, ThreadConfig, ToolResult};

/// Why a resume did not run. A message repeats the id asked for (and the user resumed
/// as) cut to its first 64 characters, control characters escaped
/// ([`shown_id`]): a forged id can neither flood nor forge a log line; the fields keep
/// it whole.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// No call waits under this id: it never existed or was already resumed.
    #[error(
        "no suspended call with id `{}`: it was never suspended or has already been resumed",
        shown_id(id)
    )]
    UnknownSuspension {
        /// The id asked for.
        id: String,
    },
    /// The call waited longer than its store allows: it will not run.
    #[error(
        "the suspended call `{}` expired before anyone decided on it and will not run: make the call again if it is still needed",
        shown_id(id)
    )]
    Expired {
        /// The id asked for.
        id: String,
    },
    /// The host resumed the call as another user than the one who made it
    /// ([`ResumeOptions::user`]): another id, or the same id in another tenant. A resumed
    /// call runs as its maker, so an approval or a completion given as someone else is
    /// refused; the call still waits. (A rejection is always allowed: it only ends the
    /// call.)
    #[error(
        "the suspended call `{}` was made by another user than `{}`, the user it was resumed as: resume it as the user who made it (or without a user); the call still waits",
        shown_id(id),
        shown_id(resumed_as)
    )]
    NotTheCaller {
        /// The id asked for.
        id: String,
        /// The user id the host resumed the call as.
        resumed_as: String,
    },
    /// The suspension store failed, as the call was looked up or as the decision took it:
    /// nothing was decided, and the call goes on waiting.
    #[error(
        "the suspension store failed: {message}; nothing was decided and the call goes on waiting: decide again once the store answers"
    )]
    Store {
        /// What the store said.
        message: String,
    },
    /// An approval could not be checked against the thread's enabled tools because the
    /// thread's configuration could not be loaded. The call still waits.
    #[error(
        "the tool configuration of thread `{thread}` could not be loaded ({message}); the call still waits: resume it again once the state store answers"
    )]
    ThreadConfigUnavailable {
        /// The thread the call was made in.
        thread: String,
        /// What the state store said.
        message: String,
    },
}

impl ToolSystem {
    /// Resumes a suspended call with a person's decision and returns its result: approve
    /// continues after the suspending stage, reject fails it with code `rejected`, complete
    /// makes the given output the call's output without running the tool. Stages before
    /// the suspension and the batch's other calls do not run again.
    ///
    /// An approval runs the tool, so it is checked against the thread's configuration as
    /// it is now: a tool disabled in the thread while the call waited is not run, and the
    /// call is rejected with a reason that says so.
    ///
    /// # Errors
    ///
    /// [`ResumeError::UnknownSuspension`] for an id that never existed or was already
    /// used; [`ResumeError::Expired`] for one that waited too long;
    /// [`ResumeError::NotTheCaller`] for an approval or completion given as another user
    /// than the call's maker; [`ResumeError::Store`] when the suspension store fails (as
    /// the decision takes the call too: nothing was decided then, and the call goes on
    /// waiting);
    /// [`ResumeError::ThreadConfigUnavailable`] when an approval cannot be checked because
    /// the thread's configuration cannot be loaded (the call keeps waiting).
    pub async fn resume(
        &self,
        suspension_id: &str,
        decision: ResumeDecision,
        options: ResumeOptions,
    ) -> Result<ToolResult, ResumeError> {
        let saved = self
            .inner
            .pipeline
            .suspended(suspension_id)
            .await
            .map_err(|e| match e {
                ToolError::SuspensionExpired { id } => ResumeError::Expired { id },
                other => ResumeError::Store {
                    message: other.to_string(),
                },
            })?
            .ok_or_else(|| ResumeError::UnknownSuspension {
                id: suspension_id.to_owned(),
            })?;
        let rejecting = matches!(decision, ResumeDecision::Reject { .. });
        if let Some(user) = &options.user
            && !user.is_same_caller(&saved.user)
            && !rejecting
        {
            return Err(ResumeError::NotTheCaller {
                id: suspension_id.to_owned(),
                resumed_as: user.id.clone(),
            });
        }
        let thread = saved.session_id.clone().unwrap_or_default();
        let config = self.inner.state.thread_config(&thread).await;
        // Approving runs the tool: only while the thread still enables it. A call made
        // outside any thread has no thread configuration to check.
        let decision = match (&decision, &config, &saved.session_id) {
            (ResumeDecision::Approve, Err(e), Some(_)) => {
                return Err(ResumeError::ThreadConfigUnavailable {
                    thread,
                    message: e.to_string(),
                });
            }
            (ResumeDecision::Approve, Ok(config), Some(_)) if !config.is_enabled(&saved.tool) => {
                ResumeDecision::Reject {
                    reason: format!(
                        "tool `{}` was disabled in this thread while the call waited for approval; it did not run",
                        saved.tool
                    ),
                }
            }
            _ => decision,
        };
        let thread_limit = match config {
            Ok(ThreadConfig {
                result_max_chars, ..
            }) => result_max_chars,
            Err(_) => None,
        };
        // The batch's limit, when it set one, was kept with the call: a call that waited
        // is cut as it would have been had it not.
        let batch_limit = saved
            .metadata
            .get(super::trace::RESULT_MAX_CHARS)
            .and_then(serde_json::Value::as_u64)
            .and_then(|limit| usize::try_from(limit).ok());
        let limit = effective_limit(
            options.result_max_chars.or(batch_limit),
            thread_limit,
            self.inner.result_max_chars,
        );
        let mut invoke = InvokeOptions::new();
        if let Some(timeout) = options.timeout.or(self.inner.timeout) {
            invoke = invoke.timeout(timeout);
        }
        if let Some(token) = options.cancellation {
            invoke = invoke.cancellation(token);
        }
        if let Some(reason) = options.reason {
            invoke = invoke.decision_reason(reason);
        }
        if let Some(approver) = options.decided_by {
            invoke = invoke.decided_by(approver);
        }
        if let Some(user) = options.user {
            invoke = invoke.user(user);
        }
        if let Some(running) = options.running {
            invoke = invoke.running(running);
        }
        let decision_label = match &decision {
            ResumeDecision::Approve => "approve",
            ResumeDecision::Reject { .. } => "reject",
            ResumeDecision::Complete { .. } => "complete",
        };
        let started = tokio::time::Instant::now();
        let invocation = self
            .inner
            .pipeline
            .resume_detailed(suspension_id, decision, invoke)
            .await;
        let elapsed = started.elapsed();
        match &invocation.result {
            // Another resume took it between the look-up and now.
            Err(ToolError::UnknownSuspension { id }) => {
                return Err(ResumeError::UnknownSuspension { id: id.clone() });
            }
            // It expired between the look-up and now.
            Err(ToolError::SuspensionExpired { id }) => {
                return Err(ResumeError::Expired { id: id.clone() });
            }
            // The store failed as the decision took the call: nothing was decided, and the
            // call goes on waiting. No result: a host would record or tell it as decided.
            Err(ToolError::NotDecided { message, .. }) => {
                return Err(ResumeError::Store {
                    message: message.clone(),
                });
            }
            _ => {}
        }
        // The call's id: its request id, unless that had to be another (see
        // `trace::request_id_of`).
        let call_id = match saved.metadata.get(super::trace::CALL_ID) {
            Some(serde_json::Value::String(call_id)) => call_id.clone(),
            _ => saved.request_id,
        };
        let result = self.to_result(call_id, saved.tool, invocation, elapsed, limit);
        if let Some(stats) = &self.inner.stats {
            stats.record(&result);
        }
        self.inner.observer.record(Observation::Resumed {
            thread_id: thread,
            decision: decision_label.to_owned(),
            duration_ms: result.metadata.duration_ms,
            display: result.metadata.mode == ExecutionMode::Display,
            result: result.clone(),
        });
        Ok(result)
    }
}
