//! The [`ResultCache`] hook and its builder.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolgate_core::external::TypeMapKey;
use toolgate_core::hook::{HookFuture, Interest};
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

use super::flight::{InFlight, Leader, Role, follow};
use super::providers::ProviderRules;
use super::{
    CacheBackend, CacheKey, KeyScope, MokaCache, ScopeBy, cache_key, cache_key_with_providers,
};

/// The tag by which a tool declares that its results are the same for every caller, so
/// they may be shared across users (the cache key then leaves the caller out).
pub const PUBLIC_RESULTS_TAG: &str = "public-results";

/// The tag by which a tool declares that its results are never to be cached, whatever
/// the cache rules say: what it answers changes without a call of it (it reads state
/// that someone else decides, such as an approval), so a stored answer would be stale
/// at once and stay stale for the whole TTL.
pub const NO_CACHE_TAG: &str = "no-cache";

/// The metadata key where the cache notes what it did: `"hit"`, `"coalesced"` (served
/// from a concurrent identical call) or `"miss"`.
pub const CACHE_METADATA_KEY: &str = "cache";

/// A miss waiting to be stored, and the leader's claim when coalescing.
struct Pending {
    key: CacheKey,
    ttl: Duration,
    leader: Option<Leader>,
}

struct PendingKey;

impl TypeMapKey for PendingKey {
    type Value = Pending;
}

#[derive(Clone, Copy, Debug)]
enum Rule {
    Cache(Option<Duration>),
    Skip,
}

/// Caches tool results. See the [module docs](super).
pub struct ResultCache {
    backend: Arc<dyn CacheBackend>,
    ttl: Duration,
    rules: HashMap<String, Rule>,
    public: HashSet<String>,
    scope_by: ScopeBy,
    providers: ProviderRules,
    coalesce: bool,
    max_wait: Duration,
    in_flight: InFlight,
}

/// Builds a [`ResultCache`]. Defaults: the in-memory [`MokaCache`] (64 MiB, no result
/// larger than 4 MiB stored), a TTL of 5 minutes, read-only tools from this program
/// cached, results scoped per user, concurrent identical misses coalesced, followers
/// waiting at most 30 s for a leader.
pub struct ResultCacheBuilder {
    backend: Arc<dyn CacheBackend>,
    ttl: Duration,
    rules: HashMap<String, Rule>,
    public: HashSet<String>,
    scope_by: ScopeBy,
    providers: ProviderRules,
    coalesce: bool,
    max_wait: Duration,
}

impl Default for ResultCacheBuilder {
    fn default() -> Self {
        ResultCacheBuilder {
            backend: Arc::new(MokaCache::default()),
            ttl: Duration::from_secs(300),
            rules: HashMap::new(),
            public: HashSet::new(),
            scope_by: ScopeBy::User,
            providers: ProviderRules::default(),
            coalesce: true,
            max_wait: Duration::from_secs(30),
        }
    }
}

impl ResultCacheBuilder {
    /// Where entries live.
    #[must_use]
    pub fn backend(mut self, backend: impl CacheBackend) -> Self {
        self.backend = Arc::new(backend);
        self
    }

    /// An already shared backend (to inspect it, or share it between pipelines).
    #[must_use]
    pub fn shared_backend(mut self, backend: Arc<dyn CacheBackend>) -> Self {
        self.backend = backend;
        self
    }

    /// The TTL of tools without their own.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Caches this tool (even if it is not read-only), with its own TTL.
    #[must_use]
    pub fn tool_ttl(mut self, tool: impl Into<String>, ttl: Duration) -> Self {
        self.rules.insert(tool.into(), Rule::Cache(Some(ttl)));
        self
    }

    /// Caches this tool (even if it is not read-only) with the default TTL.
    #[must_use]
    pub fn include(mut self, tool: impl Into<String>) -> Self {
        self.rules.insert(tool.into(), Rule::Cache(None));
        self
    }

    /// Never caches this tool.
    #[must_use]
    pub fn exclude(mut self, tool: impl Into<String>) -> Self {
        self.rules.insert(tool.into(), Rule::Skip);
        self
    }

    /// Declares this tool's results public: shared by every caller. Same as tagging the
    /// tool [`PUBLIC_RESULTS_TAG`].
    #[must_use]
    pub fn public(mut self, tool: impl Into<String>) -> Self {
        self.public.insert(tool.into());
        self
    }

    /// How results of non-public tools are scoped.
    #[must_use]
    pub fn scope_by(mut self, scope_by: ScopeBy) -> Self {
        self.scope_by = scope_by;
        self
    }

    /// Puts the value of provider `K` (looked up request → session → global; `null` when
    /// unbound) in the key of every cached call, so that a tool that reads `K` while it
    /// runs is cached per value of `K`: calls with different values never share an entry.
    /// For a per-call value the result depends on, such as the caller's region.
    ///
    /// Without this (or [`independent_of`](Self::independent_of)), a tool that reads a
    /// request- or session-scoped provider while it runs is not stored: its result may
    /// belong to that request alone.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolgate_core::external::TypeMapKey;
    /// use toolgate_hooks::cache::ResultCache;
    ///
    /// struct Region;
    /// impl TypeMapKey for Region {
    ///     type Value = String;
    /// }
    ///
    /// let cache = ResultCache::builder().key_includes::<Region>().build();
    /// ```
    #[must_use]
    pub fn key_includes<K>(mut self) -> Self
    where
        K: TypeMapKey,
        K::Value: serde::Serialize,
    {
        self.providers.key_includes::<K>();
        self
    }

    /// Declares that no tool's result depends on provider `K`, though tools read it while
    /// they run (a trace id they log, a connection handle they route through): a tool
    /// that reads `K` is cached as if it had not, and `K`'s value is not in the key.
    #[must_use]
    pub fn independent_of<K: TypeMapKey>(mut self) -> Self {
        self.providers.independent_of::<K>();
        self
    }

    /// Whether concurrent identical misses run the tool once (on by default).
    #[must_use]
    pub fn coalesce(mut self, on: bool) -> Self {
        self.coalesce = on;
        self
    }

    /// How long a follower waits for a leader before running the tool itself.
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The hook.
    pub fn build(self) -> ResultCache {
        ResultCache {
            backend: self.backend,
            ttl: self.ttl,
            rules: self.rules,
            public: self.public,
            scope_by: self.scope_by,
            providers: self.providers,
            coalesce: self.coalesce,
            max_wait: self.max_wait,
            in_flight: InFlight::default(),
        }
    }
}

impl Default for ResultCache {
    fn default() -> Self {
        ResultCacheBuilder::default().build()
    }
}

impl ResultCache {
    /// The cache with its defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder.
    pub fn builder() -> ResultCacheBuilder {
        ResultCacheBuilder::default()
    }

    /// The TTL for `tool`, or `None` when its results are not cached: a tool tagged
    /// [`NO_CACHE_TAG`] never is; tools configured with
    /// [`include`](ResultCacheBuilder::include) or
    /// [`tool_ttl`](ResultCacheBuilder::tool_ttl) are; excluded tools are not; others only
    /// when they are read-only by their owner's word (annotations of remote tools are not
    /// trusted).
    pub fn ttl_for(&self, tool: &ToolDefinition) -> Option<Duration> {
        if tool.has_tag(NO_CACHE_TAG) {
            return None;
        }
        match self.rules.get(&tool.name) {
            Some(Rule::Cache(ttl)) => Some(ttl.unwrap_or(self.ttl)),
            Some(Rule::Skip) => None,
            None => (tool.annotations.read_only && tool.source.is_trusted()).then_some(self.ttl),
        }
    }

    /// The scope of this call's entry.
    pub fn scope_for(&self, ctx: &ToolInvokeContext) -> KeyScope {
        let tool = ctx.tool();
        if self.public.contains(&tool.name) || tool.has_tag(PUBLIC_RESULTS_TAG) {
            KeyScope::Public
        } else {
            self.scope_by.scope_of(ctx.user())
        }
    }

    /// How many keys have a leader running right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn mark(ctx: &mut ToolInvokeContext, what: &str) {
        ctx.metadata_mut()
            .insert(CACHE_METADATA_KEY.to_owned(), Value::from(what));
    }

    fn miss(ctx: &mut ToolInvokeContext, key: CacheKey, ttl: Duration, leader: Option<Leader>) {
        Self::mark(ctx, "miss");
        ctx.scratch_mut()
            .insert::<PendingKey>(Pending { key, ttl, leader });
    }

    async fn lookup(&self, key: &CacheKey) -> Option<Value> {
        match self.backend.get(key).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cache read failed; treating it as a miss");
                None
            }
        }
    }
}

#[hook]
impl Hook for ResultCache {
    fn name(&self) -> &str {
        "result_cache"
    }

    /// In the plan of a tool whose results are cached ([`ttl_for`](Self::ttl_for)) only:
    /// the calls of any other tool do not pay for the cache at all.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(self.ttl_for(tool).is_some())
    }

    // The trait's form: ready at once for a tool that is not cached, boxed only to look up.
    fn will_read_cache<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let Some(ttl) = self.ttl_for(ctx.tool()).filter(|_| !ctx.is_no_store()) else {
            return HookFuture::ok();
        };
        let scope = self.scope_for(ctx);
        let key = match self.providers.key_values(ctx) {
            Some(values) => cache_key_with_providers(ctx.tool(), &scope, ctx.input(), &values),
            None => cache_key(ctx.tool(), &scope, ctx.input()),
        };
        HookFuture::new(async move {
            loop {
                if let Some(value) = self.lookup(&key).await {
                    Self::mark(ctx, "hit");
                    return ctx.respond(value);
                }
                if !self.coalesce {
                    Self::miss(ctx, key, ttl, None);
                    return Ok(());
                }
                match self.in_flight.join(&key) {
                    Role::Lead(leader) => {
                        // A leader may have stored the value between our read and our claim.
                        if let Some(value) = self.lookup(&key).await {
                            leader.publish(value.clone());
                            Self::mark(ctx, "hit");
                            return ctx.respond(value);
                        }
                        Self::miss(ctx, key, ttl, Some(leader));
                        return Ok(());
                    }
                    Role::Follow(receiver) => {
                        match tokio::time::timeout(self.max_wait, follow(receiver)).await {
                            Ok(Some(value)) => {
                                Self::mark(ctx, "coalesced");
                                return ctx.respond(value);
                            }
                            // The leader failed, was cancelled or panicked: look again.
                            Ok(None) => continue,
                            Err(_) => {
                                tracing::debug!(
                                    "waited too long for an identical call; running the tool"
                                );
                                Self::miss(ctx, key, ttl, None);
                                return Ok(());
                            }
                        }
                    }
                }
            }
        })
    }

    // The trait's form: ready at once when there is nothing to store, boxed only to write.
    fn will_write_cache<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let pending = ctx.scratch_mut().remove::<PendingKey>();
        // A result not to reuse is neither stored nor handed to identical calls waiting
        // (they look again, and run the tool themselves).
        let (Some(pending), Some(output), false) =
            (pending, ctx.output().cloned(), ctx.is_no_store())
        else {
            return HookFuture::ok();
        };
        // Nor is a result that depends on a per-call provider the key leaves out.
        if let Some(read) = self.providers.unkeyed_read(ctx) {
            tracing::debug!(
                tool = ctx.tool_name(),
                provider = read.key(),
                "result not cached: the tool read a per-call provider that is not in the cache key; declare it with `key_includes` or `independent_of`"
            );
            return HookFuture::ok();
        }
        // Charged to the caller whose call stores it, whatever the entry's scope.
        let caller = ctx.user().caller_key().into_owned();
        HookFuture::new(async move {
            if let Err(e) = self
                .backend
                .put_for(&pending.key, &caller, output.clone(), pending.ttl)
                .await
            {
                tracing::warn!(error = %e, "cache write failed; the result was not stored");
            }
            if let Some(leader) = pending.leader {
                leader.publish(output);
            }
            Ok(())
        })
    }

    fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        // Whatever path the call took, a claim still held is given back here.
        ctx.scratch_mut().remove::<PendingKey>();
        Ok(())
    }

    fn on_error(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.scratch_mut().remove::<PendingKey>();
        Ok(())
    }
}
