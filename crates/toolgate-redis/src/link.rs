//! [`Link`]: the connection every backend of one [`RedisState`](crate::RedisState) shares,
//! and the deadline on each call over it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;

/// The gauge that says whether the last Redis call of this process got an answer (1) or
/// not (0).
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

/// One connection manager (multiplexed, reconnecting with backoff), its deadline, the key
/// prefix, and this replica's identity (for lease ids and fill locks).
#[derive(Clone)]
pub(crate) struct Link {
    connection: ConnectionManager,
    deadline: Duration,
    prefix: Arc<str>,
    replica: Arc<str>,
    sequence: Arc<AtomicU64>,
    /// Whether the last call got an answer: logs and the `toolgate_redis_up` gauge change
    /// on transitions only, not on every failed call.
    up: Arc<AtomicBool>,
}

impl Link {
    pub(crate) fn new(connection: ConnectionManager, deadline: Duration, prefix: &str) -> Self {
        Link {
            connection,
            deadline,
            prefix: prefix.into(),
            replica: format!("{:016x}", fastrand::u64(..)).into(),
            sequence: Arc::new(AtomicU64::new(0)),
            up: Arc::new(AtomicBool::new(true)),
        }
    }

    /// A handle on the shared connection (cheap: it is multiplexed).
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.connection.clone()
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
        let up = failure.is_none();
        if self.up.swap(up, Ordering::Relaxed) != up {
            metrics::gauge!(REDIS_UP).set(if up { 1.0 } else { 0.0 });
            match failure {
                None => tracing::info!("Redis answers again; shared limits and cache are back"),
                Some(failure) => tracing::warn!(
                    %failure,
                    "Redis is unavailable; backends decide by their failure policies until it is back"
                ),
            }
        }
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
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
