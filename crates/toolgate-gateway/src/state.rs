//! State that outlives a configuration: rate-limit budgets, permits, cached results,
//! remembered approvals, suspended calls (and their watch for expiry) and usage statistics
//! survive a reload, so that
//! reloading is never a way around a limit and no suspended call is lost.

use std::sync::Arc;
use std::time::Duration;

use toolgate_agent::UsageStats;
use toolgate_core::suspension::{InMemorySuspensionStore, SuspensionLimits, SuspensionStore};
use toolgate_hooks::Rate;
use toolgate_hooks::budget::{BudgetBackend, InMemoryBudget};
use toolgate_hooks::cache::{CacheBackend, MokaCache};
use toolgate_hooks::concurrency::{ConcurrencyBackend, InMemoryConcurrency};
use toolgate_hooks::consent::{ApprovalStore, InMemoryApprovals};
use toolgate_hooks::quota::{InMemoryQuota, QuotaBackend};
use toolgate_redis::{
    ConcurrencyFailurePolicy, QuotaFailurePolicy, RedisBudget, RedisCache, RedisConcurrency,
    RedisConfig, RedisConfigBuilder, RedisCounters, RedisError, RedisQuota, RedisState,
    RedisSuspensions,
};

use crate::config::{Config, OnBackendErrorName, PinsConfig, RedisTlsFiles, StateConfig, StateUrl};
use crate::console::counters::{MAX_TOOLS, SHARED_KEEP, ToolCounters};
use crate::console::history::{
    DecisionHistory, KEEP_ON_REDIS, MAX_DECISIONS, MAX_TENANTS, OnRedis,
};
use crate::console::sessions::ConsoleSessions;
use crate::identity::failures::FailedCredentials;
use crate::pins::{PinError, PinStore};
use crate::webhooks::Notifications;

/// The state backend or the statistics file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The state backend (Redis) could not be reached, or refused its settings.
    #[error("state backend: {0}")]
    Backend(String),
    /// The statistics file could not be opened.
    #[error("{0}")]
    Stats(String),
}

/// Where the policies keep their state: in this process, or on Redis (shared by every
/// replica pointed at it).
#[derive(Clone)]
pub enum Backends {
    /// In this process.
    Memory {
        /// Rate-limit budgets.
        quota: Arc<InMemoryQuota>,
        /// Costs charged against budgets.
        budget: Arc<InMemoryBudget>,
        /// Calls in flight.
        concurrency: Arc<InMemoryConcurrency>,
        /// Cached results.
        cache: Arc<MokaCache>,
    },
    /// On Redis.
    Redis(RedisState),
}

impl Backends {
    /// In this process.
    pub fn in_memory(max_cache_entries: u64) -> Self {
        Backends::Memory {
            quota: Arc::new(InMemoryQuota::default()),
            budget: Arc::new(InMemoryBudget::default()),
            concurrency: Arc::new(InMemoryConcurrency::default()),
            cache: Arc::new(MokaCache::new(max_cache_entries)),
        }
    }

    /// For `state`: in memory, or on Redis.
    ///
    /// # Errors
    ///
    /// [`StateError::Backend`] when Redis cannot be reached.
    pub async fn connect(state: &StateConfig, max_cache_entries: u64) -> Result<Self, StateError> {
        let target = state.target();
        if target == StateUrl::Memory {
            return Ok(Self::in_memory(max_cache_entries));
        }
        let mut config = RedisConfig::builder().cache_fill_wait(state.cache_fill_wait);
        if let Some(deadline) = state.deadline {
            config = config.deadline(deadline);
        }
        if let Some(failures) = state.down_after_failures {
            config = config.down_after_failures(failures);
        }
        if let Some(ttl) = state.lease_ttl {
            config = config.lease_ttl(ttl);
        }
        if let Some(bytes) = state.cache_max_bytes_per_caller {
            config = config.cache_max_bytes_per_caller(bytes.0 as u64);
        }
        if let Some(window) = state.cache_caller_window {
            config = config.cache_caller_window(window);
        }
        if let Some(prefix) = &state.key_prefix {
            config = config.key_prefix(prefix.clone());
        }
        if let Some(tls) = &state.tls {
            config = with_tls_files(config, tls)?;
        }
        let connected = match &target {
            StateUrl::Cluster(nodes) => RedisState::connect_cluster(nodes, config.build()).await,
            StateUrl::Redis(url) => RedisState::connect(url, config.build()).await,
            StateUrl::Memory => unreachable!("handled above"),
        };
        connected.map(Backends::Redis).map_err(not_connected)
    }

    /// The quota backend of one rate-limit policy, failing as it declares; on Redis with
    /// the policy's own deadline, if it has one.
    pub fn quota(
        &self,
        on_error: OnBackendErrorName,
        rate: Rate,
        deadline: Option<Duration>,
    ) -> Arc<dyn QuotaBackend> {
        match self {
            Backends::Memory { quota, .. } => quota.clone(),
            Backends::Redis(redis) => Arc::new(
                with_deadline(redis.quota(), deadline, RedisQuota::deadline).on_unavailable(
                    match on_error {
                        OnBackendErrorName::FailClosed => QuotaFailurePolicy::FailClosed,
                        OnBackendErrorName::FailOpen => QuotaFailurePolicy::FailOpen,
                        OnBackendErrorName::LocalFallback => {
                            QuotaFailurePolicy::LocalFallback(rate)
                        }
                    },
                ),
            ),
        }
    }

    /// Where the replicas count wrong credentials together (`identity.failed_credentials`):
    /// the rate-limit backend on Redis with the state's deadline, granting when Redis does
    /// not answer, so that each replica's own count stands then; `None` in this process,
    /// where the count of [`SharedState::failed_credentials`] is the only one.
    pub fn shared_counts(&self) -> Option<Arc<dyn QuotaBackend>> {
        match self {
            Backends::Memory { .. } => None,
            Backends::Redis(redis) => Some(Arc::new(
                redis.quota().on_unavailable(QuotaFailurePolicy::FailOpen),
            )),
        }
    }

    /// The console's sessions, kept where the policies' state is: in this process, or on
    /// Redis, encrypted with `state.suspensions_key` when it is set.
    ///
    /// # Errors
    ///
    /// [`StateError::Backend`] for a key the store refuses.
    pub fn console_sessions(&self, state: &StateConfig) -> Result<ConsoleSessions, StateError> {
        Ok(match self {
            Backends::Memory { .. } => ConsoleSessions::default(),
            Backends::Redis(redis) => {
                let mut sessions = redis.sessions();
                if let Some(key) = &state.suspensions_key {
                    sessions = sessions
                        .with_encryption_key(key.0.as_bytes())
                        .map_err(refused_key)?;
                }
                ConsoleSessions::on_redis(sessions)
            }
        })
    }

    /// The decided history, kept where the policies' state is: in this process, or on
    /// Redis, encrypted with `state.suspensions_key` when it is set.
    ///
    /// # Errors
    ///
    /// [`StateError::Backend`] for a key the history refuses.
    pub fn decision_history(&self, state: &StateConfig) -> Result<DecisionHistory, StateError> {
        Ok(match self {
            Backends::Memory { .. } => DecisionHistory::default(),
            Backends::Redis(redis) => {
                let mut tenants = redis.parted_history(
                    "decisions_by_tenant",
                    MAX_DECISIONS,
                    MAX_TENANTS,
                    KEEP_ON_REDIS,
                );
                let mut untenanted =
                    redis.history("decisions_of_no_tenant", MAX_DECISIONS, KEEP_ON_REDIS);
                let mut earlier = redis.history("decisions", MAX_DECISIONS, KEEP_ON_REDIS);
                if let Some(key) = &state.suspensions_key {
                    let key = key.0.as_bytes();
                    tenants = tenants.with_encryption_key(key).map_err(refused_key)?;
                    untenanted = untenanted.with_encryption_key(key).map_err(refused_key)?;
                    earlier = earlier.with_encryption_key(key).map_err(refused_key)?;
                }
                DecisionHistory::Redis(Box::new(OnRedis {
                    tenants,
                    untenanted,
                    earlier,
                }))
            }
        })
    }

    /// Where every replica adds up its per-tool counters: `None` in this process, where
    /// the counters are this replica's alone.
    pub fn shared_counters(&self) -> Option<RedisCounters> {
        match self {
            Backends::Memory { .. } => None,
            Backends::Redis(redis) => Some(redis.counters(MAX_TOOLS, SHARED_KEEP)),
        }
    }

    /// Where the pins of `pins:` are kept: the file it names, or, with `shared: true`, on
    /// Redis with the policies' state.
    ///
    /// # Errors
    ///
    /// [`PinError::NotShared`] for shared pins when the state is in this process.
    pub fn pin_store(&self, pins: &PinsConfig) -> Result<PinStore, PinError> {
        match (&pins.path, self) {
            (Some(path), _) => Ok(PinStore::File(path.0.clone())),
            (None, Backends::Redis(redis)) => Ok(PinStore::Shared(redis.pins())),
            (None, Backends::Memory { .. }) => Err(PinError::NotShared),
        }
    }

    /// The budget backend of one budget; on Redis with the budget's own deadline, if it
    /// has one.
    pub fn budget(&self, deadline: Option<Duration>) -> Arc<dyn BudgetBackend> {
        match self {
            Backends::Memory { budget, .. } => budget.clone(),
            Backends::Redis(redis) => Arc::new(with_deadline(
                redis.budget(),
                deadline,
                RedisBudget::deadline,
            )),
        }
    }

    /// The concurrency backend of one cap, failing as it declares; on Redis with the cap's
    /// own deadline, if it has one.
    pub fn concurrency(
        &self,
        on_error: OnBackendErrorName,
        limit: u32,
        deadline: Option<Duration>,
    ) -> Arc<dyn ConcurrencyBackend> {
        match self {
            Backends::Memory { concurrency, .. } => concurrency.clone(),
            Backends::Redis(redis) => {
                let backend =
                    with_deadline(redis.concurrency(), deadline, RedisConcurrency::deadline);
                Arc::new(backend.on_unavailable(match on_error {
                    OnBackendErrorName::FailClosed => ConcurrencyFailurePolicy::FailClosed,
                    OnBackendErrorName::FailOpen => ConcurrencyFailurePolicy::FailOpen,
                    OnBackendErrorName::LocalFallback => {
                        ConcurrencyFailurePolicy::LocalFallback { limit }
                    }
                }))
            }
        }
    }

    /// The result cache's backend; on Redis with the cache's own deadline, if it has one.
    pub fn cache(&self, deadline: Option<Duration>) -> Arc<dyn CacheBackend> {
        match self {
            Backends::Memory { cache, .. } => cache.clone(),
            Backends::Redis(redis) => {
                Arc::new(with_deadline(redis.cache(), deadline, RedisCache::deadline))
            }
        }
    }
}

/// Why the gateway could not connect to Redis, in the words of its configuration: the
/// Redis crate's own message for an unreachable Redis speaks to a program using the crate
/// (it names the call that starts without Redis, which the gateway has no setting for).
fn not_connected(e: RedisError) -> StateError {
    match e {
        RedisError::Unreachable {
            url,
            waited,
            reason,
        } => StateError::Backend(format!(
            "Redis at {url} could not be reached within {waited:?} ({reason}): check that it runs, that this replica can reach it and that `state` gives its address; the gateway waits 1s to connect plus `state.deadline` for an answer"
        )),
        e => StateError::Backend(format!("{e} (check `state` and that Redis runs)")),
    }
}

/// The refusal of `state.suspensions_key` by a store on Redis.
fn refused_key(e: RedisError) -> StateError {
    StateError::Backend(format!("state.suspensions_key: {e}"))
}

/// `config` with the certificates of `state.tls`, read from their files.
fn with_tls_files(
    mut config: RedisConfigBuilder,
    tls: &RedisTlsFiles,
) -> Result<RedisConfigBuilder, StateError> {
    // As the configuration file is read: only a regular file, opened without waiting (a
    // pipe is not waited on), of a bounded size (a device such as `/dev/zero` ends).
    let read = |field: &str, path: &std::path::Path| {
        toolgate_core::file::read_text_file(path)
            .map(String::into_bytes)
            .map_err(|e| {
                let why = match e {
                    toolgate_core::file::TextFileError::Unreadable(e) => {
                        crate::config::io_in_words(&e)
                    }
                    other => other.to_string(),
                };
                StateError::Backend(format!(
                    "`state.tls.{field}`: cannot read `{}` ({why}); give the path of a PEM file",
                    path.display(),
                ))
            })
    };
    if let Some(ca) = &tls.ca_file {
        config = config.tls_root_certificate(read("ca_file", ca)?);
    }
    match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => {
            config = config.tls_client_certificate(
                read("client_cert_file", cert)?,
                read("client_key_file", key)?,
            );
        }
        (None, None) => {}
        _ => {
            return Err(StateError::Backend(
                "`state.tls`: set both `client_cert_file` and `client_key_file`, or neither".into(),
            ));
        }
    }
    Ok(config)
}

/// `backend` with the deadline of its policy, when the policy sets one.
fn with_deadline<B>(backend: B, deadline: Option<Duration>, set: fn(B, Duration) -> B) -> B {
    match deadline {
        Some(deadline) => set(backend, deadline),
        None => backend,
    }
}

/// Everything that lives as long as the process.
#[derive(Clone)]
pub struct SharedState {
    /// The state configuration the backends were made for.
    pub state: StateConfig,
    /// Policy state.
    pub backends: Backends,
    /// Remembered approvals.
    pub approvals: Arc<dyn ApprovalStore>,
    /// Suspended calls and the outcomes of decided ones, under the bounds of
    /// `policies.approval` (a reload changes the bounds of calls suspended after it:
    /// [`suspension_limits`]).
    pub suspensions: Suspensions,
    /// Usage statistics, when configured.
    pub stats: Option<Arc<UsageStats>>,
    /// The waiting calls watched for expiry, and the webhooks of the configuration served.
    pub notifications: Notifications,
    /// The sessions of the operator console, kept where the backends keep their state.
    pub console_sessions: Arc<ConsoleSessions>,
    /// The wrong credentials of each client address (`identity.failed_credentials`): kept
    /// across reloads, so that a reload does not give a guesser a fresh allowance.
    pub failed_credentials: Arc<FailedCredentials>,
    /// The per-tool counters of `GET /v1/admin/stats`.
    pub counters: Arc<ToolCounters>,
    /// The last decisions on waiting calls, for `GET /v1/admin/decisions`, kept where the
    /// backends keep their state.
    pub history: Arc<DecisionHistory>,
    /// The tasks of upstream MCP servers handed to callers over MCP (SEP-2663): kept
    /// across reloads, so that a caller can still poll the task it holds.
    pub relayed_tasks: toolgate_mcp::RelayedTasks,
    /// The bound on the requests in flight to each HTTP upstream (`max_connections`, each
    /// caller's share): kept across reloads, so that an upstream's calls from before a
    /// reload and those after it count against one bound, not one each.
    pub upstream_bounds: toolgate_mcp::UpstreamBounds,
}

/// Where calls wait for approval, and the outcomes of decided ones are kept: in this
/// process, or on Redis next to the other policy state, where every replica sees them and
/// a restart loses none.
#[derive(Clone)]
pub enum Suspensions {
    /// In this process.
    Memory(Arc<InMemorySuspensionStore>),
    /// On Redis.
    Redis(Arc<RedisSuspensions>),
    /// A store a test wraps around one of the others, to hold its steps in the order it
    /// chooses.
    #[cfg(test)]
    Wrapped(Arc<dyn SuspensionStore>),
}

impl Suspensions {
    /// The store for `backends` under `limits`, encrypted with `state.suspensions_key` on
    /// Redis.
    ///
    /// # Errors
    ///
    /// [`StateError::Backend`] for a key the store refuses.
    pub fn open(
        backends: &Backends,
        state: &StateConfig,
        limits: SuspensionLimits,
    ) -> Result<Self, StateError> {
        Ok(match backends {
            Backends::Memory { .. } => {
                Suspensions::Memory(Arc::new(InMemorySuspensionStore::new(limits)))
            }
            Backends::Redis(redis) => {
                let mut store = redis.suspensions(limits);
                if let Some(key) = &state.suspensions_key {
                    store = store
                        .with_encryption_key(key.0.as_bytes())
                        .map_err(refused_key)?;
                }
                Suspensions::Redis(Arc::new(store))
            }
        })
    }

    /// The store, for the pipeline and the outcome look-ups.
    pub fn store(&self) -> Arc<dyn SuspensionStore> {
        match self {
            Suspensions::Memory(store) => Arc::clone(store) as Arc<dyn SuspensionStore>,
            Suspensions::Redis(store) => Arc::clone(store) as Arc<dyn SuspensionStore>,
            #[cfg(test)]
            Suspensions::Wrapped(store) => Arc::clone(store),
        }
    }

    /// New bounds, for calls suspended from now on (a reload).
    pub fn set_limits(&self, limits: SuspensionLimits) {
        match self {
            Suspensions::Memory(store) => store.set_limits(limits),
            Suspensions::Redis(store) => store.set_limits(limits),
            #[cfg(test)]
            Suspensions::Wrapped(_) => {}
        }
    }
}

impl SharedState {
    /// The state for a first configuration.
    ///
    /// # Errors
    ///
    /// [`StateError`] when the state backend or the statistics file cannot be opened.
    pub async fn new(config: &Config) -> Result<Self, StateError> {
        let backends = Backends::connect(&config.state, max_cache_entries(config)).await?;
        Ok(SharedState {
            state: config.state.clone(),
            suspensions: Suspensions::open(&backends, &config.state, suspension_limits(config))?,
            console_sessions: Arc::new(backends.console_sessions(&config.state)?),
            history: Arc::new(backends.decision_history(&config.state)?),
            backends,
            approvals: Arc::new(InMemoryApprovals::default()),
            stats: open_stats(config)?,
            notifications: Notifications::new(),
            failed_credentials: Arc::default(),
            counters: Arc::default(),
            relayed_tasks: toolgate_mcp::RelayedTasks::default(),
            upstream_bounds: toolgate_mcp::UpstreamBounds::new(),
        })
    }

    /// The state for a reloaded configuration: the same, unless it names another state
    /// backend or statistics file, which are then opened afresh.
    ///
    /// # Errors
    ///
    /// As [`SharedState::new`].
    pub async fn for_reload(&self, config: &Config) -> Result<Self, StateError> {
        let mut next = self.clone();
        if config.state != self.state {
            next.state = config.state.clone();
            next.backends = Backends::connect(&config.state, max_cache_entries(config)).await?;
            // Calls waiting in the old store stay there: they can no longer be decided
            // through this gateway, and expire.
            next.suspensions =
                Suspensions::open(&next.backends, &config.state, suspension_limits(config))?;
            // Console sessions kept in the old place end: people sign in again.
            next.console_sessions = Arc::new(next.backends.console_sessions(&config.state)?);
            next.history = Arc::new(next.backends.decision_history(&config.state)?);
        }
        let same_stats = match (&config.stats, &self.stats) {
            (Some(c), Some(s)) => s.is_file(&c.path.0),
            (None, None) => true,
            _ => false,
        };
        if !same_stats {
            // The old store is saved once more, or its counts since its last save
            // would be lost; it is closed once the calls still running on the old
            // configuration end, and a later reload back to its file opens it again.
            next.stats = open_stats(config)?;
            if let Some(old) = &self.stats
                && let Err(e) = old.save()
            {
                tracing::warn!(error = %e, "saving the usage statistics a reload let go of failed");
            }
        }
        Ok(next)
    }
}

/// The bounds on suspended calls that `config` sets under `policies.approval` (the
/// defaults without that section).
pub fn suspension_limits(config: &Config) -> SuspensionLimits {
    let defaults = crate::config::ApprovalPolicy::default();
    let approval = config.policies.approval.as_ref().unwrap_or(&defaults);
    SuspensionLimits {
        max_per_user: approval.max_pending_per_user,
        max_total: approval.max_pending,
        max_bytes_per_user: approval.max_pending_bytes_per_user.0,
        max_bytes_total: approval.max_pending_bytes.0,
        expire_after: approval.expire_after,
    }
}

fn open_stats(config: &Config) -> Result<Option<Arc<UsageStats>>, StateError> {
    config
        .stats
        .as_ref()
        .map(|s| {
            UsageStats::open(&s.path.0)
                .map(Arc::new)
                .map_err(|e| StateError::Stats(format!("stats.path: {e}")))
        })
        .transpose()
}

fn max_cache_entries(config: &Config) -> u64 {
    config
        .policies
        .cache
        .as_ref()
        .and_then(|c| c.max_entries)
        .unwrap_or(10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_state(tls: RedisTlsFiles) -> StateConfig {
        StateConfig {
            url: StateUrl::Redis("rediss://127.0.0.1:1".to_owned()),
            tls: Some(tls),
            ..StateConfig::default()
        }
    }

    fn refusal(result: Result<Backends, StateError>) -> String {
        match result {
            Ok(_) => panic!("the state was accepted"),
            Err(error) => error.to_string(),
        }
    }

    #[tokio::test]
    async fn a_client_certificate_without_its_key_is_refused_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("client.crt");
        std::fs::write(&cert, "not read").unwrap();
        let state = tls_state(RedisTlsFiles {
            client_cert_file: Some(cert),
            ..RedisTlsFiles::default()
        });
        let message = refusal(Backends::connect(&state, 10).await);
        assert!(message.contains("client_key_file"), "{message}");
    }

    #[tokio::test]
    async fn an_unreadable_ca_file_is_named_with_its_field() {
        let state = tls_state(RedisTlsFiles {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..RedisTlsFiles::default()
        });
        let message = refusal(Backends::connect(&state, 10).await);
        assert!(message.contains("state.tls.ca_file"), "{message}");
        assert!(message.contains("/nonexistent/ca.pem"), "{message}");
    }

    #[test]
    fn a_cluster_is_given_as_one_url_or_as_a_list_of_nodes() {
        let one =
            crate::config::parse("state: redis+cluster://10.0.0.1:7000,10.0.0.2:7001\n").unwrap();
        let listed = crate::config::parse(
            "state:\n  cluster:\n    - redis://10.0.0.1:7000\n    - redis://10.0.0.2:7001\n",
        )
        .unwrap();
        assert_eq!(one.state.target(), listed.state.target());
        let StateUrl::Cluster(nodes) = one.state.target() else {
            panic!("a cluster")
        };
        assert_eq!(
            nodes.urls(),
            ["redis://10.0.0.1:7000", "redis://10.0.0.2:7001"]
        );
        assert_eq!(
            one.state.target().describe(),
            "redis cluster, 2 seed nodes (redis+cluster://10.0.0.1:7000,10.0.0.2:7001)"
        );
    }

    #[test]
    fn bad_cluster_nodes_are_config_errors_with_their_field_path() {
        let cases = [
            ("state:\n  cluster: []\n", "state.cluster", "no node"),
            (
                "state:\n  cluster: [redis://a:7000, rediss://b:7000]\n",
                "state.cluster",
                "mix redis:// and rediss://",
            ),
            (
                "state:\n  cluster: [redis://a:7000, redis://b:99999]\n",
                "state.cluster[1]",
                "b:99999",
            ),
            ("state: redis+cluster://\n", "state", "no node"),
            ("state: redis+cluster://a:7000,b:x\n", "state", "b:x"),
            (
                "state:\n  url: redis://a:6379\n  cluster: [redis://b:7000]\n",
                "state.cluster",
                "keep one",
            ),
        ];
        for (text, field, says) in cases {
            let error = crate::config::parse(text).expect_err(text);
            assert_eq!(error.field(), field, "{text}: {error}");
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn state_tls_files_are_read_from_the_config() {
        let config = crate::config::parse(
            "state:\n  url: rediss://redis.internal:6380\n  tls:\n    ca_file: /etc/toolgate/redis-ca.pem\n    client_cert_file: /etc/toolgate/client.pem\n    client_key_file: /etc/toolgate/client.key\n",
        )
        .unwrap();
        let tls = config.state.tls.expect("state.tls is read");
        assert_eq!(
            tls.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/toolgate/redis-ca.pem"))
        );
        assert!(tls.client_key_file.is_some());
    }
}
