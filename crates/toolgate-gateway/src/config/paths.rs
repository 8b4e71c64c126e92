//! The files the configuration names, looked at on the file system: what `toolgate check`
//! adds to reading the text, so that a path `serve` would refuse, or could not save to,
//! shows before it runs.
//!
//! Nothing here creates, truncates or moves a file the gateway uses: a file is at most
//! opened to be read, and a directory's writability is tried with a probe file of a name
//! of its own, removed at once.

use std::path::{Path, PathBuf};

use super::load::io_in_words;
use super::{Config, ConfigError};

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
    pub fn check_paths(&self) -> Result<(), ConfigError> {
        if let Some(stats) = &self.stats {
            stats_path(&stats.path.0)?;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
