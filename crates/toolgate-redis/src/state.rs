//! [`RedisState`]: one connection to Redis, and the three backends on it.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
        let state = Self::connect_lazy(url, config)?;
        let waited = state.config.connect_timeout + state.config.deadline;
        let mut connection = state.link.connection();
        let ping = redis::cmd("PING");
        match tokio::time::timeout(waited, ping.query_async::<String>(&mut connection)).await {
            Ok(Ok(_)) => Ok(state),
            Ok(Err(error)) => Err(RedisError::Unreachable {
                url: masked(url),
                waited,
                reason: error.to_string(),
            }),
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
        let client = redis::Client::open(url).map_err(|error| RedisError::InvalidUrl {
            url: masked(url),
            reason: error.to_string(),
        })?;
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
