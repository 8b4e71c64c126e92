//! Suspension stores: the core's in-memory one, and a JSON file that survives a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use toolgate_core::User;
use toolgate_core::suspension::{DecidedCall, RetryApproval, SuspensionFilter};
pub use toolgate_core::suspension::{
    InMemorySuspensionStore, SuspendedInvocation, SuspensionLimits, SuspensionStore,
    SuspensionStoreError, SuspensionTable,
};

use crate::persist::{self, Loaded};

/// Why a file store could not be opened: the file is already open in another store
/// ([`is_in_use`](Self::is_in_use)), or the file system refused it.
#[derive(Debug, thiserror::Error)]
#[error("{}", persist::describe("the suspension file", .path, .source, "give each process its own file, or share calls through the Redis store"))]
pub struct FileStoreError {
    /// The file.
    pub path: PathBuf,
    /// What the file system said; of kind
    /// [`ErrorKind::WouldBlock`](std::io::ErrorKind::WouldBlock) when the file is already open in
    /// another store.
    #[source]
    pub source: std::io::Error,
}

impl FileStoreError {
    /// Whether the file is already open in another store, in this process or another
    /// (`source.kind()` is [`ErrorKind::WouldBlock`](std::io::ErrorKind::WouldBlock)): give each
    /// process its own file, or close the other store first.
    pub fn is_in_use(&self) -> bool {
        persist::in_use(&self.source)
    }
}

/// Suspended calls, approvals for a retry and outcomes of decided calls kept in two JSON
/// files, each rewritten atomically (write, then rename) when it changes, so that they
/// survive a restart of the process: a call waiting for a person still waits, an approval
/// for a retry given before the restart is still good (once: one used up is gone from its
/// file before the call runs), and a caller still reads the outcome of their decided call.
///
/// It keeps the same [`SuspensionLimits`] as the in-memory store, with a
/// [`SuspensionTable`]: at most `max_per_user` calls per caller (a user id in a tenant:
/// `ann` of `globex` never takes the places of `ann` of `acme`) and `max_total` in all, their
/// records taking at most `max_bytes_per_user` bytes per caller and `max_bytes_total` in all
/// (16 MiB and 256 MiB by default: the whole file is rewritten on every change, so these
/// bound what one rewrite costs, and one caller's large calls cannot slow everyone's), each
/// expiring `expire_after` after it was suspended. Expired calls are removed from the file
/// at the next change; their ids answer "expired" until this process ends (a restart
/// forgets them, and they answer "unknown" after it).
///
/// Approvals for a retry ([`SuspensionStore::keep_retry_approval`]) and outcomes of decided
/// calls ([`SuspensionStore::keep_outcome`]) are kept under the same limits as in the
/// in-memory store: approvals counted per caller and in all apart from the calls, each until
/// its own expiry; outcomes `expire_after` after the decision, at most `max_total` (the
/// oldest go first). Those read back at open are kept even past the caps, as calls are;
/// expired ones are dropped at open and leave the file at its next change.
///
/// It lists its waiting calls ([`SuspensionStore::list`]) and its kept outcomes
/// ([`SuspensionStore::list_outcomes`]) by every condition of a [`SuspensionFilter`] (tool,
/// user id, tenant, since), as the in-memory store does.
///
/// # Files
///
/// - `<path>` (the calls file): an object of the waiting calls by id, exactly as earlier
///   versions wrote it, so a file of an earlier version opens with all its calls.
/// - `<path>.decided.json` (e.g. `suspensions.json.decided.json`): an object
///   `{"retry_approvals": [...], "outcomes": [...]}`. It is created at the first approval or
///   outcome kept; once it exists it is rewritten (empty when nothing is left) rather than
///   removed. An earlier version ignores it: opened by that version (a rollback), the
///   calls file keeps all its waiting calls, and the approvals and outcomes, which that
///   version cannot use, wait beside it.
///
/// A change writes only the file it changes: a call saved or taken, the calls file; an
/// approval kept or used, or an outcome kept, the other. Either file that cannot be read
/// back is moved aside with a warning (`<file>.corrupt-<unix ms>`) and the store starts
/// without what it held; the other file is unaffected. A new file is readable by its owner
/// only (on Unix); a rewrite keeps the file's mode.
///
/// One store owns its files: [`open`](Self::open) claims the pair with a lock on
/// `<path>.lock` (created beside it and never removed), held until the store is dropped. A
/// second store on the same path, in this process or another, is refused with a
/// [`FileStoreError`] whose [`is_in_use`](FileStoreError::is_in_use) is true, instead of
/// overwriting the first one's calls; to share calls between processes, use the Redis store.
/// On a file system that cannot lock, the store opens without the lock, with a warning.
///
/// Writes happen on the calling task, under the store's lock: the files hold only what
/// waits for a person or was decided recently, and the limits keep them small.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use toolgate_agent::{JsonFileSuspensionStore, SuspensionLimits};
/// use toolgate_core::Pipeline;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let limits = SuspensionLimits { max_per_user: 20, ..SuspensionLimits::default() };
/// let store = JsonFileSuspensionStore::open(dir.path().join("suspensions.json"), limits)?;
/// let builder = Pipeline::builder().suspension_store(Arc::new(store));
/// # Ok(()) }
/// ```
pub struct JsonFileSuspensionStore {
    path: PathBuf,
    /// `<path>.decided.json`: the approvals for a retry and the outcomes.
    decided_path: PathBuf,
    /// Held as long as the store lives: no other store opens either file meanwhile.
    _claim: persist::Claim,
    moved_aside: Option<PathBuf>,
    table: Mutex<SuspensionTable>,
    clock: Arc<dyn Fn() -> SystemTime + Send + Sync>,
}

/// What `<path>.decided.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct DecidedFile {
    #[serde(default)]
    retry_approvals: Vec<RetryApproval>,
    #[serde(default)]
    outcomes: Vec<DecidedCall>,
}

impl JsonFileSuspensionStore {
    /// Opens (or starts) the store at `path` (and `<path>.decided.json` beside it), under
    /// `limits`. Calls, approvals for a retry and outcomes read back are kept even past the
    /// caps (they were admitted when they were made); those that expired while the process
    /// was down are dropped.
    ///
    /// The files are claimed before they are read, and stay claimed until the store is
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`FileStoreError`] when another store (in this process or another) has the file
    /// open ([`FileStoreError::is_in_use`]), when the lock file beside it cannot be
    /// created, when either file exists but cannot be read or moved aside, or when its path
    /// is not a regular file (a directory, a pipe, a device).
    pub fn open(
        path: impl Into<PathBuf>,
        limits: SuspensionLimits,
    ) -> Result<Self, FileStoreError> {
        let path = path.into();
        let claim = match persist::claim(&path) {
            Ok(claim) => claim,
            Err(source) => return Err(FileStoreError { path, source }),
        };
        let (calls, moved_aside) = match persist::load(&path) {
            Ok(Loaded::Found(calls)) => (calls, None),
            Ok(Loaded::Missing) => (BTreeMap::new(), None),
            Ok(Loaded::MovedAside(aside)) => (BTreeMap::new(), Some(aside)),
            Err(source) => return Err(FileStoreError { path, source }),
        };
        let decided_path = persist::beside(&path, ".decided.json");
        let decided = match persist::load(&decided_path) {
            Ok(Loaded::Found(decided)) => decided,
            // Moved aside: `load` has warned, and the calls read back stay.
            Ok(Loaded::Missing | Loaded::MovedAside(_)) => DecidedFile::default(),
            Err(source) => {
                return Err(FileStoreError {
                    path: decided_path,
                    source,
                });
            }
        };
        let store = JsonFileSuspensionStore {
            path,
            decided_path,
            _claim: claim,
            moved_aside,
            table: Mutex::new(SuspensionTable::new(limits)),
            clock: Arc::new(SystemTime::now),
        };
        store.restore(calls, decided);
        Ok(store)
    }

    /// The same store, reading the time from `clock` instead of the system clock: for
    /// tests that move time forward to see calls, approvals and outcomes expire. What was
    /// read back at open was checked against the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The calls file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the calls file was moved when it could not be read at open, if it was.
    pub fn moved_aside(&self) -> Option<&Path> {
        self.moved_aside.as_deref()
    }

    /// The bounds.
    pub fn limits(&self) -> SuspensionLimits {
        self.lock().limits()
    }

    /// How many calls wait (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many calls of the caller `user` (its id in its tenant) wait.
    pub fn waiting_for(&self, user: &User) -> usize {
        self.lock().waiting_for(user)
    }

    fn restore(&self, calls: BTreeMap<String, SuspendedInvocation>, decided: DecidedFile) {
        let now = (self.clock)();
        let mut table = self.lock();
        for (_, suspended) in calls {
            table.restore(suspended, now);
        }
        for approval in decided.retry_approvals {
            table.restore_retry_approval(approval, now);
        }
        for outcome in decided.outcomes {
            table.restore_outcome(outcome, now);
        }
    }

    fn lock(&self) -> MutexGuard<'_, SuspensionTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the calls file out.
    fn write_calls(&self, table: &SuspensionTable) -> Result<(), SuspensionStoreError> {
        persist::write_atomic(&self.path, table.entries())
            .map_err(|e| could_not_write(&self.path, &e))
    }

    /// Writes `<path>.decided.json` out: the approvals and outcomes not expired by `now`.
    /// With none, a file that does not exist is not created.
    fn write_decided(
        &self,
        table: &SuspensionTable,
        now: SystemTime,
    ) -> Result<(), SuspensionStoreError> {
        let decided = DecidedFile {
            retry_approvals: table.live_retry_approvals(now).cloned().collect(),
            outcomes: table.list_outcomes(&SuspensionFilter::default(), None, usize::MAX, now),
        };
        let empty = decided.retry_approvals.is_empty() && decided.outcomes.is_empty();
        if empty && !self.decided_path.exists() {
            return Ok(());
        }
        persist::write_atomic(&self.decided_path, &decided)
            .map_err(|e| could_not_write(&self.decided_path, &e))
    }

    /// Makes `change` to the approvals or outcomes on a copy of the table, writes the
    /// copy's out and only then keeps it, so that memory and file never disagree when the
    /// write fails: the table cannot undo keeping an approval (it queues behind equal
    /// ones) or an outcome (it may push the oldest out).
    fn change_decided(
        &self,
        change: impl FnOnce(&mut SuspensionTable, SystemTime) -> Result<(), SuspensionStoreError>,
    ) -> Result<(), SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let mut changed = table.clone();
        change(&mut changed, now)?;
        self.write_decided(&changed, now)?;
        *table = changed;
        Ok(())
    }
}

/// The error of a write that failed, in words that say what to check.
fn could_not_write(path: &Path, error: &std::io::Error) -> SuspensionStoreError {
    SuspensionStoreError::Unavailable(format!(
        "could not write {}: {error}; check that its directory is writable and has room",
        path.display()
    ))
}

impl std::fmt::Debug for JsonFileSuspensionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonFileSuspensionStore")
            .field("path", &self.path)
            .field("waiting", &self.len())
            .field("limits", &self.limits())
            .finish_non_exhaustive()
    }
}

// On a failed write the change is undone, so that memory and file never disagree about a
// call that can still run: a call saved or taken, or an approval used, is undone in place
// (the table can: take, restore); an approval or an outcome kept is made on a copy.
#[async_trait]
impl SuspensionStore for JsonFileSuspensionStore {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let id = suspended.id.clone();
        table.insert(suspended, now)?;
        self.write_calls(&table).inspect_err(|_| {
            let _ = table.take(&id, now);
        })
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let before = table.len();
        match table.take(id, now) {
            Ok(Some(suspended)) => match self.write_calls(&table) {
                Ok(()) => Ok(Some(suspended)),
                Err(error) => {
                    table.restore(suspended, now);
                    Err(error)
                }
            },
            // An expired call was removed from memory: the file forgets it too. If that
            // write fails, the file keeps it until it is dropped as expired at the next
            // open or write.
            expired @ Err(SuspensionStoreError::Expired { .. }) if table.len() < before => {
                if let Err(error) = self.write_calls(&table) {
                    tracing::warn!(%error, "an expired suspension stays in the file until the next write");
                }
                expired
            }
            other => other,
        }
    }

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().get(id, now)?.cloned())
    }

    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().expired_owner(id, now))
    }

    /// The calls waiting, read from memory (the file holds the same): every condition of
    /// `filter` holds, a tenant's included, as in the in-memory store.
    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().list(filter, after, limit, now))
    }

    /// Keeps the approval in memory and in `<path>.decided.json`, before it is reported
    /// kept.
    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        self.change_decided(|table, now| table.keep_retry_approval(approval, now))
    }

    /// Uses an approval up in `<path>.decided.json` before it is handed out: after a crash
    /// or restart, it is gone. When the file cannot be written, the approval is not handed
    /// out and stays kept.
    async fn use_retry_approval(
        &self,
        key: &str,
    ) -> Result<Option<RetryApproval>, SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let Some(approval) = table.use_retry_approval(key, now) else {
            return Ok(None);
        };
        match self.write_decided(&table, now) {
            Ok(()) => Ok(Some(approval)),
            Err(error) => {
                table.restore_retry_approval(approval, now);
                Err(error)
            }
        }
    }

    /// Takes the call and keeps `record` as its running record in one step, under the
    /// store's lock: a reader — every one reads memory, under the same lock — finds the
    /// call waiting until both files are written and running from then on, never neither.
    /// The change is made on a copy of the table, written out, and only then kept.
    ///
    /// The two files are written one after the other: the record first, then the calls
    /// file without the call. A crash between the two leaves the call waiting beside a
    /// running record, which reads as waiting (its decision ended with the process) — never
    /// a call that is neither. When either write fails, nothing is taken or kept (the
    /// record written first is written away again) and the error is returned.
    async fn take_running(
        &self,
        id: &str,
        record: DecidedCall,
        token: &str,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let mut changed = table.clone();
        match changed.take_running(id, record, token, now) {
            Ok(Some(suspended)) => {
                self.write_decided(&changed, now)?;
                if let Err(error) = self.write_calls(&changed) {
                    if let Err(undo) = self.write_decided(&table, now) {
                        tracing::warn!(suspension_id = %toolgate_core::error::shown_id(id), error = %undo, "a running record of a call that still waits stays in the file; it reads as waiting");
                    }
                    return Err(error);
                }
                *table = changed;
                Ok(Some(suspended))
            }
            Ok(None) => Ok(None),
            // An expired call was removed from memory: the file forgets it too, as `take`.
            expired @ Err(SuspensionStoreError::Expired { .. }) => {
                if changed.len() < table.len()
                    && let Err(error) = self.write_calls(&changed)
                {
                    tracing::warn!(%error, "an expired suspension stays in the file until the next write");
                }
                *table = changed;
                expired
            }
            Err(error) => Err(error),
        }
    }

    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        self.change_decided(|table, now| {
            table.keep_outcome(outcome, now);
            Ok(())
        })
    }

    /// Kept in memory and in `<path>.decided.json` before it is reported kept. Its token
    /// is not written to the file: a running record read back after a restart stands for
    /// a call whose decision ended with the process, and only an outcome replaces it.
    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        let mut kept = false;
        self.change_decided(|table, now| {
            kept = table.keep_running(record, token, now);
            Ok(())
        })?;
        Ok(kept)
    }

    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        let mut removed = false;
        self.change_decided(|table, now| {
            removed = table.remove_running(id, token, now);
            Ok(())
        })?;
        Ok(removed)
    }

    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().outcome(id, now).cloned())
    }

    async fn list_outcomes(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DecidedCall>, SuspensionStoreError> {
        let now = (self.clock)();
        Ok(self.lock().list_outcomes(filter, after, limit, now))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Map, json};
    use toolgate_core::Stage;

    use super::*;

    fn call_by(id: &str, user: &User) -> SuspendedInvocation {
        SuspendedInvocation {
            id: id.into(),
            tool: "transfer".into(),
            tool_version: "1".into(),
            session_id: None,
            request_id: id.into(),
            user: user.clone(),
            input: json!({"amount": 10}),
            output: None,
            metadata: Map::new(),
            stage: Stage::WillCheckConsent,
            reason: "needs approval".into(),
            payload: json!(null),
            suspended_at: SystemTime::now(),
            expires_at: None,
            binding: None,
        }
    }

    /// An approval for `user` to make the call `input` again, given at `at` and good for
    /// an hour.
    fn approval(user: &User, input: &str, at: SystemTime) -> RetryApproval {
        RetryApproval {
            binding: toolgate_core::approval::CallBinding {
                user: user.id.clone(),
                tenant: user.tenant.clone(),
                tool: "transfer".into(),
                definition: "d1".into(),
                input: input.into(),
                generation: "g1".into(),
            },
            suspension_id: format!("susp-{input}"),
            decided_by: Some("boss".into()),
            decided_by_tenant: None,
            decided_at: at,
            expires_at: at + Duration::from_secs(3600),
        }
    }

    /// The outcome of the call `id` of `user`, decided at `at`.
    fn outcome_of(id: &str, user: &User, at: SystemTime) -> DecidedCall {
        let result = json!({ "tool_name": "transfer", "status": "success" });
        DecidedCall {
            decided_at: at,
            ..DecidedCall::new(id, user, result)
        }
    }

    /// The file as the version before approvals and outcomes were kept reads it: calls by
    /// id, each restored into a table, as its `open` did.
    fn open_as_the_previous_version(path: &Path, limits: SuspensionLimits) -> SuspensionTable {
        let Ok(Loaded::Found(entries)) =
            persist::load::<std::collections::BTreeMap<String, SuspendedInvocation>>(path)
        else {
            panic!("the previous version could not read the file");
        };
        let mut table = SuspensionTable::new(limits);
        for (_, suspended) in entries {
            table.restore(suspended, SystemTime::now());
        }
        table
    }

    fn limits(max_per_user: usize) -> SuspensionLimits {
        SuspensionLimits {
            max_per_user,
            expire_after: Duration::from_secs(60),
            ..SuspensionLimits::default()
        }
    }

    #[tokio::test]
    async fn a_flood_from_ann_of_globex_does_not_take_the_places_of_ann_of_acme_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let globex = User::new("ann").with_tenant("globex");
        let acme = User::new("ann").with_tenant("acme");
        let store = JsonFileSuspensionStore::open(&path, limits(2)).unwrap();
        for i in 0..2 {
            store
                .save(call_by(&format!("g{i}"), &globex))
                .await
                .unwrap();
        }
        let flood = store.save(call_by("g2", &globex)).await;
        store.save(call_by("a0", &acme)).await.unwrap();
        drop(store);

        let reopened = JsonFileSuspensionStore::open(&path, limits(2)).unwrap();
        let after_reopen = reopened.save(call_by("g3", &globex)).await;
        reopened.save(call_by("a1", &acme)).await.unwrap();

        let refused = Err(SuspensionStoreError::user_full(&globex, 2));
        assert_eq!((&flood, &after_reopen), (&refused, &refused));
        assert_eq!(reopened.waiting_for(&acme), 2);
        assert_eq!(reopened.waiting_for(&User::new("ann")), 0);
    }

    #[tokio::test]
    async fn an_expired_call_is_told_expired_to_its_own_caller_only_not_to_ann_of_another_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let acme = User::new("ann").with_tenant("acme");
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.save(call_by("anns", &acme)).await.unwrap();
        assert_eq!(store.expired_owner("anns").await, Ok(None), "it waits");
        drop(store);
        // Read back from the file, then looked up a minute later.
        let later = SystemTime::now() + Duration::from_secs(61);
        let reopened = JsonFileSuspensionStore::open(&path, limits(5))
            .unwrap()
            .with_clock(move || later);
        let expired = SuspensionStoreError::Expired { id: "anns".into() };
        assert_eq!(reopened.get("anns").await, Err(expired));

        let owner = reopened.expired_owner("anns").await.unwrap();

        // What a host answers 410 to; anyone else gets the 404 of an unknown id.
        let told = |asking: &User| owner.as_ref().is_some_and(|o| o.is_same_caller(asking));
        assert!(told(&acme.clone().with_roles(["ops"])));
        assert!(!told(&User::new("ann").with_tenant("globex")));
        assert!(!told(&User::new("ann")));
    }

    #[tokio::test]
    async fn a_tenant_listing_read_back_from_the_file_has_that_tenants_callers_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        let callers = [
            ("a1", User::new("ann").with_tenant("acme")),
            ("b1", User::new("bob").with_tenant("acme")),
            ("g1", User::new("ann").with_tenant("globex")),
            ("n1", User::new("ann")),
        ];
        for (id, user) in &callers {
            store.save(call_by(id, user)).await.unwrap();
        }
        drop(store);
        let reopened = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        let listed = |user: Option<&str>, tenant: Option<Option<&str>>| {
            let filter = SuspensionFilter {
                user: user.map(str::to_owned),
                tenant: tenant.map(|t| t.map(str::to_owned)),
                ..SuspensionFilter::default()
            };
            let reopened = &reopened;
            async move {
                let calls = reopened.list(&filter, None, 10).await.unwrap();
                calls.into_iter().map(|c| c.id).collect::<Vec<_>>()
            }
        };

        assert_eq!(listed(None, Some(Some("acme"))).await, ["a1", "b1"]);
        assert_eq!(listed(Some("ann"), Some(Some("acme"))).await, ["a1"]);
        assert_eq!(listed(Some("ann"), Some(Some("globex"))).await, ["g1"]);
        assert_eq!(listed(None, Some(None)).await, ["n1"]);
        assert_eq!(listed(Some("ann"), None).await, ["a1", "g1", "n1"]);
    }

    #[tokio::test]
    async fn a_retry_approval_given_before_a_restart_is_used_once_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann").with_tenant("acme");
        let given = approval(&ann, "10 EUR", SystemTime::now());
        let key = given.binding.key();
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.keep_retry_approval(given.clone()).await.unwrap();
        drop(store);

        let restarted = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        let first = restarted.use_retry_approval(&key).await.unwrap();
        let second = restarted.use_retry_approval(&key).await.unwrap();
        drop(restarted);
        let restarted_again = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        let after_another_restart = restarted_again.use_retry_approval(&key).await.unwrap();

        assert_eq!(first, Some(given));
        assert_eq!(second, None, "an approval is good once");
        assert_eq!(
            after_another_restart, None,
            "an approval used up is gone from the file too"
        );
    }

    #[tokio::test]
    async fn approvals_read_back_keep_their_caps_against_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let now = SystemTime::now();
        let store = JsonFileSuspensionStore::open(&path, limits(2)).unwrap();
        for input in ["1", "2"] {
            store
                .keep_retry_approval(approval(&ann, input, now))
                .await
                .unwrap();
        }
        drop(store);

        let restarted = JsonFileSuspensionStore::open(&path, limits(2)).unwrap();
        let third = restarted
            .keep_retry_approval(approval(&ann, "3", now))
            .await;
        let bobs = restarted
            .keep_retry_approval(approval(&User::new("bob"), "1", now))
            .await;

        assert_eq!(third, Err(SuspensionStoreError::user_full(&ann, 2)));
        assert_eq!(bobs, Ok(()));
    }

    #[tokio::test]
    async fn an_outcome_kept_survives_a_reopen_and_is_listed_by_filter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let acme = User::new("ann").with_tenant("acme");
        let globex = User::new("ann").with_tenant("globex");
        let now = SystemTime::now();
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store
            .keep_outcome(outcome_of("d1", &acme, now))
            .await
            .unwrap();
        store
            .keep_outcome(outcome_of("d2", &globex, now))
            .await
            .unwrap();
        drop(store);

        let reopened = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        let listed = |user: &User| {
            let filter = SuspensionFilter::of_caller(user);
            let reopened = &reopened;
            async move {
                let decided = reopened.list_outcomes(&filter, None, 10).await.unwrap();
                decided.into_iter().map(|d| d.id).collect::<Vec<_>>()
            }
        };

        assert_eq!(
            reopened.outcome("d1").await.unwrap(),
            Some(outcome_of("d1", &acme, now))
        );
        assert_eq!(listed(&acme).await, ["d1"]);
        assert_eq!(listed(&globex).await, ["d2"]);
        assert!(listed(&User::new("ann")).await.is_empty());
    }

    #[tokio::test]
    async fn approvals_and_outcomes_expired_while_down_are_gone_after_a_reopen_and_from_their_file_at_its_next_change()
     {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        // Kept two hours ago, each good for at most an hour.
        let then = SystemTime::now() - Duration::from_secs(2 * 3600);
        let lasting = SuspensionLimits {
            expire_after: Duration::from_secs(3600),
            ..limits(5)
        };
        let given = approval(&ann, "10 EUR", then);
        let key = given.binding.key();
        let store = JsonFileSuspensionStore::open(&path, lasting)
            .unwrap()
            .with_clock(move || then);
        store.keep_retry_approval(given).await.unwrap();
        store
            .keep_outcome(outcome_of("d1", &ann, then))
            .await
            .unwrap();
        assert!(store.outcome("d1").await.unwrap().is_some());
        drop(store);

        let reopened = JsonFileSuspensionStore::open(&path, lasting).unwrap();
        let used = reopened.use_retry_approval(&key).await.unwrap();
        let outcome = reopened.outcome("d1").await.unwrap();
        let listed = reopened
            .list_outcomes(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap();
        reopened
            .keep_outcome(outcome_of("d2", &ann, SystemTime::now()))
            .await
            .unwrap();
        let written = read_json(&decided_file(&path));

        assert_eq!((used, outcome, listed), (None, None, vec![]));
        assert_eq!(written["retry_approvals"], json!([]));
        let ids: Vec<&serde_json::Value> = written["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| &o["id"])
            .collect();
        assert_eq!(
            ids,
            ["d2"],
            "only the outcome kept since is left in the file"
        );
    }

    #[tokio::test]
    async fn approvals_and_outcomes_past_their_expiry_by_the_stores_clock_are_not_given_after_a_reopen()
     {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let now = SystemTime::now();
        let given = approval(&ann, "10 EUR", now);
        let key = given.binding.key();
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.keep_retry_approval(given).await.unwrap();
        store
            .keep_outcome(outcome_of("d1", &ann, now))
            .await
            .unwrap();
        drop(store);

        // Read back while good, then looked up past the approval's hour and the
        // outcome's minute.
        let later = now + Duration::from_secs(3601);
        let reopened = JsonFileSuspensionStore::open(&path, limits(5))
            .unwrap()
            .with_clock(move || later);

        assert_eq!(reopened.use_retry_approval(&key).await, Ok(None));
        assert_eq!(reopened.outcome("d1").await, Ok(None));
    }

    /// `<path>.decided.json`, spelled out: the name is part of the format.
    fn decided_file(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".decided.json");
        PathBuf::from(name)
    }

    fn read_json(path: &Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A store at `path` with a call waiting, an approval for a retry and an outcome kept.
    async fn store_with_all_three(
        path: &Path,
        ann: &User,
        now: SystemTime,
    ) -> JsonFileSuspensionStore {
        let store = JsonFileSuspensionStore::open(path, limits(5)).unwrap();
        store.save(call_by("w1", ann)).await.unwrap();
        store
            .keep_retry_approval(approval(ann, "10 EUR", now))
            .await
            .unwrap();
        store
            .keep_outcome(outcome_of("d1", ann, now))
            .await
            .unwrap();
        store
    }

    /// Puts a directory with a file in it where `path` is, so that no write can replace it.
    fn block(path: &Path) {
        let _ = std::fs::remove_file(path);
        std::fs::create_dir(path).unwrap();
        std::fs::write(path.join("keep"), "").unwrap();
    }

    fn unblock(path: &Path) {
        std::fs::remove_dir_all(path).unwrap();
    }

    #[tokio::test]
    async fn a_file_of_the_previous_format_opens_with_its_calls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann").with_tenant("acme");
        // What the previous version wrote: the waiting calls by id, and no other file.
        let previous: BTreeMap<String, SuspendedInvocation> = ["w1", "w2"]
            .into_iter()
            .map(|id| (id.to_owned(), call_by(id, &ann)))
            .collect();
        persist::write_atomic(&path, &previous).unwrap();

        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();

        assert_eq!(store.moved_aside(), None);
        assert_eq!(store.waiting_for(&ann), 2);
        for (id, call) in &previous {
            let mut kept = call.clone();
            kept.expires_at = store.get(id).await.unwrap().unwrap().expires_at;
            assert_eq!(store.get(id).await.unwrap(), Some(kept));
        }
        assert!(
            store
                .list_outcomes(&SuspensionFilter::default(), None, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(!decided_file(&path).exists());
    }

    #[tokio::test]
    async fn the_calls_file_is_written_as_the_previous_version_wrote_it_with_approvals_and_outcomes_beside_it()
     {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann").with_tenant("acme");
        let now = SystemTime::now();
        let store = store_with_all_three(&path, &ann, now).await;
        store.save(call_by("w2", &ann)).await.unwrap();

        let written = std::fs::read(&path).unwrap();
        let as_before = serde_json::to_vec_pretty(store.lock().entries()).unwrap();
        let beside = read_json(&dir.path().join("suspensions.json.decided.json"));

        assert_eq!(
            String::from_utf8(written).unwrap(),
            String::from_utf8(as_before).unwrap()
        );
        let mut keys: Vec<&String> = beside.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["outcomes", "retry_approvals"]);
        assert_eq!(
            beside["retry_approvals"],
            json!([approval(&ann, "10 EUR", now)])
        );
        assert_eq!(beside["outcomes"], json!([outcome_of("d1", &ann, now)]));
    }

    #[tokio::test]
    async fn files_with_approvals_and_outcomes_opened_by_the_previous_version_keep_their_calls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann").with_tenant("acme");
        let store = store_with_all_three(&path, &ann, SystemTime::now()).await;
        store.save(call_by("w2", &ann)).await.unwrap();
        drop(store);

        let rolled_back = open_as_the_previous_version(&path, limits(5));

        assert!(decided_file(&path).exists());
        let waiting: Vec<&String> = rolled_back.entries().keys().collect();
        assert_eq!(waiting, ["w1", "w2"]);
        assert_eq!(rolled_back.waiting_for(&ann), 2);
    }

    #[tokio::test]
    async fn a_decided_file_that_cannot_be_read_is_moved_aside_and_the_calls_still_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let now = SystemTime::now();
        drop(store_with_all_three(&path, &ann, now).await);
        std::fs::write(decided_file(&path), "{ not json").unwrap();

        let reopened = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();

        assert_eq!(reopened.moved_aside(), None, "the calls file was read");
        assert!(reopened.get("w1").await.unwrap().is_some());
        let key = approval(&ann, "10 EUR", now).binding.key();
        assert_eq!(reopened.use_retry_approval(&key).await, Ok(None));
        assert_eq!(reopened.outcome("d1").await, Ok(None));
        let aside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("suspensions.json.decided.json.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        let kept = std::fs::read_to_string(dir.path().join(&aside[0])).unwrap();
        assert_eq!(kept, "{ not json", "moved aside, not overwritten");
    }

    #[tokio::test]
    async fn no_decided_file_is_made_for_calls_alone_and_one_emptied_is_rewritten_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let given = approval(&ann, "10 EUR", SystemTime::now());
        let key = given.binding.key();
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.save(call_by("w1", &ann)).await.unwrap();
        let _ = store.take("w1").await.unwrap();
        assert_eq!(store.use_retry_approval(&key).await, Ok(None));
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        store
            .keep_outcome(outcome_of("old", &ann, long_ago))
            .await
            .unwrap();
        assert!(
            !decided_file(&path).exists(),
            "calls, and an outcome already expired, make no file"
        );

        store.keep_retry_approval(given.clone()).await.unwrap();
        let used = store.use_retry_approval(&key).await.unwrap();

        assert_eq!(used, Some(given));
        assert_eq!(
            read_json(&decided_file(&path)),
            json!({ "retry_approvals": [], "outcomes": [] })
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_change_rewrites_only_the_file_it_changes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let now = SystemTime::now();
        let store = store_with_all_three(&path, &ann, now).await;
        // A rewrite renames a new file over the old one. A second link keeps the old
        // file, so the new one cannot take its inode number: whether the file at `path` is
        // still the one linked tells whether it was rewritten.
        let snapshot = |path: &Path, name: &str| {
            let link = dir.path().join(name);
            std::fs::hard_link(path, &link).unwrap();
            link
        };
        let same = |a: &Path, b: &Path| {
            std::fs::metadata(a).unwrap().ino() == std::fs::metadata(b).unwrap().ino()
        };
        let decided = decided_file(&path);
        let (calls_before, decided_before) = (snapshot(&path, "c0"), snapshot(&decided, "d0"));

        store.save(call_by("w2", &ann)).await.unwrap();
        let _ = store.take("w1").await.unwrap();
        let after_calls = (same(&path, &calls_before), same(&decided, &decided_before));
        let calls_between = snapshot(&path, "c1");
        store
            .keep_retry_approval(approval(&ann, "20 EUR", now))
            .await
            .unwrap();
        let key = approval(&ann, "10 EUR", now).binding.key();
        assert!(store.use_retry_approval(&key).await.unwrap().is_some());
        store
            .keep_outcome(outcome_of("d2", &ann, now))
            .await
            .unwrap();
        let after_decided = (same(&path, &calls_between), same(&decided, &decided_before));

        assert_eq!(
            after_calls,
            (false, true),
            "a call rewrites the calls file only"
        );
        assert_eq!(
            after_decided,
            (true, false),
            "approvals and outcomes rewrite their file only"
        );
    }

    #[tokio::test]
    async fn an_approval_whose_use_cannot_be_written_is_not_handed_out_and_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let given = approval(&ann, "10 EUR", SystemTime::now());
        let key = given.binding.key();
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.keep_retry_approval(given.clone()).await.unwrap();

        block(&decided_file(&path));
        let refused = store.use_retry_approval(&key).await;
        unblock(&decided_file(&path));
        let used = store.use_retry_approval(&key).await;

        assert!(
            matches!(&refused, Err(SuspensionStoreError::Unavailable(m)) if m.contains("could not write")),
            "{refused:?}"
        );
        assert_eq!(used, Ok(Some(given)), "still kept, and good once");
        assert_eq!(store.use_retry_approval(&key).await, Ok(None));
    }

    #[tokio::test]
    async fn an_approval_or_outcome_whose_keeping_cannot_be_written_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let now = SystemTime::now();
        let given = approval(&ann, "10 EUR", now);
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.save(call_by("w1", &ann)).await.unwrap();

        block(&decided_file(&path));
        let approval_kept = store.keep_retry_approval(given.clone()).await;
        let outcome_kept = store.keep_outcome(outcome_of("d1", &ann, now)).await;
        unblock(&decided_file(&path));

        assert!(matches!(
            approval_kept,
            Err(SuspensionStoreError::Unavailable(_))
        ));
        assert!(matches!(
            outcome_kept,
            Err(SuspensionStoreError::Unavailable(_))
        ));
        assert_eq!(
            store.use_retry_approval(&given.binding.key()).await,
            Ok(None)
        );
        assert_eq!(store.outcome("d1").await, Ok(None));
        assert!(
            store.get("w1").await.unwrap().is_some(),
            "the call is untouched"
        );
    }

    /// Broken before: the store took the call and kept its running record in two steps,
    /// each under the lock on its own, and a reader between them found the call neither
    /// waiting nor running (its caller was told it is unknown). The reader here runs at
    /// every moment the store lets another task in — each time it reads its clock, which it
    /// does before taking its lock — and finds the call waiting or running every time.
    #[tokio::test]
    async fn a_call_taken_to_run_reads_as_waiting_or_running_at_every_moment_never_neither() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{OnceLock, Weak};

        use futures::FutureExt;

        let dir = tempfile::tempdir().unwrap();
        let ann = User::new("ann");
        let store: Arc<OnceLock<Weak<JsonFileSuspensionStore>>> = Arc::default();
        let reading = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let clock = {
            let (store, reading, seen) =
                (Arc::clone(&store), Arc::clone(&reading), Arc::clone(&seen));
            move || {
                // Armed: read the call as another task would, once per moment (the reads
                // read the clock too, and are not read themselves).
                if reading.swap(false, Ordering::SeqCst)
                    && let Some(store) = store.get().and_then(Weak::upgrade)
                {
                    let waiting = store.get("w1").now_or_never().unwrap().unwrap().is_some();
                    let running = store
                        .outcome("w1")
                        .now_or_never()
                        .unwrap()
                        .unwrap()
                        .is_some();
                    seen.lock().unwrap().push((waiting, running));
                    reading.store(true, Ordering::SeqCst);
                }
                SystemTime::now()
            }
        };
        let opened = Arc::new(
            JsonFileSuspensionStore::open(dir.path().join("suspensions.json"), limits(5))
                .unwrap()
                .with_clock(clock),
        );
        store.set(Arc::downgrade(&opened)).unwrap();
        opened.save(call_by("w1", &ann)).await.unwrap();

        let running = DecidedCall::new("w1", &ann, json!({ "status": "running" }));
        reading.store(true, Ordering::SeqCst);
        let taken = opened.take_running("w1", running, "t-1").await.unwrap();
        reading.store(false, Ordering::SeqCst);

        assert_eq!(taken.map(|call| call.id), Some("w1".to_owned()));
        let seen = seen.lock().unwrap().clone();
        assert!(!seen.is_empty(), "the reader never ran");
        assert!(
            seen.iter().all(|&(waiting, running)| waiting || running),
            "the call read as neither waiting nor running: {seen:?}"
        );
        assert_eq!(opened.get("w1").await, Ok(None));
        let kept = opened.outcome("w1").await.unwrap().unwrap();
        assert_eq!(kept.result["status"], "running");
        let decided = read_json(&decided_file(opened.path()));
        assert_eq!(decided["outcomes"][0]["id"], "w1", "{decided}");
        assert_eq!(
            read_json(opened.path()),
            json!({}),
            "the call left the calls file"
        );
    }

    /// When the calls file cannot be written, a take to run takes nothing and keeps no
    /// record, in memory or in the other file: the call still waits.
    #[tokio::test]
    async fn a_take_to_run_whose_calls_file_cannot_be_written_leaves_the_call_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suspensions.json");
        let ann = User::new("ann");
        let store = JsonFileSuspensionStore::open(&path, limits(5)).unwrap();
        store.save(call_by("w1", &ann)).await.unwrap();

        block(&path);
        let running = DecidedCall::new("w1", &ann, json!({ "status": "running" }));
        let refused = store.take_running("w1", running, "t-1").await;
        unblock(&path);

        assert!(
            matches!(&refused, Err(SuspensionStoreError::Unavailable(m)) if m.contains("could not write")),
            "{refused:?}"
        );
        assert!(
            store.get("w1").await.unwrap().is_some(),
            "the call still waits"
        );
        assert_eq!(store.outcome("w1").await, Ok(None));
        let decided = read_json(&decided_file(&path));
        assert_eq!(decided["outcomes"], json!([]), "{decided}");
    }
}
