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

use crate::RedisConfig;
use crate::topology::FollowedCluster;

/// The gauge that says whether Redis answers this process (1) or not (0). It is exported
/// as soon as a state is made: 1 once Redis has answered (a state from `connect` starts at
/// 1, a lazy one at 0), 0 after
/// [`down_after_failures`](crate::RedisConfigBuilder::down_after_failures) calls in a row got
/// no answer, and 1 again once every call for
/// [`up_after`](crate::RedisConfigBuilder::up_after) was answered.
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
            Failure::TimedOut(deadline) => write!(
                f,
                "Redis gave no answer within {deadline:?} (it is down, hung or out of reach)"
            ),
            Failure::Failed(reason) => write!(f, "Redis failed: {reason}"),
        }
    }
}

/// Whether Redis answers, as the `toolgate_redis_up` gauge and the logs tell it, with a
/// debounce each way: down after `down_after` calls in a row got no answer (one slow reply
/// on a busy machine does not flip it), up again only once calls were answered for
/// `up_after` with no unanswered call among them. The second half is what keeps a cluster
/// with one primary hung from flapping: calls to the healthy primaries are answered
/// between the ones that are not, and each such answer used to count Redis up again.
#[derive(Debug)]
struct Health {
    up: AtomicBool,
    failures_in_a_row: AtomicU32,
    /// Milliseconds from `born` to the latest unanswered call; `NEVER` before the first.
    last_failure_ms: AtomicU64,
    born: tokio::time::Instant,
    down_after: u32,
    up_after: Duration,
}

const NEVER: u64 = u64::MAX;

impl Health {
    fn new(down_after: u32, up_after: Duration, up: bool) -> Self {
        Health {
            up: AtomicBool::new(up),
            failures_in_a_row: AtomicU32::new(0),
            last_failure_ms: AtomicU64::new(NEVER),
            born: tokio::time::Instant::now(),
            down_after: down_after.max(1),
            up_after,
        }
    }

    /// Records one call's answer now; `Some(up)` when the state changed with it.
    fn record(&self, answered: bool) -> Option<bool> {
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(NEVER - 1);
        self.record_at(answered, now)
    }

    /// Records one call's answer at `now_ms` (from `born`).
    fn record_at(&self, answered: bool, now_ms: u64) -> Option<bool> {
        if answered {
            if self.up.load(Ordering::Relaxed) {
                // Written only when there is something to reset: the common case stays a
                // read of a shared cache line.
                if self.failures_in_a_row.load(Ordering::Relaxed) != 0 {
                    self.failures_in_a_row.store(0, Ordering::Relaxed);
                }
                return None;
            }
            let last = self.last_failure_ms.load(Ordering::Relaxed);
            let quiet = last == NEVER
                || u128::from(now_ms.saturating_sub(last)) >= self.up_after.as_millis();
            if !quiet {
                return None;
            }
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            return self
                .up
                .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
                .then_some(true);
        }
        self.last_failure_ms.store(now_ms, Ordering::Relaxed);
        let failures = self
            .failures_in_a_row
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if failures < self.down_after {
            return None;
        }
        self.up
            .compare_exchange(true, false, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
            .then_some(false)
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

/// Where a link's connections come from: one node's reconnecting manager, or a cluster
/// connection that is replaced when a failover has to be followed.
#[derive(Clone)]
pub(crate) enum Source {
    Single(ConnectionManager),
    Cluster(Arc<FollowedCluster>),
}

/// One connection (multiplexed, reconnecting by itself), the deadline of each call, the
/// key prefix, and this replica's identity (for lease ids and fill locks).
#[derive(Clone)]
pub(crate) struct Link {
    source: Source,
    /// What the link is to, password masked: which Redis a log line is about.
    to: Arc<str>,
    deadline: Duration,
    prefix: Arc<str>,
    replica: Arc<str>,
    sequence: Arc<AtomicU64>,
    /// Shared by every backend of the state, whatever their deadlines: logs and the
    /// `toolgate_redis_up` gauge change on transitions only.
    health: Arc<Health>,
}

impl Link {
    /// A link over `source` with the deadline, prefix and health settings of `config`.
    /// `answered` says whether Redis has answered already (a checked connection) or not
    /// (a lazy one): the `toolgate_redis_up` gauge starts at 1 or 0 accordingly, so it is
    /// there from the start.
    pub(crate) fn new(source: Source, config: &RedisConfig, to: &str, answered: bool) -> Self {
        metrics::gauge!(REDIS_UP).set(if answered { 1.0 } else { 0.0 });
        Link {
            source,
            to: to.into(),
            deadline: config.deadline,
            prefix: config.key_prefix.as_str().into(),
            replica: format!("{:016x}", fastrand::u64(..)).into(),
            sequence: Arc::new(AtomicU64::new(0)),
            health: Arc::new(Health::new(
                config.down_after_failures,
                config.up_after,
                answered,
            )),
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

    /// A handle on the shared connection (cheap: it is multiplexed). On a cluster, the
    /// current one: take a new handle for each call.
    pub(crate) fn connection(&self) -> Connection {
        match &self.source {
            Source::Single(manager) => Connection::Single(manager.clone()),
            Source::Cluster(followed) => Connection::Cluster(followed.connection()),
        }
    }

    /// Whether the link is to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.source, Source::Cluster(_))
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// An id unique across replicas: the replica's identity and a sequence number.
    pub(crate) fn unique_id(&self) -> String {
        let n = self.sequence.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n:x}", self.replica)
    }

    /// Runs `script` with `key` as its one declared key and `args`, under the deadline: the
    /// call of a store whose scripts build their other keys from a base.
    pub(crate) async fn run_script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        key: String,
        args: &[&[u8]],
    ) -> Result<T, Failure> {
        let mut invocation = script.prepare_invoke();
        invocation.key(key);
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.connection();
        self.within(invocation.invoke_async::<T>(&mut connection))
            .await
    }

    /// Runs one Redis call under the deadline. Waiting for a reconnect counts against it,
    /// so no caller waits longer than the deadline, whatever state the connection is in.
    pub(crate) async fn within<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Failure> {
        let answer = match tokio::time::timeout(self.deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Failure::Failed(said_by_redis(&error))),
            Err(_) => Err(Failure::TimedOut(self.deadline)),
        };
        if answer.is_err()
            && let Source::Cluster(followed) = &self.source
        {
            // A hung primary only ever shows as calls without an answer.
            followed.suspect();
        }
        self.note(answer.as_ref().err());
        answer
    }

    fn note(&self, failure: Option<&Failure>) {
        let Some(up) = self.health.record(failure.is_none()) else {
            return;
        };
        metrics::gauge!(REDIS_UP).set(if up { 1.0 } else { 0.0 });
        match failure {
            None => tracing::info!(
                redis = %self.to,
                "Redis answers again; shared limits and cache are back"
            ),
            Some(failure) => tracing::warn!(
                redis = %self.to,
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
            .field("kind", &self.connection().kind())
            .field("to", &self.to)
            .field("deadline", &self.deadline)
            .field("prefix", &self.prefix)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// What Redis said, for a caller's error: without the script's SHA and Lua line Redis adds
/// to an error raised in a script (`… script: 5cfe…, on @user_script:33.`), which tell a
/// caller nothing and an onlooker how the limits are built.
fn said_by_redis(error: &redis::RedisError) -> String {
    let text = error.to_string();
    match text.find(" script: ") {
        Some(at) => text[..at].trim_end_matches('.').to_owned(),
        None => text,
    }
}

/// Milliseconds for Redis `PX` / `PEXPIRE`: rounded up, at least 1.
pub(crate) fn millis_at_least_one(duration: Duration) -> u64 {
    let ms = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Health;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_error_raised_in_a_script_is_told_without_the_script_s_sha_and_line() {
        let reply = b"-OOM command not allowed when used memory > 'maxmemory'. script: 5cfe0c9b77ea3462cc6cfff22c089e94a23d7739, on @user_script:33.\r\n";
        let error = redis::parse_redis_value(reply)
            .unwrap()
            .extract_error()
            .unwrap_err();
        let said = super::said_by_redis(&error);
        assert!(
            said.contains("command not allowed when used memory > 'maxmemory'"),
            "{said}"
        );
        assert!(
            !said.contains("5cfe0c9b") && !said.contains("user_script"),
            "{said}"
        );
    }

    #[test]
    fn one_unanswered_call_does_not_mark_redis_down() {
        let health = Health::new(3, SECOND, true);
        assert_eq!(health.record_at(false, 0), None);
        assert_eq!(health.record_at(true, 1), None, "it never went down");
        assert_eq!(health.record_at(false, 2), None);
        assert_eq!(health.record_at(false, 3), None);
        assert_eq!(
            health.record_at(true, 4),
            None,
            "two in a row are not three"
        );
    }

    #[test]
    fn redis_is_down_after_the_set_number_of_failures_in_a_row_and_up_after_a_quiet_while() {
        let health = Health::new(3, SECOND, true);
        assert_eq!(health.record_at(false, 0), None);
        assert_eq!(health.record_at(false, 1), None);
        assert_eq!(health.record_at(false, 2), Some(false));
        assert_eq!(health.record_at(false, 3), None, "down already");
        assert_eq!(
            health.record_at(true, 500),
            None,
            "answered, but not for long"
        );
        assert_eq!(health.record_at(true, 1_003), Some(true));
        assert_eq!(health.record_at(true, 1_004), None);
    }

    #[test]
    fn answers_between_unanswered_calls_do_not_flap_the_state() {
        // One primary of three hung: now and then three calls in a row go to it, with
        // calls to the healthy ones answered in between, for 2.4 s.
        let health = Health::new(3, SECOND, true);
        let mut transitions = Vec::new();
        for ms in 0..2_400 {
            transitions.extend(health.record_at(ms % 100 >= 3, ms));
        }
        // Back to answering everything.
        for ms in 2_400..4_000 {
            transitions.extend(health.record_at(true, ms));
        }
        assert_eq!(transitions, [false, true], "down once, up once");
    }

    #[test]
    fn a_lazy_state_is_up_at_its_first_answer() {
        let health = Health::new(3, SECOND, false);
        assert_eq!(health.record_at(true, 0), Some(true));
    }

    #[test]
    fn down_after_zero_is_taken_as_one() {
        let health = Health::new(0, SECOND, true);
        assert_eq!(health.record_at(false, 0), Some(false));
    }
}
