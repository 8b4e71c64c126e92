//! The files the configuration names, looked at on the file system: what `toolgate check`
//! adds to reading the text, so that a path `serve` would refuse, or could not save to,
//! shows before it runs.
//!
//! Nothing here creates, truncates or moves a file the gateway uses: a file is at most
//! opened to be read, and a directory's writability is tried with a probe file of a name
//! of its own, removed at once.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use toolgate_core::file::{TextFileError, what_it_is};

use super::{AuditConfig, Config, ConfigError};

impl Config {
    /// Checks on the file system the files the configuration names, as the running
    /// gateway will use them: `stats.path` must not be a directory, must be readable if it
    /// exists, and must be in a directory that exists and that the gateway can write in
    /// (the statistics are saved by writing a new file beside it and renaming it).
    ///
    /// Run by `toolgate check`; not by [`parse`](super::parse), which reads text alone.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Path`] naming the field and saying what to write instead.
    ///
    /// `pins.path` and `audit.path` (with the lock files the gateway keeps beside them)
    /// must be regular files where they exist — a pipe, a device or a directory is refused
    /// at once, unopened — except that the audit log may go to a device or to a pipe that
    /// is read (`/dev/stdout`).
    pub fn check_paths(&self) -> Result<(), ConfigError> {
        if let Some(stats) = &self.stats {
            stats_path(&stats.path.0)?;
        }
        if let Some(path) = self.pins.as_ref().and_then(|p| p.path.as_ref()) {
            pins_path(&path.0)?;
        }
        if let Some(tls) = &self.state.tls {
            for (field, path) in [
                ("state.tls.ca_file", &tls.ca_file),
                ("state.tls.client_cert_file", &tls.client_cert_file),
                ("state.tls.client_key_file", &tls.client_key_file),
            ] {
                if let Some(path) = path
                    && let Ok(Some(what)) = special_file(path)
                {
                    return Err(refusal(
                        field,
                        path,
                        format!(
                            "{} is {what}, not a regular file: give the path of a PEM file",
                            path.display()
                        ),
                    ));
                }
            }
        }
        if let Some(AuditConfig::File { path, .. }) = &self.audit
            && let Some(pipe) = audit_path(&path.0)?
        {
            HELD_PIPES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((path.0.clone(), pipe));
        }
        Ok(())
    }
}

/// What is at `path` when it is there and not a regular file, in words ("a pipe"), found
/// without opening it: opening a pipe waits for its other end, and a device such as
/// `/dev/zero` never ends. A symbolic link is followed; nothing there is `None` (the
/// file is made when it is needed).
///
/// # Errors
///
/// When the file system cannot say (permission denied on a directory of the path).
pub(crate) fn special_file(path: &Path) -> std::io::Result<Option<&'static str>> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => Ok(None),
        Ok(metadata) => Ok(Some(what_it_is(&metadata.file_type()))),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Opens the regular file at `path` as `options` say, without waiting: on Unix with
/// `O_NONBLOCK` (and `O_NOFOLLOW` when `no_follow`), so that a pipe put there after
/// [`special_file`] looked opens at once (or fails) instead of waiting for its other end;
/// what was opened, not the path, is then refused unless it is a regular file, on which
/// `O_NONBLOCK` changes nothing.
///
/// # Errors
///
/// [`TextFileError::Unreadable`] when it cannot be opened, [`TextFileError::NotAFile`]
/// when it is not a regular file.
pub(crate) fn open_regular(
    options: &mut OpenOptions,
    path: &Path,
    no_follow: bool,
) -> Result<File, TextFileError> {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        options,
        libc::O_NONBLOCK | if no_follow { libc::O_NOFOLLOW } else { 0 },
    );
    #[cfg(not(unix))]
    let _ = no_follow;
    let file = options.open(path).map_err(|e| {
        // A pipe nothing reads fails an open to write at once: said as what it is.
        let looked = if no_follow {
            std::fs::symlink_metadata(path)
        } else {
            std::fs::metadata(path)
        };
        match looked {
            Ok(m) if !m.is_file() && !m.is_symlink() => TextFileError::NotAFile {
                what: what_it_is(&m.file_type()),
            },
            _ => TextFileError::Unreadable(e),
        }
    })?;
    let metadata = file.metadata().map_err(TextFileError::Unreadable)?;
    if !metadata.is_file() {
        return Err(TextFileError::NotAFile {
            what: what_it_is(&metadata.file_type()),
        });
    }
    Ok(file)
}

/// The refusal of the file at `path` that `field` names.
fn refusal(field: &str, path: &Path, message: String) -> ConfigError {
    ConfigError::Path {
        origin: "<config>".to_owned(),
        field: field.to_owned(),
        path: path.to_owned(),
        message,
    }
}

/// The lock file kept beside `path`, which must be a regular file where it exists.
fn lock_beside(field: &str, path: &Path, lock: &Path) -> Result<(), ConfigError> {
    match special_file(lock) {
        Ok(None) => Ok(()),
        Ok(Some(what)) => Err(refusal(
            field,
            path,
            format!(
                "its lock file {} is {what}, not a regular file: remove it (the gateway makes the lock file itself)",
                lock.display()
            ),
        )),
        Err(e) => Err(refusal(
            field,
            path,
            format!(
                "cannot look at its lock file {} ({}): give a path in a directory the gateway can read and write",
                lock.display(),
                io_in_words(&e)
            ),
        )),
    }
}

/// `pins.path`, read and replaced whole by the gateway (with `<path>.lock` beside it): a
/// regular file where it exists. Refused before anything is opened or made.
///
/// # Errors
///
/// [`ConfigError::Path`] for `pins.path`.
pub(crate) fn pins_path(path: &Path) -> Result<(), ConfigError> {
    let shown = path.display();
    match special_file(path) {
        Ok(None) => {}
        Ok(Some(what)) => {
            return Err(refusal(
                "pins.path",
                path,
                format!(
                    "{shown} is {what}, not a regular file: name a file the gateway can read and write, such as `/var/lib/toolgate/pins.json`"
                ),
            ));
        }
        Err(e) => {
            return Err(refusal(
                "pins.path",
                path,
                format!(
                    "cannot look at {shown} ({}): give a path in a directory the gateway can read and write",
                    io_in_words(&e)
                ),
            ));
        }
    }
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    lock_beside("pins.path", path, Path::new(&lock))
}

/// `audit.path`, appended to (with `.NAME.lock` beside a regular file): a regular file
/// where it exists, or a device, or a pipe that something reads (`/dev/stdout`). A
/// directory, a socket or a pipe nothing reads (which would keep the gateway's start
/// waiting) is refused before anything is opened or made.
///
/// A pipe is tried by opening it to write without waiting: the writing end opened, if it
/// is, is returned, to be held until the audit log has opened its own — closed before,
/// it would end the reader's input (the reader would see the end of the pipe).
///
/// # Errors
///
/// [`ConfigError::Path`] for `audit.path`.
pub(crate) fn audit_path(path: &Path) -> Result<Option<File>, ConfigError> {
    let shown = path.display();
    let what = match special_file(path) {
        Ok(what) => what,
        Err(e) => {
            return Err(refusal(
                "audit.path",
                path,
                format!(
                    "cannot look at {shown} ({}): give a path in a directory the gateway can write in",
                    io_in_words(&e)
                ),
            ));
        }
    };
    let Some(what) = what else {
        let name = path.file_name().unwrap_or(path.as_os_str());
        let mut hidden = std::ffi::OsString::from(".");
        hidden.push(name);
        hidden.push(".lock");
        return lock_beside("audit.path", path, &path.with_file_name(hidden)).map(|()| None);
    };
    match what {
        "a device" => Ok(None),
        "a directory" => Err(refusal(
            "audit.path",
            path,
            format!(
                "{shown} is a directory: give the path of a file, such as `{}`",
                path.join("audit.jsonl").display()
            ),
        )),
        "a pipe" => pipe_writer(path).map(Some).ok_or_else(|| {
            refusal(
            "audit.path",
            path,
                format!(
                    "{shown} is a pipe nothing reads from, which the gateway would wait on: start its reader first, or name a regular file"
                ),
            )
        }),
        _ => Err(refusal(
            "audit.path",
            path,
            format!(
                "{shown} is {what}, not a regular file: name a file the gateway can append to, such as `/var/log/toolgate/audit.jsonl`"
            ),
        )),
    }
}

/// The writing end of the pipe at `path` if something reads it: opening it to write
/// without waiting fails when nothing does.
fn pipe_writer(path: &Path) -> Option<File> {
    let mut options = OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    options.open(path).ok()
}

/// The writing ends of audit pipes that [`Config::check_paths`] opened, held until the
/// audit log has opened its own ([`release_audit_pipe`]) or the process ends.
static HELD_PIPES: std::sync::Mutex<Vec<(PathBuf, File)>> = std::sync::Mutex::new(Vec::new());

/// Lets go of the writing end of the audit pipe at `path` that [`Config::check_paths`]
/// holds, once the audit log writes to the pipe itself.
pub(crate) fn release_audit_pipe(path: &Path) {
    HELD_PIPES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(held, _)| held != path);
}

/// `stats.path` can be read if it is there, and saved by a write-then-rename in its
/// directory (`UsageStats::save`).
fn stats_path(path: &Path) -> Result<(), ConfigError> {
    let refuse = |message: String| ConfigError::Path {
        origin: "<config>".to_owned(),
        field: "stats.path".to_owned(),
        path: path.to_owned(),
        message,
    };
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(refuse(
            "the path is empty: give the file the statistics are kept in, such as `/var/lib/toolgate/stats.json`"
                .to_owned(),
        ));
    }
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => {
            return Err(refuse(format!(
                "{shown} is a directory: give the path of a file, such as `{}`",
                path.join("stats.json").display()
            )));
        }
        Ok(metadata) if !metadata.is_file() => {
            // A device, a pipe or a socket: opening it could block, and saving would
            // replace it.
            return Err(refuse(format!(
                "{shown} is not a regular file: give the path of a file, such as `/var/lib/toolgate/stats.json`"
            )));
        }
        Ok(_) => {
            // Read as the gateway will at start; nothing is written.
            if let Err(e) = std::fs::File::open(path) {
                return Err(refuse(format!(
                    "cannot read {shown} ({}): make it readable by the user the gateway runs as, or give another path",
                    io_in_words(&e)
                )));
            }
        }
        // A missing directory, or a file where one is, is said of the directory below.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) => {}
        Err(e) => {
            return Err(refuse(format!(
                "cannot look at {shown} ({}): give a path in a directory the gateway can read and write",
                io_in_words(&e)
            )));
        }
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let in_directory = directory.display();
    match std::fs::metadata(&directory) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => {
            return Err(refuse(format!(
                "{in_directory} is not a directory: give a path in a directory, such as `/var/lib/toolgate/stats.json`"
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(format!(
                "the directory {in_directory} does not exist: create it (`mkdir -p {in_directory}`), or give a path in a directory that exists"
            )));
        }
        Err(e) => {
            return Err(refuse(format!(
                "cannot look at the directory {in_directory} ({}): give a path in a directory the gateway can write in",
                io_in_words(&e)
            )));
        }
    }
    if let Err(e) = probe_writable(&directory, path) {
        return Err(refuse(format!(
            "the gateway cannot write in the directory {in_directory} ({}), where the file is saved (written beside it, then renamed): make the directory writable by the user the gateway runs as, or give a path in one that is",
            io_in_words(&e)
        )));
    }
    Ok(())
}

/// Creates a file of a name no one else uses in `directory`, then removes it: whether the
/// gateway may create files there (permission bits alone do not say it: for root, or on a
/// read-only file system).
fn probe_writable(directory: &Path, path: &Path) -> std::io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |name| name.to_string_lossy());
    let probe = directory.join(format!(
        ".{name}.toolgate-check-{}-{nanos}",
        std::process::id()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// What the file system said, in words: `no such file`, `permission denied`, `it is a
/// directory`, … — never Rust's `No such file or directory (os error 2)`. An error made with
/// a message of its own (`io::Error::other`) is that message.
pub(crate) fn io_in_words(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    if error.raw_os_error().is_none() {
        return error.to_string();
    }
    let words = match error.kind() {
        ErrorKind::NotFound => "no such file",
        ErrorKind::PermissionDenied => "permission denied",
        ErrorKind::IsADirectory => "it is a directory",
        ErrorKind::NotADirectory => "a part of the path is not a directory",
        ErrorKind::ReadOnlyFilesystem => "the file system is read-only",
        ErrorKind::StorageFull => "the disk is full",
        _ => {
            let text = error.to_string();
            let text = match text.rfind(" (os error ") {
                Some(at) if text.ends_with(')') => text[..at].to_owned(),
                _ => text,
            };
            let mut chars = text.chars();
            return match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => text,
            };
        }
    };
    words.to_owned()
}

/// A pipe made at `path` (`mkfifo`), for tests.
#[cfg(all(test, unix))]
pub(crate) fn make_fifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("running mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// What `f` returns, on a thread of its own, within 10 s: a test of something that must
/// not wait fails, rather than hanging, when it does.
#[cfg(test)]
pub(crate) fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(answer) => answer,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} waited (10 s) instead of answering at once")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(yaml: String) -> Result<(), ConfigError> {
        within("check_paths", move || {
            super::super::parse(&yaml)
                .expect("the text is fine")
                .check_paths()
        })
    }

    #[cfg(unix)]
    #[test]
    fn a_pipe_a_device_or_a_directory_as_pins_path_is_refused_at_once_and_no_lock_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pins.json");
        make_fifo(&fifo);
        for (path, what) in [
            (fifo.as_path(), "a pipe"),
            (Path::new("/dev/zero"), "a device"),
            (dir.path(), "a directory"),
        ] {
            let refused = checked(format!("pins:\n  path: {}\n", path.display())).unwrap_err();
            assert_eq!(refused.field(), "pins.path", "{refused}");
            assert!(matches!(refused, ConfigError::Path { .. }), "{refused:?}");
            assert_eq!(
                refused.to_string(),
                format!(
                    "<config>: `pins.path`: {} is {what}, not a regular file: name a file the gateway can read and write, such as `/var/lib/toolgate/pins.json`",
                    path.display()
                )
            );
        }
        assert!(!dir.path().join("pins.json.lock").exists());
        assert!(!Path::new("/dev/zero.lock").exists());

        // A pipe where the gateway keeps the pins' lock would be waited on too.
        let pins = dir.path().join("other.json");
        make_fifo(&dir.path().join("other.json.lock"));
        let refused = checked(format!("pins:\n  path: {}\n", pins.display()))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("other.json.lock is a pipe"), "{refused}");
        assert!(!pins.exists());
        // A file, or none yet, passes.
        checked(format!(
            "pins:\n  path: {}\n",
            dir.path().join("new.json").display()
        ))
        .unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_pipe_as_a_redis_certificate_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("ca.pem");
        make_fifo(&fifo);
        let refused = checked(format!(
            "state:\n  url: rediss://127.0.0.1:1\n  tls:\n    ca_file: {}\n",
            fifo.display()
        ))
        .unwrap_err();
        assert_eq!(refused.field(), "state.tls.ca_file", "{refused}");
        assert!(
            refused
                .to_string()
                .contains("is a pipe, not a regular file"),
            "{refused}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_audit_path_that_is_a_directory_or_a_pipe_nothing_reads_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let audit = |path: &Path| {
            checked(format!(
                "audit:\n  sink: file\n  path: {}\n",
                path.display()
            ))
        };

        let refused = audit(dir.path()).unwrap_err();
        assert_eq!(refused.field(), "audit.path");
        assert_eq!(
            refused.to_string(),
            format!(
                "<config>: `audit.path`: {} is a directory: give the path of a file, such as `{}`",
                dir.path().display(),
                dir.path().join("audit.jsonl").display()
            )
        );

        let fifo = dir.path().join("audit.jsonl");
        make_fifo(&fifo);
        let refused = audit(&fifo).unwrap_err().to_string();
        assert!(
            refused.contains("is a pipe nothing reads from"),
            "{refused}"
        );
        assert!(!dir.path().join(".audit.jsonl.lock").exists());

        // Read, the pipe passes (`/dev/stdout`), and so does a device.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_nonblocking()
            .open(&fifo)
            .unwrap();
        audit(&fifo).unwrap();
        release_audit_pipe(&fifo);
        drop(reader);
        audit(Path::new("/dev/null")).unwrap();
        audit(&dir.path().join("new.jsonl")).unwrap();
    }

    /// `O_NONBLOCK`, so that a test opening a pipe's reading end does not wait for a writer.
    #[cfg(unix)]
    trait NonBlocking {
        fn custom_flags_nonblocking(&mut self) -> &mut Self;
    }

    #[cfg(unix)]
    impl NonBlocking for std::fs::OpenOptions {
        fn custom_flags_nonblocking(&mut self) -> &mut Self {
            std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_NONBLOCK)
        }
    }

    fn stats_at(path: &Path) -> Result<(), ConfigError> {
        let config = super::super::parse(&format!("stats:\n  path: {}\n", path.display()))
            .expect("the text is fine");
        config.check_paths()
    }

    #[test]
    fn a_stats_file_in_a_writable_directory_passes_and_is_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("stats.json");
        stats_at(&missing).unwrap();
        assert!(!missing.exists(), "check made the file");
        std::fs::write(&missing, "not json").unwrap();
        stats_at(&missing).unwrap();
        assert_eq!(std::fs::read_to_string(&missing).unwrap(), "not json");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "the probe file was left behind");
    }

    #[test]
    fn a_stats_path_that_is_a_directory_or_in_a_missing_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let refused = stats_at(dir.path()).unwrap_err();
        assert_eq!(refused.field(), "stats.path");
        assert!(matches!(refused, ConfigError::Path { .. }), "{refused:?}");
        assert!(refused.to_string().contains("is a directory"), "{refused}");

        let missing = dir.path().join("no/such/dir/stats.json");
        let refused = stats_at(&missing).unwrap_err().to_string();
        assert!(refused.contains("does not exist"), "{refused}");
        assert!(refused.contains("mkdir -p"), "{refused}");
        assert!(!refused.contains("os error"), "{refused}");
    }

    #[test]
    fn io_errors_are_said_in_words() {
        #[cfg(target_os = "linux")]
        {
            let words = |code| io_in_words(&std::io::Error::from_raw_os_error(code));
            assert_eq!(words(2), "no such file");
            assert_eq!(words(13), "permission denied");
            assert_eq!(words(21), "it is a directory");
            // EMFILE: no words of its own, the system's without the number.
            assert_eq!(words(24), "too many open files");
        }
        let own = std::io::Error::other("it is not UTF-8 text: save it as UTF-8");
        assert_eq!(io_in_words(&own), "it is not UTF-8 text: save it as UTF-8");
    }
}
