//! [`Approvals`]: record approvals, and approve or reject suspended calls.

use std::sync::Arc;

use serde_json::Value;
use toolgate_core::suspension::{ResumeDecision, RetryApproval, SuspendedInvocation};
use toolgate_core::{CallerId, InvokeOptions, Pipeline, ToolError};

use super::taken::TakenOnces;
use super::{ApprovalStore, ApprovalStoreError, Grant};

/// The approval API: what a person (or the UI in front of them) calls.
///
/// * Before a call: [`grant`](Self::grant) one-shot or "always allow" approvals per caller
///   (the user id in its tenant) and tool, [`revoke`](Self::revoke) them.
/// * For a suspended call: [`approve`](Self::approve) (optionally remembering the approval
///   for this caller and tool) or [`reject`](Self::reject); both resume it through the
///   pipeline and return its outcome. Or [`approve_retry`](Self::approve_retry): the call
///   ends, and its caller's next identical call runs once.
///
/// Get one from [`Consent::approvals`](super::Consent::approvals); clones share the store.
#[derive(Clone)]
pub struct Approvals {
    store: Arc<dyn ApprovalStore>,
    /// The one-shot approvals the hook's calls in flight hold, for those from
    /// [`Consent::approvals`](super::Consent::approvals).
    taken: Option<Arc<TakenOnces>>,
}

impl Approvals {
    /// The API over `store`. Prefer [`Consent::approvals`](super::Consent::approvals): its
    /// [`revoke`](Self::revoke) reaches the one-shot approvals the hook's calls in flight
    /// hold too.
    pub fn new(store: Arc<dyn ApprovalStore>) -> Self {
        Approvals { store, taken: None }
    }

    /// The API of a [`Consent`](super::Consent) hook: over its store and the approvals its
    /// calls in flight took.
    pub(super) fn of_hook(store: Arc<dyn ApprovalStore>, taken: Arc<TakenOnces>) -> Self {
        Approvals {
            store,
            taken: Some(taken),
        }
    }

    /// Records an approval for `caller` calling `tool`: a [`&User`](toolgate_core::User)
    /// or a [`CallerId`] names the caller in their tenant; a bare user id (`"ann"`) names
    /// the caller of that id *without* a tenant, never `ann` of some tenant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use toolgate_core::User;
    /// use toolgate_hooks::consent::{Approvals, Grant, InMemoryApprovals};
    ///
    /// let approvals = Approvals::new(Arc::new(InMemoryApprovals::default()));
    /// let ann = User::new("ann").with_tenant("acme");
    /// approvals.grant(&ann, "wipe", Grant::Always).await?;
    /// // Ann of acme's grant: not the one of the `ann` without a tenant.
    /// assert!(!approvals.revoke("ann", "wipe").await?);
    /// assert!(approvals.revoke(&ann, "wipe").await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ApprovalStoreError`] when the store fails or is full.
    pub async fn grant(
        &self,
        caller: impl Into<CallerId>,
        tool: &str,
        grant: Grant,
    ) -> Result<(), ApprovalStoreError> {
        let caller = caller.into();
        self.store.grant(&caller.caller_key(), tool, grant).await
    }

    /// Removes the approval for `caller` (named as in [`grant`](Self::grant)) calling
    /// `tool`; whether there was one. A one-shot approval that a call in flight took is
    /// revoked too (for the approvals of [`Consent::approvals`](super::Consent::approvals)):
    /// that call goes on, but if it fails before its tool runs it does not give the
    /// approval back.
    ///
    /// # Errors
    ///
    /// [`ApprovalStoreError`] when the store fails.
    pub async fn revoke(
        &self,
        caller: impl Into<CallerId>,
        tool: &str,
    ) -> Result<bool, ApprovalStoreError> {
        let caller = caller.into();
        let key = caller.caller_key();
        // In flight first: a call that gives its approval back after this finds it revoked
        // (and one that gave it back before, or does so meanwhile, is revoked below).
        let in_flight = self.taken.as_ref().is_some_and(|t| t.revoke(&key, tool));
        let stored = self.store.revoke(&key, tool).await?;
        Ok(stored || in_flight)
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
