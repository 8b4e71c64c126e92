//! The session scope: providers shared by the invocations with one session id, bounded by
//! an idle expiry and a maximum count; and [`SessionProviders`], the host's handle on one
//! session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dashmap::DashMap;
// The tokio clock (the system clock outside tests), so that idle expiry follows a paused
// test clock instead of needing real sleeps.
use tokio::time::Instant;
use typemap_rev::TypeMapKey;

use super::{Providers, Scopes};

/// Limits of the session scope.
///
/// A flood of session ids cannot exhaust memory: a session unused for `idle_timeout` is
/// dropped, and past `max_sessions` the least recently used tenth is evicted at once.
#[derive(Clone, Copy, Debug)]
pub struct SessionConfig {
    /// The most sessions kept at once.
    pub max_sessions: usize,
    /// How long an unused session is kept.
    pub idle_timeout: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_sessions: 10_000,
            idle_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// The providers of one session.
pub(crate) struct SessionScope {
    providers: RwLock<Providers>,
    last_used_ms: AtomicU64,
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

/// All live sessions of a pipeline.
pub(crate) struct SessionStore {
    sessions: DashMap<Arc<str>, Arc<SessionScope>>,
    config: SessionConfig,
    epoch: Instant,
    last_sweep_ms: AtomicU64,
}

impl SessionStore {
    pub(crate) fn new(config: SessionConfig) -> Self {
        SessionStore {
            sessions: DashMap::new(),
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

    /// The session's scope if it exists and has not expired; marks it used.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<SessionScope>> {
        let now = self.now_ms();
        let scope = self.sessions.get(id).map(|s| Arc::clone(&s))?;
        if self.is_idle(&scope, now) {
            self.sessions.remove_if(id, |_, s| self.is_idle(s, now));
            return None;
        }
        scope.last_used_ms.store(now, Ordering::Relaxed);
        Some(scope)
    }

    /// The session's scope, created if needed (which may evict others).
    pub(crate) fn get_or_create(&self, id: &Arc<str>) -> Arc<SessionScope> {
        if let Some(scope) = self.get(id) {
            return scope;
        }
        self.make_room();
        let now = self.now_ms();
        let entry = self.sessions.entry(Arc::clone(id)).or_insert_with(|| {
            Arc::new(SessionScope {
                providers: RwLock::new(Providers::new()),
                last_used_ms: AtomicU64::new(now),
            })
        });
        Arc::clone(&entry)
    }

    fn make_room(&self) {
        let now = self.now_ms();
        let sweep_every = (self.config.idle_timeout.as_millis() as u64 / 4).max(1);
        if now.saturating_sub(self.last_sweep_ms.load(Ordering::Relaxed)) >= sweep_every {
            self.last_sweep_ms.store(now, Ordering::Relaxed);
            self.sessions.retain(|_, s| !self.is_idle(s, now));
        }
        if self.sessions.len() < self.config.max_sessions {
            return;
        }
        // Evict the least recently used tenth in one pass, so that a flood of new ids costs
        // one scan per many inserts instead of one per insert.
        let mut ages: Vec<(u64, Arc<str>)> = self
            .sessions
            .iter()
            .map(|e| {
                (
                    e.value().last_used_ms.load(Ordering::Relaxed),
                    Arc::clone(e.key()),
                )
            })
            .collect();
        let evict = (self.config.max_sessions / 10).max(1).min(ages.len());
        if evict < ages.len() {
            ages.select_nth_unstable_by_key(evict, |(t, _)| *t);
        }
        for (_, key) in ages.into_iter().take(evict) {
            self.sessions.remove(&key);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    pub(crate) fn remove(&self, id: &str) -> bool {
        self.sessions.remove(id).is_some()
    }
}

/// The host's handle on the providers of one session, from
/// [`Pipeline::session`](crate::Pipeline::session): what it binds here, every invocation
/// with this session id reads (request → **session** → global), hooks and tools alike.
///
/// A session seeded by the host is bounded like every session
/// ([`SessionConfig`](super::SessionConfig)): unused for the idle timeout, or evicted past
/// the maximum count, it is gone with its providers, and [`get`](Self::get) says so. Seed
/// it where a session starts (a login, a new agent thread, an MCP `initialize`), and again
/// if it may have expired since. The handle holds the pipeline's scopes, not the session:
/// keeping it keeps nothing alive.
///
/// # Examples
///
/// ```
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::Pipeline;
///
/// struct AllowedHosts;
/// impl TypeMapKey for AllowedHosts {
///     type Value = Vec<String>;
/// }
///
/// let pipeline = Pipeline::builder().build()?;
/// let session = pipeline.session("thread-42");
/// session.provide::<AllowedHosts>(vec!["docs.rs".into()]);
/// assert_eq!(*session.get::<AllowedHosts>().unwrap(), ["docs.rs"]);
/// assert!(pipeline.session("thread-7").get::<AllowedHosts>().is_none());
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
#[derive(Clone)]
pub struct SessionProviders {
    scopes: Arc<Scopes>,
    id: Arc<str>,
}

impl SessionProviders {
    pub(crate) fn new(scopes: Arc<Scopes>, id: Arc<str>) -> Self {
        SessionProviders { scopes, id }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Binds `value` under key `K` for this session, replacing an earlier value. Makes the
    /// session if it does not exist (which may evict the least recently used sessions past
    /// the maximum count).
    pub fn provide<K: TypeMapKey>(&self, value: K::Value) -> &Self {
        self.provide_shared::<K>(Arc::new(value))
    }

    /// Binds an already shared value under key `K` for this session.
    pub fn provide_shared<K: TypeMapKey>(&self, value: Arc<K::Value>) -> &Self {
        self.scopes
            .sessions
            .get_or_create(&self.id)
            .insert::<K>(value);
        self
    }

    /// The value bound under key `K` in this session, if the session is live and binds it
    /// (marks the session used).
    pub fn get<K: TypeMapKey>(&self) -> Option<Arc<K::Value>> {
        self.scopes.sessions.get(&self.id)?.get::<K>()
    }

    /// Ends the session: drops it and its providers. Returns whether it was live.
    pub fn end(&self) -> bool {
        self.scopes.sessions.remove(&self.id)
    }
}

impl std::fmt::Debug for SessionProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionProviders")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}
