//! The upstream tasks (SEP-2663) handed to callers: which caller each belongs to, and where
//! it lives upstream.
//!
//! When an imported tool's upstream answers a caller's `tools/call` with a task, the caller
//! is answered a task of toolgate's own: a random handle, which stands for the upstream's
//! task in this table. A `tasks/get`, `tasks/update` or `tasks/cancel` of the handle is
//! relayed to the upstream (through its tasks tool, on the caller's own connection) only
//! for the caller the task was made for (the same user id in the same tenant); to anyone else — whatever the id they send — it is
//! unknown, exactly as an id that never was one. The upstream's own id never reaches the
//! caller.
//!
//! The table is bounded: each entry expires with its task (the upstream's `ttlMs`, at most
//! [`MAX_AGE`]); one user holds at most [`RelayedTasks::per_caller`] tasks, a new one
//! forgetting that user's oldest (never another user's); and the table holds at most
//! [`RelayedTasks::total`], past which a new task is refused.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use toolgate_core::{CallerId as Owner, User};

/// The longest a task is kept when its upstream keeps it longer (or gives no `ttlMs`).
pub const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// How many tasks one user holds by default.
const PER_CALLER: usize = 100;
/// How many tasks the table holds by default, all users together.
const TOTAL: usize = 10_000;

/// The prefix of a relayed task's handle.
const HANDLE_PREFIX: &str = "tgt_";

/// The tasks upstreams created for callers, by the handles the callers were given. Clones
/// share the table, so that a server made again on a reload keeps its callers' tasks
/// ([`McpServer::relayed_tasks`](super::McpServer::relayed_tasks)).
#[derive(Clone)]
pub struct RelayedTasks(Arc<Mutex<Table>>);

/// Where a handle's task lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Relayed {
    /// The tool that relays `tasks/*` requests to the task's upstream.
    pub tasks_tool: String,
    /// The task's id at the upstream.
    pub upstream_id: String,
}

struct Entry {
    owner: Owner,
    relayed: Relayed,
    expires: Instant,
}

struct Table {
    entries: HashMap<String, Entry>,
    /// Each caller's handles, oldest first.
    by_user: HashMap<Owner, VecDeque<String>>,
    per_caller: usize,
    total: usize,
}

/// Why a task could not be handed to its caller.
#[derive(Debug, thiserror::Error)]
#[error(
    "toolgate holds {0} tasks of upstream MCP servers for its callers, as many as it may; poll or cancel tasks already made, or call again once they have ended"
)]
pub(crate) struct TableFull(usize);

impl Default for RelayedTasks {
    fn default() -> Self {
        RelayedTasks::with_limits(PER_CALLER, TOTAL)
    }
}

impl RelayedTasks {
    /// A table that holds at most `per_caller` tasks of one user and `total` in all.
    pub fn with_limits(per_caller: usize, total: usize) -> Self {
        RelayedTasks(Arc::new(Mutex::new(Table {
            entries: HashMap::new(),
            by_user: HashMap::new(),
            per_caller: per_caller.max(1),
            total: total.max(1),
        })))
    }

    /// How many tasks one user holds at most: a new one forgets the user's oldest.
    pub fn per_caller(&self) -> usize {
        self.table().per_caller
    }

    /// How many tasks are held at most, all users together: past it a new task is
    /// refused.
    pub fn total(&self) -> usize {
        self.table().total
    }

    /// How many tasks are held now (expired ones included until they are swept).
    pub fn len(&self) -> usize {
        self.table().entries.len()
    }

    /// Whether no task is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `relayed` for `user` for `ttl` (at most [`MAX_AGE`]); the handle to give the
    /// caller.
    pub(crate) fn insert(
        &self,
        user: &User,
        relayed: Relayed,
        ttl: Option<Duration>,
    ) -> Result<String, TableFull> {
        let owner = Owner::of(user);
        let user = &owner;
        let now = Instant::now();
        let expires = now + ttl.map_or(MAX_AGE, |ttl| ttl.min(MAX_AGE));
        let mut table = self.table();
        let table = &mut *table;
        table.sweep_user(user, now);
        let held = table.by_user.get(user).map_or(0, VecDeque::len);
        if held >= table.per_caller {
            table.forget_oldest(user);
        } else if table.entries.len() >= table.total {
            table.sweep(now);
            if table.entries.len() >= table.total {
                return Err(TableFull(table.total));
            }
        }
        let handle = new_handle();
        table.entries.insert(
            handle.clone(),
            Entry {
                owner: owner.clone(),
                relayed,
                expires,
            },
        );
        table
            .by_user
            .entry(owner)
            .or_default()
            .push_back(handle.clone());
        Ok(handle)
    }

    /// Where `handle`'s task lives, when it is `user`'s and has not expired.
    pub(crate) fn get(&self, handle: &str, user: &User) -> Option<Relayed> {
        if !handle.starts_with(HANDLE_PREFIX) {
            return None;
        }
        let table = self.table();
        let entry = table.entries.get(handle)?;
        (entry.owner.is(user) && entry.expires > Instant::now()).then(|| entry.relayed.clone())
    }
}

impl Table {
    /// Forgets `user`'s expired tasks.
    fn sweep_user(&mut self, user: &Owner, now: Instant) {
        let Some(handles) = self.by_user.get_mut(user) else {
            return;
        };
        let entries = &mut self.entries;
        handles.retain(|handle| match entries.get(handle) {
            Some(entry) if entry.expires > now => true,
            _ => {
                entries.remove(handle);
                false
            }
        });
        if handles.is_empty() {
            self.by_user.remove(user);
        }
    }

    /// Forgets every expired task.
    fn sweep(&mut self, now: Instant) {
        let users: Vec<Owner> = self.by_user.keys().cloned().collect();
        for user in users {
            self.sweep_user(&user, now);
        }
    }

    /// Forgets `user`'s oldest task.
    fn forget_oldest(&mut self, user: &Owner) {
        if let Some(handles) = self.by_user.get_mut(user)
            && let Some(oldest) = handles.pop_front()
        {
            self.entries.remove(&oldest);
        }
    }
}

/// A new handle: 128 random bits, so that none can be guessed.
fn new_handle() -> String {
    let bytes = toolgate_hooks::fingerprint::random_key();
    let mut handle = String::with_capacity(HANDLE_PREFIX.len() + 32);
    handle.push_str(HANDLE_PREFIX);
    for byte in &bytes[..16] {
        handle.push_str(&format!("{byte:02x}"));
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(n: usize) -> Relayed {
        Relayed {
            tasks_tool: "tasks.up".to_owned(),
            upstream_id: format!("up-{n}"),
        }
    }

    #[test]
    fn a_task_is_found_by_its_handle_for_its_own_user_only() {
        let table = RelayedTasks::default();
        let handle = table.insert(&User::new("ann"), relayed(1), None).unwrap();
        assert!(handle.starts_with(HANDLE_PREFIX) && handle.len() == 36);
        assert_eq!(table.get(&handle, &User::new("ann")), Some(relayed(1)));
        assert_eq!(table.get(&handle, &User::new("bob")), None);
        assert_eq!(
            table.get("up-1", &User::new("ann")),
            None,
            "the upstream id is no handle"
        );
    }

    #[test]
    fn a_task_is_unknown_to_the_same_user_id_of_another_tenant_whose_flood_spares_it() {
        let table = RelayedTasks::with_limits(2, 100);
        let acme = User::new("ann").with_tenant("acme");
        let globex = User::new("ann").with_tenant("globex");
        let handle = table.insert(&acme, relayed(1), None).unwrap();
        assert_eq!(table.get(&handle, &globex), None);
        assert_eq!(
            table.get(&handle, &User::new("ann")),
            None,
            "nor without one"
        );
        for n in 2..6 {
            table.insert(&globex, relayed(n), None).unwrap();
        }
        assert_eq!(table.get(&handle, &acme), Some(relayed(1)));
    }

    #[test]
    fn a_flood_from_one_user_forgets_its_own_oldest_and_no_one_elses() {
        let table = RelayedTasks::with_limits(3, 100);
        let bobs = table.insert(&User::new("bob"), relayed(0), None).unwrap();
        let anns: Vec<String> = (1..=10)
            .map(|n| table.insert(&User::new("ann"), relayed(n), None).unwrap())
            .collect();
        assert_eq!(table.len(), 4);
        assert!(
            anns[..7]
                .iter()
                .all(|h| table.get(h, &User::new("ann")).is_none())
        );
        assert!(
            anns[7..]
                .iter()
                .all(|h| table.get(h, &User::new("ann")).is_some())
        );
        assert_eq!(table.get(&bobs, &User::new("bob")), Some(relayed(0)));
    }

    #[test]
    fn past_the_total_a_new_task_is_refused_until_one_expires() {
        let table = RelayedTasks::with_limits(10, 2);
        table
            .insert(&User::new("ann"), relayed(1), Some(Duration::ZERO))
            .unwrap();
        table.insert(&User::new("bob"), relayed(2), None).unwrap();
        // Ann's expired task is swept to make room.
        table.insert(&User::new("cat"), relayed(3), None).unwrap();
        assert!(table.insert(&User::new("dan"), relayed(4), None).is_err());
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn an_expired_task_is_unknown() {
        let table = RelayedTasks::default();
        let handle = table
            .insert(&User::new("ann"), relayed(1), Some(Duration::ZERO))
            .unwrap();
        assert_eq!(table.get(&handle, &User::new("ann")), None);
    }
}
