//! [`RedisError`]: why the shared state could not be set up.

use std::time::Duration;

/// The shared state could not be set up. Once it is, Redis failures never surface as this
/// type: each backend decides by its failure policy instead.
///
/// # Examples
///
/// ```
/// use toolgate_redis::{RedisConfig, RedisError, RedisState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let error = RedisState::connect_lazy("postgres://db", RedisConfig::default()).unwrap_err();
/// assert!(matches!(error, RedisError::InvalidUrl { .. }));
/// assert!(error.to_string().contains("use redis://"));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// The URL does not parse as a Redis URL.
    #[error(
        "`{url}` is not a Redis URL ({reason}): use redis://[user:password@]host[:port][/db], or rediss:// for TLS"
    )]
    InvalidUrl {
        /// The URL, password masked.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// The nodes given for a Redis Cluster cannot be used (see
    /// [`ClusterNodes`](crate::ClusterNodes)).
    #[error(
        "`{nodes}` is not a usable list of Redis Cluster nodes ({reason}): write redis+cluster://host1:port1,host2:port2 (rediss+cluster://… for TLS), or list node URLs that all use redis:// or all rediss://"
    )]
    InvalidClusterNodes {
        /// The nodes as given, passwords masked.
        nodes: String,
        /// What is wrong with them.
        reason: String,
    },
    /// The configuration cannot work.
    #[error("invalid Redis configuration: {0}")]
    InvalidConfig(String),
    /// The key given to encrypt waiting calls at rest
    /// ([`RedisSuspensions::with_encryption_key`](crate::RedisSuspensions::with_encryption_key))
    /// is not a usable AES-256 key.
    #[error(
        "the key for encrypting waiting calls on Redis cannot be used ({reason}): give 32 random bytes, or the 64 hexadecimal digits that `openssl rand -hex 32` prints"
    )]
    InvalidEncryptionKey {
        /// What is wrong with it (never the key itself).
        reason: String,
    },
    /// Redis did not answer in time when connecting.
    #[error(
        "Redis at {url} could not be reached within {waited:?} ({reason}): check that it runs and that this replica can reach it, or start with `RedisState::connect_lazy` to run on the failure policies until it is back"
    )]
    Unreachable {
        /// The URL, password masked.
        url: String,
        /// How long the connection was given.
        waited: Duration,
        /// What went wrong.
        reason: String,
    },
}

/// `url` with any password replaced by `***`, fit for logs and error messages.
pub(crate) fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::masked;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            masked("redis://app:s3cret@cache:6379/0"),
            "redis://app:***@cache:6379/0"
        );
        assert_eq!(masked("redis://cache:6379"), "redis://cache:6379");
        assert_eq!(masked("redis://:pw@cache"), "redis://:***@cache");
    }
}
