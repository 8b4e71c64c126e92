//! [`Notifications`]: what outlives a configuration — the calls watched for expiry and the
//! configuration's [`Notifier`] of the moment.
//!
//! Calls wait across reloads, so the table of their expiries lives as long as the
//! suspension store; the webhooks they are told to are those of the configuration being
//! served when each event happens. Every event has one sender: a waiting call is
//! *claimed* out of the table by whoever sees its end first — the resume that takes it
//! (decided) or the expiry timer, or a look-up that finds it expired (expired) — so a
//! decided call is never also reported expired, and an expired one is reported once.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use futures::future::BoxFuture;
use tokio::sync::watch;
use toolgate_core::suspension::{SuspendedInvocation, SuspensionStore, SuspensionStoreError};

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

    /// Removes and returns the calls due by `now`.
    fn take_due(&mut self, now: SystemTime) -> Vec<Arc<CallSummary>> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_expiry.first()
            && *at <= now
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
                    watched.take_due(SystemTime::now());
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
    /// call, both may report its expiry, under one id ([`Event::new`]). At most `cap`
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

    /// A claimed call expired: `suspension.expired` is sent, as of its expiry.
    pub(crate) fn expired(&self, call: Arc<CallSummary>) {
        let at = call.expires_at.unwrap_or_else(SystemTime::now);
        self.send(WebhookEventName::Expired, at, call, None);
    }

    fn send(
        &self,
        kind: WebhookEventName,
        at: SystemTime,
        call: Arc<CallSummary>,
        decision: Option<DecisionSummary>,
    ) {
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

    /// The earliest expiry watched.
    fn next_expiry(&self) -> Option<SystemTime> {
        self.lock().by_expiry.first().map(|(at, _)| *at)
    }

    /// Reports the calls whose expiry has come, as `store` confirms: one that `store` still
    /// keeps is watched again for its new expiry; one it no longer knows was decided in
    /// the meantime, or forgotten — no expiry is claimed for it.
    async fn expire_due(&self, store: &dyn SuspensionStore) {
        let now = SystemTime::now();
        let due = self.lock().take_due(now);
        for call in due {
            match store.get(&call.id).await {
                Err(SuspensionStoreError::Expired { .. }) => self.expired(call),
                Ok(Some(kept)) => {
                    if let Some(at) = kept.expires_at.filter(|at| *at > now) {
                        let mut later = (*call).clone();
                        later.expires_at = Some(at);
                        self.unclaim(Arc::new(later));
                    }
                }
                Ok(None) => {}
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
        assert!(notifications.lock().take_due(SystemTime::now()).is_empty());
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
}
