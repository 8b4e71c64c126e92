//! Who opened each MCP session of an endpoint, so that nobody else can use or end it.
//!
//! rmcp issues an `Mcp-Session-Id` at `initialize` and takes it back from whoever sends
//! it. A session is one caller's: the pipeline runs its calls in that caller's session
//! scope, relays to it what upstreams send for its calls, and ends it on its `DELETE`. So
//! the endpoint records the caller (a user id in a tenant: [`CallerId`]) behind each id it
//! issues, and answers a request that names the id with anyone else's credential as it
//! answers an id it never issued (404), revealing nothing of the session.
//!
//! The table follows rmcp's sessions: an id leaves it when its session is ended through
//! the endpoint, and ids whose sessions rmcp no longer holds (its keep-alive ended them)
//! are swept out whenever the table has doubled since the last sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use toolgate_core::CallerId;

/// How many ids the table holds before its first sweep.
const FIRST_SWEEP: usize = 1024;

/// The opener of every open session of one endpoint.
#[derive(Default)]
pub(super) struct Owners(Mutex<Table>);

#[derive(Default)]
struct Table {
    by_session: HashMap<Arc<str>, CallerId>,
    /// The size at which the next sweep runs.
    next_sweep: usize,
}

impl Owners {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `caller` may use session `id`: it opened it. An id the endpoint never
    /// issued, or whose session was ended, is nobody's.
    pub(super) fn may_use(&self, id: &str, caller: &CallerId) -> bool {
        self.lock().by_session.get(id) == Some(caller)
    }

    /// Records `caller` as the opener of the session `id` rmcp just issued, after sweeping
    /// out the sessions rmcp no longer holds when the table has grown enough.
    pub(super) async fn record(&self, id: &str, caller: CallerId, sessions: &LocalSessionManager) {
        let sweep = {
            let table = self.lock();
            let due = table.by_session.len() >= table.next_sweep.max(FIRST_SWEEP);
            due.then(|| table.by_session.keys().cloned().collect::<Vec<_>>())
        };
        if let Some(ids) = sweep {
            let mut gone = Vec::new();
            for id in ids {
                if !sessions.has_session(&id).await.unwrap_or(false) {
                    gone.push(id);
                }
            }
            let mut table = self.lock();
            for id in gone {
                table.by_session.remove(&id);
            }
            table.next_sweep = table.by_session.len() * 2;
        }
        self.lock().by_session.insert(Arc::from(id), caller);
    }

    /// Forgets session `id`, which was ended.
    pub(super) fn forget(&self, id: &str) {
        self.lock().by_session.remove(id);
    }

    /// How many sessions are recorded (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().by_session.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_is_its_openers_alone_and_ended_ones_are_nobodys() {
        let (owners, sessions) = (Owners::default(), LocalSessionManager::default());
        let ann = CallerId::of(&toolgate_core::User::new("ann").with_tenant("acme"));
        let other_ann = CallerId::of(&toolgate_core::User::new("ann").with_tenant("globex"));
        owners.record("s1", ann.clone(), &sessions).await;
        assert!(owners.may_use("s1", &ann));
        assert!(!owners.may_use("s1", &other_ann));
        assert!(
            !owners.may_use("s2", &ann),
            "an id never issued is nobody's"
        );
        owners.forget("s1");
        assert!(!owners.may_use("s1", &ann));
    }

    #[tokio::test]
    async fn sessions_rmcp_no_longer_holds_are_swept_out_as_the_table_grows() {
        let (owners, sessions) = (Owners::default(), LocalSessionManager::default());
        let ann = CallerId::from("ann");
        for n in 0..FIRST_SWEEP {
            owners
                .record(&format!("gone-{n}"), ann.clone(), &sessions)
                .await;
        }
        assert_eq!(owners.len(), FIRST_SWEEP);
        // rmcp holds none of them: the next one sweeps them out.
        owners.record("new", ann.clone(), &sessions).await;
        assert_eq!(owners.len(), 1);
        assert!(owners.may_use("new", &ann));
    }
}
