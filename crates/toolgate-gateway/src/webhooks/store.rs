//! [`NotifyingStore`]: the suspension store as the pipeline sees it, telling
//! [`Notifications`] when a call starts to wait and when one is found expired.
//!
//! Every call that waits — on `/v1`, in a batch, over `/mcp`, or suspended again after a
//! resume — is kept through [`SuspensionStore::save`], so this is the one place that sees
//! them all.

use std::sync::Arc;
use std::time::SystemTime;

use toolgate_core::User;
use toolgate_core::external::async_trait;
use toolgate_core::suspension::{
    DecidedCall, RetryApproval, SuspendedInvocation, SuspensionFilter, SuspensionStore,
    SuspensionStoreError,
};

use super::event::CallSummary;
use super::notifications::Notifications;

/// The gateway's suspension store, with notifications.
pub(crate) struct NotifyingStore {
    inner: Arc<dyn SuspensionStore>,
    notifications: Notifications,
    /// How many waiting calls are watched for expiry at most: the store's own cap.
    cap: usize,
}

impl NotifyingStore {
    pub(crate) fn new(
        inner: Arc<dyn SuspensionStore>,
        notifications: Notifications,
        cap: usize,
    ) -> Self {
        NotifyingStore {
            inner,
            notifications,
            cap,
        }
    }

    /// Takes the call `id` with `take`, a take of the inner store. Claimed before the store
    /// is asked, so that the expiry timer cannot report a call that this take is deciding.
    async fn taking(
        &self,
        id: &str,
        take: impl Future<Output = Result<Option<SuspendedInvocation>, SuspensionStoreError>>,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let claimed = self.notifications.claim(id);
        let taken = take.await;
        match (&taken, claimed) {
            (Err(SuspensionStoreError::Expired { .. }), Some(call)) => {
                self.notifications.expired(call);
            }
            // Still waiting (the store failed): watched again.
            (Err(_), Some(call)) => self.notifications.unclaim(call),
            _ => {}
        }
        taken
    }

    /// reported it yet.
    fn seen<T>(
        &self,
        id: &str,
        looked_up: Result<T, SuspensionStoreError>,
    ) -> Result<T, SuspensionStoreError> {
        if let Err(SuspensionStoreError::Expired { .. }) = &looked_up
            && let Some(call) = self.notifications.claim(id)
        {
            self.notifications.expired(call);
        }
        looked_up
    }
}

#[async_trait]
impl SuspensionStore for NotifyingStore {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        let id = suspended.id.clone();
        self.inner.save(suspended).await?;
        // Read back for the expiry the store stamped.
        if let Ok(Some(kept)) = self.inner.get(&id).await {
            self.notifications.waiting(CallSummary::of(&kept), self.cap);
        }
        Ok(())
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.taking(id, self.inner.take(id)).await
    }

    async fn take_running(
        &self,
        id: &str,
        record: DecidedCall,
        token: &str,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.taking(id, self.inner.take_running(id, record, token))
            .await
    }

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let looked_up = self.inner.get(id).await;
        self.seen(id, looked_up)
    }

    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        self.inner.expired_owner(id).await
    }

    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        self.inner.list(filter, after, limit).await
    }

    async fn list_expiries(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Option<SystemTime>)>, SuspensionStoreError> {
        self.inner.list_expiries(after, limit).await
    }

    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        self.inner.keep_retry_approval(approval).await
    }

    async fn use_retry_approval(
        &self,
        key: &str,
    ) -> Result<Option<RetryApproval>, SuspensionStoreError> {
        self.inner.use_retry_approval(key).await
    }

    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        self.inner.keep_outcome(outcome).await
    }

    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        self.inner.keep_running(record, token).await
    }

    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        self.inner.remove_running(id, token).await
    }

    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        self.inner.outcome(id).await
    }

    async fn list_outcomes(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DecidedCall>, SuspensionStoreError> {
        self.inner.list_outcomes(filter, after, limit).await
    }
}
