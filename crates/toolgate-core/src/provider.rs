//! Providers: typed values looked up by key type in three scopes.
//!
//! A provider key is a type implementing [`TypeMapKey`]; its `Value` is what is stored.
//! Lookup from a [`ToolInvokeContext`](crate::ToolInvokeContext) goes request → session →
//! global and hands out an `Arc` of the value.
//!
//! * **request** — new for every invocation; bound by the caller
//!   ([`InvokeOptions::provide`](crate::InvokeOptions::provide)) or by hooks.
//! * **session** — shared by the invocations with the same session id, safe under concurrent
//!   use, bounded by an idle expiry and a maximum count ([`SessionConfig`]).
//! * **global** — built once with the pipeline, read-only at invoke time.

use std::any::TypeId;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

// The tokio clock (the system clock outside tests), so that idle expiry follows a paused
// test clock instead of needing real sleeps.
use tokio::time::Instant;

use dashmap::DashMap;
use typemap_rev::{TypeMap, TypeMapKey};

/// The scope a provider is bound in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This invocation only.
    Request,
    /// Every invocation with the same session id.
    Session,
    /// The whole pipeline; bound only when the pipeline is built.
    Global,
}

/// A provider could not be found or bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// No scope has a value for this key.
    #[error(
        "provider `{key}` is not bound in the request, session or global scope: bind it on the pipeline builder or in a `will_bind_providers` hook"
    )]
    Missing {
        /// The key type.
        key: &'static str,
    },
    /// Global providers are read-only at invoke time.
    #[error(
        "provider `{key}` cannot be bound in the global scope during an invocation: global providers are bound once, on the pipeline builder"
    )]
    GlobalReadOnly {
        /// The key type.
        key: &'static str,
    },
    /// A session-scoped binding needs a session id.
    #[error(
        "provider `{key}` cannot be bound in the session scope: this invocation has no session id"
    )]
    NoSession {
        /// The key type.
        key: &'static str,
    },
}

impl ProviderError {
    /// The stable machine code: `missing_provider`, `global_provider_read_only` or
    /// `no_session`.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Missing { .. } => "missing_provider",
            ProviderError::GlobalReadOnly { .. } => "global_provider_read_only",
            ProviderError::NoSession { .. } => "no_session",
        }
    }
}

/// The internal key under which a provider value is stored: shared, so lookups hand out
/// an `Arc` without cloning the value.
pub(crate) struct Shared<K>(PhantomData<K>);

impl<K> TypeMapKey for Shared<K>
where
    K: TypeMapKey,
{
    type Value = Arc<K::Value>;
}

/// A provider key type named by a hook as required (or as bound by it per call).
///
/// ```
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::provider::ProviderRequirement;
/// struct Clock;
/// impl TypeMapKey for Clock { type Value = u64; }
/// let r = ProviderRequirement::of::<Clock>();
/// assert!(r.key().ends_with("Clock"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProviderRequirement {
    type_id: TypeId,
    key: &'static str,
}

impl ProviderRequirement {
    /// The requirement for key type `K`.
    pub fn of<K: TypeMapKey>() -> Self {
        ProviderRequirement {
            type_id: TypeId::of::<K>(),
            key: std::any::type_name::<K>(),
        }
    }

    /// The key type's name.
    pub fn key(&self) -> &'static str {
        self.key
    }

    pub(crate) fn type_id(&self) -> TypeId {
        self.type_id
    }
}

/// A set of provider bindings in one scope (the request scope of an invocation, or what a
/// caller hands in through [`InvokeOptions`](crate::InvokeOptions)).
#[derive(Default)]
pub struct Providers {
    /// Made on the first binding: most invocations bind nothing in their request scope,
    /// and an empty set then costs nothing to make or drop.
    map: Option<TypeMap>,
}

impl Providers {
    /// No bindings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `value` under key `K`, replacing an earlier value.
    pub fn insert<K: TypeMapKey>(&mut self, value: K::Value) {
        self.insert_arc::<K>(Arc::new(value));
    }

    /// Binds an already shared value under key `K`.
    pub fn insert_arc<K: TypeMapKey>(&mut self, value: Arc<K::Value>) {
        self.map
            .get_or_insert_with(TypeMap::new)
            .insert::<Shared<K>>(value);
    }

    /// The value under key `K`.
    pub fn get<K: TypeMapKey>(&self) -> Option<&Arc<K::Value>> {
        self.map.as_ref()?.get::<Shared<K>>()
    }

    /// Whether nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.map.as_ref().is_none_or(TypeMap::is_empty)
    }
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("len", &self.map.as_ref().map_or(0, TypeMap::len))
            .finish()
    }
}

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
}

/// The pipeline-wide provider scopes: the global providers and the live sessions.
pub(crate) struct Scopes {
    pub globals: Providers,
    pub sessions: SessionStore,
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
