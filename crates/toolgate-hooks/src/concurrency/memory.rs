//! [`InMemoryConcurrency`]: a tokio semaphore per key, dropped when idle.

use std::sync::Arc;

use async_trait::async_trait;
use dashmap::DashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{ConcurrencyBackend, ConcurrencyBackendError, Permit, PermitRequest};

struct Slot {
    semaphore: Arc<Semaphore>,
    limit: u32,
}

type Slots = DashMap<String, Slot>;

/// The default concurrency backend: one tokio semaphore per key, in this process.
///
/// A key exists only while calls with it are in flight or waiting: the last permit to come
/// back removes it, so memory follows the number of calls in flight, and `max_keys` caps
/// it (a new key past the cap gets [`ConcurrencyBackendError::Full`]).
///
/// ```
/// use toolgate_hooks::concurrency::InMemoryConcurrency;
///
/// let backend = InMemoryConcurrency::new(10_000);
/// assert_eq!(backend.in_flight(), 0);
/// ```
#[derive(Clone)]
pub struct InMemoryConcurrency {
    slots: Arc<Slots>,
    max_keys: usize,
}

impl Default for InMemoryConcurrency {
    fn default() -> Self {
        InMemoryConcurrency::new(100_000)
    }
}

impl std::fmt::Debug for InMemoryConcurrency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryConcurrency")
            .field("keys", &self.key_count())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// Gives the semaphore permit back, then drops the key if nothing else uses it.
struct MemoryPermit {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
    key: String,
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        remove_if_idle(&self.slots, &self.key);
    }
}

/// Drops the key on the way out of an acquire that got no permit (or was cancelled).
struct Cleanup<'a> {
    slots: &'a Slots,
    key: &'a str,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        remove_if_idle(self.slots, self.key);
    }
}

/// Removes `key` when no permit is out and nobody else holds its semaphore. Both are
/// checked under the map's shard lock, and acquirers clone the semaphore under the same
/// lock, so a waiter never loses its semaphore.
fn remove_if_idle(slots: &Slots, key: &str) {
    slots.remove_if(key, |_, slot| {
        Arc::strong_count(&slot.semaphore) == 1
            && slot.semaphore.available_permits() == slot.limit as usize
    });
}

impl InMemoryConcurrency {
    /// A backend tracking at most `max_keys` keys at once.
    pub fn new(max_keys: usize) -> Self {
        InMemoryConcurrency {
            slots: Arc::new(DashMap::new()),
            max_keys,
        }
    }

    /// How many keys have calls in flight or waiting.
    pub fn key_count(&self) -> usize {
        self.slots.len()
    }

    /// How many permits are out, over every key.
    pub fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .map(|s| (s.limit as usize).saturating_sub(s.semaphore.available_permits()))
            .sum()
    }

    /// How many permits are out for `key` (as built by the policy, namespace included).
    pub fn in_flight_for(&self, key: &str) -> usize {
        self.slots.get(key).map_or(0, |s| {
            (s.limit as usize).saturating_sub(s.semaphore.available_permits())
        })
    }

    fn semaphore(
        &self,
        request: &PermitRequest<'_>,
    ) -> Result<Arc<Semaphore>, ConcurrencyBackendError> {
        if let Some(slot) = self.slots.get(request.key) {
            return Ok(Arc::clone(&slot.semaphore));
        }
        if self.slots.len() >= self.max_keys {
            return Err(ConcurrencyBackendError::Full {
                max_keys: self.max_keys,
            });
        }
        let slot = self
            .slots
            .entry(request.key.to_owned())
            .or_insert_with(|| Slot {
                semaphore: Arc::new(Semaphore::new(request.limit as usize)),
                limit: request.limit,
            });
        Ok(Arc::clone(&slot.semaphore))
    }

    async fn acquire_permit(
        &self,
        request: PermitRequest<'_>,
    ) -> Result<Option<Permit>, ConcurrencyBackendError> {
        // Declared first so it runs last, after the semaphore handle is gone — also when
        // this future is dropped while it waits.
        let _cleanup = Cleanup {
            slots: &self.slots,
            key: request.key,
        };
        let semaphore = self.semaphore(&request)?;
        let acquired = match Arc::clone(&semaphore).try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) if request.wait.is_zero() => None,
            Err(_) => tokio::time::timeout(request.wait, Arc::clone(&semaphore).acquire_owned())
                .await
                .ok()
                .and_then(Result::ok),
        };
        drop(semaphore);
        match acquired {
            Some(permit) => Ok(Some(Permit::new(MemoryPermit {
                permit: Some(permit),
                slots: Arc::clone(&self.slots),
                key: request.key.to_owned(),
            }))),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl ConcurrencyBackend for InMemoryConcurrency {
    async fn acquire(
        &self,
        request: PermitRequest<'_>,
    ) -> Result<Option<Permit>, ConcurrencyBackendError> {
        self.acquire_permit(request).await
    }
}
