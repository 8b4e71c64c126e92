//! The decided history: the last decisions on waiting calls taken through this gateway
//! process, newest first, for `GET /v1/admin/decisions` and the console. Bounded to
//! [`MAX_DECISIONS`]; a restart forgets it (the audit trail is the lasting record).

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

/// The most decisions kept.
pub const MAX_DECISIONS: usize = 500;

/// One decision on a waiting call.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Decided {
    /// The suspension id.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Who made the call.
    pub user: String,
    /// Who decided.
    pub decided_by: String,
    /// `approve`, `reject`, `complete` or `approve_retry`.
    pub decision: String,
    /// The reason the approver gave, if any.
    pub reason: Option<String>,
    /// When (RFC 3339).
    pub decided_at: String,
    /// How the call ended: `success`, `error` or `approved_for_retry`.
    pub outcome: String,
}

/// The last decisions, newest first.
#[derive(Debug, Default)]
pub struct DecisionHistory {
    decisions: Mutex<VecDeque<Decided>>,
}

impl DecisionHistory {
    /// Keeps `decided`, forgetting the oldest past [`MAX_DECISIONS`].
    pub fn record(&self, decided: Decided) {
        let mut decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        decisions.push_front(decided);
        decisions.truncate(MAX_DECISIONS);
    }

    /// The newest `limit` decisions.
    pub fn newest(&self, limit: usize) -> Vec<Decided> {
        let decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        decisions.iter().take(limit).cloned().collect()
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
            decided_by: "alice".into(),
            decision: "approve".into(),
            reason: None,
            decided_at: "2026-11-28T08:00:00Z".into(),
            outcome: "success".into(),
        }
    }

    #[test]
    fn the_newest_decisions_come_first_and_the_oldest_are_forgotten() {
        let history = DecisionHistory::default();
        for i in 0..MAX_DECISIONS + 3 {
            history.record(decided(i));
        }
        let newest = history.newest(usize::MAX);
        assert_eq!(newest.len(), MAX_DECISIONS);
        assert_eq!(newest[0].id, (MAX_DECISIONS + 2).to_string());
        assert_eq!(newest.last().unwrap().id, "3");
        assert_eq!(history.newest(2).len(), 2);
    }
}
