//! Suspension stores: the core's in-memory one, and a JSON file that survives a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use toolgate_core::User;
use toolgate_core::suspension::SuspensionFilter;
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

/// Suspended calls kept in one JSON file, rewritten atomically (write, then rename) on
/// every change, so that calls waiting for a person survive a restart of the process.
///
/// It keeps the same [`SuspensionLimits`] as the in-memory store, with a
/// [`SuspensionTable`]: at most `max_per_user` calls per caller (a user id in a tenant:
/// `ann` of `globex` never takes the places of `ann` of `acme`) and `max_total` in all, each
/// expiring `expire_after` after it was suspended. Expired calls are removed from the file
/// at the next change; their ids answer "expired" until this process ends (a restart
/// forgets them, and they answer "unknown" after it).
///
/// It lists its waiting calls ([`SuspensionStore::list`]) by every condition of a
/// [`SuspensionFilter`] (tool, user id, tenant, since), as the in-memory store does; it
/// keeps no outcomes of decided calls.
///
/// A file that cannot be read back is moved aside with a warning and a new one started. A
/// new file is readable by its owner only (on Unix); a rewrite keeps the file's mode.
///
/// One store owns one file: [`open`](Self::open) claims it with a lock on `<path>.lock`
/// (created beside it and never removed), held until the store is dropped. A second store
/// on the same file, in this process or another, is refused with a [`FileStoreError`]
/// whose [`is_in_use`](FileStoreError::is_in_use) is true, instead of overwriting the
/// first one's calls; to share calls between processes, use the Redis store. On a file
/// system that cannot lock, the store opens without the lock, with a warning.
///
/// Writes happen on the calling task, under the store's lock: the file holds only calls
/// that wait for a person, and the limits keep it small.
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
    /// Held as long as the store lives: no other store opens the file meanwhile.
    _claim: persist::Claim,
    moved_aside: Option<PathBuf>,
    table: Mutex<SuspensionTable>,
    clock: Arc<dyn Fn() -> SystemTime + Send + Sync>,
}

impl JsonFileSuspensionStore {
    /// Opens (or starts) the store at `path`, under `limits`. Calls read back from the
    /// file are kept even past the caps (they were admitted when they were made); those
    /// that expired while the process was down are dropped.
    ///
    /// The file is claimed before it is read, and stays claimed until the store is
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`FileStoreError`] when another store (in this process or another) has the file
    /// open ([`FileStoreError::is_in_use`]), when the lock file beside it cannot be
    /// created, when the file exists but cannot be read or moved aside, or when the path is
    /// not a regular file (a directory, a pipe, a device).
    pub fn open(
        path: impl Into<PathBuf>,
        limits: SuspensionLimits,
    ) -> Result<Self, FileStoreError> {
        let path = path.into();
        let claim = match persist::claim(&path) {
            Ok(claim) => claim,
            Err(source) => return Err(FileStoreError { path, source }),
        };
        let (entries, moved_aside) = match persist::load(&path) {
            Ok(Loaded::Found(entries)) => (entries, None),
            Ok(Loaded::Missing) => (BTreeMap::new(), None),
            Ok(Loaded::MovedAside(aside)) => (BTreeMap::new(), Some(aside)),
            Err(source) => return Err(FileStoreError { path, source }),
        };
        let store = JsonFileSuspensionStore {
            path,
            _claim: claim,
            moved_aside,
            table: Mutex::new(SuspensionTable::new(limits)),
            clock: Arc::new(SystemTime::now),
        };
        store.restore(entries);
        Ok(store)
    }

    /// The same store, reading the time from `clock` instead of the system clock: for
    /// tests that move time forward to see calls expire. Calls read back at open were
    /// checked against the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the file was moved when it could not be read at open, if it was.
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

    fn restore(&self, entries: BTreeMap<String, SuspendedInvocation>) {
        let now = (self.clock)();
        let mut table = self.lock();
        for (_, suspended) in entries {
            table.restore(suspended, now);
        }
    }

    fn lock(&self) -> MutexGuard<'_, SuspensionTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the table out.
    fn write(&self, table: &SuspensionTable) -> Result<(), SuspensionStoreError> {
        persist::write_atomic(&self.path, table.entries()).map_err(|e| {
            SuspensionStoreError::Unavailable(format!(
                "could not write {}: {e}; check that its directory is writable and has room",
                self.path.display()
            ))
        })
    }
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
// call that can still run.
#[async_trait]
impl SuspensionStore for JsonFileSuspensionStore {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let id = suspended.id.clone();
        table.insert(suspended, now)?;
        self.write(&table).inspect_err(|_| {
            let _ = table.take(&id, now);
        })
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let now = (self.clock)();
        let mut table = self.lock();
        let before = table.len();
        match table.take(id, now) {
            Ok(Some(suspended)) => match self.write(&table) {
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
                if let Err(error) = self.write(&table) {
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
}
