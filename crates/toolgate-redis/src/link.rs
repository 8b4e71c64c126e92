//! [`Link`]: the connection every backend of one [`RedisState`](crate::RedisState) shares,
//! and the deadline on each call over it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// The gauge that says whether Redis answers this process (1) or not (0): it goes to 0
/// after [`down_after_failures`](crate::RedisConfigBuilder::down_after_failures) calls in a
/// row got no answer, and back to 1 at the first that does.
pub const REDIS_UP: &str = "toolgate_redis_up";

/// Why a Redis call gave no answer.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// No answer within the deadline (Redis down, hung, or reconnecting).
    TimedOut(Duration),
    /// Redis or the connection answered with an error.
    Failed(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::TimedOut(deadline) => write!(f, "Redis gave no answer within {deadline:?}"),
            Failure::Failed(reason) => write!(f, "Redis failed: {reason}"),
        }
    }
}

/// Whether Redis answers, as the `toolgate_redis_up` gauge and the logs tell it: down after
/// `down_after` calls in a row got no answer, up again at the first answer. One slow reply on
/// a busy machine does not flip it.
#[derive(Debug)]
struct Health {
    up: AtomicBool,
    failures_in_a_row: AtomicU32,
    down_after: u32,
}

impl Health {
    fn new(down_after: u32) -> Self {
        Health {
            up: AtomicBool::new(true),
            failures_in_a_row: AtomicU32::new(0),
            down_after: down_after.max(1),
        }
    }

    /// Records one call's answer; `Some(up)` when the state changed with it.
    fn record(&self, answered: bool) -> Option<bool> {
        let up = if answered {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            true
        } else {
            let failures = self
                .failures_in_a_row
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            if failures < self.down_after {
                return None;
            }
            false
        };
        (self.up.swap(up, Ordering::Relaxed) != up).then_some(up)
    }
}

/// The connection of a state: to one Redis node, or to a Redis Cluster. Both are
/// multiplexed and reconnect by themselves; the backends send their scripts and commands
/// through either alike (it is a [`ConnectionLike`]), so what they do does not depend on
/// which one it is.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One node (or a proxy in front of several): one socket, reconnecting with backoff.
    Single(ConnectionManager),
    /// A Redis Cluster: a socket per node, each command sent to the primary of its key's
    /// slot, `MOVED`/`ASK` redirects followed and the slot map refreshed after a failover.
    Cluster(ClusterConnection),
}

impl Connection {
    /// `PING`. On a cluster it goes to every primary and counts as answered when all of
    /// them answer: every slot's owner is reachable (a replica that is down does not
    /// matter to the backends, which never read from replicas).
    pub(crate) async fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Connection::Single(connection) => redis::cmd("PING")
                .query_async::<String>(connection)
                .await
                .map(drop),
            Connection::Cluster(connection) => {
                let every_primary = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                connection
                    .route_command(redis::cmd("PING"), every_primary)
                    .await
                    .and_then(Value::extract_error)
                    .map(drop)
            }
        }
    }

    /// What the connection is to, for logs and `Debug`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Connection::Single(_) => "single node",
            Connection::Cluster(_) => "cluster",
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

/// One connection (multiplexed, reconnecting by itself), the deadline of each call, the
/// key prefix, and this replica's identity (for lease ids and fill locks).
#[derive(Clone)]
pub(crate) struct Link {
    connection: Connection,
    deadline: Duration,
    prefix: Arc<str>,
    replica: Arc<str>,
    sequence: Arc<AtomicU64>,
    /// Shared by every backend of the state, whatever their deadlines: logs and the
    /// `toolgate_redis_up` gauge change on transitions only.
    health: Arc<Health>,
}

impl Link {
    pub(crate) fn new(
        connection: Connection,
        deadline: Duration,
        prefix: &str,
        down_after: u32,
    ) -> Self {
        Link {
            connection,
            deadline,
            prefix: prefix.into(),
            replica: format!("{:016x}", fastrand::u64(..)).into(),
            sequence: Arc::new(AtomicU64::new(0)),
            health: Arc::new(Health::new(down_after)),
        }
    }

    /// The same link with another per-call deadline (at least a millisecond).
    pub(crate) fn with_deadline(&self, deadline: Duration) -> Self {
        Link {
            deadline: deadline.max(Duration::from_millis(1)),
            ..self.clone()
        }
    }

    /// The per-call deadline.
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// A handle on the shared connection (cheap: it is multiplexed).
    pub(crate) fn connection(&self) -> Connection {
        self.connection.clone()
    }

    /// Whether the link is to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.connection, Connection::Cluster(_))
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// An id unique across replicas: the replica's identity and a sequence number.
    pub(crate) fn unique_id(&self) -> String {
        let n = self.sequence.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:x}", self.replica)
    }

    /// Runs one Redis call under the deadline. Waiting for a reconnect counts against it,
    /// so no caller waits longer than the deadline, whatever state the connection is in.
    pub(crate) async fn within<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Failure> {
        let answer = match tokio::time::timeout(self.deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Failure::Failed(error.to_string())),
            Err(_) => Err(Failure::TimedOut(self.deadline)),
        };
        self.note(answer.as_ref().err());
        answer
    }

    fn note(&self, failure: Option<&Failure>) {
        let Some(up) = self.health.record(failure.is_none()) else {
            return;
        };
        metrics::gauge!(REDIS_UP).set(if up { 1.0 } else { 0.0 });
        match failure {
            None => tracing::info!("Redis answers again; shared limits and cache are back"),
            Some(failure) => tracing::warn!(
                %failure,
                failures_in_a_row = self.health.down_after,
                "Redis is unavailable; backends decide by their failure policies until it is back"
            ),
        }
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("to", &self.connection.kind())
            .field("deadline", &self.deadline)
            .field("prefix", &self.prefix)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// Milliseconds for Redis `PX` / `PEXPIRE`: rounded up, at least 1.
pub(crate) fn millis_at_least_one(duration: Duration) -> u64 {
    let ms = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::Health;

    #[test]
    fn one_unanswered_call_does_not_mark_redis_down() {
        let health = Health::new(3);
        assert_eq!(health.record(false), None);
        assert_eq!(health.record(true), None, "it never went down");
        assert_eq!(health.record(false), None);
        assert_eq!(health.record(false), None);
        assert_eq!(health.record(true), None, "two in a row are not three");
    }

    #[test]
    fn redis_is_down_after_the_set_number_of_failures_in_a_row_and_up_at_the_first_answer() {
        let health = Health::new(3);
        assert_eq!(health.record(false), None);
        assert_eq!(health.record(false), None);
        assert_eq!(health.record(false), Some(false));
        assert_eq!(
            health.record(false),
            None,
            "down already: no second transition"
        );
        assert_eq!(health.record(true), Some(true));
        assert_eq!(health.record(true), None);
    }

    #[test]
    fn down_after_zero_is_taken_as_one() {
        let health = Health::new(0);
        assert_eq!(health.record(false), Some(false));
    }
}
