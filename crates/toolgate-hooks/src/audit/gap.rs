//! Gap markers: how a [`JsonLinesSink`](super::JsonLinesSink) declares, in its own chain,
//! the records it had to drop.
//!
//! A sink whose file takes no writes (a full disk, a file it may not write) holds up to
//! 16 MiB of lines and writes them when the file has room again. Past that, a record is
//! dropped — *before* it is linked into the chain, so no seq or hash is spent on it. The
//! next time the sink has room it first links a marker of its own, in the place the
//! dropped records would have had:
//!
//! ```text
//! {"seq":98,"chain":"…","prev":"<hash of record 97>","gap":{"records":12,"bytes":2170212,"from_ms":1764878401997,"to_ms":1764878402500,"reason":"disk_full","error":"No space left on device (os error 28)"}}
//! ```
//!
//! Its `prev` is the hash of the last record written, and the next record's `prev` is its
//! hash: the chain holds end to end, through the marker, with nothing in it that is not
//! on disk. A marker is a record like any other to the chain and its checkpoints, so it
//! cannot be put in, taken out or edited later without breaking them (with a key, without
//! a valid signature). [`verify`](super::verify) reports such a gap as one the gateway
//! declared, and a marker not as the gateway writes it as tampering.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

use crate::clock::now_ms;

/// Why records were lost: what the file answered the sink's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GapReason {
    /// The disk was full (`ENOSPC`).
    DiskFull,
    /// The disk quota of the gateway's user was used up (`EDQUOT`).
    QuotaExceeded,
    /// The file could not be written: permissions, a read-only filesystem.
    NotWritable,
    /// Any other error of the writes.
    WriteFailed,
}

impl GapReason {
    fn of(error: &io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::StorageFull => GapReason::DiskFull,
            io::ErrorKind::QuotaExceeded => GapReason::QuotaExceeded,
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                GapReason::NotWritable
            }
            _ => GapReason::WriteFailed,
        }
    }
}

impl fmt::Display for GapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GapReason::DiskFull => "a full disk",
            GapReason::QuotaExceeded => "a full disk quota",
            GapReason::NotWritable => "a file the gateway could not write",
            GapReason::WriteFailed => "failed writes",
        })
    }
}

/// What a gap marker declares: the `gap` of its line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gap {
    /// How many records were dropped.
    pub records: u64,
    /// Their size as JSON, in bytes (without the chain's link).
    pub bytes: u64,
    /// When the first was dropped, in milliseconds since the Unix epoch.
    pub from_ms: u64,
    /// When the last was.
    pub to_ms: u64,
    /// Why.
    pub reason: GapReason,
    /// The error the file answered with, first (`No space left on device (os error 28)`).
    pub error: String,
}

/// The longest `error` a sink writes (an OS error's text is far shorter).
const MAX_ERROR: usize = 200;

impl Gap {
    /// The gap that a record of `bytes` dropped now, for `error`, begins.
    pub(crate) fn begin(bytes: usize, error: &io::Error) -> Self {
        let at = now_ms();
        let mut text = error.to_string();
        if text.len() > MAX_ERROR {
            let cut = (0..=MAX_ERROR).rev().find(|i| text.is_char_boundary(*i));
            text.truncate(cut.unwrap_or(0));
        }
        Gap {
            records: 1,
            bytes: bytes as u64,
            from_ms: at,
            to_ms: at,
            reason: GapReason::of(error),
            error: text,
        }
    }

    /// Counts one more record of `bytes` dropped now.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.records += 1;
        self.bytes += bytes as u64;
        // A clock set back must not make the range end before it starts.
        self.to_ms = self.to_ms.max(now_ms());
    }

    /// The marker as a JSON object, to be linked into the chain as a record is.
    pub(crate) fn marker(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Marker<'a> {
            gap: &'a Gap,
        }
        serde_json::to_vec(&Marker { gap: self }).expect("a gap serializes")
    }

    /// Why these numbers are not ones a sink writes, if they are not: at least one record,
    /// each at least the two bytes of `{}`, a range that does not end before it starts,
    /// an error no longer than a sink writes.
    pub(crate) fn inconsistency(&self) -> Option<String> {
        if self.records == 0 {
            return Some("it declares no record lost".to_owned());
        }
        if self.bytes < 2 * self.records {
            return Some(format!(
                "it declares {} record(s) in {} byte(s), fewer than the smallest record takes",
                self.records, self.bytes
            ));
        }
        if self.from_ms > self.to_ms {
            return Some("its time range ends before it starts".to_owned());
        }
        if self.error.len() > MAX_ERROR {
            return Some(format!(
                "its error is longer than the {MAX_ERROR} bytes a sink writes"
            ));
        }
        None
    }
}

/// An instant in milliseconds since the Unix epoch as RFC 3339 in UTC, to the millisecond.
pub(crate) fn utc(at_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// A size in bytes as people read it (`2.1 MiB`).
pub(crate) fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / f64::from(1 << 10)),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_utc_to_the_millisecond() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_007), "2000-02-29T00:00:00.007Z");
        assert_eq!(utc(1_764_878_401_997), "2025-12-04T20:00:01.997Z");
    }

    #[test]
    fn the_reason_is_the_kind_of_error_the_file_answered() {
        let full = io::Error::from_raw_os_error(28);
        let gap = Gap::begin(300, &full);
        assert_eq!(
            (gap.reason, gap.records, gap.bytes),
            (GapReason::DiskFull, 1, 300)
        );
        assert!(gap.error.contains("No space left"), "{}", gap.error);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(Gap::begin(1, &denied).reason, GapReason::NotWritable);
    }
}
