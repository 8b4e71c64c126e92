//! [`RedisState`]: one connection to Redis, and the three backends on it.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::TlsFiles;
use crate::error::masked;
use crate::link::Link;
use crate::{RedisCache, RedisConcurrency, RedisConfig, RedisError, RedisQuota};

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
    config: RedisConfig,
}

impl RedisState {
    /// Connects to Redis at `url` and checks that it answers (`PING`) within the
    /// configuration's connect timeout, so that a wrong address shows at start-up.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidUrl`], [`RedisError::InvalidConfig`], or
    /// [`RedisError::Unreachable`] when Redis does not answer in time.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, RedisError> {
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
            Ok(Ok(_)) => Self::with_client(client, config),
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
        config.validate().map_err(RedisError::InvalidConfig)?;
        let client = client(url, config.tls.as_deref())?;
        Self::with_client(client, config)
    }

    /// The state over `client`, whose connection opens on the first call.
    fn with_client(client: redis::Client, config: RedisConfig) -> Result<Self, RedisError> {
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
        Ok(RedisState {
            link: Link::new(
                manager,
                config.deadline,
                &config.key_prefix,
                config.down_after_failures,
            ),
            config,
        })
    }

    /// The quota backend, failing closed; see [`RedisQuota::on_unavailable`].
    pub fn quota(&self) -> RedisQuota {
        RedisQuota::new(self.link.clone())
    }

    /// The concurrency backend, failing closed; see [`RedisConcurrency::on_unavailable`].
    pub fn concurrency(&self) -> RedisConcurrency {
        RedisConcurrency::new(self.link.clone(), self.config.lease_ttl)
    }

    /// The cache backend. Each call makes a new fill-lock owner: give each
    /// [`ResultCache`](toolgate_hooks::cache::ResultCache) its own.
    pub fn cache(&self) -> RedisCache {
        RedisCache::new(
            self.link.clone(),
            self.config.cache_max_value_bytes,
            self.config.cache_fill_wait,
        )
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// How long a `PING` takes, or `None` when Redis does not answer within the deadline:
    /// for readiness probes and health pages.
    pub async fn ping(&self) -> Option<Duration> {
        let started = tokio::time::Instant::now();
        let mut connection = self.link.connection();
        let ping = redis::cmd("PING");
        let answer = self
            .link
            .within(ping.query_async::<String>(&mut connection))
            .await;
        answer.ok().map(|_| started.elapsed())
    }
}

/// The client for `url`: over TLS with the configured certificates, when there are any.
fn client(url: &str, tls: Option<&TlsFiles>) -> Result<redis::Client, RedisError> {
    let invalid = |error: redis::RedisError| RedisError::InvalidUrl {
        url: masked(url),
        reason: error.to_string(),
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
    let certificates = redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(certificate, key)| redis::ClientTlsConfig {
                client_cert: certificate.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.root_ca.clone(),
    };
    redis::Client::build_with_tls(url, certificates).map_err(|error| {
        RedisError::InvalidConfig(format!(
            "the TLS certificates cannot be used ({error}): give PEM files — the CA's certificate, and the client's certificate with its private key"
        ))
    })
}

/// Redis could not be reached: the reason, with what to check when it is the TLS handshake.
fn unreachable(url: &str, waited: Duration, error: &redis::RedisError) -> RedisError {
    let mut reason = error.to_string();
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
