//! One process writes an audit file: a [`JsonLinesSink`](super::JsonLinesSink) claims its
//! file with an advisory lock (`flock`) on `.NAME.lock` beside it, held until the last
//! sink of this process on that file is dropped.
//!
//! Two processes appending to one file interleave two hash chains in it, and with rotation
//! each moves the other's file aside under its feet: records are lost and the chain reports
//! tampering. The lock is on a file beside the audit file, which stays, because rotation
//! moves the audit file itself aside.
//!
//! Within one process, sinks on the same file share the claim: a gateway's reload opens
//! the new configuration's sink while the old one finishes the calls in flight.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::AuditError;

/// A lock file this process holds, how many sinks use it, and the lock their rotations
/// take.
type Held = (File, usize, Rotations);

/// What the sinks of one file hold while they move it aside: one at a time.
pub(crate) type Rotations = Arc<Mutex<()>>;

/// The lock files this process holds, by their path.
fn claims() -> &'static Mutex<HashMap<PathBuf, Held>> {
    static CLAIMS: OnceLock<Mutex<HashMap<PathBuf, Held>>> = OnceLock::new();
    CLAIMS.get_or_init(Mutex::default)
}

/// A sink's share of its file's lock; the lock is released when the last share of the
/// process is dropped.
#[derive(Debug)]
pub(crate) struct Claim {
    /// The lock file, as [`claims`] knows it; `None` when the file is not locked (a
    /// device or a pipe, or a file system without locks).
    key: Option<PathBuf>,
    /// Held by a sink of the file while it rotates it, shared by the sinks of this
    /// process on the file: two never move it aside at once.
    pub(crate) rotations: Rotations,
}

impl Claim {
    fn unlocked() -> Self {
        Claim {
            key: None,
            rotations: Rotations::default(),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some(key) = &self.key else { return };
        let mut claims = claims().lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, users, _)) = claims.get_mut(key) {
            *users -= 1;
            if *users == 0 {
                // Closing the lock file releases the lock (under the registry's lock, so
                // that a sink opening the file now never finds it still held).
                claims.remove(key);
            }
        }
    }
}

/// The lock file of the audit file at `path`: `.NAME.lock` in its directory. Hidden, and
/// named apart from the rotated files (`NAME.*`), so that neither a glob of the series
/// given to `toolgate audit verify` nor a clean-up of old files takes it (a lock file
/// deleted while held would let a second process make a new one and lock that).
fn lock_path(path: &Path) -> PathBuf {
    match path.file_name() {
        Some(name) => {
            let mut hidden = std::ffi::OsString::from(".");
            hidden.push(name);
            hidden.push(".lock");
            path.with_file_name(hidden)
        }
        None => {
            let mut name = path.as_os_str().to_owned();
            name.push(".lock");
            PathBuf::from(name)
        }
    }
}

/// Claims the audit file at `path` for this process.
///
/// # Errors
///
/// [`AuditError::InUse`] when another process holds the claim; [`AuditError::Open`]
/// when the lock file cannot be opened or created, or is a symbolic link.
pub(crate) fn claim(path: &Path) -> Result<Claim, AuditError> {
    // A device or a pipe (`/dev/stdout`) is no file a chain is kept in, nor one that has a
    // directory to lock in.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Ok(Claim::unlocked());
    }
    let lock = lock_path(path);
    let open_error = |reason: String| AuditError::Open {
        path: path.display().to_string(),
        reason,
    };
    // The same file under another name (a relative path, a linked directory) is one key.
    let key = match (lock.parent(), lock.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            std::fs::canonicalize(dir).map_or_else(|_| lock.clone(), |dir| dir.join(name))
        }
        _ => lock.clone(),
    };
    let mut claims = claims().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, users, rotations)) = claims.get_mut(&key) {
        *users += 1;
        let rotations = rotations.clone();
        return Ok(Claim {
            key: Some(key),
            rotations,
        });
    }
    // A symbolic link planted at the lock file's name would have the sink create or lock
    // a file of the link's choosing.
    if std::fs::symlink_metadata(&lock).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(open_error(format!(
            "its lock file {} is a symbolic link: remove the link (the audit log creates its lock file itself)",
            lock.display()
        )));
    }
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(&lock).map_err(|e| {
        open_error(format!(
            "its lock file {} cannot be opened: {e}; the audit log keeps it beside the audit file, so their directory must be writable",
            lock.display()
        ))
    })?;
    match file.try_lock() {
        Ok(()) => {
            let rotations = Rotations::default();
            claims.insert(key.clone(), (file, 1, rotations.clone()));
            Ok(Claim {
                key: Some(key),
                rotations,
            })
        }
        Err(TryLockError::WouldBlock) => Err(AuditError::InUse {
            path: path.display().to_string(),
            lock: lock.display().to_string(),
        }),
        Err(TryLockError::Error(error)) => {
            tracing::warn!(
                path = %path.display(),
                lock = %lock.display(),
                %error,
                "the audit file could not be locked for this process alone (its file system may not support locks); \
                 going on without the lock: make sure no other process writes this audit file"
            );
            Ok(Claim::unlocked())
        }
    }
}
