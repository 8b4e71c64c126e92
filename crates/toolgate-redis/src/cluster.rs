//! [`ClusterNodes`]: the nodes a Redis Cluster client starts from.

use std::fmt;

use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::RedisError;
use crate::error::masked;

/// The scheme of a cluster written as one URL, plain and over TLS.
const CLUSTER: &str = "redis+cluster://";
const CLUSTER_TLS: &str = "rediss+cluster://";

/// The nodes of a Redis Cluster that a client asks for the cluster's layout: a few are
/// enough (the client learns the others, and follows the cluster as it changes), all of
/// them is fine.
///
/// Written either as one URL — `redis+cluster://host1:port1,host2:port2` (or
/// `rediss+cluster://…` for TLS, with an optional `user:password@` that every node
/// shares) — or as a list of node URLs that all use `redis://` or all `rediss://`. A
/// cluster has only database 0, so a node URL may not name another one. Printed with
/// passwords masked.
///
/// # Examples
///
/// ```
/// use toolgate_redis::ClusterNodes;
///
/// let nodes = ClusterNodes::parse("rediss+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7000")?;
/// assert_eq!(nodes.len(), 2);
/// assert!(nodes.uses_tls());
/// assert_eq!(nodes.to_string(), "rediss+cluster://app:***@10.0.0.1:7000,10.0.0.2:7000");
///
/// let same = ClusterNodes::from_urls(["rediss://app:s3cret@10.0.0.1:7000", "rediss://app:s3cret@10.0.0.2:7000"])?;
/// assert_eq!(nodes, same);
///
/// // Mixed schemes, an empty list and a bad port are refused, saying how to write it.
/// assert!(ClusterNodes::from_urls(["redis://a:7000", "rediss://b:7000"]).is_err());
/// assert!(ClusterNodes::parse("redis+cluster://").is_err());
/// let error = ClusterNodes::parse("redis+cluster://a:7000,b:70000").unwrap_err();
/// assert!(error.to_string().contains("b:70000"), "{error}");
/// # Ok::<(), toolgate_redis::RedisError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterNodes {
    urls: Vec<String>,
    tls: bool,
}

impl ClusterNodes {
    /// Whether `text` is written as a cluster URL (`redis+cluster://…` or
    /// `rediss+cluster://…`), rather than the URL of one node.
    ///
    /// ```
    /// use toolgate_redis::ClusterNodes;
    ///
    /// assert!(ClusterNodes::is_cluster_url("redis+cluster://h1:7000,h2:7000"));
    /// assert!(!ClusterNodes::is_cluster_url("redis://h1:6379"));
    /// ```
    pub fn is_cluster_url(text: &str) -> bool {
        text.starts_with(CLUSTER) || text.starts_with(CLUSTER_TLS)
    }

    /// Reads `redis+cluster://[user:password@]host1:port1,host2:port2[,…]` (or
    /// `rediss+cluster://…`). A node without a port is on 6379.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidClusterNodes`] for another scheme, no node, a node that is not
    /// `host[:port]`, or a path other than `/` or `/0`.
    pub fn parse(text: &str) -> Result<Self, RedisError> {
        let invalid = |reason: String| RedisError::InvalidClusterNodes {
            nodes: masked(text),
            reason,
        };
        let (scheme, rest) = if let Some(rest) = text.strip_prefix(CLUSTER) {
            ("redis://", rest)
        } else if let Some(rest) = text.strip_prefix(CLUSTER_TLS) {
            ("rediss://", rest)
        } else {
            return Err(invalid(format!(
                "it starts with neither {CLUSTER} nor {CLUSTER_TLS}"
            )));
        };
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (format!("{userinfo}@"), rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = match rest.split_once('/') {
            Some((hosts, path)) => (hosts, Some(path)),
            None => (rest, None),
        };
        if !matches!(path, None | Some("" | "0")) {
            return Err(invalid(
                "a cluster has only database 0: leave the path out".into(),
            ));
        }
        let urls: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| format!("{scheme}{userinfo}{host}"))
            .collect();
        Self::checked(urls).map_err(invalid)
    }

    /// The nodes at `urls`, each `redis://[user:password@]host[:port]` or all
    /// `rediss://…`.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidClusterNodes`] for an empty list, mixed schemes, a URL that
    /// does not parse (a bad port, say), a Unix socket, or a database other than 0.
    pub fn from_urls<I, S>(urls: I) -> Result<Self, RedisError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        Self::checked(urls.clone()).map_err(|reason| RedisError::InvalidClusterNodes {
            nodes: urls.iter().map(|u| masked(u)).collect::<Vec<_>>().join(","),
            reason,
        })
    }

    fn checked(urls: Vec<String>) -> Result<Self, String> {
        let Some(first) = urls.first() else {
            return Err("no node is given".into());
        };
        let tls = first.starts_with("rediss://");
        for url in &urls {
            let scheme_tls = if url.starts_with("rediss://") {
                true
            } else if url.starts_with("redis://") {
                false
            } else {
                return Err(format!(
                    "`{}` is not a redis:// or rediss:// URL",
                    masked(url)
                ));
            };
            if scheme_tls != tls {
                return Err(format!(
                    "`{}` and `{}` mix redis:// and rediss://; every node of a cluster is reached the same way",
                    masked(first),
                    masked(url)
                ));
            }
            if let Some(problem) = port_problem(url) {
                return Err(format!("`{}`: {problem}", masked(url)));
            }
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|error| format!("`{}`: {error}", masked(url)))?;
            if let ConnectionAddr::Unix(_) = info.addr() {
                return Err(format!(
                    "`{}` is a Unix socket; cluster nodes are reached over TCP",
                    masked(url)
                ));
            }
            if info.redis_settings().db() != 0 {
                return Err(format!(
                    "`{}` names database {}; a cluster has only database 0",
                    masked(url),
                    info.redis_settings().db()
                ));
            }
        }
        Ok(ClusterNodes { urls, tls })
    }

    /// Nodes reached the same way as these (scheme, credentials, anything after the host),
    /// at other `host:port`s: those a cluster's layout lists, when a failover has to be
    /// followed on a new connection.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidClusterNodes`] for no host, or one that does not make a URL.
    pub(crate) fn with_hosts(&self, hosts: &[String]) -> Result<Self, RedisError> {
        let first = &self.urls[0];
        let (scheme, rest) = first.split_once("://").unwrap_or(("redis", first));
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (format!("{userinfo}@"), rest),
            None => (String::new(), rest),
        };
        let suffix = rest.find(['/', '?', '#']).map_or("", |at| &rest[at..]);
        Self::from_urls(
            hosts
                .iter()
                .map(|host| format!("{scheme}://{userinfo}{host}{suffix}")),
        )
    }

    /// The node URLs (with their passwords, if any: do not log them; the `Display` form
    /// masks them).
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// How many nodes are given.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Never true: a list without nodes is refused when it is made. (For clippy's
    /// `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Whether the nodes are reached over TLS (`rediss://`).
    pub fn uses_tls(&self) -> bool {
        self.tls
    }
}

impl fmt::Display for ClusterNodes {
    /// `redis+cluster://host1:port1,host2:port2` (or `rediss+cluster://…`), password
    /// masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { CLUSTER_TLS } else { CLUSTER };
        let strip = if self.tls { "rediss://" } else { "redis://" };
        let hosts: Vec<String> = self
            .urls
            .iter()
            .map(|url| masked(url).trim_start_matches(strip).to_owned())
            .collect();
        // The user (and masked password) every node shares is written once, before the
        // first host.
        let (userinfo, hosts) = split_userinfo(&hosts);
        write!(f, "{scheme}{userinfo}{}", hosts.join(","))
    }
}

/// What is wrong with the port of `url`, if one is written and it is not 1 to 65535 (the
/// URL parser only says that the URL did not parse).
fn port_problem(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host_port = host_port.split('/').next()?;
    let port = match host_port.rfind(']') {
        Some(end) => host_port[end + 1..].strip_prefix(':')?,
        None => host_port.rsplit_once(':')?.1,
    };
    match port.parse::<u16>() {
        Ok(port) if port > 0 => None,
        _ => Some(format!("the port `{port}` is not a number from 1 to 65535")),
    }
}

/// `user:***@` when every host starts with the same one, and the hosts without it.
fn split_userinfo(hosts: &[String]) -> (String, Vec<String>) {
    let userinfo = hosts
        .first()
        .and_then(|h| h.rsplit_once('@'))
        .map(|(u, _)| format!("{u}@"));
    match userinfo {
        Some(userinfo) if hosts.iter().all(|h| h.starts_with(&userinfo)) => {
            let bare = hosts
                .iter()
                .map(|h| h[userinfo.len()..].to_owned())
                .collect();
            (userinfo, bare)
        }
        _ => (String::new(), hosts.to_vec()),
    }
}

impl fmt::Debug for ClusterNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterNodes({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::ClusterNodes;
    use crate::RedisError;

    fn reason(result: Result<ClusterNodes, RedisError>) -> String {
        match result {
            Ok(nodes) => panic!("{nodes} was accepted"),
            Err(error) => {
                assert!(
                    matches!(error, RedisError::InvalidClusterNodes { .. }),
                    "{error:?}"
                );
                error.to_string()
            }
        }
    }

    #[test]
    fn one_cluster_url_becomes_one_node_url_per_host() {
        let nodes =
            ClusterNodes::parse("redis+cluster://10.0.0.1:7000, 10.0.0.2:7001,h3/").unwrap();
        assert_eq!(
            nodes.urls(),
            [
                "redis://10.0.0.1:7000",
                "redis://10.0.0.2:7001",
                "redis://h3"
            ]
        );
        assert!(!nodes.uses_tls());
        assert_eq!(
            nodes.to_string(),
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7001,h3"
        );
    }

    #[test]
    fn nodes_of_a_new_layout_are_reached_like_the_seeds() {
        let seeds =
            ClusterNodes::parse("rediss+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7000/0").unwrap();
        let moved = seeds
            .with_hosts(&["10.0.0.9:7001".into(), "[::1]:7002".into()])
            .unwrap();
        assert_eq!(
            moved.urls(),
            [
                "rediss://app:pw@10.0.0.9:7001",
                "rediss://app:pw@[::1]:7002"
            ]
        );
        assert!(moved.uses_tls());
        assert!(seeds.with_hosts(&[]).is_err());
    }

    #[test]
    fn bad_node_lists_are_refused_with_what_to_write() {
        let empty = reason(ClusterNodes::parse("redis+cluster://"));
        assert!(empty.contains("no node"), "{empty}");
        assert!(empty.contains("redis+cluster://host1:port1"), "{empty}");
        let empty = reason(ClusterNodes::from_urls(Vec::<String>::new()));
        assert!(empty.contains("no node"), "{empty}");
        let mixed = reason(ClusterNodes::from_urls(["redis://a:1", "rediss://b:2"]));
        assert!(mixed.contains("mix redis:// and rediss://"), "{mixed}");
        let port = reason(ClusterNodes::parse("redis+cluster://a:7000,b:port"));
        assert!(port.contains("b:port"), "{port}");
        assert!(
            port.contains("the port `port` is not a number from 1 to 65535"),
            "{port}"
        );
        let port = reason(ClusterNodes::from_urls(["redis://u:p@[::1]:99999/0"]));
        assert!(port.contains("the port `99999`"), "{port}");
        assert!(ClusterNodes::from_urls(["redis://[::1]:7000", "redis://h"]).is_ok());
        let database = reason(ClusterNodes::from_urls(["redis://a:7000/2"]));
        assert!(database.contains("database 2"), "{database}");
        let scheme = reason(ClusterNodes::parse("redis://a:7000"));
        assert!(scheme.contains("redis+cluster://"), "{scheme}");
        let path = reason(ClusterNodes::parse("redis+cluster://a:7000/3"));
        assert!(path.contains("only database 0"), "{path}");
    }

    #[test]
    fn passwords_are_masked_when_printed() {
        let nodes = ClusterNodes::parse("redis+cluster://u:pw@a:1,b:2").unwrap();
        assert_eq!(nodes.to_string(), "redis+cluster://u:***@a:1,b:2");
        assert!(!format!("{nodes:?}").contains("pw"));
        let error = reason(ClusterNodes::parse("redis+cluster://u:pw@a:1,b:x"));
        assert!(!error.contains("pw"), "{error}");
    }
}
