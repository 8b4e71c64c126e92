//! Reading a text file the operator names (a configuration, a policy file): only a
//! regular file, and only up to a bound, so that a wrong path fails at once rather than
//! hanging or filling memory.

use std::io::Read;
use std::path::Path;

/// The most of a text file that is read: far more than any configuration or policies,
/// and little enough that a wrong path (a log file, say) fails at once.
pub const MAX_TEXT_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Why a text file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextFileError {
    /// It could not be opened or read.
    #[error("{0}")]
    Unreadable(#[source] std::io::Error),
    /// It is a directory, a pipe, a device or a socket: `what` it is, in words ("a
    /// directory").
    #[error("it is {what}, not a regular file")]
    NotAFile {
        /// What it is instead, in words: "a directory", "a pipe", "a device", "a socket".
        what: &'static str,
    },
    /// It is over [`MAX_TEXT_FILE_BYTES`].
    #[error("it is over {} MiB: is this the right file?", MAX_TEXT_FILE_BYTES >> 20)]
    TooLarge,
    /// It is not UTF-8.
    #[error("it is not UTF-8 text (from byte {valid_up_to} on): save it as UTF-8")]
    NotUtf8 {
        /// How many bytes from its start are UTF-8.
        valid_up_to: usize,
    },
}

/// The text of the regular file at `path`, of at most [`MAX_TEXT_FILE_BYTES`]; a byte
/// order mark at its start is kept.
///
/// The file is opened without waiting (a FIFO with no writer would keep an ordinary open
/// waiting for ever) and what was opened is checked, not the path, which may have been
/// replaced since: a pipe, a device such as `/dev/zero` or a directory is refused unread.
///
/// # Errors
///
/// [`TextFileError`] when it cannot be read, is not a regular file, is over the bound or
/// is not UTF-8.
pub fn read_text_file(path: &Path) -> Result<String, TextFileError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(TextFileError::Unreadable)?;
    let metadata = file.metadata().map_err(TextFileError::Unreadable)?;
    if !metadata.is_file() {
        return Err(TextFileError::NotAFile {
            what: what_it_is(&metadata.file_type()),
        });
    }
    if metadata.len() > MAX_TEXT_FILE_BYTES {
        return Err(TextFileError::TooLarge);
    }
    bounded_text(file)
}

/// The text of the regular file or the pipe at `path` (`--config <(envsubst < t.yaml)`), of
/// at most [`MAX_TEXT_FILE_BYTES`]: for a file read once, at a command's start, where a
/// pipe is the operator's own choice. A pipe is opened without waiting (an ordinary open
/// waits for a writer, for ever if none comes): one nothing writes to ends at once and is
/// refused; one with a writer is read as its writer writes. A directory, a device or a
/// socket is refused unread.
///
/// # Errors
///
/// As [`read_text_file`].
pub fn read_text_file_or_pipe(path: &Path) -> Result<String, TextFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
            return read_pipe(path);
        }
    }
    read_text_file(path)
}

/// The text written to the pipe at `path`, up to its end and at most
/// [`MAX_TEXT_FILE_BYTES`] (see [`read_text_file_or_pipe`]).
#[cfg(unix)]
fn read_pipe(path: &Path) -> Result<String, TextFileError> {
    use std::io::ErrorKind;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(TextFileError::Unreadable)?;
    let kind = file
        .metadata()
        .map_err(TextFileError::Unreadable)?
        .file_type();
    if !kind.is_fifo() {
        // Replaced since it was looked at: read as any file.
        return read_text_file(path);
    }
    let mut bytes = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                bytes.extend_from_slice(&chunk[..n]);
                if bytes.len() as u64 > MAX_TEXT_FILE_BYTES {
                    return Err(TextFileError::TooLarge);
                }
            }
            // Its writer has not written yet: the pipe is read as it is written.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(TextFileError::Unreadable(e)),
        }
    }
    if bytes.is_empty() {
        return Err(TextFileError::Unreadable(std::io::Error::other(
            "it is a pipe nothing writes to (or whose writer wrote nothing): write the configuration to it first, or name the configuration file itself",
        )));
    }
    utf8(bytes)
}

/// What `file` holds, read to its end or past [`MAX_TEXT_FILE_BYTES`] (a file may grow
/// while it is read, a pipe has no length), as UTF-8 text.
fn bounded_text(file: std::fs::File) -> Result<String, TextFileError> {
    let mut bytes = Vec::new();
    file.take(MAX_TEXT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(TextFileError::Unreadable)?;
    if bytes.len() as u64 > MAX_TEXT_FILE_BYTES {
        return Err(TextFileError::TooLarge);
    }
    utf8(bytes)
}

/// `bytes` as UTF-8 text.
fn utf8(bytes: Vec<u8>) -> Result<String, TextFileError> {
    String::from_utf8(bytes).map_err(|e| TextFileError::NotUtf8 {
        valid_up_to: e.utf8_error().valid_up_to(),
    })
}

/// What a file that is not a regular one is, in words: "a directory", "a pipe", "a
/// socket", "a device".
pub fn what_it_is(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a pipe";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
    }
    "a special file"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_fifo_a_device_or_a_directory_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("gateway.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for path in [fifo.as_path(), Path::new("/dev/zero"), dir.path()] {
            let refused = read_text_file(path).unwrap_err();
            assert!(
                matches!(refused, TextFileError::NotAFile { .. }),
                "{path:?}: {refused}"
            );
        }
    }

    #[test]
    fn a_file_over_the_bound_or_not_utf8_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_TEXT_FILE_BYTES + 1)
            .unwrap();
        assert_eq!(
            read_text_file(&big).unwrap_err().to_string(),
            "it is over 16 MiB: is this the right file?"
        );
        let latin1 = dir.path().join("latin1");
        std::fs::write(&latin1, b"caf\xe9").unwrap();
        assert_eq!(
            read_text_file(&latin1).unwrap_err().to_string(),
            "it is not UTF-8 text (from byte 3 on): save it as UTF-8"
        );
        let fine = dir.path().join("fine");
        std::fs::write(&fine, "text").unwrap();
        assert_eq!(read_text_file(&fine).unwrap(), "text");
    }
}
