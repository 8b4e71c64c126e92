//! The decided history: the last decisions on waiting calls, newest first, for
//! `GET /v1/admin/decisions` and the console. Bounded to [`MAX_DECISIONS`]. It is kept where
//! the policies keep their state: in this process, where a restart forgets it, or on Redis,
//! where every replica records into one history and reads it, for [`KEEP_ON_REDIS`] after
//! the newest decision. The audit trail is the lasting record.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolgate_redis::RedisHistory;

/// The most decisions kept.
pub const MAX_DECISIONS: usize = 500;

/// How long the history on Redis is kept after its newest decision.
pub const KEEP_ON_REDIS: Duration = Duration::from_secs(30 * 24 * 3600);

/// One decision on a waiting call.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Decided {
    /// The suspension id.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Who made the call.
    pub user: String,
    /// The tenant of who made the call, if any: an approver of one tenant is shown that
    /// tenant's decisions only. (Decisions kept by an earlier version read as of no
    /// tenant.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Who decided.
    pub decided_by: String,
    /// The tenant of who decided, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by_tenant: Option<String>,
    /// `approve`, `reject`, `complete` or `approve_retry`.
    pub decision: String,
    /// The reason the approver gave, if any.
    pub reason: Option<String>,
    /// When (RFC 3339).
    pub decided_at: String,
    /// How the call ended: `success`, `error` or `approved_for_retry`.
    pub outcome: String,
}

/// The history is kept on Redis, which did not answer in time.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the decided history is kept on Redis, which does not answer: try again in a moment")]
pub struct HistoryUnavailable;

/// The last decisions, newest first: in this process, or on Redis.
#[derive(Debug)]
pub enum DecisionHistory {
    /// In this process.
    Memory(Mutex<VecDeque<Decided>>),
    /// On Redis, shared by every replica.
    Redis(RedisHistory),
}

impl Default for DecisionHistory {
    fn default() -> Self {
        DecisionHistory::Memory(Mutex::default())
    }
}

impl DecisionHistory {
    /// Keeps `decided`, forgetting the oldest past [`MAX_DECISIONS`]. The decision stands
    /// whether or not it can be kept: when Redis does not answer, that is logged.
    pub async fn record(&self, decided: Decided) {
        match self {
            DecisionHistory::Memory(decisions) => {
                let mut decisions = decisions.lock().unwrap_or_else(|e| e.into_inner());
                decisions.push_front(decided);
                decisions.truncate(MAX_DECISIONS);
            }
            DecisionHistory::Redis(redis) => {
                let entry = serde_json::to_string(&decided).unwrap_or_default();
                if let Err(error) = redis.record(&entry).await {
                    tracing::warn!(target: "toolgate::console", %error, id = %decided.id, "a decision was not added to the decided history");
                }
            }
        }
    }

    /// The newest `limit` decisions (an entry on Redis this gateway cannot read is left out).
    ///
    /// # Errors
    ///
    /// [`HistoryUnavailable`] when the history is on Redis and Redis does not answer.
    pub async fn newest(&self, limit: usize) -> Result<Vec<Decided>, HistoryUnavailable> {
        match self {
            DecisionHistory::Memory(decisions) => {
                let decisions = decisions.lock().unwrap_or_else(|e| e.into_inner());
                Ok(decisions.iter().take(limit).cloned().collect())
            }
            DecisionHistory::Redis(redis) => {
                let entries = redis.newest(limit).await.map_err(|error| {
                    tracing::warn!(target: "toolgate::console", %error, "the decided history cannot be read");
                    HistoryUnavailable
                })?;
                Ok(entries
                    .iter()
                    .filter_map(|entry| serde_json::from_str(entry).ok())
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(id: usize) -> Decided {
        Decided {
            id: id.to_string(),
            tool: "sleep".into(),
            user: "bob".into(),
            tenant: None,
            decided_by: "alice".into(),
            decided_by_tenant: None,
            decision: "approve".into(),
            reason: None,
            decided_at: "2026-11-28T08:00:00Z".into(),
            outcome: "success".into(),
        }
    }

    #[tokio::test]
    async fn the_newest_decisions_come_first_and_the_oldest_are_forgotten() {
        let history = DecisionHistory::default();
        for i in 0..MAX_DECISIONS + 3 {
            history.record(decided(i)).await;
        }
        let newest = history.newest(usize::MAX).await.unwrap();
        assert_eq!(newest.len(), MAX_DECISIONS);
        assert_eq!(newest[0].id, (MAX_DECISIONS + 2).to_string());
        assert_eq!(newest.last().unwrap().id, "3");
        assert_eq!(history.newest(2).await.unwrap().len(), 2);
    }
}
