//! JSON files that survive a crash: written to a temporary file and renamed over the old
//! one, moved aside (never overwritten) when they cannot be read back, and claimed by one
//! owner at a time.

use std::fs::{File, TryLockError};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Writes `value` as JSON to `path` atomically: a reader sees the old file or the new
/// one, never half of either.
///
/// The temporary file is created fresh (never opened through a file or a symbolic link
/// already at its name, which could send the write elsewhere) and, on Unix, readable by
/// its owner only; when `path` exists, the new file takes its permissions, so a mode
/// the operator chose survives the rewrite.
pub(crate) fn write_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    let (tmp, mut file) = create_temporary(path)?;
    let written = (|| {
        if let Ok(existing) = std::fs::metadata(path) {
            file.set_permissions(existing.permissions())?;
        }
        file.write_all(&json)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A new temporary file next to `path`, with a name of its own per write, so two saves of
/// the same file never share one. A name already taken (left by a process that crashed
/// under the same process id, or planted) is skipped, never opened or removed.
fn create_temporary(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut attempts = 0;
    loop {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = PathBuf::from(tmp);
        match create_new(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 100 => {
                attempts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates `path`, failing if anything (a symbolic link included) is already there.
fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// One owner's claim on a file: an exclusive advisory lock on the file beside it named
/// `<path>.lock`, held until the claim is dropped. A store keeps its claim as long as it
/// lives, so that two stores (in one process or two) never rewrite the same file over each
/// other's changes.
///
/// The lock file is never removed: removing it would let a later opener lock a new file
/// while an earlier owner still holds the old one.
#[derive(Debug)]
pub(crate) struct Claim {
    /// The locked lock file, or `None` when its file system cannot lock.
    #[cfg_attr(
        not(unix),
        allow(dead_code, reason = "held for its lock; read on Unix only")
    )]
    lock: Option<File>,
}

impl Claim {
    /// Whether `path`, however it is spelled (`..`, a linked directory, a relative path),
    /// names the file claimed for `claimed`: its lock file is the very file this claim
    /// holds. Without a lock (a file system that cannot lock), the two paths are compared
    /// as written.
    pub(crate) fn covers(&self, claimed: &Path, path: &Path) -> bool {
        #[cfg(unix)]
        if let Some(lock) = &self.lock {
            use std::os::unix::fs::MetadataExt;
            let (Ok(held), Ok(named)) = (lock.metadata(), std::fs::metadata(beside(path, ".lock")))
            else {
                return false;
            };
            return (held.dev(), held.ino()) == (named.dev(), named.ino());
        }
        claimed == path
    }
}

/// Claims `path` for the caller, before it reads the file.
///
/// The lock file is created if missing (readable by its owner only, on Unix) and locked
/// without waiting; on Unix a symbolic link at its name is refused, never followed. A file
/// system that cannot lock (such as some network file systems) is logged as a warning and
/// the claim goes on without a lock: the store stays usable, with one owner per file left
/// to the operator.
///
/// # Errors
///
/// An error of kind [`ErrorKind::WouldBlock`] when another owner (in this process or
/// another) holds the claim; the error of opening the lock file when it cannot be opened
/// or created (a missing or read-only directory).
pub(crate) fn claim(path: &Path) -> std::io::Result<Claim> {
    let lock_path = beside(path, ".lock");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    // A symbolic link planted at the lock file's name would have the store open (and
    // create, or lock) a file of the link's choosing: it is refused instead.
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let lock = options.open(&lock_path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return std::io::Error::new(
                e.kind(),
                format!(
                    "its lock file {} is a symbolic link: remove the link (the store creates \
                     its lock file itself)",
                    lock_path.display()
                ),
            );
        }
        std::io::Error::new(
            e.kind(),
            format!("cannot open its lock file {}: {e}", lock_path.display()),
        )
    })?;
    match lock.try_lock() {
        Ok(()) => Ok(Claim { lock: Some(lock) }),
        Err(TryLockError::WouldBlock) => Err(std::io::Error::new(
            ErrorKind::WouldBlock,
            format!(
                "its lock file {} is held by another owner",
                lock_path.display()
            ),
        )),
        Err(TryLockError::Error(error)) => {
            tracing::warn!(
                path = %path.display(),
                lock = %lock_path.display(),
                %error,
                "the file could not be locked for this store alone (its file system may not support locks); \
                 going on without the lock: make sure no other store uses this file"
            );
            Ok(Claim { lock: None })
        }
    }
}

/// Whether an error of [`claim`] says that another owner holds the file.
pub(crate) fn in_use(error: &std::io::Error) -> bool {
    error.kind() == ErrorKind::WouldBlock
}

/// The message of a store's error about its file: `file` names what the file holds ("the
/// suspension file"), `in_use` says what to do when another owner holds it.
pub(crate) fn describe(file: &str, path: &Path, source: &std::io::Error, in_use: &str) -> String {
    if self::in_use(source) {
        format!(
            "another store (in this process or another) already has {file} {} open: {in_use}",
            path.display()
        )
    } else {
        format!(
            "{file} {}: {source}; check that its directory exists and is writable",
            path.display()
        )
    }
}

/// `path` with `suffix` added to its file name.
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// What loading a JSON file found.
pub(crate) enum Loaded<T> {
    /// The file does not exist yet.
    Missing,
    /// The file's content.
    Found(T),
    /// The file could not be parsed; it was moved to this path.
    MovedAside(PathBuf),
}

/// Reads `path` as JSON. A file that does not parse is renamed to
/// `<path>.corrupt-<unix ms>` so that the next save does not destroy it.
///
/// Only a regular file is read: a pipe would block the open forever and a device such as
/// `/dev/zero` would fill memory, so either is an error. So is a symbolic link: every
/// change replaces the file (a rename onto its name), which would replace the link with a
/// file of its own and leave the file it pointed to behind, stale — where a store opened
/// on that file's own name would find calls already run and run them again.
pub(crate) fn load<T: DeserializeOwned>(path: &Path) -> std::io::Result<Loaded<T>> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is not a regular file but a symbolic link: give the path of the file itself (the store replaces its file at every change, which would replace the link)",
            ));
        }
        Ok(metadata) if !metadata.is_file() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is not a regular file (but a directory, a device or a pipe): give the path of a JSON file, or of one to create",
            ));
        }
        _ => {}
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(e) => return Err(e),
    };
    match serde_json::from_slice(&bytes) {
        Ok(value) => Ok(Loaded::Found(value)),
        Err(error) => {
            let stamp = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let mut aside = path.as_os_str().to_owned();
            aside.push(format!(".corrupt-{stamp}"));
            let aside = PathBuf::from(aside);
            std::fs::rename(path, &aside)?;
            tracing::warn!(
                path = %path.display(),
                moved_to = %aside.display(),
                %error,
                "a JSON file could not be read; it was moved aside and a new one will be started"
            );
            Ok(Loaded::MovedAside(aside))
        }
    }
}
