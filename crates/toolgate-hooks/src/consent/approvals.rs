//! [`Approvals`]: record approvals, and approve or reject suspended calls.

use std::sync::Arc;

use serde_json::Value;
use toolgate_core::suspension::{ResumeDecision, RetryApproval, SuspendedInvocation};
use toolgate_core::{CallerId, InvokeOptions, Pipeline, ToolError};

use super::{ApprovalStore, ApprovalStoreError, Grant};

/// The approval API: what a person (or the UI in front of them) calls.
///
/// * Before a call: [`grant`](Self::grant) one-shot or "always allow" approvals per caller
///   and tool, [`revoke`](Self::revoke) them. A caller is named by its
///   [`caller_key`](toolgate_core::User::caller_key): the user id for a caller without a
///   tenant, the id in its tenant otherwise.
/// * For a suspended call: [`approve`](Self::approve) (optionally remembering the approval
///   for this caller and tool) or [`reject`](Self::reject); both resume it through the
///   pipeline and return its outcome. Or [`approve_retry`](Self::approve_retry): the call
///   ends, and its caller's next identical call runs once.
///
/// Get one from [`Consent::approvals`](super::Consent::approvals); clones share the store.
#[derive(Clone)]
pub struct Approvals {
    store: Arc<dyn ApprovalStore>,
}

impl Approvals {
    /// The API over `store`.
    pub fn new(store: Arc<dyn ApprovalStore>) -> Self {
        Approvals { store }
    }

    /// Records an approval for the caller `user` calling `tool`: `user` is the caller's
    /// [`caller_key`](toolgate_core::User::caller_key) (its id, when it has no tenant).
    ///
    /// # Errors
    ///
    /// [`ApprovalStoreError`] when the store fails or is full.
    pub async fn grant(
        &self,
        user: &str,
        tool: &str,
        grant: Grant,
    ) -> Result<(), ApprovalStoreError> {
        self.store.grant(user, tool, grant).await
    }

    /// Removes the approval for the caller `user` (its
    /// [`caller_key`](toolgate_core::User::caller_key)) calling `tool`; whether there was
    /// one.
    ///
    /// # Errors
    ///
    /// [`ApprovalStoreError`] when the store fails.
    pub async fn revoke(&self, user: &str, tool: &str) -> Result<bool, ApprovalStoreError> {
        self.store.revoke(user, tool).await
    }

    /// The suspended call with this id, for showing to the approver.
    ///
    /// # Errors
    ///
    /// As [`Pipeline::suspended`].
    pub async fn pending(
        &self,
        pipeline: &Pipeline,
        suspension_id: &str,
    ) -> Result<Option<SuspendedInvocation>, ToolError> {
        pipeline.suspended(suspension_id).await
    }

    /// Approves a suspended call and runs it to its end. With `remember`, later calls of
    /// the same caller — the same user id in the same tenant — to the same tool are
    /// approved too (an "always allow" grant).
    ///
    /// # Errors
    ///
    /// [`ToolError::UnknownSuspension`] for an unknown or already settled id;
    /// [`ToolError::Internal`] when `remember` could not be recorded (the call is then
    /// left suspended); otherwise the call's own outcome.
    pub async fn approve(
        &self,
        pipeline: &Pipeline,
        suspension_id: &str,
        remember: bool,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        if remember {
            let pending = pipeline.suspended(suspension_id).await?.ok_or_else(|| {
                ToolError::UnknownSuspension {
                    id: suspension_id.to_owned(),
                }
            })?;
            self.store
                .grant(&pending.user.caller_key(), &pending.tool, Grant::Always)
                .await
                .map_err(|e| {
                    ToolError::internal(format!(
                        "the approval could not be remembered ({e}); the call still waits"
                    ))
                })?;
        }
        pipeline
            .resume(suspension_id, ResumeDecision::Approve, options)
            .await
    }

    /// Approves a suspended call for its caller to make again instead of running it now:
    /// the next call of the same user that is the same call — same tool and definition,
    /// same input once validated, defaulted and redacted, same configuration generation —
    /// runs once without waiting, within the pipeline's `approval_run_within`. See
    /// [`Pipeline::approve_retry`].
    ///
    /// # Errors
    ///
    /// As [`Pipeline::approve_retry`].
    pub async fn approve_retry(
        &self,
        pipeline: &Pipeline,
        suspension_id: &str,
        decided_by: Option<CallerId>,
    ) -> Result<RetryApproval, ToolError> {
        pipeline.approve_retry(suspension_id, decided_by).await
    }

    /// Rejects a suspended call: it ends with code `rejected`, HTTP 403, and `reason`.
    ///
    /// # Errors
    ///
    /// [`ToolError::UnknownSuspension`] for an unknown or already settled id; otherwise the
    /// rejection itself (`rejected`).
    pub async fn reject(
        &self,
        pipeline: &Pipeline,
        suspension_id: &str,
        reason: impl Into<String>,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        pipeline
            .resume(
                suspension_id,
                ResumeDecision::Reject {
                    reason: reason.into(),
                },
                options,
            )
            .await
    }
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approvals")
    }
}
