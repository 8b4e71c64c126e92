//! [`RedisConfig`]: deadlines, reconnection, key layout, lease and cache settings.

use std::time::Duration;

/// How the backends talk to Redis. Every setting has a default that suits a gateway on the
/// same network as its Redis; change the ones your deployment disagrees with.
///
/// | setting | default | what it bounds |
/// |---|---|---|
/// | [`deadline`](RedisConfigBuilder::deadline) | 100 ms | every Redis call, including waiting for a reconnect; a backend can have its own |
/// | [`down_after_failures`](RedisConfigBuilder::down_after_failures) | 3 | unanswered calls in a row before `toolgate_redis_up` goes to 0 |
/// | [`up_after`](RedisConfigBuilder::up_after) | 1 s | how long every call must be answered before `toolgate_redis_up` is 1 again |
/// | [`connect_timeout`](RedisConfigBuilder::connect_timeout) | 1 s | one connection attempt |
/// | [`reconnect_backoff`](RedisConfigBuilder::reconnect_backoff) | 100 ms … 5 s, 6 tries | the pause between connection attempts (exponential, with jitter) |
/// | [`key_prefix`](RedisConfigBuilder::key_prefix) | `toolgate` | the first part of every key |
/// | [`lease_ttl`](RedisConfigBuilder::lease_ttl) | 30 s | how long a dead replica's concurrency permit outlives it |
/// | [`cache_max_value_bytes`](RedisConfigBuilder::cache_max_value_bytes) | 1 MiB | the largest cached result |
/// | [`cache_max_bytes_per_caller`](RedisConfigBuilder::cache_max_bytes_per_caller) | 16 MiB per 5 min | what one caller may write to the cache per [window](RedisConfigBuilder::cache_caller_window) |
/// | [`cache_fill_wait`](RedisConfigBuilder::cache_fill_wait) | off | how long a replica waits for another one filling the same entry |
/// | [`tls_root_certificate`](RedisConfigBuilder::tls_root_certificate), [`tls_client_certificate`](RedisConfigBuilder::tls_client_certificate) | the system's trust store, no client certificate | a `rediss://` connection |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_redis::RedisConfig;
///
/// let config = RedisConfig::builder()
///     .deadline(Duration::from_millis(50))
///     .lease_ttl(Duration::from_secs(10))
///     .cache_fill_wait(Some(Duration::from_secs(2)))
///     .build();
/// assert_eq!(config.deadline(), Duration::from_millis(50));
/// assert_eq!(config.key_prefix(), "toolgate");
/// ```
#[derive(Clone, Debug)]
pub struct RedisConfig {
    pub(crate) deadline: Duration,
    pub(crate) down_after_failures: u32,
    pub(crate) up_after: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect_min_delay: Duration,
    pub(crate) reconnect_max_delay: Duration,
    pub(crate) reconnect_tries: usize,
    pub(crate) key_prefix: String,
    pub(crate) lease_ttl: Duration,
    pub(crate) cache_max_value_bytes: usize,
    pub(crate) cache_max_bytes_per_caller: u64,
    pub(crate) cache_caller_window: Duration,
    pub(crate) cache_fill_wait: Option<Duration>,
    /// Behind an `Arc`: certificates are large, and every backend's state holds the config.
    pub(crate) tls: Option<std::sync::Arc<TlsFiles>>,
}

/// The certificates of a TLS connection, as PEM: the CA that signed the server's certificate
/// (when it is not in the system's trust store) and this client's certificate and key (for
/// mutual TLS). Printed redacted.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) root_ca: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("root_ca", &self.root_ca.as_ref().map(|_| "<set>"))
            .field("client", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            deadline: Duration::from_millis(100),
            down_after_failures: 3,
            up_after: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            reconnect_min_delay: Duration::from_millis(100),
            reconnect_max_delay: Duration::from_secs(5),
            reconnect_tries: 6,
            key_prefix: "toolgate".to_owned(),
            lease_ttl: Duration::from_secs(30),
            cache_max_value_bytes: 1024 * 1024,
            cache_max_bytes_per_caller: RedisConfig::DEFAULT_CACHE_MAX_BYTES_PER_CALLER,
            cache_caller_window: RedisConfig::DEFAULT_CACHE_CALLER_WINDOW,
            cache_fill_wait: None,
            tls: None,
        }
    }
}

/// Builds a [`RedisConfig`]; see there for the defaults.
#[derive(Clone, Debug, Default)]
pub struct RedisConfigBuilder {
    config: RedisConfig,
}

impl RedisConfigBuilder {
    /// The longest any single Redis call may take, waiting for a connection included. Past
    /// it, the backend decides without Redis, by its failure policy.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.config.deadline = deadline;
        self
    }

    /// How many Redis calls in a row must get no answer before Redis counts as down (the
    /// `toolgate_redis_up` gauge goes to 0 and a warning is logged); it counts up again
    /// after [`up_after`](Self::up_after) of answers. The default, 3, keeps one slow reply on
    /// a busy machine from flipping the signal. Each call that gets no answer is still decided by its backend's failure
    /// policy, whatever this says.
    #[must_use]
    pub fn down_after_failures(mut self, failures: u32) -> Self {
        self.config.down_after_failures = failures;
        self
    }

    /// How long every Redis call must be answered, with no call left unanswered, before
    /// Redis counts as up again after it was down (default 1 s). Without it, one primary of
    /// a cluster that hangs flips the signal at every answer from the others; with it, the
    /// gauge goes to 0 once and comes back once. A single node that answers again is
    /// counted up after this long.
    #[must_use]
    pub fn up_after(mut self, quiet: Duration) -> Self {
        self.config.up_after = quiet;
        self
    }

    /// How long one attempt to open a connection may take.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// The pause between connection attempts after Redis went away: it starts at `min`,
    /// doubles up to `max`, each pause stretched by a random part of itself (so replicas
    /// that lost Redis together do not come back together), for `tries` attempts in a row.
    /// After the last one fails, the next call starts a new series. Callers never wait for
    /// this: they get their answer within [`deadline`](Self::deadline).
    ///
    /// This is for one node. On a Redis Cluster the cluster client reconnects to each node
    /// on its own schedule (50 ms doubling to 1 s, until the node is back or leaves the
    /// cluster's layout), with the same guarantee that callers never wait past their
    /// deadline.
    #[must_use]
    pub fn reconnect_backoff(mut self, min: Duration, max: Duration, tries: usize) -> Self {
        self.config.reconnect_min_delay = min;
        self.config.reconnect_max_delay = max.max(min);
        self.config.reconnect_tries = tries;
        self
    }

    /// The first part of every key (default `toolgate`). Give deployments that share one
    /// Redis their own prefix. On a Redis Cluster, give one without `{` or `}`: the keys'
    /// own hash tags follow the prefix, and Redis hashes the first `{…}` of a key, so a
    /// brace in the prefix would put every key in one slot, or a script's keys in two.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// How long a concurrency lease lives without renewal. Holders renew theirs every third
    /// of it, so this is how long the permits of a replica that died stay taken.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.lease_ttl = ttl;
        self
    }

    /// The largest cached result, as JSON bytes. Larger results are not stored (and
    /// counted), the call itself succeeds.
    #[must_use]
    pub fn cache_max_value_bytes(mut self, bytes: usize) -> Self {
        self.config.cache_max_value_bytes = bytes;
        self
    }

    /// The most bytes of cache entries one caller may write within a
    /// [window](Self::cache_caller_window) (default
    /// [`RedisConfig::DEFAULT_CACHE_MAX_BYTES_PER_CALLER`], 16 MiB; 0 turns the bound off).
    ///
    /// The caller is the one whose call stores the entry (a user id in its tenant),
    /// whatever the entry's scope: a result shared by a tenant or by everyone is charged to
    /// the caller who stored it, so that one caller's flood uses up only their own share.
    /// An entry weighs its JSON and its key. A result
    /// that would take its caller past the bound is not stored (and counted,
    /// [`CacheStats::over_caller_bound`](crate::CacheStats::over_caller_bound)); the call
    /// succeeds all the same, and the caller's results are stored again once the window
    /// is over. So one caller asking for many distinct results makes Redis hold at most
    /// about this much for the cache per window (twice it at a window's turn, the entries
    /// of the window before still living) — not the quotas, budgets, leases and sessions
    /// of everyone else that share the Redis pushed out by eviction, or refused under
    /// `noeviction`.
    ///
    /// Replicas of a version without the bound write without counting, during a rolling
    /// upgrade.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolgate_redis::RedisConfig;
    ///
    /// let config = RedisConfig::builder()
    ///     .cache_max_bytes_per_caller(4 * 1024 * 1024)
    ///     .cache_caller_window(Duration::from_secs(600))
    ///     .build();
    /// assert_eq!(config.cache_max_bytes_per_caller(), 4 * 1024 * 1024);
    /// ```
    #[must_use]
    pub fn cache_max_bytes_per_caller(mut self, bytes: u64) -> Self {
        self.config.cache_max_bytes_per_caller = bytes;
        self
    }

    /// The window of [`cache_max_bytes_per_caller`](Self::cache_max_bytes_per_caller)
    /// (default [`RedisConfig::DEFAULT_CACHE_CALLER_WINDOW`], 5 minutes, the result cache's
    /// default TTL): fixed, starting at a caller's first write after the last window
    /// ended. Give it the longest TTL of your cached tools: entries that live longer than
    /// the window stay while their caller writes the next window's bytes.
    #[must_use]
    pub fn cache_caller_window(mut self, window: Duration) -> Self {
        self.config.cache_caller_window = window;
        self
    }

    /// The cross-replica fill lock: with `Some(wait)`, a miss claims the entry for `wait`,
    /// and the same miss on another replica waits up to `wait` for the value instead of
    /// running the tool too. `None` (the default) lets every replica run its own misses.
    #[must_use]
    pub fn cache_fill_wait(mut self, wait: Option<Duration>) -> Self {
        self.config.cache_fill_wait = wait;
        self
    }

    /// Trusts the CA whose certificate this is (PEM) for a `rediss://` URL, instead of the
    /// system's trust store: for a Redis whose certificate a private CA signed.
    #[must_use]
    pub fn tls_root_certificate(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        std::sync::Arc::make_mut(self.config.tls.get_or_insert_default()).root_ca =
            Some(ca_pem.into());
        self
    }

    /// Presents this certificate and key (PEM) to Redis over `rediss://`: mutual TLS, for a
    /// Redis started with `tls-auth-clients yes`.
    #[must_use]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        std::sync::Arc::make_mut(self.config.tls.get_or_insert_default()).client =
            Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// The configuration.
    pub fn build(self) -> RedisConfig {
        self.config
    }
}

impl RedisConfig {
    /// The default of [`RedisConfigBuilder::cache_max_bytes_per_caller`]: 16 MiB.
    pub const DEFAULT_CACHE_MAX_BYTES_PER_CALLER: u64 = 16 * 1024 * 1024;

    /// The default of [`RedisConfigBuilder::cache_caller_window`]: 5 minutes, the result
    /// cache's default TTL.
    pub const DEFAULT_CACHE_CALLER_WINDOW: Duration = Duration::from_secs(300);

    /// A builder with the defaults.
    pub fn builder() -> RedisConfigBuilder {
        RedisConfigBuilder::default()
    }

    /// The per-call deadline.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// How many unanswered calls in a row count Redis as down.
    pub fn down_after_failures(&self) -> u32 {
        self.down_after_failures
    }

    /// How long calls must be answered before Redis counts as up again.
    pub fn up_after(&self) -> Duration {
        self.up_after
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The lease TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The largest cached value, in bytes.
    pub fn cache_max_value_bytes(&self) -> usize {
        self.cache_max_value_bytes
    }

    /// The most bytes of cache entries one caller may write per window (0: no bound).
    pub fn cache_max_bytes_per_caller(&self) -> u64 {
        self.cache_max_bytes_per_caller
    }

    /// The window of the bound per caller.
    pub fn cache_caller_window(&self) -> Duration {
        self.cache_caller_window
    }

    /// The fill-lock wait, if the fill lock is on.
    pub fn cache_fill_wait(&self) -> Option<Duration> {
        self.cache_fill_wait
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.deadline.is_zero() {
            return Err("`deadline` is zero, so every call would fail: use e.g. 100 ms".into());
        }
        if self.down_after_failures == 0 {
            return Err(
                "`down_after_failures` is zero: use at least 1 (3 keeps one slow reply from marking Redis down)"
                    .into(),
            );
        }
        if self.lease_ttl < Duration::from_millis(30) {
            return Err(format!(
                "`lease_ttl` of {:?} is too short to renew: use at least 30 ms (30 s is typical)",
                self.lease_ttl
            ));
        }
        if self.cache_max_bytes_per_caller > 0
            && self.cache_caller_window < Duration::from_millis(1)
        {
            return Err(
                "`cache_caller_window` is shorter than 1 ms, so the bound per caller would never hold: use the cache's TTL (5 min by default)"
                    .into(),
            );
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(format!(
                "`key_prefix` `{}` contains a brace, which would break Redis Cluster hash tags: remove it",
                self.key_prefix
            ));
        }
        Ok(())
    }
}
