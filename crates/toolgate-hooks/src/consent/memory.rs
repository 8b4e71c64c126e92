//! [`InMemoryApprovals`]: approvals in a bounded map.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::{ApprovalStore, ApprovalStoreError, Grant};

/// The default approval store: in this process, at most `max` approvals.
///
/// ```
/// use toolgate_hooks::consent::InMemoryApprovals;
/// let store = InMemoryApprovals::new(10_000);
/// assert!(store.is_empty());
/// ```
#[derive(Debug)]
pub struct InMemoryApprovals {
    grants: Mutex<HashMap<(String, String), Grant>>,
    max: usize,
}

impl InMemoryApprovals {
    /// A store holding at most `max` approvals; past that, granting fails.
    pub fn new(max: usize) -> Self {
        InMemoryApprovals {
            grants: Mutex::new(HashMap::new()),
            max,
        }
    }

    /// How many approvals are recorded.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Grant>> {
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for InMemoryApprovals {
    fn default() -> Self {
        InMemoryApprovals::new(100_000)
    }
}

#[async_trait]
impl ApprovalStore for InMemoryApprovals {
    async fn grant(&self, user: &str, tool: &str, grant: Grant) -> Result<(), ApprovalStoreError> {
        let mut grants = self.lock();
        let key = (user.to_owned(), tool.to_owned());
        let full = grants.len() >= self.max;
        match grants.get_mut(&key) {
            Some(existing) => {
                if grant == Grant::Always {
                    *existing = Grant::Always;
                }
                Ok(())
            }
            None if full => Err(ApprovalStoreError::Full { max: self.max }),
            None => {
                grants.insert(key, grant);
                Ok(())
            }
        }
    }

    async fn consume(&self, user: &str, tool: &str) -> Result<Option<Grant>, ApprovalStoreError> {
        let mut grants = self.lock();
        let key = (user.to_owned(), tool.to_owned());
        Ok(match grants.get(&key).copied() {
            Some(Grant::Once) => grants.remove(&key),
            other => other,
        })
    }

    async fn revoke(&self, user: &str, tool: &str) -> Result<bool, ApprovalStoreError> {
        Ok(self
            .lock()
            .remove(&(user.to_owned(), tool.to_owned()))
            .is_some())
    }
}
