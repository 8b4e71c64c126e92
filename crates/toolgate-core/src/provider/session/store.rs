//! [`SessionStore`]: the live sessions of a pipeline, bounded by idle expiry, a share per
//! caller and a total count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
// The tokio clock (the system clock outside tests), so that idle expiry follows a paused
// test clock instead of needing real sleeps.
use tokio::time::Instant;
use typemap_rev::TypeMapKey;

use super::SessionConfig;
use crate::provider::Providers;
use crate::user::User;

/// The providers of one session.
pub(crate) struct SessionScope {
    providers: RwLock<Providers>,
    /// For idle expiry.
    last_used_ms: AtomicU64,
    /// The store's use count when the session was last used: orders sessions for eviction
    /// without the ties of a millisecond clock.
    last_use: AtomicU64,
    /// The [caller key](User::caller_key) of the caller whose call made the session;
    /// `None` for a session the host made.
    maker: Option<Arc<str>>,
}

impl SessionScope {
    pub(crate) fn get<K: TypeMapKey>(&self) -> Option<Arc<K::Value>> {
        let guard = self.providers.read().unwrap_or_else(|e| e.into_inner());
        guard.get::<K>().cloned()
    }

    pub(crate) fn insert<K: TypeMapKey>(&self, value: Arc<K::Value>) {
        let mut guard = self.providers.write().unwrap_or_else(|e| e.into_inner());
        guard.insert_arc::<K>(value);
    }

    /// Whether `bound` holds of this session's providers.
    pub(crate) fn holds(&self, bound: fn(&Providers) -> bool) -> bool {
        bound(&self.providers.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A session as eviction sees it: its last use, its id and the scope itself (so that a
/// session made again under the same id in the meantime is not the one removed).
type Aged = (u64, Arc<str>, Arc<SessionScope>);

/// All live sessions of a pipeline.
///
/// Lock order: a `sessions` shard may be held while a `by_caller` shard is taken (when a
/// session is made), never the other way round.
pub(crate) struct SessionStore {
    sessions: DashMap<Arc<str>, Arc<SessionScope>>,
    /// The sessions each caller's calls made, by caller key: what their share counts and
    /// where their own least recently used sessions are found without scanning the rest.
    by_caller: DashMap<Arc<str>, HashMap<Arc<str>, Arc<SessionScope>>>,
    uses: AtomicU64,
    config: SessionConfig,
    epoch: Instant,
    last_sweep_ms: AtomicU64,
}

impl SessionStore {
    pub(crate) fn new(config: SessionConfig) -> Self {
        SessionStore {
            sessions: DashMap::new(),
            by_caller: DashMap::new(),
            uses: AtomicU64::new(0),
            config,
            epoch: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn is_idle(&self, scope: &SessionScope, now: u64) -> bool {
        now.saturating_sub(scope.last_used_ms.load(Ordering::Relaxed))
            > self.config.idle_timeout.as_millis() as u64
    }

    fn mark_used(&self, scope: &SessionScope, now: u64) {
        scope.last_used_ms.store(now, Ordering::Relaxed);
        let turn = self.uses.fetch_add(1, Ordering::Relaxed);
        scope.last_use.store(turn, Ordering::Relaxed);
    }

    /// The session's scope if it exists and has not expired; marks it used.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<SessionScope>> {
        let now = self.now_ms();
        let scope = self.sessions.get(id).map(|s| Arc::clone(&s))?;
        if self.is_idle(&scope, now) {
            if let Some((id, gone)) = self.sessions.remove_if(id, |_, s| self.is_idle(s, now)) {
                self.unindex(&id, &gone);
            }
            return None;
        }
        self.mark_used(&scope, now);
        Some(scope)
    }

    /// The session's scope, made if needed for `maker` — the caller whose call makes it,
    /// or `None` for the host — which may evict others when the store is full
    /// ([`make_room`](Self::make_room)).
    pub(crate) fn get_or_create(&self, id: &Arc<str>, maker: Option<&User>) -> Arc<SessionScope> {
        if let Some(scope) = self.get(id) {
            return scope;
        }
        let maker: Option<Arc<str>> = maker.map(|user| Arc::from(user.caller_key()));
        self.make_room();
        let now = self.now_ms();
        let entry = self.sessions.entry(Arc::clone(id)).or_insert_with(|| {
            let scope = Arc::new(SessionScope {
                providers: RwLock::new(Providers::new()),
                last_used_ms: AtomicU64::new(now),
                last_use: AtomicU64::new(0),
                maker: maker.clone(),
            });
            self.mark_used(&scope, now);
            if let Some(maker) = maker {
                // Indexed while the session's shard is held, so no removal can miss it.
                self.by_caller
                    .entry(maker)
                    .or_default()
                    .insert(Arc::clone(id), Arc::clone(&scope));
            }
            scope
        });
        Arc::clone(&entry)
    }

    /// Drops idle sessions now and then; and when the store is full, evicts a tenth of its
    /// maximum (at least one session) in one pass, so that a flood of new ids costs one
    /// scan per many inserts: the least recently used sessions of the caller whose calls
    /// hold the most, if they hold more than their share (a tenth of the maximum) — the
    /// one flooding pays, never the callers under their share — and otherwise the least
    /// recently used of all.
    fn make_room(&self) {
        let now = self.now_ms();
        let sweep_every = (self.config.idle_timeout.as_millis() as u64 / 4).max(1);
        if now.saturating_sub(self.last_sweep_ms.load(Ordering::Relaxed)) >= sweep_every {
            self.last_sweep_ms.store(now, Ordering::Relaxed);
            let mut idle = Vec::new();
            self.sessions.retain(|id, s| {
                let keep = !self.is_idle(s, now);
                if !keep {
                    idle.push((Arc::clone(id), Arc::clone(s)));
                }
                keep
            });
            for (id, scope) in idle {
                self.unindex(&id, &scope);
            }
        }
        if self.sessions.len() < self.config.max_sessions {
            return;
        }
        let evict = self.config.max_sessions / 10;
        let aged = |(id, s): (&Arc<str>, &Arc<SessionScope>)| -> Aged {
            let last_use = s.last_use.load(Ordering::Relaxed);
            (last_use, Arc::clone(id), Arc::clone(s))
        };
        let heaviest = self
            .by_caller
            .iter()
            .filter(|held| held.len() > self.config.caller_share())
            .max_by_key(|held| held.len())
            .map(|held| held.iter().map(aged).collect::<Vec<_>>());
        let aged = match heaviest {
            Some(theirs) => theirs,
            None => self
                .sessions
                .iter()
                .map(|e| aged((e.key(), e.value())))
                .collect(),
        };
        self.evict_oldest(aged, evict);
    }

    /// Removes the `count` (at least one) least recently used of `aged`.
    fn evict_oldest(&self, mut aged: Vec<Aged>, count: usize) {
        let count = count.max(1).min(aged.len());
        if count < aged.len() {
            aged.select_nth_unstable_by_key(count, |(last_use, _, _)| *last_use);
        }
        for (_, id, scope) in aged.into_iter().take(count) {
            self.sessions.remove_if(&id, |_, s| Arc::ptr_eq(s, &scope));
            self.unindex(&id, &scope);
        }
    }

    /// Drops a removed session from its maker's sessions.
    fn unindex(&self, id: &str, scope: &Arc<SessionScope>) {
        let Some(maker) = &scope.maker else {
            return;
        };
        let emptied = {
            let Some(mut held) = self.by_caller.get_mut(maker) else {
                return;
            };
            if held.get(id).is_some_and(|s| Arc::ptr_eq(s, scope)) {
                held.remove(id);
            }
            held.is_empty()
        };
        if emptied {
            self.by_caller.remove_if(maker, |_, held| held.is_empty());
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    pub(crate) fn remove(&self, id: &str) -> bool {
        match self.sessions.remove(id) {
            Some((id, scope)) => {
                self.unindex(&id, &scope);
                true
            }
            None => false,
        }
    }

    /// How many callers hold sessions their calls made.
    #[cfg(test)]
    pub(crate) fn callers(&self) -> usize {
        self.by_caller.len()
    }
}
