//! [`FollowedCluster`]: a cluster connection that follows a failover the client cannot see.
//!
//! redis-rs refreshes its slot map when a node answers `MOVED` or a connection to it breaks.
//! A primary that hangs — `SIGSTOP`, a partition that drops packets, a paused VM — does
//! neither: requests to it time out (and redis-rs retries them on the same node), and once
//! a replica has taken its slots nothing ever tells the client, until the old primary wakes
//! and answers `MOVED`. Minutes of refused calls for a replica that was ready in seconds.
//!
//! So every Redis call on a cluster that gets no answer wakes a watcher. It asks the nodes
//! for the layout (`CLUSTER SLOTS`, the first node to answer wins), at most once every
//! [`CHECK_INTERVAL`], and when a slot range has another primary than the connection was
//! built on, it builds a new connection from the nodes of the new layout and swaps it in.
//! Calls already in flight finish on the old one. While every call is answered, the
//! watcher sends nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::Value;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use tokio::sync::Notify;

use crate::{ClusterNodes, RedisError};

/// The shortest time between two looks at the cluster's layout. While a primary hangs, each
/// replica asks about four times a second (one `CLUSTER SLOTS` each time); the promotion of
/// its replica is seen within this interval, plus one round trip and a new connection.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Builds the cluster client for a list of nodes, with the state's timeouts and
/// certificates.
pub(crate) type ClientFor =
    Box<dyn Fn(&ClusterNodes) -> Result<ClusterClient, RedisError> + Send + Sync>;

/// The cluster connection every call takes, replaced when the cluster's layout changed
/// under it.
pub(crate) struct FollowedCluster {
    current: ArcSwap<ClusterConnection>,
    wake: Arc<Notify>,
}

impl FollowedCluster {
    /// Starts following `connection`, made from `seeds`. The watcher runs on the current
    /// tokio runtime and ends when the returned value is dropped; `wait` bounds each look at
    /// the layout and each new connection.
    pub(crate) fn start(
        connection: ClusterConnection,
        seeds: ClusterNodes,
        client_for: ClientFor,
        wait: Duration,
    ) -> Arc<Self> {
        let wake = Arc::new(Notify::new());
        let followed = Arc::new(FollowedCluster {
            current: ArcSwap::from_pointee(connection),
            wake: wake.clone(),
        });
        let watcher = Watcher {
            followed: Arc::downgrade(&followed),
            wake,
            seeds,
            client_for,
            wait,
        };
        tokio::spawn(watcher.run());
        followed
    }

    /// A handle on the current connection (cheap: it is multiplexed).
    pub(crate) fn connection(&self) -> ClusterConnection {
        ClusterConnection::clone(&self.current.load())
    }

    /// A call got no answer: have the layout looked at (at most once per
    /// [`CHECK_INTERVAL`]; wake-ups in between count as one).
    pub(crate) fn suspect(&self) {
        self.wake.notify_one();
    }
}

impl Drop for FollowedCluster {
    fn drop(&mut self) {
        // The watcher wakes, finds nothing to follow, and ends.
        self.wake.notify_one();
    }
}

struct Watcher {
    followed: Weak<FollowedCluster>,
    wake: Arc<Notify>,
    seeds: ClusterNodes,
    client_for: ClientFor,
    wait: Duration,
}

impl Watcher {
    async fn run(self) {
        // What the first connection was built on. Unknown (a lazy state whose cluster is
        // away) means the first layout seen replaces the connection.
        let mut known = match self.followed.upgrade() {
            Some(followed) => layout_of(followed.connection(), self.wait).await,
            None => return,
        };
        loop {
            self.wake.notified().await;
            let Some(followed) = self.followed.upgrade() else {
                return;
            };
            let connection = followed.connection();
            // Not held while waiting: dropping the state ends the watcher.
            drop(followed);
            if let Some(now) = layout_of(connection, self.wait).await
                && known.as_ref() != Some(&now)
                && self.replace(&now).await
            {
                known = Some(now);
            }
            tokio::time::sleep(CHECK_INTERVAL).await;
        }
    }

    /// Builds a connection from the nodes of `layout` and swaps it in; whether it did.
    async fn replace(&self, layout: &Layout) -> bool {
        let built = async {
            let nodes = self.seeds.with_hosts(&layout.nodes)?;
            let client = (self.client_for)(&nodes)?;
            client
                .get_async_connection()
                .await
                .map_err(|error| RedisError::Unreachable {
                    url: nodes.to_string(),
                    waited: self.wait,
                    reason: error.to_string(),
                })
        };
        let connection = match tokio::time::timeout(self.wait, built).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                tracing::warn!(%error, "the Redis Cluster's layout changed, but a connection to its new nodes could not be made; trying again at the next unanswered call");
                return false;
            }
            Err(_) => {
                tracing::warn!(waited = ?self.wait, "the Redis Cluster's layout changed, but its new nodes did not answer in time; trying again at the next unanswered call");
                return false;
            }
        };
        let Some(followed) = self.followed.upgrade() else {
            return false;
        };
        followed.current.store(Arc::new(connection));
        tracing::info!(
            primaries = %layout.describe(),
            "the Redis Cluster's layout changed (a failover the client was not told of); calls now go to the new primaries"
        );
        true
    }
}

/// The layout as the first node to answer `CLUSTER SLOTS` sees it, or `None` when none
/// answers within `wait` (or the answer cannot be read).
async fn layout_of(mut connection: ClusterConnection, wait: Duration) -> Option<Layout> {
    let first_answer = RoutingInfo::MultiNode((
        MultipleNodeRoutingInfo::AllNodes,
        Some(ResponsePolicy::OneSucceeded),
    ));
    let mut slots = redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    let answer = tokio::time::timeout(wait, connection.route_command(slots, first_answer))
        .await
        .ok()?
        .ok()?;
    Layout::read(&answer)
}

/// Which primary serves which slots, and the nodes (primaries, then their replicas) a new
/// connection can start from. Two layouts are the same when the same primaries serve the
/// same ranges: a replica that comes or goes changes no route, and is no reason for a new
/// connection.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// Each slot range's primary, by node id (its address when the node gives no id).
    primaries: BTreeMap<(i64, i64), String>,
    /// `host:port` of every node listed with a usable address.
    nodes: Vec<String>,
    /// `host:port` of each range's primary, for the log.
    addresses: BTreeMap<(i64, i64), String>,
}

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.primaries == other.primaries
    }
}

impl Eq for Layout {}

impl Layout {
    /// Reads a `CLUSTER SLOTS` answer: per range, `[start, end, primary, replica…]`, each
    /// node `[host, port, id, …]`.
    pub(crate) fn read(answer: &Value) -> Option<Layout> {
        let Value::Array(ranges) = answer else {
            return None;
        };
        let mut layout = Layout {
            primaries: BTreeMap::new(),
            nodes: Vec::new(),
            addresses: BTreeMap::new(),
        };
        for range in ranges {
            let Value::Array(parts) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end))) = (parts.first(), parts.get(1))
            else {
                return None;
            };
            let mut nodes = parts.iter().skip(2).map(Node::read);
            let primary = nodes.next()??;
            let identity = primary.id.clone().or(primary.address.clone())?;
            layout.primaries.insert((*start, *end), identity);
            if let Some(address) = &primary.address {
                layout.addresses.insert((*start, *end), address.clone());
            }
            for node in std::iter::once(Some(primary)).chain(nodes).flatten() {
                if let Some(address) = node.address
                    && !layout.nodes.contains(&address)
                {
                    layout.nodes.push(address);
                }
            }
        }
        (!layout.primaries.is_empty()).then_some(layout)
    }

    fn describe(&self) -> String {
        self.addresses
            .iter()
            .map(|((start, end), address)| format!("{start}-{end} on {address}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

struct Node {
    address: Option<String>,
    id: Option<String>,
}

impl Node {
    fn read(value: &Value) -> Option<Node> {
        let Value::Array(fields) = value else {
            return None;
        };
        let host = fields.first().and_then(text)?;
        let Some(Value::Int(port)) = fields.get(1) else {
            return None;
        };
        // An empty host or `?` is a node that does not know its own address: it cannot be
        // a starting point.
        let address = match host.as_str() {
            "" | "?" => None,
            ipv6 if ipv6.contains(':') => Some(format!("[{ipv6}]:{port}")),
            host => Some(format!("{host}:{port}")),
        };
        let id = fields.get(2).and_then(text).filter(|id| !id.is_empty());
        Some(Node { address, id })
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::Layout;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    fn range(start: i64, end: i64, nodes: Vec<Value>) -> Value {
        let mut parts = vec![Value::Int(start), Value::Int(end)];
        parts.extend(nodes);
        Value::Array(parts)
    }

    #[test]
    fn a_promotion_is_a_new_layout_and_the_hung_node_is_no_starting_point() {
        let before = Value::Array(vec![
            range(
                0,
                8191,
                vec![node("10.0.0.1", 7000, "a"), node("10.0.0.4", 7000, "d")],
            ),
            range(8192, 16383, vec![node("10.0.0.2", 7000, "b")]),
        ]);
        // The replica of `a` took its slots; `a` (failed) is listed nowhere.
        let after = Value::Array(vec![
            range(0, 8191, vec![node("10.0.0.4", 7000, "d")]),
            range(8192, 16383, vec![node("10.0.0.2", 7000, "b")]),
        ]);
        let before = Layout::read(&before).unwrap();
        let after = Layout::read(&after).unwrap();
        assert_ne!(before, after);
        assert_eq!(after.nodes, ["10.0.0.4:7000", "10.0.0.2:7000"]);
        assert_eq!(
            after.describe(),
            "0-8191 on 10.0.0.4:7000, 8192-16383 on 10.0.0.2:7000"
        );
        assert_eq!(before.nodes.len(), 3);
        let replica_gone = Value::Array(vec![
            range(0, 8191, vec![node("10.0.0.1", 7000, "a")]),
            range(8192, 16383, vec![node("10.0.0.2", 7000, "b")]),
        ]);
        assert_eq!(
            Layout::read(&replica_gone).unwrap(),
            before,
            "a replica that left changes no route"
        );
    }

    #[test]
    fn unreadable_answers_and_unknown_hosts_are_not_layouts_or_seeds() {
        assert_eq!(Layout::read(&Value::Nil), None);
        assert_eq!(Layout::read(&Value::Array(vec![])), None);
        let unknown = Value::Array(vec![range(0, 16383, vec![node("?", 7000, "a")])]);
        let layout = Layout::read(&unknown).unwrap();
        assert!(layout.nodes.is_empty());
        let ipv6 = Value::Array(vec![range(0, 16383, vec![node("::1", 7000, "a")])]);
        assert_eq!(Layout::read(&ipv6).unwrap().nodes, ["[::1]:7000"]);
    }
}
