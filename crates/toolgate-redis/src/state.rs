//! [`RedisState`]: one connection to Redis, and the three backends on it.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;

use crate::config::TlsFiles;
use crate::error::masked;
use crate::link::{Connection, Link, Source};
use crate::topology::FollowedCluster;
use toolgate_core::suspension::SuspensionLimits;

use crate::{
    ClusterNodes, RedisBudget, RedisCache, RedisConcurrency, RedisConfig, RedisCounters,
    RedisError, RedisHistory, RedisPartedHistory, RedisPins, RedisQuota, RedisSessions,
    RedisSuspensions,
};

/// How often the cluster client tries a command again after a redirect (`MOVED`, `ASK`),
/// a `CLUSTERDOWN`/`TRYAGAIN`, or a lost node, and the pauses between tries: short, since
/// the per-call deadline bounds the whole and a caller that gave up stops the retries.
const CLUSTER_RETRIES: u32 = 16;
const CLUSTER_RETRY_MIN_WAIT_MS: u64 = 5;
const CLUSTER_RETRY_MAX_WAIT_MS: u64 = 100;

/// The entry point: a connection to Redis shared by the [quota](RedisQuota),
/// [concurrency](RedisConcurrency) and [cache](RedisCache) backends it builds.
///
/// The connection is multiplexed (one socket carries every call of the process) and comes
/// back by itself after Redis goes away, with jittered exponential backoff (see
/// [`RedisConfigBuilder::reconnect_backoff`](crate::RedisConfigBuilder::reconnect_backoff)).
/// No caller waits for a reconnect past the per-call
/// [deadline](crate::RedisConfigBuilder::deadline): it gets its backend's failure-policy
/// answer instead.
///
/// On a Redis Cluster ([`connect_cluster`](Self::connect_cluster), or a
/// `redis+cluster://host1:port1,host2:port2` URL) there is one such socket per node, and
/// each command goes to the primary of its key's slot. Every script keeps its keys in one
/// slot, so the backends work there unchanged; redirects (`MOVED`, `ASK`) are followed
/// and the slot map refreshed after a failover, all within the same per-call deadline, and a
/// primary that hangs is left for its promoted replica (see
/// [`connect_cluster`](Self::connect_cluster)).
///
/// Cloning is cheap and shares the connection.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use toolgate_hooks::cache::ResultCache;
/// use toolgate_hooks::concurrency::Concurrency;
/// use toolgate_hooks::quota::{Quota, Rate};
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let quota = Quota::builder(Rate::per_minute(60)?).backend(Arc::new(state.quota())).build();
/// let cap = Concurrency::builder(4)?.backend(Arc::new(state.concurrency())).build();
/// let cache = ResultCache::builder().backend(state.cache()).build();
/// # let _ = (quota, cap, cache);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisState {
    link: Link,
    /// Behind an `Arc`: the state is cloned into every backend and kept small.
    config: std::sync::Arc<RedisConfig>,
}

impl RedisState {
    /// Checks that `url` is a one-node Redis URL that [`connect`](Self::connect) can use,
    /// connecting to nothing: for a configuration check before a start.
    ///
    /// ```
    /// use toolgate_redis::{RedisError, RedisState};
    ///
    /// assert!(RedisState::check_url("redis://127.0.0.1:6379/0").is_ok());
    /// let Err(RedisError::InvalidUrl { reason, .. }) = RedisState::check_url("redis://127.0.0.1:99999") else {
    ///     panic!("a port past 65535 is refused");
    /// };
    /// assert_eq!(reason, "invalid port number");
    /// ```
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidUrl`], with the password masked and why in words.
    pub fn check_url(url: &str) -> Result<(), RedisError> {
        redis::Client::open(url)
            .map(drop)
            .map_err(|error| RedisError::InvalidUrl {
                url: masked(url),
                reason: url_problem(url, &error),
            })
    }

    /// Connects to Redis at `url` and checks that it answers (`PING`) within the
    /// configuration's connect timeout, so that a wrong address shows at start-up.
    ///
    /// `url` is one node's (`redis://…`, `rediss://…`, `redis+unix://…`), or a Redis
    /// Cluster's, `redis+cluster://host1:port1,host2:port2` (see
    /// [`connect_cluster`](Self::connect_cluster)).
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidUrl`], [`RedisError::InvalidClusterNodes`],
    /// [`RedisError::InvalidConfig`], or [`RedisError::Unreachable`] when Redis does not
    /// answer in time.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, RedisError> {
        if ClusterNodes::is_cluster_url(url) {
            return Self::connect_cluster(&ClusterNodes::parse(url)?, config).await;
        }
        // One connection of its own first, so that what is wrong (refused, a certificate,
        // a password) shows here rather than as a reconnecting manager's silence.
        config.validate().map_err(RedisError::InvalidConfig)?;
        let client = client(url, config.tls.as_deref())?;
        let waited = config.connect_timeout + config.deadline;
        let probe = async {
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|error| unreachable(url, waited, &error))?;
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .map_err(|error| unreachable(url, waited, &error))
        };
        match tokio::time::timeout(waited, probe).await {
            Ok(Ok(_)) => Self::with_client(client, &masked(url), config, true),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(RedisError::Unreachable {
                url: masked(url),
                waited,
                reason: "no answer".into(),
            }),
        }
    }

    /// Sets up the connection without waiting for it: the first calls open it, and until
    /// Redis answers the backends decide by their failure policies. For replicas that must
    /// start while Redis is away.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidUrl`] or [`RedisError::InvalidConfig`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: the connection runs a background task.
    pub fn connect_lazy(url: &str, config: RedisConfig) -> Result<Self, RedisError> {
        if ClusterNodes::is_cluster_url(url) {
            return Self::connect_cluster_lazy(&ClusterNodes::parse(url)?, config);
        }
        config.validate().map_err(RedisError::InvalidConfig)?;
        let client = client(url, config.tls.as_deref())?;
        Self::with_client(client, &masked(url), config, false)
    }

    /// Connects to the Redis Cluster that `nodes` belong to, learns its layout (which
    /// primary serves which slots), and checks that every primary answers (`PING`) within
    /// the configuration's connect timeout.
    ///
    /// The client keeps a multiplexed connection to each primary and sends each command to
    /// the primary of its key's slot (never to a replica: reads from replicas could miss
    /// the latest write). When the cluster changes — a slot moves, a primary fails and a
    /// replica takes over — the client follows the redirects (`MOVED`, `ASK`), refreshes
    /// its slot map and tries again, with short pauses (5 to 100 ms), all within the
    /// call's [deadline](crate::RedisConfigBuilder::deadline); past it, the backend
    /// decides by its failure policy, as with one node.
    ///
    /// A primary that hangs (paused, or cut off by a partition that drops packets) sends no
    /// redirect and breaks no connection, so the client alone would keep sending it its
    /// slots after a replica took them over. Every call that gets no answer therefore has
    /// the layout looked at (`CLUSTER SLOTS`, at most four times a second); when a slot
    /// range has a new primary, a new connection is made to the nodes of the new layout and
    /// takes the next calls. Calls succeed again within about half a second of the
    /// promotion (measured in `tests/cluster.rs`), the hung node still hung.
    ///
    /// With certificates in `config`
    /// ([`tls_root_certificate`](crate::RedisConfigBuilder::tls_root_certificate),
    /// [`tls_client_certificate`](crate::RedisConfigBuilder::tls_client_certificate)) the
    /// nodes must be `rediss://`, and every node's certificate is checked against them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use toolgate_redis::{ClusterNodes, RedisConfig, RedisState};
    ///
    /// # async fn run() -> Result<(), toolgate_redis::RedisError> {
    /// let nodes = ClusterNodes::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000")?;
    /// let state = RedisState::connect_cluster(&nodes, RedisConfig::default()).await?;
    /// assert!(state.is_cluster());
    /// let quota = state.quota(); // the same backends as on one node
    /// # let _ = quota;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidConfig`] (certificates with `redis://` nodes, say), or
    /// [`RedisError::Unreachable`] when no node answers in time, or a primary does not.
    pub async fn connect_cluster(
        nodes: &ClusterNodes,
        config: RedisConfig,
    ) -> Result<Self, RedisError> {
        config.validate().map_err(RedisError::InvalidConfig)?;
        let client = cluster_client(nodes, &config)?;
        let shown = nodes.to_string();
        let waited = config.connect_timeout + config.deadline;
        let probe = async {
            let connection = client
                .get_async_connection()
                .await
                .map_err(|error| unreachable(&shown, waited, &error))?;
            Connection::Cluster(connection.clone())
                .ping()
                .await
                .map_err(|error| unreachable(&shown, waited, &error))?;
            Ok(connection)
        };
        match tokio::time::timeout(waited, probe).await {
            Ok(Ok(connection)) => Ok(Self::following(connection, nodes, config, true)),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(RedisError::Unreachable {
                url: shown,
                waited,
                reason: "no answer".into(),
            }),
        }
    }

    /// Sets up the cluster client without waiting for it: it connects in the background,
    /// and until the cluster answers the backends decide by their failure policies. For
    /// replicas that must start while Redis is away.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidConfig`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: the connection runs a background task.
    pub fn connect_cluster_lazy(
        nodes: &ClusterNodes,
        config: RedisConfig,
    ) -> Result<Self, RedisError> {
        config.validate().map_err(RedisError::InvalidConfig)?;
        let client = cluster_client(nodes, &config)?;
        let connection = client.get_pending_async_connection_with_config(
            ClusterConfig::new()
                .set_connection_timeout(config.connect_timeout)
                .set_response_timeout(node_response_timeout(&config)),
        );
        Ok(Self::following(connection, nodes, config, false))
    }

    /// The state over a cluster `connection` made from `nodes`, replaced when a failover
    /// has to be followed (see [`FollowedCluster`]).
    fn following(
        connection: ClusterConnection,
        nodes: &ClusterNodes,
        config: RedisConfig,
        answered: bool,
    ) -> Self {
        let for_nodes = config.clone();
        let followed = FollowedCluster::start(
            connection,
            nodes.clone(),
            Box::new(move |nodes| cluster_client(nodes, &for_nodes)),
            config.connect_timeout + config.deadline,
        );
        Self::over(
            Source::Cluster(followed),
            config,
            &nodes.to_string(),
            answered,
        )
    }

    fn over(source: Source, config: RedisConfig, to: &str, answered: bool) -> Self {
        RedisState {
            link: Link::new(source, &config, to, answered),
            config: std::sync::Arc::new(config),
        }
    }

    /// The state over `client`, whose connection opens on the first call; `answered` when
    /// Redis answered a check already.
    fn with_client(
        client: redis::Client,
        to: &str,
        config: RedisConfig,
        answered: bool,
    ) -> Result<Self, RedisError> {
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(None)
            .set_min_delay(config.reconnect_min_delay)
            .set_max_delay(config.reconnect_max_delay)
            .set_exponent_base(2.0)
            .set_number_of_retries(config.reconnect_tries);
        let manager =
            ConnectionManager::new_lazy_with_config(client, manager_config).map_err(|error| {
                RedisError::InvalidConfig(format!("the connection cannot be set up: {error}"))
            })?;
        Ok(Self::over(Source::Single(manager), config, to, answered))
    }

    /// Whether this state is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.link.is_cluster()
    }

    /// The quota backend, failing closed; see [`RedisQuota::on_unavailable`].
    pub fn quota(&self) -> RedisQuota {
        RedisQuota::new(self.link.clone())
    }

    /// The budget backend (the `Budget` hook's `OnBackendError` decides what an outage
    /// means).
    pub fn budget(&self) -> RedisBudget {
        RedisBudget::new(self.link.clone())
    }

    /// The concurrency backend, failing closed; see [`RedisConcurrency::on_unavailable`].
    pub fn concurrency(&self) -> RedisConcurrency {
        RedisConcurrency::new(self.link.clone(), self.config.lease_ttl)
    }

    /// The cache backend. Each call makes a new fill-lock owner: give each
    /// [`ResultCache`](toolgate_hooks::cache::ResultCache) its own.
    pub fn cache(&self) -> RedisCache {
        RedisCache::new(self.link.clone(), &self.config)
    }

    /// The suspension store: calls waiting for approval, approvals for a retry and decided
    /// outcomes, shared by every replica on this Redis and bounded by `limits`; see
    /// [`RedisSuspensions`].
    pub fn suspensions(&self, limits: SuspensionLimits) -> RedisSuspensions {
        RedisSuspensions::new(self.link.clone(), limits)
    }

    /// The sign-in sessions shared by every replica on this Redis; see [`RedisSessions`].
    pub fn sessions(&self) -> RedisSessions {
        RedisSessions::new(self.link.clone())
    }

    /// The newest `max` entries of the record `name`, shared by every replica on this
    /// Redis and kept `keep` after the newest; see [`RedisHistory`].
    pub fn history(&self, name: &str, max: usize, keep: Duration) -> RedisHistory {
        RedisHistory::new(self.link.clone(), name, max, keep)
    }

    /// The newest `max` entries of each part of the record `name` — at most `max_parts`
    /// parts apart, the others sharing one more list — shared by every replica on this
    /// Redis and kept `keep` after the newest; see [`RedisPartedHistory`].
    pub fn parted_history(
        &self,
        name: &str,
        max: usize,
        max_parts: usize,
        keep: Duration,
    ) -> RedisPartedHistory {
        RedisPartedHistory::new(self.link.clone(), name, max, max_parts, keep)
    }

    /// The pinned definitions of imported tools, shared by every replica on this Redis;
    /// see [`RedisPins`].
    pub fn pins(&self) -> RedisPins {
        RedisPins::new(self.link.clone())
    }

    /// Per-tool counts summed over every replica on this Redis, at most `max_tools` tools
    /// apart, kept `keep` after the last addition; see [`RedisCounters`].
    pub fn counters(&self, max_tools: usize, keep: Duration) -> RedisCounters {
        RedisCounters::new(self.link.clone(), max_tools, keep)
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// How long a `PING` takes, or `None` when Redis does not answer within the deadline:
    /// for readiness probes and health pages. On a cluster the `PING` goes to every
    /// primary, and counts as answered when all of them answer.
    pub async fn ping(&self) -> Option<Duration> {
        let started = tokio::time::Instant::now();
        let mut connection = self.link.connection();
        let answer = self.link.within(connection.ping()).await;
        answer.ok().map(|()| started.elapsed())
    }
}

/// The client for `url`: over TLS with the configured certificates, when there are any.
fn client(url: &str, tls: Option<&TlsFiles>) -> Result<redis::Client, RedisError> {
    let invalid = |error: redis::RedisError| RedisError::InvalidUrl {
        url: masked(url),
        reason: url_problem(url, &error),
    };
    let Some(tls) = tls else {
        return redis::Client::open(url).map_err(invalid);
    };
    if !url.starts_with("rediss://") {
        return Err(RedisError::InvalidConfig(format!(
            "TLS certificates are set but `{}` is not a TLS URL: use rediss://",
            masked(url)
        )));
    }
    redis::Client::build_with_tls(url, certificates(tls)).map_err(unusable_certificates)
}

/// The cluster client for `nodes`: primaries only, short retries, no overall timeout of
/// its own (the link's deadline is the one that counts), and the configured certificates.
fn cluster_client(nodes: &ClusterNodes, config: &RedisConfig) -> Result<ClusterClient, RedisError> {
    let mut builder = ClusterClientBuilder::new(nodes.urls().to_vec())
        .connection_timeout(config.connect_timeout)
        .response_timeout(node_response_timeout(config))
        .overall_response_timeout(None)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(CLUSTER_RETRY_MIN_WAIT_MS)
        .max_retry_wait(CLUSTER_RETRY_MAX_WAIT_MS)
        .retry_wait_formula(CLUSTER_RETRY_MIN_WAIT_MS, 2);
    if let Some(tls) = config.tls.as_deref() {
        if !nodes.uses_tls() {
            return Err(RedisError::InvalidConfig(format!(
                "TLS certificates are set but the cluster nodes `{nodes}` are not reached over TLS: use rediss+cluster:// (or rediss:// node URLs)"
            )));
        }
        builder = builder.certs(certificates(tls));
    }
    builder.build().map_err(|error| {
        let message = error.to_string();
        if message.to_lowercase().contains("cert") || message.to_lowercase().contains("pem") {
            unusable_certificates(error)
        } else {
            RedisError::InvalidClusterNodes {
                nodes: nodes.to_string(),
                reason: message,
            }
        }
    })
}

/// How long the cluster client waits for one node's answer: long enough for the longest
/// usual deadline. The client waits this long on a hung node when it refreshes its slot
/// map; a failover it is not told of is followed by the state instead (`topology`).
fn node_response_timeout(config: &RedisConfig) -> Duration {
    config.deadline.max(config.connect_timeout)
}

fn certificates(tls: &TlsFiles) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(certificate, key)| redis::ClientTlsConfig {
                client_cert: certificate.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.root_ca.clone(),
    }
}

fn unusable_certificates(error: redis::RedisError) -> RedisError {
    RedisError::InvalidConfig(format!(
        "the TLS certificates cannot be used ({error}): give PEM files — the CA's certificate, and the client's certificate with its private key"
    ))
}

/// Redis could not be reached: the reason, with what to check when it is the TLS handshake;
/// or Redis refused the credentials ([`RedisError::Refused`]).
fn unreachable(url: &str, waited: Duration, error: &redis::RedisError) -> RedisError {
    let mut reason = error.to_string();
    if error.kind() == redis::ErrorKind::AuthenticationFailed
        || ["WRONGPASS", "NOAUTH"]
            .iter()
            .any(|code| reason.contains(code))
    {
        return RedisError::Refused { url: masked(url) };
    }
    let lower = reason.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        reason.push_str(
            "; the TLS handshake failed: check that the CA given (`tls_root_certificate`, or the system's trust store) signed the server's certificate, that the certificate names the host in the URL, and that the client certificate is one the server accepts",
        );
    }
    RedisError::Unreachable {
        url: masked(url),
        waited,
        reason,
    }
}

/// Why redis-rs cannot read `url`, in words: the URL parser's own reason (`invalid port
/// number`, `empty host`) where redis-rs only says that the URL did not parse.
fn url_problem(url: &str, error: &redis::RedisError) -> String {
    // redis-rs says `<what> - <its error kind>[: <detail>]`.
    let said = error.to_string();
    let said = said.split(" - ").next().unwrap_or_default().trim();
    match said {
        "Redis URL did not parse" => match url::Url::parse(url) {
            Err(e) => e.to_string(),
            Ok(_) => "it is not a well-formed URL".to_owned(),
        },
        "Missing hostname" => "it names no host".to_owned(),
        "Invalid database number" => {
            "the database after the host is not a number, as in `redis://127.0.0.1:6379/0`"
                .to_owned()
        }
        "Missing path" => "it names no socket file".to_owned(),
        other => other.to_lowercase(),
    }
}
