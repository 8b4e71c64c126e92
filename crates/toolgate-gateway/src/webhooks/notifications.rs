//! [`Notifications`]: what outlives a configuration — the calls watched for expiry and the
//! configuration's [`Notifier`] of the moment.
//!
//! Calls wait across reloads, so the table of their expiries lives as long as the
//! suspension store; the webhooks they are told to are those of the configuration being
//! served when each event happens. Every event has one sender: a waiting call is
//! *claimed* out of the table by whoever sees its end first — the resume that takes it
//! (decided) or the expiry timer, or a look-up that finds it expired (expired) — so a
//! decided call is never also reported expired, and an expired one is reported once.
//!
//! Across replicas sharing a store, the store says who tells an expiry: each expired call
//! is given to one replica only ([`SuspensionStore::claim_expired`]), which tells it. A
//! replica claims when a call it watches comes due, when a look-up finds one expired, and
//! every [`ADOPT_EVERY`](super::delivery::ADOPT_EVERY) — so the expiry of a call whose
//! replica died before anyone else watched it is told too, at most that much late. A
//! store that cannot claim leaves each process to tell the expiries of the calls it
//! watches (several may then tell one, under one event id).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use futures::future::BoxFuture;
use tokio::sync::watch;
use toolgate_core::User;
use toolgate_core::suspension::{
    DecidedCall, SuspendedInvocation, SuspensionStore, SuspensionStoreError,
};

use super::delivery::{Expiries, Notifier, Watch};
use super::event::{CallSummary, DecisionSummary, Event};
use crate::config::{WebhookConfig, WebhookEventName};

/// The approval notifications of one gateway process. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct Notifications {
    inner: Arc<Inner>,
}

struct Inner {
    watched: Mutex<Watched>,
    current: ArcSwapOption<Notifier>,
    /// Bumped when a call is watched, so that the expiry timer looks again.
    wake: watch::Sender<()>,
    /// Whether the store claims expiries ([`SuspensionStore::claim_expired`]): one of
    /// [`CLAIMS_UNKNOWN`], [`CLAIMS`], [`CLAIMS_NOT`], as the last claim found.
    claims: AtomicU8,
    /// Expiries are left to claim: a sweep claimed a full page, so another is due at once.
    more: AtomicBool,
    /// Every event sent, its kind and call, for tests to count.
    #[cfg(test)]
    sent: Mutex<Vec<(WebhookEventName, String)>>,
}

/// No claim was tried yet.
const CLAIMS_UNKNOWN: u8 = 0;
/// The store claims expiries.
const CLAIMS: u8 = 1;
/// The store cannot claim expiries: each process tells those of the calls it watches.
const CLAIMS_NOT: u8 = 2;

/// The most expiries one sweep claims or confirms: a flood of expired calls is told a page
/// at a time, each page a sweep of its own, so that no sweep holds the store (or this
/// task) for long.
const SWEEP_PAGE: usize = 256;

/// How long after its expiry a watched call that the store still keeps waiting (its clock
/// behind this one's) is looked at again.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// What a round of claims found.
enum Claimed {
    /// The store claims expiries; these calls were claimed and told (by id).
    Told(Vec<String>),
    /// The store cannot claim: each process tells the expiries of what it watches.
    Unsupported,
    /// The store failed: the expiries stay in it, for a later round.
    Failed,
}

/// The waiting calls, by id and by expiry.
#[derive(Default)]
struct Watched {
    by_id: HashMap<String, Arc<CallSummary>>,
    by_expiry: BTreeSet<(SystemTime, String)>,
}

impl Watched {
    fn remove(&mut self, id: &str) -> Option<Arc<CallSummary>> {
        let call = self.by_id.remove(id)?;
        if let Some(at) = call.expires_at {
            self.by_expiry.remove(&(at, call.id.clone()));
        }
        Some(call)
    }

    fn insert(&mut self, call: Arc<CallSummary>, at: SystemTime) {
        self.remove(&call.id);
        self.by_expiry.insert((at, call.id.clone()));
        self.by_id.insert(call.id.clone(), call);
    }

    /// Removes and returns the calls due by `now`, at most `limit` of them (the soonest
    /// due first).
    fn take_due(&mut self, now: SystemTime, limit: usize) -> Vec<Arc<CallSummary>> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_expiry.first()
            && *at <= now
            && due.len() < limit
        {
            let (_, id) = self.by_expiry.pop_first().expect("looked at above");
            due.extend(self.by_id.remove(&id));
        }
        due
    }
}

impl Default for Notifications {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Notifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifications")
            .field("watched", &self.lock().by_id.len())
            .field("webhooks", &self.inner.current.load().is_some())
            .finish()
    }
}

impl Notifications {
    /// No call watched, no webhook.
    pub fn new() -> Self {
        Notifications {
            inner: Arc::new(Inner {
                watched: Mutex::new(Watched::default()),
                current: ArcSwapOption::empty(),
                wake: watch::channel(()).0,
                claims: AtomicU8::new(CLAIMS_UNKNOWN),
                more: AtomicBool::new(false),
                #[cfg(test)]
                sent: Mutex::default(),
            }),
        }
    }

    /// How many waiting calls are watched for expiry.
    pub fn watched(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Makes `notifier` the one events go to (none: events are not sent). The one it
    /// replaces is retired: it stops watching for expiries and finishes what it has queued.
    pub(crate) fn install(&self, notifier: Option<Arc<Notifier>>) {
        if let Some(old) = self.inner.current.swap(notifier) {
            old.retire();
        }
        self.inner.wake.send_replace(());
    }

    /// Stops sending at shutdown: the notifier finishes what it has queued for up to
    /// `wait`; what is left then is not delivered.
    pub async fn shutdown(&self, wait: Duration) {
        if let Some(notifier) = self.inner.current.swap(None) {
            notifier.retire();
            notifier.finished(wait).await;
        }
    }

    /// A call started to wait: it is watched for expiry (unless `cap` calls are watched
    /// already, which the store's own bound prevents) and `suspension.waiting` is sent.
    pub(crate) fn waiting(&self, call: CallSummary, cap: usize) {
        let call = Arc::new(call);
        if let Some(at) = call.expires_at {
            let watched = {
                let mut watched = self.lock();
                if watched.by_id.len() >= cap {
                    // Due calls are left only when no notifier watches: nobody is told.
                    watched.take_due(SystemTime::now(), usize::MAX);
                }
                let room = watched.by_id.len() < cap;
                if room {
                    watched.insert(call.clone(), at);
                }
                room
            };
            if watched {
                self.inner.wake.send_replace(());
            } else {
                tracing::warn!(
                    suspension_id = %call.id,
                    cap,
                    "a waiting call is not watched for expiry: as many calls as the suspension store may hold are watched already; no `suspension.expired` will be sent for it"
                );
            }
        }
        self.send(WebhookEventName::Waiting, SystemTime::now(), call, None);
    }

    /// Watches for expiry every call `store` keeps waiting, as [`waiting`](Self::waiting)
    /// does for a call as it starts to wait, but without telling that it waits (it was
    /// told when it started): the calls of a store that outlives the process (Redis) are
    /// then reported when they expire even though this process did not see them start —
    /// after a restart, or on a replica that started later. Where two processes watch a
    /// call, the store gives its expiry to one ([`SuspensionStore::claim_expired`]); one
    /// that cannot claim leaves both to report it, under one id ([`Event::new`]). At most `cap`
    /// calls are watched in all. How many calls were taken in; a store that cannot list
    /// takes none. The store is listed in its light form
    /// ([`list_expiries`](SuspensionStore::list_expiries)), and only the calls not watched
    /// yet are read, one at a time: a caller's large waiting calls are not read again on
    /// every round, by every replica.
    ///
    /// # Errors
    ///
    /// The store's, when it cannot be read; the calls of the pages read before are
    /// watched.
    pub(crate) async fn adopt(
        &self,
        store: &dyn SuspensionStore,
        cap: usize,
    ) -> Result<usize, SuspensionStoreError> {
        const PAGE: usize = 256;
        let (mut adopted, mut after) = (0, None::<String>);
        loop {
            // Ids and expiries only: this runs every `ADOPT_EVERY` on every replica, and
            // the calls themselves may be large. Only a call not watched yet is read.
            let page = match store.list_expiries(after.as_deref(), PAGE).await {
                Err(SuspensionStoreError::CannotList) => return Ok(adopted),
                page => page?,
            };
            let unwatched: Vec<&str> = {
                let watched = self.lock();
                page.iter()
                    .filter(|(id, at)| at.is_some() && !watched.by_id.contains_key(id.as_str()))
                    .map(|(id, _)| id.as_str())
                    .collect()
            };
            let mut full = self.lock().by_id.len() >= cap;
            for id in unwatched {
                if full {
                    break;
                }
                let call = match store.get(id).await {
                    Ok(Some(call)) => call,
                    // Decided or expired since it was listed: nothing to watch.
                    Ok(None) | Err(SuspensionStoreError::Expired { .. }) => continue,
                    Err(error) => return Err(error),
                };
                let Some(at) = call.expires_at else { continue };
                let mut watched = self.lock();
                if watched.by_id.len() < cap && !watched.by_id.contains_key(&call.id) {
                    watched.insert(Arc::new(CallSummary::of(&call)), at);
                    adopted += 1;
                }
                full = watched.by_id.len() >= cap;
            }
            self.inner.wake.send_replace(());
            match page.last() {
                Some((last, _)) if page.len() == PAGE && !full => after = Some(last.clone()),
                _ => return Ok(adopted),
            }
        }
    }

    /// An approver decided on `call`: `suspension.decided` is sent.
    pub(crate) fn decided(&self, call: &SuspendedInvocation, decision: DecisionSummary) {
        let call = self
            .claim(&call.id)
            .unwrap_or_else(|| Arc::new(CallSummary::of(call)));
        self.send(
            WebhookEventName::Decided,
            SystemTime::now(),
            call,
            Some(decision),
        );
    }

    /// The caller `by` withdrew the call whose running record is `running` while it ran,
    /// for `reason`: `suspension.withdrawn` is sent, with the withdrawal as its decision.
    /// Told by the process that kept the withdrawal, once.
    pub(crate) fn withdrawn(&self, running: &DecidedCall, by: &User, reason: &str) {
        let record = &running.result;
        let text = |field: &str| record[field].as_str().unwrap_or_default().to_owned();
        let call = CallSummary {
            id: running.id.clone(),
            tool: text("tool_name"),
            user: running.user.clone(),
            tenant: running.tenant.clone(),
            reason: text("reason"),
            suspended_at: running.suspended_at.unwrap_or(running.decided_at),
            // It no longer waits: nothing of it expires.
            expires_at: None,
        };
        let withdrawal = DecisionSummary::by("withdraw", by, Some(reason.to_owned()));
        self.send(
            WebhookEventName::Withdrawn,
            SystemTime::now(),
            Arc::new(call),
            Some(withdrawal),
        );
    }

    /// Takes the call `id` out of the watch, so that no expiry is reported for it by
    /// anyone else: the caller now reports its end (or gives it back with
    /// [`unclaim`](Self::unclaim)).
    pub(crate) fn claim(&self, id: &str) -> Option<Arc<CallSummary>> {
        self.lock().remove(id)
    }

    /// Watches a claimed call again (its end did not come after all).
    pub(crate) fn unclaim(&self, call: Arc<CallSummary>) {
        if let Some(at) = call.expires_at {
            self.lock().insert(call, at);
            self.inner.wake.send_replace(());
        }
    }

    /// A claimed call was found expired (by a look-up): `suspension.expired` is sent, as
    /// of its expiry — by this process when the store cannot claim expiries, else by the
    /// one replica the store gives it to: the call is watched again, due at once, so
    /// that the expiry timer claims it.
    pub(crate) fn expired(&self, call: Arc<CallSummary>) {
        if self.inner.claims.load(Ordering::Relaxed) == CLAIMS_NOT {
            self.tell_expired(call);
        } else {
            self.unclaim(call);
        }
    }

    /// Sends `suspension.expired` for `call`, as of its expiry.
    fn tell_expired(&self, call: Arc<CallSummary>) {
        let at = call.expires_at.unwrap_or_else(SystemTime::now);
        self.send(WebhookEventName::Expired, at, call, None);
    }

    /// Claims from `store` up to a page of expiries nobody told yet — of the calls this
    /// process watches or not: those of a replica gone too — and tells them. A full page
    /// leaves another sweep due at once.
    async fn claim_expired(&self, store: &dyn SuspensionStore) -> Claimed {
        let claimed = match store.claim_expired(SWEEP_PAGE).await {
            Ok(claimed) => claimed,
            Err(SuspensionStoreError::CannotList) => {
                self.inner.claims.store(CLAIMS_NOT, Ordering::Relaxed);
                return Claimed::Unsupported;
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    "the expired calls of the suspension store could not be claimed: their `suspension.expired` is sent once it can be"
                );
                return Claimed::Failed;
            }
        };
        self.inner.claims.store(CLAIMS, Ordering::Relaxed);
        if claimed.len() >= SWEEP_PAGE {
            self.inner.more.store(true, Ordering::Relaxed);
            self.inner.wake.send_replace(());
        }
        let mut told = Vec::with_capacity(claimed.len());
        for call in claimed {
            let summary = self
                .claim(&call.id)
                .unwrap_or_else(|| Arc::new(CallSummary::of(&call)));
            told.push(call.id);
            self.tell_expired(summary);
        }
        Claimed::Told(told)
    }

    fn send(
        &self,
        kind: WebhookEventName,
        at: SystemTime,
        call: Arc<CallSummary>,
        decision: Option<DecisionSummary>,
    ) {
        #[cfg(test)]
        self.inner
            .sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((kind, call.id.clone()));
        if let Some(notifier) = self.inner.current.load().as_ref()
            && notifier.subscribes(kind)
        {
            notifier.enqueue(Arc::new(Event::new(kind, at, call, decision)));
        }
    }

    /// Starts the notifier of `webhooks` (checked at load), watching the expiries of
    /// these notifications (confirming each with `store`) until it is retired, and taking
    /// in the calls `store` keeps waiting that this process did not see start, at once and
    /// every [`ADOPT_EVERY`](super::delivery::ADOPT_EVERY), up to `cap` watched in all
    /// ([`adopt`](Self::adopt)); events go to it once it is [installed](Self::install).
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be made (no TLS backend).
    pub(crate) fn start_notifier(
        &self,
        webhooks: &[WebhookConfig],
        store: Arc<dyn SuspensionStore>,
        cap: usize,
    ) -> Result<Arc<Notifier>, String> {
        let inner = Arc::downgrade(&self.inner);
        let watch = Watch {
            upgrade: Box::new(move || {
                let inner = inner.upgrade()?;
                Some(Box::new(Notifications { inner }) as Box<dyn Expiries>)
            }),
            wake_ups: self.inner.wake.subscribe(),
        };
        Notifier::start(webhooks, watch, store, cap)
    }

    /// The earliest expiry watched (the epoch when expiries are left to claim).
    fn next_expiry(&self) -> Option<SystemTime> {
        if self.inner.more.load(Ordering::Relaxed) {
            return Some(SystemTime::UNIX_EPOCH);
        }
        self.lock().by_expiry.first().map(|(at, _)| *at)
    }

    /// Reports the calls whose expiry has come, as `store` confirms, a page at a time.
    /// Where the store claims expiries, it tells which of them (and of other replicas'
    /// calls) this process tells; a due call it did not give is told by another replica,
    /// or was decided, unless the store keeps it waiting still (then it is watched again).
    /// Otherwise each due call is looked up: told if expired; one `store` still keeps is
    /// watched again for its new expiry; one it no longer knows was decided in the
    /// meantime, or forgotten — no expiry is claimed for it.
    async fn expire_due(&self, store: &dyn SuspensionStore) {
        let now = SystemTime::now();
        self.inner.more.store(false, Ordering::Relaxed);
        let due = self.lock().take_due(now, SWEEP_PAGE);
        if due.len() >= SWEEP_PAGE {
            self.inner.more.store(true, Ordering::Relaxed);
        }
        let claimed = match self.claim_expired(store).await {
            Claimed::Told(told) => Some(told),
            Claimed::Unsupported => None,
            // The store keeps them: the next round claims them, here or elsewhere.
            Claimed::Failed => return,
        };
        for call in due {
            if claimed.as_ref().is_some_and(|told| told.contains(&call.id)) {
                continue;
            }
            match store.get(&call.id).await {
                Err(SuspensionStoreError::Expired { .. }) if claimed.is_none() => {
                    self.tell_expired(call);
                }
                Ok(Some(kept)) => {
                    let at = kept.expires_at.filter(|at| *at > now);
                    let at = match (at, &claimed) {
                        (Some(at), _) => at,
                        // Its expiry came here but not yet at the store: looked at again.
                        (None, Some(_)) => now + RECHECK_AFTER,
                        (None, None) => continue,
                    };
                    let mut later = (*call).clone();
                    later.expires_at = Some(at);
                    self.unclaim(Arc::new(later));
                }
                Ok(None) | Err(SuspensionStoreError::Expired { .. }) => {}
                Err(error) => tracing::warn!(
                    suspension_id = %call.id,
                    error = %error,
                    "whether a waiting call expired could not be read from the suspension store; no `suspension.expired` is sent for it"
                ),
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Watched> {
        self.inner
            .watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Expiries for Notifications {
    fn next_expiry(&self) -> Option<SystemTime> {
        Notifications::next_expiry(self)
    }

    fn expire_due<'a>(&'a self, store: &'a dyn SuspensionStore) -> BoxFuture<'a, ()> {
        Box::pin(Notifications::expire_due(self, store))
    }

    fn adopt_stored<'a>(&'a self, store: &'a dyn SuspensionStore, cap: usize) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // The expiries nobody told: of calls that expired before any replica watching
            // them came to them, their replica gone.
            self.claim_expired(store).await;
            match self.adopt(store, cap).await {
                Ok(0) => {}
                Ok(calls) => tracing::info!(
                    calls,
                    "waiting calls kept by the suspension store are watched for expiry"
                ),
                Err(error) => tracing::warn!(
                    %error,
                    "the waiting calls of the suspension store could not be listed: those this process did not see start get no `suspension.expired` from it until it can"
                ),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use toolgate_core::suspension::InMemorySuspensionStore;

    use super::*;
    use crate::config::{EnvString, WebhookFormatName};

    fn call(id: &str, expires_in: u64) -> CallSummary {
        let now = SystemTime::now();
        CallSummary {
            id: id.into(),
            tool: "deploy".into(),
            user: "bob".into(),
            tenant: None,
            reason: "needs approval".into(),
            suspended_at: now,
            expires_at: Some(now + Duration::from_secs(expires_in)),
        }
    }

    #[test]
    fn a_claimed_call_is_claimed_once_and_no_longer_due() {
        let notifications = Notifications::new();
        notifications.waiting(call("a", 0), 10);
        notifications.waiting(call("b", 3600), 10);

        assert_eq!(
            notifications.claim("a").map(|c| c.id.clone()).as_deref(),
            Some("a")
        );
        assert!(notifications.claim("a").is_none(), "claimed once");
        assert!(
            notifications
                .lock()
                .take_due(SystemTime::now(), usize::MAX)
                .is_empty()
        );
        assert_eq!(notifications.watched(), 1);
    }

    #[test]
    fn the_watch_is_bounded_and_makes_room_from_calls_already_due() {
        let notifications = Notifications::new();
        notifications.waiting(call("due", 0), 2);
        notifications.waiting(call("later", 3600), 2);

        notifications.waiting(call("third", 3600), 2);
        notifications.waiting(call("fourth", 3600), 2);

        assert_eq!(notifications.watched(), 2);
        assert!(
            notifications.claim("due").is_none(),
            "made room for `third`"
        );
        assert!(notifications.claim("fourth").is_none(), "no room left");
        assert!(notifications.claim("third").is_some());
    }

    /// A webhook nobody answers at (port 9, discard).
    fn unreachable_webhook() -> WebhookConfig {
        WebhookConfig {
            url: EnvString("http://127.0.0.1:9/hook".into()),
            secret: EnvString("0123456789abcdef".into()),
            format: WebhookFormatName::Json,
            events: WebhookEventName::ALL.to_vec(),
            caller_share: crate::webhooks::CALLER_SHARE,
        }
    }

    /// A call parked through another replica after this one started, as the store keeps
    /// it.
    fn parked_elsewhere(id: &str) -> SuspendedInvocation {
        let now = SystemTime::now();
        SuspendedInvocation {
            id: id.into(),
            tool: "deploy".into(),
            tool_version: "1".into(),
            session_id: None,
            request_id: "r1".into(),
            user: toolgate_core::User::new("bob"),
            input: serde_json::json!({}),
            output: None,
            metadata: serde_json::Map::new(),
            stage: toolgate_core::Stage::WillExecute,
            reason: "needs approval".into(),
            payload: serde_json::Value::Null,
            suspended_at: now,
            expires_at: Some(now + Duration::from_secs(3600)),
            binding: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_serving_notifier_takes_in_calls_parked_elsewhere_since_it_started() {
        let notifications = Notifications::new();
        let webhooks = [unreachable_webhook()];
        let store = Arc::new(InMemorySuspensionStore::default());
        store.save(parked_elsewhere("before")).await.unwrap();
        let notifier = notifications
            .start_notifier(&webhooks, store.clone(), 100)
            .unwrap();
        notifications.install(Some(notifier));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(notifications.watched(), 1, "the calls kept when it started");
        // Parked through another replica, which is gone before the call expires: this
        // one must still report the expiry, so it must watch the call.
        store.save(parked_elsewhere("later")).await.unwrap();
        tokio::time::sleep(super::super::delivery::ADOPT_EVERY + Duration::from_secs(1)).await;
        assert_eq!(notifications.watched(), 2);
    }

    /// A store that counts the calls read in full: by a listing, or one by one.
    struct CountingReads {
        inner: InMemorySuspensionStore,
        listed: std::sync::atomic::AtomicUsize,
        got: std::sync::atomic::AtomicUsize,
    }

    #[toolgate_core::external::async_trait]
    impl SuspensionStore for CountingReads {
        async fn save(&self, call: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
            self.inner.save(call).await
        }
        async fn take(
            &self,
            id: &str,
        ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
            self.inner.take(id).await
        }
        async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
            self.got.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.get(id).await
        }
        async fn list(
            &self,
            filter: &toolgate_core::suspension::SuspensionFilter,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
            self.listed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.list(filter, after, limit).await
        }
        async fn list_expiries(
            &self,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<(String, Option<SystemTime>)>, SuspensionStoreError> {
            self.inner.list_expiries(after, limit).await
        }
    }

    #[tokio::test]
    async fn adopting_reads_only_the_calls_not_watched_yet_never_a_full_listing() {
        let notifications = Notifications::new();
        let store = CountingReads {
            inner: InMemorySuspensionStore::default(),
            listed: Default::default(),
            got: Default::default(),
        };
        for id in ["a", "b", "c"] {
            store.save(parked_elsewhere(id)).await.unwrap();
        }
        notifications.waiting(CallSummary::of(&parked_elsewhere("a")), 100);

        assert_eq!(notifications.adopt(&store, 100).await.unwrap(), 2);
        assert_eq!(notifications.adopt(&store, 100).await.unwrap(), 0);
        assert_eq!(notifications.watched(), 3);
        let reads = |count: &std::sync::atomic::AtomicUsize| {
            count.load(std::sync::atomic::Ordering::SeqCst)
        };
        assert_eq!(reads(&store.got), 2, "`b` and `c`, once each");
        assert_eq!(
            reads(&store.listed),
            0,
            "the calls are never listed in full"
        );
    }

    #[tokio::test]
    async fn a_replaced_notifier_ends_its_task() {
        let notifications = Notifications::new();
        let webhooks = [unreachable_webhook()];
        let store = Arc::new(InMemorySuspensionStore::default());
        let first = notifications
            .start_notifier(&webhooks, store.clone(), 100)
            .unwrap();
        let task = first.take_task().unwrap();
        notifications.install(Some(first));

        let second = notifications
            .start_notifier(&webhooks, store.clone(), 100)
            .unwrap();
        notifications.install(Some(second.clone()));

        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the replaced notifier's task ends")
            .unwrap();
        let task = second.take_task().unwrap();
        drop(second);
        drop(notifications);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("a notifier whose notifications are gone ends its task")
            .unwrap();
    }

    /// The calls `notifications` told expired, in the order told.
    fn told_expired(notifications: &Notifications) -> Vec<String> {
        let sent = notifications.inner.sent.lock().unwrap();
        sent.iter()
            .filter(|(kind, _)| *kind == WebhookEventName::Expired)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// A call parked through a replica, already expired: the store keeps it, and its
    /// expiry is due.
    async fn parked_and_expired(store: &InMemorySuspensionStore, id: &str) -> CallSummary {
        let mut call = parked_elsewhere(id);
        call.expires_at = Some(SystemTime::now() - Duration::from_millis(1));
        store.save(call.clone()).await.unwrap();
        CallSummary::of(&call)
    }

    #[tokio::test]
    async fn an_expiry_whose_replica_died_before_anyone_watched_the_call_is_told_once() {
        let store = InMemorySuspensionStore::default();
        let parked_on = Notifications::new();
        parked_on.waiting(parked_and_expired(&store, "orphan").await, 100);
        // The replica that parked the call dies before it comes to its expiry, and before
        // any other replica took the call in.
        drop(parked_on);
        let (first, second) = (Notifications::new(), Notifications::new());

        // Both replicas' rounds (as every `ADOPT_EVERY`), twice.
        for _ in 0..2 {
            first.adopt_stored(&store, 100).await;
            second.adopt_stored(&store, 100).await;
        }

        let told = [told_expired(&first), told_expired(&second)].concat();
        assert_eq!(told, ["orphan"]);
    }

    #[tokio::test]
    async fn two_replicas_watching_one_call_tell_its_expiry_once() {
        let store = InMemorySuspensionStore::default();
        let call = parked_and_expired(&store, "watched").await;
        let replicas = [Notifications::new(), Notifications::new()];
        for replica in &replicas {
            replica.waiting(call.clone(), 100);
        }

        for replica in &replicas {
            assert!(
                replica
                    .next_expiry()
                    .is_some_and(|at| at <= SystemTime::now())
            );
            replica.expire_due(&store).await;
        }

        let told: Vec<String> = replicas.iter().flat_map(told_expired).collect();
        assert_eq!(told, ["watched"]);
        assert!(replicas.iter().all(|r| r.watched() == 0));
    }

    #[tokio::test]
    async fn a_look_up_that_finds_a_call_expired_leaves_its_telling_to_the_store() {
        let store = InMemorySuspensionStore::default();
        let (here, there) = (Notifications::new(), Notifications::new());
        for replica in [&here, &there] {
            // A first round, nothing expired yet: the store claims expiries.
            replica.adopt_stored(&store, 100).await;
        }
        let call = parked_and_expired(&store, "looked-up").await;
        for replica in [&here, &there] {
            replica.waiting(call.clone(), 100);
        }

        // As `NotifyingStore` does when a look-up answers that the call expired.
        let claimed = here.claim("looked-up").unwrap();
        here.expired(claimed);
        assert!(told_expired(&here).is_empty(), "left to the timer's claim");
        there.expire_due(&store).await;
        here.expire_due(&store).await;

        let told = [told_expired(&here), told_expired(&there)].concat();
        assert_eq!(told, ["looked-up"]);
        assert_eq!(here.watched() + there.watched(), 0);
    }

    #[tokio::test]
    async fn a_flood_of_expired_calls_is_told_a_page_a_sweep_each_once() {
        let store = InMemorySuspensionStore::default();
        let flood = 2 * SWEEP_PAGE + 10;
        for i in 0..flood {
            parked_and_expired(&store, &format!("c{i:04}")).await;
        }
        let replica = Notifications::new();

        replica.adopt_stored(&store, 10_000).await;
        assert_eq!(told_expired(&replica).len(), SWEEP_PAGE, "one page a sweep");
        // The rest is due at once, a page a sweep.
        let mut sweeps = 1;
        while replica
            .next_expiry()
            .is_some_and(|at| at <= SystemTime::now())
        {
            let before = told_expired(&replica).len();
            replica.expire_due(&store).await;
            assert!(told_expired(&replica).len() - before <= SWEEP_PAGE);
            sweeps += 1;
            assert!(
                sweeps <= 4,
                "the flood is drained in a bounded number of sweeps"
            );
        }

        let mut told = told_expired(&replica);
        told.sort();
        told.dedup();
        assert_eq!(told.len(), flood, "each call told, once");
        assert_eq!(told_expired(&replica).len(), flood);
    }
}
