//! Suspension stores: the core's in-memory one, and a JSON file that survives a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
pub use toolgate_core::{
    InMemorySuspensionStore, SuspendedInvocation, SuspensionStore, SuspensionStoreError,
};

use crate::persist::{self, Loaded};

/// Why a file store could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("could not open the suspension file {}: {source}; check that its directory exists and is writable", path.display())]
pub struct FileStoreError {
    /// The file.
    pub path: PathBuf,
    /// What the file system said.
    #[source]
    pub source: std::io::Error,
}

/// Suspended calls kept in one JSON file, rewritten atomically (write, then rename) on
/// every change, so that calls waiting for a person survive a restart of the process.
///
/// A file that cannot be read back is moved aside with a warning and a new one started.
/// Writes happen on the calling task, under the store's lock: the file holds only calls
/// that wait for a person, so it stays small, and `max_entries` keeps it so.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use toolgate_agent::JsonFileSuspensionStore;
/// use toolgate_core::Pipeline;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = JsonFileSuspensionStore::open(dir.path().join("suspensions.json"), 1_000)?;
/// let mut builder = Pipeline::builder();
/// builder.suspension_store(Arc::new(store));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct JsonFileSuspensionStore {
    path: PathBuf,
    moved_aside: Option<PathBuf>,
    max_entries: usize,
    entries: Mutex<BTreeMap<String, SuspendedInvocation>>,
}

impl JsonFileSuspensionStore {
    /// Opens (or starts) the store at `path`, holding at most `max_entries` calls.
    ///
    /// # Errors
    ///
    /// [`FileStoreError`] when the file exists but cannot be read or moved aside.
    pub fn open(path: impl Into<PathBuf>, max_entries: usize) -> Result<Self, FileStoreError> {
        let path = path.into();
        let (entries, moved_aside) = match persist::load(&path) {
            Ok(Loaded::Found(entries)) => (entries, None),
            Ok(Loaded::Missing) => (BTreeMap::new(), None),
            Ok(Loaded::MovedAside(aside)) => (BTreeMap::new(), Some(aside)),
            Err(source) => return Err(FileStoreError { path, source }),
        };
        Ok(JsonFileSuspensionStore {
            path,
            moved_aside,
            max_entries,
            entries: Mutex::new(entries),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the file was moved when it could not be read at open, if it was.
    pub fn moved_aside(&self) -> Option<&Path> {
        self.moved_aside.as_deref()
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies `change` and writes the file; on a failed write the change is undone, so
    /// memory and file never disagree.
    fn change<T>(
        &self,
        change: impl FnOnce(
            &mut BTreeMap<String, SuspendedInvocation>,
        ) -> Result<T, SuspensionStoreError>,
    ) -> Result<T, SuspensionStoreError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let before = entries.clone();
        let out = change(&mut entries)?;
        if let Err(e) = persist::write_atomic(&self.path, &*entries) {
            *entries = before;
            return Err(SuspensionStoreError(format!(
                "could not write {}: {e}",
                self.path.display()
            )));
        }
        Ok(out)
    }
}

#[async_trait]
impl SuspensionStore for JsonFileSuspensionStore {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        self.change(|entries| {
            if entries.len() >= self.max_entries {
                return Err(SuspensionStoreError(format!(
                    "{} calls already wait for a person: resume or reject some first",
                    entries.len()
                )));
            }
            entries.insert(suspended.id.clone(), suspended);
            Ok(())
        })
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let known = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(id);
        if known {
            self.change(|entries| Ok(entries.remove(id)))
        } else {
            Ok(None)
        }
    }

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        Ok(self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned())
    }
}
