//! JSON files that survive a crash: written to a temporary file and renamed over the old
//! one, and moved aside (never overwritten) when they cannot be read back.

use std::io::Write;
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
/// Only a regular file (or a link to one) is read: a pipe would block the open forever
/// and a device such as `/dev/zero` would fill memory, so either is an error.
pub(crate) fn load<T: DeserializeOwned>(path: &Path) -> std::io::Result<Loaded<T>> {
    match std::fs::metadata(path) {
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
