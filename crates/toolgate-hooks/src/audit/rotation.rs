//! Rotation of a JSON-lines audit file by size or age: the file is moved aside as
//! `NAME.UNIX_MS` and a fresh `NAME` begins, the chain carried on across the two.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// When a [`JsonLinesSink`](super::JsonLinesSink) starts a new file.
///
/// The full file is renamed `NAME.UNIX_MS` (the time of the rotation in milliseconds,
/// thirteen digits, so the names sort in the order they were written) and a new file is
/// opened at the configured path. A chained sink writes a checkpoint at the end of the
/// old file, and the new file's first record links to the old file's last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    max_bytes: Option<u64>,
    max_age: Option<Duration>,
}

impl Rotation {
    /// No rotation until a limit is set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new file once this one holds `bytes` (counting what it held when opened).
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = Some(bytes.max(1));
        self
    }

    /// A new file at the first record written `age` after this one was opened (by
    /// this process: a restart counts from its start).
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }
}

/// The state of the file being written.
#[derive(Debug)]
pub(crate) struct Rotating {
    path: PathBuf,
    rule: Rotation,
    bytes: u64,
    opened: Instant,
}

impl Rotating {
    pub(crate) fn new(path: &Path, rule: Rotation) -> Self {
        Rotating {
            path: path.to_owned(),
            rule,
            bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
            opened: Instant::now(),
        }
    }

    /// Counts `bytes` more written; whether the file is due to rotate.
    pub(crate) fn wrote(&mut self, bytes: usize) -> bool {
        self.bytes += bytes as u64;
        self.rule.max_bytes.is_some_and(|max| self.bytes >= max)
            || self
                .rule
                .max_age
                .is_some_and(|age| self.opened.elapsed() >= age)
    }

    /// Moves the (flushed) file aside and opens a fresh one at the path.
    ///
    /// A name taken is never replaced: the next millisecond's name is tried. The check and
    /// the rename are one step because nothing else moves the file meanwhile: another
    /// process does not write it (the sink's claim on it), and the sinks of this process
    /// on it rotate one at a time (the claim's lock, held by the caller). When the file was
    /// deleted from the path, a new one is begun.
    pub(crate) fn rotate(&mut self) -> io::Result<File> {
        let mut ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        loop {
            let mut name = self.path.as_os_str().to_owned();
            name.push(format!(".{ms:013}"));
            let aside = PathBuf::from(name);
            if aside.try_exists()? {
                ms += 1;
                continue;
            }
            match std::fs::rename(&self.path, &aside) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => break,
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.bytes = 0;
        self.opened = Instant::now();
        Ok(file)
    }
}
