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
    /// Redis answered, and refused the user name or password the URL gives (or asked for
    /// one where the URL gives none).
    #[error(
        "Redis at {url} answered but refused to let toolgate in: the user name or password in its address is wrong, or missing where Redis asks for one; check them (`redis://user:password@host:6379`)"
    )]
    Refused {
        /// The URL, password masked.
        url: String,
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

/// `url` with any password replaced by `***`, fit for logs and error messages: the one in
/// its user information (`redis://user:***@host`, or all of it when it has no `:`, since
/// some write a bare password there), and the `pass` or `password` of its query (where
/// `redis+unix://` URLs carry it). Text that is not a URL as written keeps nothing before
/// its last `@`.
pub(crate) fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_owned(),
        };
    };
    // The user information ends at the last `@` before the query: an `@` in the query is
    // the query's, and one in a password written unescaped is the password's.
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let mut out = format!("{scheme}://");
    match before_query.rsplit_once('@') {
        Some((userinfo, host)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => out.push_str(&format!("{user}:***@")),
                None => out.push_str("***@"),
            }
            out.push_str(host);
        }
        None => out.push_str(before_query),
    }
    if let Some(query) = query {
        out.push('?');
        let pairs = query.split('&').map(|pair| match pair.split_once('=') {
            Some((key, _))
                if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
            {
                format!("{key}=***")
            }
            _ => pair.to_owned(),
        });
        out.push_str(&pairs.collect::<Vec<_>>().join("&"));
    }
    out
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

    #[test]
    fn a_password_in_the_query_or_a_malformed_url_is_masked_too() {
        for (url, shown) in [
            (
                "redis+unix:///run/redis.sock?user=app&pass=HUNTER2&db=0",
                "redis+unix:///run/redis.sock?user=app&pass=***&db=0",
            ),
            (
                "unix:///run/redis.sock?PASSWORD=HUNTER2",
                "unix:///run/redis.sock?PASSWORD=***",
            ),
            ("redis:/:HUNTER2@127.0.0.1:1", "***@127.0.0.1:1"),
            ("redis://HUNTER2@cache:6379", "redis://***@cache:6379"),
            ("redis://u:p/HUNTER2@cache/0", "redis://u:***@cache/0"),
        ] {
            assert_eq!(masked(url), shown);
        }
    }

    #[test]
    fn an_at_sign_in_the_query_does_not_move_the_host() {
        assert_eq!(
            masked("redis://u:HUNTER2@127.0.0.1:1/0?x=a@b"),
            "redis://u:***@127.0.0.1:1/0?x=a@b"
        );
    }
}
