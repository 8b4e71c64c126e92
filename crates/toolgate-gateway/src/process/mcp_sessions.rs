//! Which user opened each MCP session, so that nobody else can use or end it — and how
//! many sessions each user may hold.
//!
//! A user is a caller: an id in a tenant ([`CallerId`]). `ann` of tenant `globex` is not
//! `ann` of tenant `acme`: she can neither use a session `ann` of `acme` opened nor take
//! her places.
//!
//! rmcp issues an `Mcp-Session-Id` at `initialize` and accepts it from anyone who sends it
//! back. The `/mcp` endpoint records the user behind each new id here and refuses the id
//! from every other user as if it were unknown (404), so a session's existence is not
//! revealed either. An id that is not in the table is unknown, whatever rmcp holds: the
//! table fails closed.
//!
//! The table is bounded by what a user does, never at another user's expense:
//! - a user holds at most `per_user` sessions; past it their next session is refused
//!   (429), and none of their open sessions is closed to make room — a client that runs
//!   several agents on one key would otherwise lose a live session to its own newcomer;
//! - all users together hold at most `max`; past it a newcomer is refused (503), whoever
//!   it is, and no session is evicted to make room;
//! - a session with no request for `idle_timeout`, and no response still streaming to
//!   it, expires: it no longer counts, and answers 404.
//!
//! Every session that leaves the table — expired, ended, refused — is handed to the
//! closer given at [`McpSessions::new`], which ends it inside rmcp too, so that its memory
//! is freed now instead of at rmcp's keep-alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use toolgate_core::{CallerId, User};
use toolgate_mcp::McpHttpService;

use crate::config::McpSessionLimits;

/// Ends a session inside the MCP server when it leaves the table.
pub(crate) type Closer = Box<dyn Fn(Arc<str>) + Send + Sync>;

/// The owner of every open MCP session, bounded per user and in all.
pub(crate) struct McpSessions {
    table: Mutex<Table>,
    close: Closer,
}

struct Table {
    entries: HashMap<Arc<str>, Entry>,
    limits: McpSessionLimits,
}

struct Entry {
    /// Who opened it.
    caller: CallerId,
    /// When its last request ended (or it was opened).
    last_used: Instant,
    /// Requests whose response is still being sent: a session streaming to its client is
    /// in use, however long ago the request came.
    in_flight: u32,
}

impl Entry {
    fn expired(&self, now: Instant, idle: Duration) -> bool {
        self.in_flight == 0 && now.saturating_duration_since(self.last_used) >= idle
    }

    /// How long until it expires, if nothing uses it; `None` while a response streams.
    fn expires_in(&self, now: Instant, idle: Duration) -> Option<Duration> {
        (self.in_flight == 0)
            .then(|| idle.saturating_sub(now.saturating_duration_since(self.last_used)))
    }
}

/// Why a new session was not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// The user already holds as many sessions as one user may.
    #[error(
        "you ({who}) have {limit} MCP sessions open, the most one user may hold: reuse one of them, or end one you no longer need with `DELETE /mcp` and its `Mcp-Session-Id`; a session unused for {idle} ends by itself"
    )]
    PerUser {
        /// The user, as the message names them.
        who: String,
        /// `per_user`.
        limit: usize,
        /// The idle time after which a session ends, as written in the message.
        idle: String,
        /// When the user's first unused session expires.
        retry_after: Duration,
    },
    /// All users together hold as many sessions as the gateway keeps.
    #[error(
        "the gateway holds as many MCP sessions as it keeps ({limit}, for all users): try again later; a session unused for {idle} ends by itself"
    )]
    Full {
        /// `max`.
        limit: usize,
        /// The idle time after which a session ends, as written in the message.
        idle: String,
        /// When the first unused session expires.
        retry_after: Duration,
    },
}

impl Refused {
    /// How long to wait before a new session could be kept.
    pub(crate) fn retry_after(&self) -> Duration {
        match self {
            Refused::PerUser { retry_after, .. } | Refused::Full { retry_after, .. } => {
                *retry_after
            }
        }
    }
}

/// A request in flight in a session: while it lives, the session does not expire; when it
/// is dropped (its response sent or abandoned), the session's idle time starts again.
pub(crate) struct InUse {
    sessions: Arc<McpSessions>,
    id: Arc<str>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut table = self.sessions.lock();
        if let Some(entry) = table.entries.get_mut(&self.id) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            entry.last_used = Instant::now();
        }
    }
}

impl McpSessions {
    /// An empty table within `limits`; `close` ends a session inside the MCP server.
    pub(crate) fn new(limits: McpSessionLimits, close: Closer) -> Self {
        McpSessions {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                limits,
            }),
            close,
        }
    }

    /// The table of the MCP endpoint `mcp`, with a task that sweeps expired sessions every
    /// [`sweep_interval`](Self::sweep_interval) for as long as the table lives. Sessions
    /// leaving the table are closed in `mcp`.
    pub(crate) fn start(limits: McpSessionLimits, mcp: McpHttpService) -> Arc<Self> {
        let close: Closer = Box::new(move |id| {
            let mcp = mcp.clone();
            // Closing waits on the session's worker: never under the table's lock, and
            // never holding up the request that let the session go.
            tokio::spawn(async move { mcp.close_session(&id).await });
        });
        let sessions = Arc::new(McpSessions::new(limits, close));
        let table = Arc::downgrade(&sessions);
        tokio::spawn(async move {
            loop {
                let Some(every) = table.upgrade().map(|s| s.sweep_interval()) else {
                    return;
                };
                tokio::time::sleep(every).await;
                match table.upgrade() {
                    Some(sessions) => sessions.sweep(),
                    // The configuration that made it was replaced, sessions and all.
                    None => return,
                }
            }
        });
        sessions
    }

    /// Applies new limits (a reload) from the next session on; sessions over a lowered
    /// limit stay until they end or expire.
    pub(crate) fn set_limits(&self, limits: McpSessionLimits) {
        self.lock().limits = limits;
    }

    /// How often [`sweep`](Self::sweep) should run: often enough that an expired session
    /// lives on by at most a quarter of the idle time (and by 30 s at most).
    pub(crate) fn sweep_interval(&self) -> Duration {
        let idle = self.lock().limits.idle_timeout;
        (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30))
    }

    /// Records that `user` opened the session `id`, or refuses it — and then closes it,
    /// since rmcp opened it already.
    pub(crate) fn bind(&self, id: &str, user: &User) -> Result<(), Refused> {
        self.bind_at(id, user, Instant::now())
    }

    fn bind_at(&self, id: &str, user: &User, now: Instant) -> Result<(), Refused> {
        let mut table = self.lock();
        let mut closing = table.remove_expired(now);
        let kept = table.admit(id, user, now);
        table.publish();
        drop(table);
        if let Err(refused) = &kept {
            let reason = match refused {
                Refused::PerUser { .. } => "per_user",
                Refused::Full { .. } => "max",
            };
            metrics::counter!("toolgate_mcp_sessions_refused_total", "reason" => reason)
                .increment(1);
            closing.push(Arc::from(id));
        }
        self.close_all(closing);
        kept
    }

    /// Whether `user` (the same id in the same tenant) opened the session `id` and it has
    /// not expired; if so, the request holds it in use until the returned guard is
    /// dropped. An expired session is closed.
    pub(crate) fn claim(self: &Arc<Self>, id: &str, user: &User) -> Option<InUse> {
        self.claim_at(id, user, Instant::now())
    }

    fn claim_at(self: &Arc<Self>, id: &str, user: &User, now: Instant) -> Option<InUse> {
        let mut table = self.lock();
        let idle = table.limits.idle_timeout;
        let (key, entry) = table.entries.get_key_value(id)?;
        if !entry.caller.is(user) {
            return None;
        }
        let key = Arc::clone(key);
        if entry.expired(now, idle) {
            table.entries.remove(&key);
            table.publish();
            drop(table);
            (self.close)(key);
            return None;
        }
        if let Some(entry) = table.entries.get_mut(&key) {
            entry.in_flight += 1;
            entry.last_used = now;
        }
        Some(InUse {
            sessions: Arc::clone(self),
            id: key,
        })
    }

    /// Forgets the session `id` (it was ended, or rmcp no longer knows it) and makes sure
    /// rmcp does not keep it either.
    pub(crate) fn unbind(&self, id: &str) {
        let removed = {
            let mut table = self.lock();
            let removed = table.entries.remove_entry(id);
            table.publish();
            removed
        };
        if let Some((id, _)) = removed {
            (self.close)(id);
        }
    }

    /// Forgets and closes every expired session.
    pub(crate) fn sweep(&self) {
        self.sweep_at(Instant::now());
    }

    fn sweep_at(&self, now: Instant) {
        let closing = {
            let mut table = self.lock();
            let closing = table.remove_expired(now);
            if !closing.is_empty() {
                table.publish();
            }
            closing
        };
        self.close_all(closing);
    }

    fn close_all(&self, ids: Vec<Arc<str>>) {
        for id in ids {
            (self.close)(id);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Table {
    /// Reports how many sessions are open (`toolgate_mcp_sessions`), after a change. Only
    /// the table in use changes: the one a reload built and dropped for the kept one
    /// never held a session.
    fn publish(&self) {
        metrics::gauge!("toolgate_mcp_sessions").set(self.entries.len() as f64);
    }

    /// Removes the expired entries; their ids, to close.
    fn remove_expired(&mut self, now: Instant) -> Vec<Arc<str>> {
        let idle = self.limits.idle_timeout;
        let expired: Vec<Arc<str>> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.expired(now, idle))
            .map(|(id, _)| Arc::clone(id))
            .collect();
        for id in &expired {
            self.entries.remove(id);
        }
        expired
    }

    /// Keeps `id` for `user` if both the user's and the total bound allow it. Expects the
    /// expired entries gone.
    fn admit(&mut self, id: &str, user: &User, now: Instant) -> Result<(), Refused> {
        let McpSessionLimits {
            per_user,
            max,
            idle_timeout: idle,
            ..
        } = self.limits;
        let first_expiry = |of_user: bool| {
            self.entries
                .values()
                .filter(|entry| !of_user || entry.caller.is(user))
                .filter_map(|entry| entry.expires_in(now, idle))
                .min()
                // Every session is streaming: one may end at any time; say the idle time.
                .unwrap_or(idle)
        };
        let held = self
            .entries
            .values()
            .filter(|entry| entry.caller.is(user))
            .count();
        if held >= per_user {
            return Err(Refused::PerUser {
                who: user.named(),
                limit: per_user,
                idle: humantime::format_duration(idle).to_string(),
                retry_after: first_expiry(true),
            });
        }
        if self.entries.len() >= max {
            return Err(Refused::Full {
                limit: max,
                idle: humantime::format_duration(idle).to_string(),
                retry_after: first_expiry(false),
            });
        }
        self.entries.insert(
            Arc::from(id),
            Entry {
                caller: CallerId::of(user),
                last_used: now,
                in_flight: 0,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use toolgate_core::User;

    use super::{McpSessions, Refused};
    use crate::config::McpSessionLimits;

    const IDLE: Duration = Duration::from_secs(60);

    fn user(id: &str) -> User {
        User::new(id)
    }

    /// A table with these bounds, and the ids its closer was handed.
    fn table(per_user: usize, max: usize) -> (Arc<McpSessions>, Arc<Mutex<Vec<String>>>) {
        let closed = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&closed);
        let sessions = McpSessions::new(
            McpSessionLimits {
                per_user,
                max,
                idle_timeout: IDLE,
                ..McpSessionLimits::default()
            },
            Box::new(move |id| record.lock().unwrap().push(id.to_string())),
        );
        (Arc::new(sessions), closed)
    }

    #[test]
    fn a_session_belongs_only_to_the_user_who_opened_it() {
        let (sessions, closed) = table(10, 100);
        sessions.bind("s1", &user("alice")).unwrap();
        assert!(sessions.claim("s1", &user("alice")).is_some());
        assert!(sessions.claim("s1", &user("bob")).is_none());
        assert!(sessions.claim("s2", &user("alice")).is_none());
        sessions.unbind("s1");
        assert!(sessions.claim("s1", &user("alice")).is_none());
        assert_eq!(
            *closed.lock().unwrap(),
            ["s1"],
            "an ended session is closed"
        );
    }

    #[test]
    fn a_user_is_an_id_in_a_tenant_for_sessions_and_their_cap() {
        let (sessions, _) = table(1, 100);
        let (acme, globex) = (
            user("ann").with_tenant("acme"),
            user("ann").with_tenant("globex"),
        );
        sessions.bind("acme", &acme).unwrap();
        assert!(sessions.claim("acme", &globex).is_none());
        assert!(sessions.claim("acme", &user("ann")).is_none());
        assert!(
            sessions
                .claim("acme", &acme.clone().with_roles(["admin"]))
                .is_some()
        );
        sessions.bind("globex", &globex).unwrap();
        let refused = sessions.bind("more", &acme).unwrap_err().to_string();
        assert!(refused.contains("`ann` of tenant `acme`"), "{refused}");
    }

    #[test]
    fn past_their_cap_a_user_is_refused_and_keeps_every_session() {
        let (sessions, closed) = table(3, 100);
        for id in ["a1", "a2", "a3"] {
            sessions.bind(id, &user("alice")).unwrap();
        }
        let refused = sessions.bind("a4", &user("alice")).unwrap_err();
        assert!(
            matches!(refused, Refused::PerUser { limit: 3, .. }),
            "{refused:?}"
        );
        let message = refused.to_string();
        assert!(message.contains("DELETE /mcp"), "{message}");
        for id in ["a1", "a2", "a3"] {
            assert!(
                sessions.claim(id, &user("alice")).is_some(),
                "{id} was closed"
            );
        }
        assert!(sessions.claim("a4", &user("alice")).is_none());
        assert_eq!(
            *closed.lock().unwrap(),
            ["a4"],
            "the refused session, opened already, is closed"
        );
    }

    #[test]
    fn one_users_flood_leaves_another_users_session_alone() {
        let (sessions, _) = table(4, 8);
        sessions.bind("alice", &user("alice")).unwrap();
        let refused = (0..1000)
            .filter(|i| sessions.bind(&format!("b{i}"), &user("bob")).is_err())
            .count();
        assert_eq!(refused, 996, "bob keeps his 4");
        assert!(sessions.claim("alice", &user("alice")).is_some());
    }

    #[test]
    fn past_the_total_cap_newcomers_are_refused_and_nobody_is_evicted() {
        let (sessions, closed) = table(2, 4);
        for (id, user) in [
            ("a1", &user("a")),
            ("a2", &user("a")),
            ("b1", &user("b")),
            ("c1", &user("c")),
        ] {
            sessions.bind(id, user).unwrap();
        }
        let refused = sessions.bind("d1", &user("d")).unwrap_err();
        assert!(
            matches!(refused, Refused::Full { limit: 4, .. }),
            "{refused:?}"
        );
        for (id, user) in [
            ("a1", &user("a")),
            ("a2", &user("a")),
            ("b1", &user("b")),
            ("c1", &user("c")),
        ] {
            assert!(sessions.claim(id, user).is_some(), "{id} was evicted");
        }
        assert_eq!(*closed.lock().unwrap(), ["d1"]);
    }

    #[test]
    fn an_idle_session_expires_frees_its_slot_and_is_closed() {
        let (sessions, closed) = table(1, 100);
        let start = Instant::now();
        sessions.bind_at("a1", &user("alice"), start).unwrap();
        let refused = sessions
            .bind_at("a2", &user("alice"), start + IDLE / 2)
            .unwrap_err();
        assert_eq!(
            refused.retry_after(),
            IDLE / 2,
            "a1 expires in half the time"
        );
        sessions
            .bind_at("a3", &user("alice"), start + IDLE)
            .unwrap();
        assert!(
            sessions
                .claim_at("a1", &user("alice"), start + IDLE)
                .is_none()
        );
        assert_eq!(*closed.lock().unwrap(), ["a2", "a1"]);
    }

    #[test]
    fn a_claim_after_the_idle_time_is_refused_and_closes_the_session() {
        let (sessions, closed) = table(4, 100);
        let start = Instant::now();
        sessions.bind_at("a1", &user("alice"), start).unwrap();
        assert!(
            sessions
                .claim_at(
                    "a1",
                    &user("alice"),
                    start + IDLE + Duration::from_millis(1)
                )
                .is_none()
        );
        assert_eq!(*closed.lock().unwrap(), ["a1"]);
    }

    #[test]
    fn a_session_with_a_response_in_flight_does_not_expire() {
        let (sessions, closed) = table(1, 100);
        let start = Instant::now();
        sessions.bind_at("a1", &user("alice"), start).unwrap();
        let streaming = sessions.claim_at("a1", &user("alice"), start).unwrap();
        let later = start + IDLE * 10;
        assert!(sessions.bind_at("a2", &user("alice"), later).is_err());
        assert!(sessions.claim_at("a1", &user("alice"), later).is_some());
        drop(streaming);
        assert!(
            closed.lock().unwrap().iter().all(|id| id != "a1"),
            "a1 was closed while in use"
        );
    }

    #[test]
    fn a_sweep_closes_only_expired_sessions() {
        let (sessions, closed) = table(4, 100);
        let start = Instant::now();
        sessions.bind_at("old", &user("alice"), start).unwrap();
        let later = start + IDLE;
        sessions.bind_at("new", &user("bob"), later).unwrap();
        sessions.sweep_at(later);
        assert_eq!(*closed.lock().unwrap(), ["old"]);
        assert!(sessions.claim_at("new", &user("bob"), later).is_some());
    }
}
