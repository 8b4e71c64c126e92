//! In-flight coalescing: concurrent identical misses run the tool once.
//!
//! The first miss for a key becomes the leader and holds a [`Leader`] guard in its
//! context; later misses for the same key follow, waiting on a watch channel. The leader
//! publishes its output once it is cached. The guard is RAII: if the leader fails, is
//! cancelled or panics, the guard is dropped with its context, the channel closes, and
//! every follower wakes up and looks again (one of them becomes the next leader). No
//! follower waits on a leader that is gone.

use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use serde_json::Value;
use tokio::sync::watch;

use super::CacheKey;

type Flights = DashMap<CacheKey, watch::Receiver<Option<Value>>>;

/// The calls in flight, by key.
#[derive(Clone, Default)]
pub(crate) struct InFlight {
    flights: Arc<Flights>,
}

/// What a miss does: lead (run the tool) or follow (wait for the leader).
pub(crate) enum Role {
    Lead(Leader),
    Follow(watch::Receiver<Option<Value>>),
}

/// The leader's claim on a key. Dropping it without [`publish`](Leader::publish) wakes the
/// followers empty-handed.
pub(crate) struct Leader {
    flights: Arc<Flights>,
    key: CacheKey,
    sender: watch::Sender<Option<Value>>,
    receiver: watch::Receiver<Option<Value>>,
}

impl InFlight {
    pub(crate) fn join(&self, key: &CacheKey) -> Role {
        match self.flights.entry(key.clone()) {
            Entry::Occupied(flight) => Role::Follow(flight.get().clone()),
            Entry::Vacant(slot) => {
                let (sender, receiver) = watch::channel(None);
                slot.insert(receiver.clone());
                Role::Lead(Leader {
                    flights: Arc::clone(&self.flights),
                    key: key.clone(),
                    sender,
                    receiver,
                })
            }
        }
    }

    /// How many keys have a leader running (for tests: zero once everything settled).
    pub(crate) fn len(&self) -> usize {
        self.flights.len()
    }
}

impl Leader {
    /// Hands the result to every follower; they respond with it.
    pub(crate) fn publish(self, value: Value) {
        self.sender.send_replace(Some(value));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.flights.remove_if(&self.key, |_, receiver| {
            receiver.same_channel(&self.receiver)
        });
    }
}

/// Waits for the leader: its value, or `None` once it is gone without one.
pub(crate) async fn follow(mut receiver: watch::Receiver<Option<Value>>) -> Option<Value> {
    match receiver.wait_for(Option::is_some).await {
        Ok(value) => value.clone(),
        Err(_) => None,
    }
}
