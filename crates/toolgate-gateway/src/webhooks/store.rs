//! [`NotifyingStore`]: the suspension store as the pipeline sees it, telling
//! [`Notifications`] when a call starts to wait and when one is found expired.
//!
//! Every call that waits — on `/v1`, in a batch, over `/mcp`, or suspended again after a
//! resume — is kept through [`SuspensionStore::save`], so this is the one place that sees
//! them all.

use std::sync::Arc;

use toolgate_core::external::async_trait;
use toolgate_core::suspension::{
    InMemorySuspensionStore, SuspendedInvocation, SuspensionFilter, SuspensionStore,
    SuspensionStoreError,
};

use super::event::CallSummary;
use super::notifications::Notifications;

/// The gateway's suspension store, with notifications.
pub(crate) struct NotifyingStore {
    inner: Arc<InMemorySuspensionStore>,
    notifications: Notifications,
}

impl NotifyingStore {
    pub(crate) fn new(inner: Arc<InMemorySuspensionStore>, notifications: Notifications) -> Self {
        NotifyingStore {
            inner,
            notifications,
        }
    }

    /// Reports the expiry of `id` when its look-up found it expired and nobody had
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
            let cap = self.inner.limits().max_total;
            self.notifications.waiting(CallSummary::of(&kept), cap);
        }
        Ok(())
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        // Claimed before the store is asked, so that the expiry timer cannot report a
        // call that this take is deciding.
        let claimed = self.notifications.claim(id);
        let taken = self.inner.take(id).await;
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

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let looked_up = self.inner.get(id).await;
        self.seen(id, looked_up)
    }

    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        self.inner.list(filter, after, limit).await
    }
}
