//! [`InMemorySuspensionStore`]: the default store.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;

use super::{
    DecidedCall, RetryApproval, SuspendedInvocation, SuspensionFilter, SuspensionLimits,
    SuspensionStore, SuspensionStoreError, SuspensionTable,
};
use crate::user::User;

/// The wall clock a store stamps and checks expiry with.
type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The default store: in this process, under [`SuspensionLimits`] — per-caller (a user id
/// in a tenant) and total caps on the number of waiting calls and on their bytes, and
/// expiry.
///
/// # Examples
///
/// ```
/// use toolgate_core::suspension::{InMemorySuspensionStore, SuspensionLimits};
///
/// let store = InMemorySuspensionStore::new(SuspensionLimits::default());
/// assert!(store.is_empty());
/// ```
pub struct InMemorySuspensionStore {
    table: Mutex<SuspensionTable>,
    clock: WallClock,
}

impl InMemorySuspensionStore {
    /// A store under `limits`.
    pub fn new(limits: SuspensionLimits) -> Self {
        InMemorySuspensionStore {
            table: Mutex::new(SuspensionTable::new(limits)),
            clock: Arc::new(SystemTime::now),
        }
    }

    /// The same store, reading the time from `clock` instead of the system clock: for
    /// tests that move time forward to see calls expire.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The bounds.
    pub fn limits(&self) -> SuspensionLimits {
        self.lock().limits()
    }

    /// Changes the bounds (a configuration reload): they apply to calls suspended from now
    /// on; calls already waiting keep their expiry.
    pub fn set_limits(&self, limits: SuspensionLimits) {
        self.lock().set_limits(limits);
    }

    /// How many calls wait (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many calls of the caller `user` (its id in its tenant) wait.
    pub fn waiting_for(&self, user: &User) -> usize {
        self.lock().waiting_for(user)
    }

    /// Removes the calls that have expired; how many there were. Saving and looking up
    /// do this as they go, so calling it is only needed to free memory sooner.
    pub fn remove_expired(&self) -> usize {
        let now = (self.clock)();
        self.lock().remove_expired(now)
    }

    fn lock(&self) -> MutexGuard<'_, SuspensionTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for InMemorySuspensionStore {
    fn default() -> Self {
        InMemorySuspensionStore::new(SuspensionLimits::default())
    }
}

impl std::fmt::Debug for InMemorySuspensionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemorySuspensionStore")
            .field("waiting", &self.len())
            .field("limits", &self.limits())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl SuspensionStore for InMemorySuspensionStore {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        let now = (self.clock)();
        self.lock().insert(suspended, now)
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        self.lock().take(id, now)
    }

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().get(id, now)?.cloned())
    }

    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().expired_owner(id, now))
    }

    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().list(filter, after, limit, now))
    }

    async fn claim_expired(
        &self,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().claim_expired(limit, now))
    }

    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        let now = (self.clock)();
        self.lock().keep_retry_approval(approval, now)
    }

    async fn use_retry_approval(
        &self,
        key: &str,
    ) -> Result<Option<RetryApproval>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().use_retry_approval(key, now))
    }

    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        let now = (self.clock)();
        self.lock().keep_outcome(outcome, now);
        Ok(())
    }

    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().keep_running(record, token, now))
    }

    async fn take_running(
        &self,
        id: &str,
        record: DecidedCall,
        token: &str,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        self.lock().take_running(id, record, token, now)
    }

    async fn keep_outcome_over_running(
        &self,
        outcome: DecidedCall,
    ) -> Result<bool, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().keep_outcome_over_running(outcome, now))
    }

    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().remove_running(id, token, now))
    }

    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().outcome(id, now).cloned())
    }

    async fn list_outcomes(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DecidedCall>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().list_outcomes(filter, after, limit, now))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::suspension::table::tests::{call, call_by};

    /// A store whose clock stands still until the returned counter of seconds moves it.
    fn store_with_clock(limits: SuspensionLimits) -> (InMemorySuspensionStore, Arc<AtomicU64>) {
        let seconds = Arc::new(AtomicU64::new(0));
        let read = Arc::clone(&seconds);
        let store = InMemorySuspensionStore::new(limits).with_clock(move || {
            SystemTime::UNIX_EPOCH + Duration::from_secs(read.load(Ordering::SeqCst))
        });
        (store, seconds)
    }

    #[tokio::test]
    async fn one_user_past_the_cap_is_refused_while_others_still_park() {
        let limits = SuspensionLimits {
            max_per_user: 3,
            ..SuspensionLimits::default()
        };
        let store = InMemorySuspensionStore::new(limits);
        for i in 0..3 {
            store.save(call(&format!("m{i}"), "mallory")).await.unwrap();
        }

        let refused = store.save(call("m3", "mallory")).await.unwrap_err();

        assert!(matches!(
            refused,
            SuspensionStoreError::UserFull { max: 3, .. }
        ));
        store.save(call("a0", "ann")).await.unwrap();
        assert_eq!(
            (
                store.waiting_for(&User::new("mallory")),
                store.waiting_for(&User::new("ann"))
            ),
            (3, 1)
        );
        assert!(store.get("m3").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_call_past_its_expiry_answers_expired_and_frees_its_place() {
        let limits = SuspensionLimits {
            max_per_user: 1,
            expire_after: Duration::from_secs(24 * 3600),
            ..SuspensionLimits::default()
        };
        let (store, seconds) = store_with_clock(limits);
        store.save(call("first", "ann")).await.unwrap();
        seconds.store(24 * 3600 - 1, Ordering::SeqCst);
        assert!(store.save(call("second", "ann")).await.is_err());
        assert!(store.get("first").await.unwrap().is_some());

        seconds.store(24 * 3600, Ordering::SeqCst);

        store.save(call("second", "ann")).await.unwrap();
        assert_eq!(store.len(), 1, "the expired call was removed");
        assert_eq!(
            store.take("first").await,
            Err(SuspensionStoreError::Expired { id: "first".into() })
        );
        assert_eq!(
            store.get("second").await.unwrap().unwrap().expires_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(48 * 3600))
        );
    }

    #[tokio::test]
    async fn an_expired_call_is_remembered_with_who_made_it_so_only_they_are_told_it_expired() {
        let limits = SuspensionLimits {
            expire_after: Duration::from_secs(60),
            ..SuspensionLimits::default()
        };
        let (store, seconds) = store_with_clock(limits);
        store.save(call("anns", "ann")).await.unwrap();
        store.save(call("bobs", "bob")).await.unwrap();
        assert_eq!(store.expired_owner("anns").await, Ok(None), "it waits");

        seconds.store(60, Ordering::SeqCst);
        let looked_up = store.get("anns").await;
        store.remove_expired();

        assert_eq!(
            looked_up,
            Err(SuspensionStoreError::Expired { id: "anns".into() })
        );
        assert_eq!(
            store.expired_owner("anns").await,
            Ok(Some(User::new("ann")))
        );
        assert_eq!(
            store.expired_owner("bobs").await,
            Ok(Some(User::new("bob")))
        );
        assert_eq!(store.expired_owner("never").await, Ok(None));
    }

    #[tokio::test]
    async fn a_flood_from_ann_of_globex_does_not_take_the_places_of_ann_of_acme() {
        let limits = SuspensionLimits {
            max_per_user: 3,
            ..SuspensionLimits::default()
        };
        let store = InMemorySuspensionStore::new(limits);
        let globex = User::new("ann").with_tenant("globex");
        let acme = User::new("ann").with_tenant("acme");
        for i in 0..3 {
            store
                .save(call_by(&format!("g{i}"), &globex))
                .await
                .unwrap();
        }

        let flood = store.save(call_by("g3", &globex)).await;

        assert_eq!(flood, Err(SuspensionStoreError::user_full(&globex, 3)));
        for i in 0..3 {
            store.save(call_by(&format!("a{i}"), &acme)).await.unwrap();
        }
        assert_eq!(
            (store.waiting_for(&globex), store.waiting_for(&acme)),
            (3, 3)
        );
    }

    #[tokio::test]
    async fn an_expired_call_is_told_expired_to_its_own_caller_only_not_to_ann_of_another_tenant() {
        let limits = SuspensionLimits {
            expire_after: Duration::from_secs(60),
            ..SuspensionLimits::default()
        };
        let (store, seconds) = store_with_clock(limits);
        let acme = User::new("ann").with_tenant("acme");
        store.save(call_by("anns", &acme)).await.unwrap();
        seconds.store(60, Ordering::SeqCst);
        assert!(store.get("anns").await.is_err());

        let owner = store
            .expired_owner("anns")
            .await
            .unwrap()
            .expect("an owner");

        // What a host answers 410 to; anyone else gets the 404 of an unknown id.
        let told = |asking: &User| owner.is_same_caller(asking);
        assert!(told(&acme.clone().with_roles(["ops"])));
        assert!(!told(&User::new("ann").with_tenant("globex")));
        assert!(!told(&User::new("ann")));
    }

    #[tokio::test]
    async fn a_listing_pages_in_id_order_with_filters_and_skips_expired_calls() {
        let limits = SuspensionLimits {
            expire_after: Duration::from_secs(60),
            ..SuspensionLimits::default()
        };
        let (store, seconds) = store_with_clock(limits);
        store.save(call("a-old", "ann")).await.unwrap();
        seconds.store(30, Ordering::SeqCst);
        for (id, user) in [("b", "bob"), ("c", "ann"), ("d", "ann")] {
            let mut suspended = call(id, user);
            suspended.suspended_at = SystemTime::UNIX_EPOCH + Duration::from_secs(30);
            store.save(suspended).await.unwrap();
        }
        let ids =
            |page: Vec<SuspendedInvocation>| page.into_iter().map(|s| s.id).collect::<Vec<_>>();
        let ann = SuspensionFilter {
            user: Some("ann".into()),
            ..SuspensionFilter::default()
        };

        let first = store.list(&ann, None, 2).await.unwrap();
        let second = store.list(&ann, Some("c"), 2).await.unwrap();
        let since = SuspensionFilter {
            since: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10)),
            ..SuspensionFilter::default()
        };
        let recent = store.list(&since, None, 10).await.unwrap();
        let other_tool = SuspensionFilter {
            tool: Some("other".into()),
            ..SuspensionFilter::default()
        };
        seconds.store(61, Ordering::SeqCst);
        let after_expiry = store.list(&ann, None, 10).await.unwrap();

        assert_eq!(ids(first), ["a-old", "c"]);
        assert_eq!(ids(second), ["d"]);
        assert_eq!(ids(recent), ["b", "c", "d"]);
        assert!(store.list(&other_tool, None, 10).await.unwrap().is_empty());
        assert_eq!(
            ids(after_expiry),
            ["c", "d"],
            "the expired call is not listed"
        );
    }

    /// A store that only looks calls up by id.
    struct ByIdOnly;

    #[async_trait]
    impl SuspensionStore for ByIdOnly {
        async fn save(&self, _: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
            Ok(())
        }
        async fn take(&self, _: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
            Ok(None)
        }
        async fn get(&self, _: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
            Ok(None)
        }
    }

    #[tokio::test]
    async fn a_store_that_cannot_list_says_so() {
        let listed = ByIdOnly.list(&SuspensionFilter::default(), None, 10).await;

        assert_eq!(listed, Err(SuspensionStoreError::CannotList));
    }

    #[tokio::test]
    async fn an_expired_call_is_claimed_once_without_its_contents_and_a_decided_one_never() {
        let limits = SuspensionLimits {
            expire_after: Duration::from_secs(60),
            ..SuspensionLimits::default()
        };
        let (store, seconds) = store_with_clock(limits);
        store.save(call("forgotten", "ann")).await.unwrap();
        store.save(call("decided", "ann")).await.unwrap();
        assert!(store.claim_expired(10).await.unwrap().is_empty());
        assert!(store.take("decided").await.unwrap().is_some());

        seconds.store(60, Ordering::SeqCst);
        // Found expired by a look-up first: still there to claim.
        assert!(store.get("forgotten").await.is_err());
        let claimed = store.claim_expired(10).await.unwrap();

        let ids: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["forgotten"]);
        assert_eq!(claimed[0].input, serde_json::Value::Null, "no contents");
        assert_eq!(claimed[0].tool, "deploy");
        assert!(store.claim_expired(10).await.unwrap().is_empty(), "once");
        // Unclaimed for `expire_after` (ten minutes at least) after its expiry: dropped.
        store.save(call("late", "ann")).await.unwrap();
        seconds.store(120 + 600, Ordering::SeqCst);
        assert!(store.claim_expired(10).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn expired_calls_are_claimed_a_page_at_a_time_and_at_most_max_total_are_kept() {
        let limits = SuspensionLimits {
            max_total: 3,
            expire_after: Duration::from_secs(60),
            ..SuspensionLimits::default()
        };
        let (store, seconds) = store_with_clock(limits);
        for (flood, at) in [("a", 60), ("b", 120)] {
            for i in 0..3 {
                store
                    .save(call(&format!("{flood}{i}"), "ann"))
                    .await
                    .unwrap();
            }
            seconds.store(at, Ordering::SeqCst);
        }

        let first = store.claim_expired(2).await.unwrap();
        let second = store.claim_expired(2).await.unwrap();

        let ids: Vec<&str> = first.iter().chain(&second).map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["b0", "b1", "b2"], "the latest, oldest expiry first");
        assert!(store.claim_expired(2).await.unwrap().is_empty());
    }
}
