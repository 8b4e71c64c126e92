//! What an upstream connection was last told about each resource: subscribed (on which
//! of the channel's connections) or not.
//!
//! `resources/subscribe` and `resources/unsubscribe` for one resource go to the upstream
//! one at a time, each by whoever holds the resource's turn ([`Told::turn`]), so that the
//! upstream applies them in the order they were decided: requests sent side by side (two
//! HTTP POSTs) may be applied in either order, and an unsubscription applied after the
//! subscription that followed it leaves a subscriber without updates. The record is kept
//! only while it says "subscribed" or someone holds or waits for the turn, so the table
//! is bounded by what the upstream is subscribed to, and by who waits.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// What the upstream was last told about one resource: `Some(generation)` — subscribed,
/// on the channel's connection of that generation — or `None`, not subscribed.
type Record = Arc<tokio::sync::Mutex<Option<u64>>>;

/// What the upstream was last told about each resource of one channel, by URI.
#[derive(Default)]
pub(crate) struct Told {
    records: Mutex<HashMap<String, Record>>,
}

impl Told {
    /// The turn to tell the upstream about `uri`, once whoever holds it is done, waiting
    /// at most until `deadline`; `None` when the deadline passed first. Cancel-safe: a
    /// wait given up leaves no record behind.
    pub(crate) async fn turn(&self, uri: &str, deadline: Instant) -> Option<Turn<'_>> {
        let record = {
            let mut records = self.lock();
            Arc::clone(records.entry(uri.to_owned()).or_default())
        };
        // Made before the wait, so that a wait dropped or timed out tidies up too.
        let mut turn = Turn {
            told: self,
            uri: uri.to_owned(),
            record: Arc::clone(&record),
            held: None,
        };
        let held = tokio::time::timeout_at(deadline, record.lock_owned()).await;
        turn.held = Some(held.ok()?);
        Some(turn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many resources have a record (for tests: it stays bounded).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The turn to tell the upstream about one resource: nobody else tells it anything about
/// the resource while this lives. Reads and writes what it was last told. Dropped, the
/// next in line gets the turn, and a record that says "not subscribed" and that nobody
/// else holds or waits for goes.
pub(crate) struct Turn<'a> {
    told: &'a Told,
    uri: String,
    record: Record,
    /// `None` only while the turn is waited for.
    held: Option<OwnedMutexGuard<Option<u64>>>,
}

impl Deref for Turn<'_> {
    type Target = Option<u64>;

    fn deref(&self) -> &Option<u64> {
        self.held.as_ref().expect("a turn is read only once held")
    }
}

impl DerefMut for Turn<'_> {
    fn deref_mut(&mut self) -> &mut Option<u64> {
        self.held
            .as_mut()
            .expect("a turn is written only once held")
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // With the table locked nobody can take the record up meanwhile: the table and
        // this turn are its only holders exactly when nobody else holds or waits for it.
        let mut records = self.told.lock();
        self.held = None;
        let alone = Arc::strong_count(&self.record) == 2;
        let unsubscribed = self.record.try_lock().is_ok_and(|told| told.is_none());
        if alone && unsubscribed {
            records.remove(&self.uri);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn a_record_is_kept_only_while_it_says_subscribed() {
        let told = Told::default();
        let mut turn = told.turn("res://a", soon()).await.expect("a free turn");
        assert_eq!(*turn, None);
        *turn = Some(1);
        drop(turn);
        assert_eq!(told.len(), 1, "a subscription is remembered");

        let mut turn = told.turn("res://a", soon()).await.expect("a free turn");
        assert_eq!(*turn, Some(1));
        *turn = None;
        drop(turn);
        assert_eq!(
            told.len(),
            0,
            "an unsubscribed resource leaves nothing behind"
        );

        drop(told.turn("res://b", soon()).await);
        assert_eq!(
            told.len(),
            0,
            "a turn that told nothing leaves nothing behind"
        );
    }

    #[tokio::test]
    async fn the_next_turn_waits_for_the_one_held_and_sees_what_it_told() {
        let told = Arc::new(Told::default());
        let mut first = told.turn("res://a", soon()).await.expect("a free turn");
        let waiting = {
            let told = Arc::clone(&told);
            tokio::spawn(async move { told.turn("res://a", soon()).await.map(|turn| *turn) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the turn is held");
        *first = Some(3);
        drop(first);
        assert_eq!(waiting.await.unwrap(), Some(Some(3)));
    }

    #[tokio::test]
    async fn a_wait_past_its_deadline_gives_up_and_leaves_nothing_behind() {
        let told = Told::default();
        let held = told.turn("res://a", soon()).await.expect("a free turn");
        let waited = told
            .turn("res://a", Instant::now() + Duration::from_millis(20))
            .await;
        assert!(waited.is_none());
        drop(held);
        assert_eq!(told.len(), 0);
    }
}
