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
pub(crate) fn write_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    // A name of its own per write, so two saves of the same file never share a
    // temporary file.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
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
pub(crate) fn load<T: DeserializeOwned>(path: &Path) -> std::io::Result<Loaded<T>> {
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
