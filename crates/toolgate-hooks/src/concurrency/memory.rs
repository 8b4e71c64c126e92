//! [`InMemoryConcurrency`]: a tokio semaphore per key, dropped when idle.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use dashmap::DashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{ConcurrencyBackend, ConcurrencyBackendError, Permit, PermitRequest};

/// The semaphore of one key. It holds `limit + debt` permits in all: when a request
/// brings a lower limit than the slot's (a reload lowered it) while more calls are in
/// flight than the new limit allows, the permits it could not take back at once are owed,
/// and the next ones to come back are forgotten instead of given back.
struct Slot {
    semaphore: Arc<Semaphore>,
    limit: u32,
    /// Permits to forget as they come back; only ever above zero while calls are in flight.
    debt: AtomicU32,
}

impl Slot {
    fn new(limit: u32) -> Self {
        Slot {
            semaphore: Arc::new(Semaphore::new(limit as usize)),
            limit,
            debt: AtomicU32::new(0),
        }
    }

    /// Every permit the semaphore holds, out or not.
    fn total(&self) -> usize {
        self.limit as usize + self.debt.load(Ordering::Relaxed) as usize
    }

    /// How many permits are out.
    fn out(&self) -> usize {
        self.total()
            .saturating_sub(self.semaphore.available_permits())
    }

    /// Makes `limit` the slot's limit, the calls in flight counting against it: a raise
    /// pays the debt first and frees the rest; a cut takes back free permits and owes the
    /// rest.
    fn set_limit(&mut self, limit: u32) {
        let debt = self.debt.get_mut();
        if limit < self.limit {
            let cut = self.limit - limit;
            let taken = self.semaphore.forget_permits(cut as usize) as u32;
            *debt += cut - taken;
        } else {
            let raise = limit - self.limit;
            let paid = raise.min(*debt);
            *debt -= paid;
            self.semaphore.add_permits((raise - paid) as usize);
        }
        self.limit = limit;
    }

    /// Whether a permit coming back is owed (and so is to be forgotten); counts it paid.
    fn pay_debt(&self) -> bool {
        self.debt
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| d.checked_sub(1))
            .is_ok()
    }
}

type Slots = DashMap<String, Slot>;

/// The default concurrency backend: one tokio semaphore per key, in this process.
///
/// A key exists only while calls with it are in flight or waiting: the last permit to come
/// back removes it, so memory follows the number of calls in flight, and `max_keys` caps
/// it (a new key past the cap gets [`ConcurrencyBackendError::Full`]).
///
/// Each request's `limit` holds for the calls in flight with its key, whatever limit they
/// came with: a backend kept across a reload applies the new limit at once, and a lowered
/// one admits nothing more until the calls in flight are under it.
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
        let mut permit = self.permit.take();
        // Under the key's shard lock, so the debt is read as `set_limit` left it: an owed
        // permit is forgotten rather than given back.
        self.slots.remove_if(&self.key, |_, slot| {
            // Given back (or forgotten) before the slot is checked for being idle.
            match permit.take() {
                Some(owed) if slot.pay_debt() => owed.forget(),
                given_back => drop(given_back),
            }
            is_idle(slot)
        });
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
    slots.remove_if(key, |_, slot| is_idle(slot));
}

/// No permit is out and nobody else holds the slot's semaphore.
fn is_idle(slot: &Slot) -> bool {
    Arc::strong_count(&slot.semaphore) == 1 && slot.out() == 0
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
        self.slots.iter().map(|s| s.out()).sum()
    }

    /// How many permits are out for `key` (as built by the policy, namespace included).
    pub fn in_flight_for(&self, key: &str) -> usize {
        self.slots.get(key).map_or(0, |s| s.out())
    }

    fn semaphore(
        &self,
        request: &PermitRequest<'_>,
    ) -> Result<Arc<Semaphore>, ConcurrencyBackendError> {
        if let Some(slot) = self.slots.get(request.key) {
            if slot.limit == request.limit {
                return Ok(Arc::clone(&slot.semaphore));
            }
        } else if self.slots.len() >= self.max_keys {
            return Err(ConcurrencyBackendError::Full {
                max_keys: self.max_keys,
            });
        }
        // A new key, or a limit that changed (a reload): under the shard's write lock.
        let mut slot = self
            .slots
            .entry(request.key.to_owned())
            .or_insert_with(|| Slot::new(request.limit));
        if slot.limit != request.limit {
            slot.set_limit(request.limit);
        }
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
