//! Which user opened each MCP session, so that nobody else can use or end it.
//!
//! rmcp issues an `Mcp-Session-Id` at `initialize` and accepts it from anyone who sends it
//! back. The `/mcp` endpoint records the user behind each new id here and refuses the id
//! from every other user as if it were unknown (404), so a session's existence is not
//! revealed either. An id that is not in the table is unknown, whatever rmcp holds: the
//! table fails closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolgate_mcp::rmcp::transport::streamable_http_server::session::local::SessionConfig;

/// How long rmcp keeps an idle session: past it the session is gone there too, so its
/// entry can go.
const IDLE: Duration = SessionConfig::DEFAULT_KEEP_ALIVE;

/// The owner of every open MCP session, at most `max` of them.
///
/// Past `max`, entries idle longer than rmcp keeps a session are dropped first, then the
/// least recently used tenth. A dropped entry makes its session unknown (404): its client
/// initializes again, as the MCP specification asks of a client that gets 404.
pub(crate) struct McpSessions {
    owners: Mutex<HashMap<Arc<str>, Owner>>,
    max: usize,
}

struct Owner {
    user: Arc<str>,
    last_used: Instant,
}

impl McpSessions {
    /// An empty table keeping at most `max` sessions (at least one).
    pub(crate) fn new(max: usize) -> Self {
        McpSessions {
            owners: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    /// Records that `user` opened the session `id`.
    pub(crate) fn bind(&self, id: &str, user: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if owners.len() >= self.max && !owners.contains_key(id) {
            owners.retain(|_, owner| now.duration_since(owner.last_used) < IDLE);
        }
        if owners.len() >= self.max && !owners.contains_key(id) {
            let mut ages: Vec<(Instant, Arc<str>)> = owners
                .iter()
                .map(|(id, owner)| (owner.last_used, Arc::clone(id)))
                .collect();
            ages.sort_unstable_by_key(|(last_used, _)| *last_used);
            let evict = (self.max / 10).max(1).min(ages.len());
            for (_, id) in ages.into_iter().take(evict) {
                owners.remove(&id);
            }
        }
        owners.insert(
            Arc::from(id),
            Owner {
                user: Arc::from(user),
                last_used: now,
            },
        );
    }

    /// Whether `user` opened the session `id`; if so, the session counts as used now.
    pub(crate) fn is_owner(&self, id: &str, user: &str) -> bool {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get_mut(id) {
            Some(owner) if &*owner.user == user => {
                owner.last_used = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// Forgets the session `id` (it was ended, or rmcp no longer knows it).
    pub(crate) fn unbind(&self, id: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::McpSessions;

    #[test]
    fn a_session_belongs_only_to_the_user_who_opened_it() {
        let sessions = McpSessions::new(10);
        sessions.bind("s1", "alice");
        assert!(sessions.is_owner("s1", "alice"));
        assert!(!sessions.is_owner("s1", "bob"));
        assert!(!sessions.is_owner("s2", "alice"));
        sessions.unbind("s1");
        assert!(!sessions.is_owner("s1", "alice"));
    }

    #[test]
    fn the_table_never_holds_more_than_its_bound() {
        let sessions = McpSessions::new(10);
        for i in 0..100 {
            sessions.bind(&format!("s{i}"), "alice");
        }
        let held = sessions
            .owners
            .lock()
            .map(|o| o.len())
            .unwrap_or(usize::MAX);
        assert!(held <= 10, "{held} entries");
        assert!(
            sessions.is_owner("s99", "alice"),
            "the newest session is kept"
        );
    }
}
