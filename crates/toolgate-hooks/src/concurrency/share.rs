//! [`KeyedShare`]: at most so many places held at once per key, refused (not waited for)
//! past it, each given back when its [`SharePlace`] is dropped.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How many places each key holds, at most `max` each: for what one client, caller or user
/// may hold of a resource all share (connections, a queue, open streams), so that one of
/// them cannot take it all. A place is held until its [`SharePlace`] is dropped, wherever
/// that happens. Only keys holding a place have an entry, so the table is never larger
/// than the places out.
///
/// ```
/// use toolgate_hooks::concurrency::KeyedShare;
///
/// let share = KeyedShare::new(2);
/// let first = share.take("ann").expect("ann's first place");
/// let _second = share.take("ann").expect("ann's second");
/// assert!(share.take("ann").is_none(), "ann holds her share");
/// assert!(share.take("bob").is_some(), "bob has his own");
/// drop(first);
/// assert!(share.take("ann").is_some(), "a place given back is free again");
/// ```
#[derive(Debug)]
pub struct KeyedShare<K: Eq + Hash> {
    /// Atomic so that a share held behind its `Arc` can be given a new bound
    /// ([`set_max`](Self::set_max)).
    max: AtomicUsize,
    held: Mutex<HashMap<K, usize>>,
}

/// One place in a key's share, given back when dropped.
#[derive(Debug)]
pub struct SharePlace<K: Eq + Hash> {
    share: Arc<KeyedShare<K>>,
    key: K,
}

impl<K: Eq + Hash + Clone> KeyedShare<K> {
    /// At most `max` places per key.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(KeyedShare {
            max: AtomicUsize::new(max),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A place for `key`, held until the returned [`SharePlace`] is dropped; `None` when
    /// `key` holds `max` places already.
    pub fn take(self: &Arc<Self>, key: K) -> Option<SharePlace<K>> {
        let max = self.max.load(Ordering::Relaxed);
        if max == 0 {
            // Refused before an entry is made: a key holding nothing has none.
            return None;
        }
        let mut held = self.lock();
        let count = held.entry(key.clone()).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(SharePlace {
            share: Arc::clone(self),
            key,
        })
    }

    /// The most places a key may hold.
    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Bounds each key by `max` from now on, as a reload of a configuration does: the
    /// places held now stay held, and a key that holds `max` or more already takes no
    /// other until it is under the new bound.
    ///
    /// ```
    /// use toolgate_hooks::concurrency::KeyedShare;
    ///
    /// let share = KeyedShare::new(3);
    /// let held: Vec<_> = (0..3).map(|_| share.take("ann").unwrap()).collect();
    /// share.set_max(2);
    /// assert_eq!(share.held_by(&"ann"), 3, "what ann holds stays hers");
    /// assert!(share.take("ann").is_none());
    /// drop(held);
    /// assert!(share.take("ann").is_some());
    /// ```
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// How many places `key` holds now.
    pub fn held_by(&self, key: &K) -> usize {
        self.lock().get(key).copied().unwrap_or_default()
    }

    /// How many keys hold a place now.
    pub fn keys(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Eq + Hash> Drop for SharePlace<K> {
    fn drop(&mut self) {
        let mut held = self
            .share
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_share_gets_places_back_and_leaves_no_entry() {
        let share = KeyedShare::new(3);
        let mut daves: Vec<_> = (0..3)
            .map(|_| share.take("dave").expect("within dave's share"))
            .collect();
        assert!(share.take("dave").is_none(), "past dave's share");
        let bobs = share.take("bob").expect("bob's own share");
        assert_eq!(share.held_by(&"dave"), 3);
        // One of dave's is given back: he may take one more.
        daves.pop();
        assert!(share.take("dave").is_some());
        assert_eq!(share.held_by(&"dave"), 2, "refused, not held");
        drop((daves, bobs));
        assert_eq!(share.keys(), 0, "a key holding nothing has no entry");
    }

    #[test]
    fn a_share_of_zero_refuses_every_key_and_keeps_none() {
        let share = KeyedShare::new(0);
        for key in 0..1_000 {
            assert!(share.take(key).is_none());
        }
        assert_eq!(share.keys(), 0, "refused keys leave no entry");
    }
}
