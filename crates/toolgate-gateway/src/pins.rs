//! Tool-definition pinning, the defence against a "rug pull": an upstream that changes
//! what one of its tools says it does (its description, its schemas, its hints) after
//! people decided to trust it.
//!
//! With `pins: { path: … }` (or `pins: { shared: true }`) in the configuration, every imported tool, prompt and
//! resources tool is fingerprinted when the gateway starts or reloads: the SHA-256 of its
//! name, title, description, input and output schema and annotations. The first time a
//! tool is seen its fingerprint is pinned (trust on first use). When a pinned tool comes
//! back different, it is not served — it is left out of every listing, and calls to it
//! are refused with `definition_changed` (409) — until an admin accepts the change with
//! `toolgate pins accept NAME` or `POST /v1/admin/pins/NAME/accept` (then reload). Every
//! pin, change and acceptance is appended to the file's `history`, and logged at
//! `warn` (target `toolgate::pins`).
//!
//! With `shared: true` the pins are kept on Redis with the policies' state
//! ([`RedisPins`]) instead of in a file: every replica checks its tools against the same
//! pins, a change seen by one is held back by all, and a change accepted through one is
//! served by each after its next reload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_core::file::TextFileError;
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolDefinition};
use toolgate_core::{ToolError, ToolInvokeContext};
use toolgate_hooks::fingerprint::fingerprint;
use toolgate_redis::{PinCheck, PinsUnavailable, RedisPins, StoredPin};

use crate::config::io_in_words;
use crate::config::paths::{open_regular, special_file};

/// The tag of a tool whose definition changed and awaits acceptance.
pub const CHANGED_TAG: &str = "pin-changed";

/// The pin file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// Reading or writing the file failed.
    #[error("pin file {path}: {reason}: check the path and its permissions (`pins.path`)")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// `pins.path`, or a file the gateway keeps beside it (its lock), is a pipe, a device
    /// or a directory: refused unopened, since opening a pipe waits for its other end and a
    /// device such as `/dev/zero` never ends.
    #[error("{}", not_a_file(path, file, what))]
    NotAFile {
        /// The pin file (`pins.path`).
        path: PathBuf,
        /// The file refused: the pin file, or one beside it.
        file: PathBuf,
        /// What it is, in words: "a pipe", "a device", "a directory".
        what: &'static str,
    },
    /// The file is not a pin file.
    #[error(
        "pin file {path} is not a pin file ({reason}): fix it, or move it away to pin every tool again"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The pins are kept on Redis (`pins.shared`), and Redis does not answer.
    #[error("{0}: check `state.url` and that Redis runs")]
    Unavailable(#[from] PinsUnavailable),
    /// The pins are shared (`pins.shared`), and the policies' state is not on Redis.
    #[error(
        "shared pins are kept on Redis with the policies' state, and this gateway keeps its state in memory: set `state.url` to a Redis URL"
    )]
    NotShared,
    /// An import was asked of a configuration whose pins are a file.
    #[error(
        "`import` brings a pin file to shared pins (`pins: {{ shared: true }}`), and this configuration keeps its pins in a file already"
    )]
    ImportIntoFile,
    /// No tool of that name is pinned, or has a change waiting.
    #[error(
        "`{tool}` is not pinned, and no change of it waits: `toolgate pins --config FILE` lists the pins"
    )]
    NotPinned {
        /// The tool asked for.
        tool: String,
    },
    /// Nothing waits to be accepted under that name.
    #[error(
        "no changed definition of `{tool}` waits to be accepted: `toolgate pins --config FILE` lists the changes"
    )]
    NothingPending {
        /// The tool asked for.
        tool: String,
    },
}

/// An accepted definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pinned {
    /// Its fingerprint (`sha256:…`).
    pub fingerprint: String,
    /// What was fingerprinted.
    pub definition: Value,
}

/// A changed definition waiting for an admin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The fingerprint pinned before.
    pub pinned: String,
    /// The fingerprint offered now.
    pub offered: String,
    /// What is offered now.
    pub definition: Value,
}

/// One entry of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PinEvent {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The tool.
    pub tool: String,
    /// `pinned`, `changed`, `accepted` or `forgotten`.
    pub event: String,
    /// The fingerprint pinned, offered or accepted.
    pub fingerprint: String,
}

/// The pin file: accepted fingerprints, changes waiting, and the history of both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PinFile {
    /// Accepted definitions, by tool name.
    #[serde(default)]
    pub pins: BTreeMap<String, Pinned>,
    /// Changed definitions waiting for an admin, by tool name.
    #[serde(default)]
    pub pending: BTreeMap<String, Change>,
    /// Every pin, change and acceptance, oldest first.
    #[serde(default)]
    pub history: Vec<PinEvent>,
}

/// What to do with a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its definition is the pinned one (or was just pinned): serve it.
    Serve,
    /// Its definition changed: hold it back until accepted.
    HoldBack,
}

/// What of a definition is pinned, and its fingerprint.
pub fn pinned_form(definition: &ToolDefinition) -> (String, Value) {
    let form = json!({
        "name": definition.name,
        "title": definition.title,
        "description": definition.description,
        "input_schema": definition.input_schema,
        "output_schema": definition.output_schema,
        "annotations": definition.annotations,
    });
    (fingerprint(&form), form)
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl PinFile {
    /// The pin file at `path`; empty when there is none yet.
    ///
    /// # Errors
    ///
    /// [`PinError`] when it cannot be read or is not a pin file.
    ///
    /// Read as the configuration file is: only a regular file, opened without waiting,
    /// of at most [`MAX_TEXT_FILE_BYTES`](toolgate_core::file::MAX_TEXT_FILE_BYTES).
    pub fn load(path: &Path) -> Result<PinFile, PinError> {
        match toolgate_core::file::read_text_file(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| PinError::Malformed {
                path: path.to_owned(),
                reason: e.to_string(),
            }),
            Err(TextFileError::Unreadable(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(PinFile::default())
            }
            Err(e) => Err(refused(path, path, e)),
        }
    }

    /// Writes the file whole, through a temporary file renamed over it.
    ///
    /// # Errors
    ///
    /// [`PinError::Io`] when it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), PinError> {
        let io = |e: std::io::Error| PinError::Io {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let text = serde_json::to_vec_pretty(self).map_err(|e| io(std::io::Error::other(e)))?;
        let temporary = path.with_extension("pins.tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        let mut file = open_regular(&mut options, &temporary, false)
            .map_err(|e| refused(path, &temporary, e))?;
        std::io::Write::write_all(&mut file, &text).map_err(io)?;
        drop(file);
        std::fs::rename(&temporary, path).map_err(io)
    }

    fn record(&mut self, tool: &str, event: &str, fingerprint: &str) {
        log_event(tool, event, fingerprint);
        self.history.push(PinEvent {
            at_ms: now_ms(),
            tool: tool.to_owned(),
            event: event.to_owned(),
            fingerprint: fingerprint.to_owned(),
        });
    }

    /// Checks `definition` against its pin: pins it when new, records a change when it
    /// differs. Returns whether the file changed beside the verdict.
    pub fn check(&mut self, definition: &ToolDefinition) -> (Verdict, bool) {
        let (offered, form) = pinned_form(definition);
        let name = definition.name.clone();
        match self.pins.get(&name) {
            None => {
                self.record(&name, "pinned", &offered);
                self.pins.insert(
                    name,
                    Pinned {
                        fingerprint: offered,
                        definition: form,
                    },
                );
                (Verdict::Serve, true)
            }
            Some(pin) if pin.fingerprint == offered => {
                // Changed back: nothing waits any more.
                let changed = self.pending.remove(&name).is_some();
                (Verdict::Serve, changed)
            }
            Some(pin) => {
                let already = self
                    .pending
                    .get(&name)
                    .is_some_and(|c| c.offered == offered);
                if !already {
                    let pinned = pin.fingerprint.clone();
                    self.record(&name, "changed", &offered);
                    self.pending.insert(
                        name,
                        Change {
                            pinned,
                            offered,
                            definition: form,
                        },
                    );
                }
                (Verdict::HoldBack, !already)
            }
        }
    }

    /// Accepts the change waiting for `tool`.
    ///
    /// # Errors
    ///
    /// [`PinError::NothingPending`] when no change of `tool` waits.
    pub fn accept(&mut self, tool: &str) -> Result<(), PinError> {
        let change = self
            .pending
            .remove(tool)
            .ok_or_else(|| PinError::NothingPending {
                tool: tool.to_owned(),
            })?;
        self.record(tool, "accepted", &change.offered);
        self.pins.insert(
            tool.to_owned(),
            Pinned {
                fingerprint: change.offered,
                definition: change.definition,
            },
        );
        Ok(())
    }

    /// Forgets the pin of `tool` and any change waiting for it: the next definition
    /// offered for `tool` is pinned afresh.
    ///
    /// # Errors
    ///
    /// [`PinError::NotPinned`] when `tool` has neither.
    pub fn forget(&mut self, tool: &str) -> Result<(), PinError> {
        let pin = self.pins.remove(tool);
        let change = self.pending.remove(tool);
        if pin.is_none() && change.is_none() {
            return Err(PinError::NotPinned {
                tool: tool.to_owned(),
            });
        }
        let fingerprint = pin.map(|p| p.fingerprint).unwrap_or_default();
        self.record(tool, "forgotten", &fingerprint);
        Ok(())
    }
}

/// Loads the pin file at `path`, lets `change` change it, and writes it back when `change`
/// says it changed, holding the file's lock throughout: a reload's check, an admin's
/// acceptance through the gateway and `toolgate pins` in another process change the file
/// one after the other, never over each other's changes. Runs on a blocking thread, as
/// waiting for the lock and the file may take a while.
///
/// The lock is an advisory lock (`flock`) on a file beside the pin file, `<path>.lock`,
/// which stays: the pin file itself is replaced on every write, so a lock on it would not
/// hold. Reads need no lock, since a write replaces the file whole.
async fn change_file<T, F>(path: &Path, change: F) -> Result<T, PinError>
where
    T: Send + 'static,
    F: FnOnce(&mut PinFile) -> Result<(T, bool), PinError> + Send + 'static,
{
    let path = path.to_owned();
    let io = {
        let path = path.clone();
        move |e: std::io::Error| PinError::Io {
            path: path.clone(),
            reason: e.to_string(),
        }
    };
    let joined = tokio::task::spawn_blocking({
        let io = io.clone();
        move || {
            // A pipe, a device or a directory named as the pin file is refused before its
            // lock file is made beside it.
            if let Some(what) = special_file(&path).map_err(&io)? {
                return Err(PinError::NotAFile {
                    path: path.clone(),
                    file: path.clone(),
                    what,
                });
            }
            let mut lock_path = path.clone().into_os_string();
            lock_path.push(".lock");
            let lock_path = PathBuf::from(lock_path);
            let mut options = std::fs::OpenOptions::new();
            options.create(true).truncate(false).write(true);
            // A symbolic link planted at the lock file's name is refused, never followed
            // to create or lock a file of its choosing; a pipe there is refused, not
            // waited on.
            let lock = open_regular(&mut options, &lock_path, true)
                .map_err(|e| refused(&path, &lock_path, e))?;
            // Held until `lock` is closed, at the end of this closure.
            lock.lock().map_err(&io)?;
            let mut file = PinFile::load(&path)?;
            let (answer, changed) = change(&mut file)?;
            if changed {
                file.save(&path)?;
            }
            Ok(answer)
        }
    })
    .await;
    joined.map_err(|e| io(std::io::Error::other(e)))?
}

/// The refusal of `file` (the pin file at `path`, or one beside it) as read or opened.
fn refused(path: &Path, file: &Path, e: TextFileError) -> PinError {
    match e {
        TextFileError::NotAFile { what } => PinError::NotAFile {
            path: path.to_owned(),
            file: file.to_owned(),
            what,
        },
        TextFileError::Unreadable(e) if file == path => PinError::Io {
            path: path.to_owned(),
            reason: io_in_words(&e),
        },
        TextFileError::Unreadable(e) => PinError::Io {
            path: path.to_owned(),
            reason: format!("{}: {}", file.display(), io_in_words(&e)),
        },
        other => PinError::Malformed {
            path: path.to_owned(),
            reason: other.to_string(),
        },
    }
}

/// What [`PinError::NotAFile`] says.
fn not_a_file(path: &Path, file: &Path, what: &str) -> String {
    if file == path {
        format!(
            "`pins.path` ({}) is {what}, not a regular file: name a file the gateway can read and write",
            path.display()
        )
    } else {
        format!(
            "`pins.path` ({}): {} beside it is {what}, not a regular file: remove it (the gateway makes it itself)",
            path.display(),
            file.display()
        )
    }
}

/// How many definitions are checked against shared pins at once.
const CHECKS_AT_ONCE: usize = 16;

/// Where a gateway keeps its pins (`pins:`): a file of its own, or on Redis, shared by every
/// replica.
#[derive(Clone, Debug)]
pub enum PinStore {
    /// The pin file at this path.
    File(PathBuf),
    /// On Redis, with the policies' state.
    Shared(RedisPins),
}

/// The pins and the changes waiting, as [`PinStore::read`] finds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PinList {
    /// Accepted definitions, by tool name.
    pub pins: BTreeMap<String, Pinned>,
    /// Changed definitions waiting for an admin, by tool name.
    pub pending: BTreeMap<String, Change>,
}

impl PinStore {
    /// Where the pins are: the file's path, or "the pins shared on Redis".
    pub fn describe(&self) -> String {
        match self {
            PinStore::File(path) => path.display().to_string(),
            PinStore::Shared(_) => "the pins shared on Redis".to_owned(),
        }
    }

    /// Checks each of `definitions` against its pin, pinning those seen for the first
    /// time, and records the changes: what to do with each, in order.
    ///
    /// # Errors
    ///
    /// [`PinError`] when the file cannot be read or written, or Redis does not answer:
    /// nothing is then known of the pins, and no tool may be served unchecked.
    pub async fn check(&self, definitions: &[ToolDefinition]) -> Result<Vec<Verdict>, PinError> {
        match self {
            PinStore::File(path) => {
                let definitions = definitions.to_vec();
                change_file(path, move |file| {
                    let mut changed = false;
                    let verdicts = definitions
                        .iter()
                        .map(|definition| {
                            let (verdict, modified) = file.check(definition);
                            changed |= modified;
                            verdict
                        })
                        .collect();
                    Ok((verdicts, changed))
                })
                .await
            }
            PinStore::Shared(pins) => {
                // A few checks in flight at once: an upstream with many tools does not
                // cost a round trip each, one after the other.
                let mut verdicts = Vec::with_capacity(definitions.len());
                for some in definitions.chunks(CHECKS_AT_ONCE) {
                    let checks = some.iter().map(|definition| check_shared(pins, definition));
                    verdicts.extend(futures::future::try_join_all(checks).await?);
                }
                Ok(verdicts)
            }
        }
    }

    /// The pins and the changes waiting.
    ///
    /// # Errors
    ///
    /// [`PinError`] when the file cannot be read, or Redis does not answer.
    pub async fn read(&self) -> Result<PinList, PinError> {
        match self {
            PinStore::File(path) => {
                let file = PinFile::load(path)?;
                Ok(PinList {
                    pins: file.pins,
                    pending: file.pending,
                })
            }
            PinStore::Shared(pins) => {
                let stored = pins.read().await?;
                let definition =
                    |pin: &StoredPin| serde_json::from_str(&pin.definition).unwrap_or(Value::Null);
                let pending = stored
                    .pending
                    .iter()
                    .map(|(tool, offered)| {
                        let change = Change {
                            pinned: stored
                                .pinned
                                .get(tool)
                                .map(|pin| pin.fingerprint.clone())
                                .unwrap_or_default(),
                            offered: offered.fingerprint.clone(),
                            definition: definition(offered),
                        };
                        (tool.clone(), change)
                    })
                    .collect();
                let pins = stored
                    .pinned
                    .iter()
                    .map(|(tool, pin)| {
                        let pinned = Pinned {
                            fingerprint: pin.fingerprint.clone(),
                            definition: definition(pin),
                        };
                        (tool.clone(), pinned)
                    })
                    .collect();
                Ok(PinList { pins, pending })
            }
        }
    }

    /// Accepts the change waiting for `tool`; a gateway serves the tool after its next
    /// reload.
    ///
    /// # Errors
    ///
    /// [`PinError::NothingPending`] when no change of `tool` waits; otherwise as
    /// [`read`](Self::read), or when the file cannot be written.
    pub async fn accept(&self, tool: &str) -> Result<(), PinError> {
        match self {
            PinStore::File(path) => {
                let tool = tool.to_owned();
                change_file(path, move |file| Ok((file.accept(&tool)?, true))).await
            }
            PinStore::Shared(pins) => match pins.accept(tool).await? {
                Some(fingerprint) => {
                    log_event(tool, "accepted", &fingerprint);
                    Ok(())
                }
                None => Err(PinError::NothingPending {
                    tool: tool.to_owned(),
                }),
            },
        }
    }

    /// Forgets the pin of `tool` and any change waiting for it, for a tool gone for good
    /// (pins never expire). Should an upstream offer a tool of that name again, its
    /// definition then is pinned afresh, trusted on first use, and served.
    ///
    /// # Errors
    ///
    /// [`PinError::NotPinned`] when `tool` has neither a pin nor a change waiting;
    /// otherwise as [`accept`](Self::accept).
    pub async fn forget(&self, tool: &str) -> Result<(), PinError> {
        match self {
            PinStore::File(path) => {
                let tool = tool.to_owned();
                change_file(path, move |file| Ok((file.forget(&tool)?, true))).await
            }
            PinStore::Shared(pins) => match pins.forget(tool).await? {
                Some(fingerprint) => {
                    log_event(tool, "forgotten", &fingerprint);
                    Ok(())
                }
                None => Err(PinError::NotPinned {
                    tool: tool.to_owned(),
                }),
            },
        }
    }

    /// Brings the pins and the changes waiting of `file` to the shared pins: a tool the
    /// shared pins do not know is pinned as the file pinned it; one they pinned otherwise
    /// gets the file's definition as a change waiting, as does each change waiting in the
    /// file — unless a change waits there already, which stays: it is what a replica saw
    /// its upstream offer. Importing twice changes nothing more.
    ///
    /// # Errors
    ///
    /// [`PinError::ImportIntoFile`] for a pin file: there is nothing to import into;
    /// otherwise when Redis does not answer.
    pub async fn import(&self, file: &PinFile) -> Result<Imported, PinError> {
        let PinStore::Shared(pins) = self else {
            return Err(PinError::ImportIntoFile);
        };
        let mut imported = Imported::default();
        for (tool, pin) in &file.pins {
            let definition = pin.definition.to_string();
            match pins.import(tool, &pin.fingerprint, &definition).await? {
                PinCheck::Pinned => imported.pinned += 1,
                PinCheck::Same => imported.alike += 1,
                _ => imported.differing.push(tool.clone()),
            }
        }
        for (tool, change) in &file.pending {
            let definition = change.definition.to_string();
            if !pins
                .import(tool, &change.offered, &definition)
                .await?
                .serves()
            {
                imported.pending += 1;
            }
        }
        Ok(imported)
    }
}

/// Checks `definition` against the shared pins.
async fn check_shared(pins: &RedisPins, definition: &ToolDefinition) -> Result<Verdict, PinError> {
    let (offered, form) = pinned_form(definition);
    let name = &definition.name;
    let found = pins.check(name, &offered, &form.to_string()).await?;
    match found {
        PinCheck::Pinned => log_event(name, "pinned", &offered),
        PinCheck::Changed => log_event(name, "changed", &offered),
        _ => {}
    }
    Ok(if found.serves() {
        Verdict::Serve
    } else {
        Verdict::HoldBack
    })
}

/// What [`PinStore::import`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// Pins of the file now shared.
    pub pinned: usize,
    /// Pins of the file the shared pins held alike already.
    pub alike: usize,
    /// Pins of the file pinned otherwise in the shared pins: each now a change waiting.
    pub differing: Vec<String>,
    /// Changes waiting in the file, now waiting in the shared pins (not counted: one the
    /// shared pins hold as their pin already, accepted there).
    pub pending: usize,
}

impl std::fmt::Display for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "imported: {} pinned, {} pinned alike already, {} changes waiting",
            self.pinned, self.alike, self.pending
        )?;
        if !self.differing.is_empty() {
            write!(
                f,
                "; pinned otherwise already, so held back as changes for an approver: {}",
                self.differing.join(", ")
            )?;
        }
        Ok(())
    }
}

fn log_event(tool: &str, event: &str, fingerprint: &str) {
    tracing::warn!(target: "toolgate::pins", tool, event, fingerprint, "tool definition {event}");
}

/// A tool whose definition changed since it was pinned: listed nowhere, and refused.
pub(crate) struct HeldBack {
    definition: ToolDefinition,
}

impl HeldBack {
    pub(crate) fn new(tool: &Arc<dyn ErasedTool>) -> Self {
        let mut definition = tool.definition();
        definition.tags.push(CHANGED_TAG.to_owned());
        HeldBack { definition }
    }
}

impl ErasedTool for HeldBack {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, _input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        Ok(None)
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        _ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let name = &self.definition.name;
        Box::pin(std::future::ready(Err(ToolError::abort(
            format!(
                "the definition of `{name}` changed at its MCP server since it was pinned, so it is not served: an admin must review and accept the change (`toolgate pins accept {name}`)"
            ),
            "definition_changed",
            409,
        ))))
    }
}

/// Whether `definition` is served (not held back for a changed definition).
pub fn is_served(definition: &ToolDefinition) -> bool {
    !definition.tags.iter().any(|t| t == CHANGED_TAG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_pipe_or_a_device_as_the_pin_file_is_refused_unread_and_no_lock_is_made() {
        use crate::config::paths::{make_fifo, within};
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pins.json");
        make_fifo(&fifo);
        for path in [fifo.clone(), PathBuf::from("/dev/zero")] {
            // As a reload checks the tools against the pins.
            let refused = within("checking against the pins", {
                let path = path.clone();
                move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    runtime.block_on(PinStore::File(path).check(&[definition("a", "b")]))
                }
            })
            .unwrap_err();
            assert!(matches!(refused, PinError::NotAFile { .. }), "{refused:?}");
            let refused = within("reading the pins", move || PinFile::load(&path)).unwrap_err();
            assert!(matches!(refused, PinError::NotAFile { .. }), "{refused:?}");
        }
        assert!(!dir.path().join("pins.json.lock").exists());
        assert!(!Path::new("/dev/zero.lock").exists());
        assert_eq!(
            PinFile::load(Path::new("/dev/zero"))
                .unwrap_err()
                .to_string(),
            "`pins.path` (/dev/zero) is a device, not a regular file: name a file the gateway can read and write"
        );

        // A pipe at the lock's name, or at the name the file is written under first.
        let pins = dir.path().join("other.json");
        make_fifo(&dir.path().join("other.json.lock"));
        let refused = within("locking the pins", {
            let pins = pins.clone();
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                runtime.block_on(PinStore::File(pins).check(&[definition("a", "b")]))
            }
        })
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("other.json.lock beside it is a pipe, not a regular file"),
            "{refused}"
        );
        let third = dir.path().join("third.json");
        make_fifo(&third.with_extension("pins.tmp"));
        let refused = within("saving the pins", move || PinFile::default().save(&third))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("third.pins.tmp beside it is a pipe"),
            "{refused}"
        );
    }

    fn definition(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.to_owned(),
            title: None,
            description: description.to_owned(),
            version: "1".to_owned(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: Default::default(),
            tags: Vec::new(),
            source: Default::default(),
        }
    }

    /// Admins accepting changes at once on one gateway, from several worker threads, each
    /// keep theirs: the file is read, changed and written by one at a time. Each takes the
    /// file's lock through a handle of its own, as another process does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn changes_accepted_at_once_in_a_pin_file_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = PinStore::File(dir.path().join("pins.json"));
        let names: Vec<String> = (0..32).map(|n| format!("tool{n}")).collect();
        let first: Vec<_> = names.iter().map(|n| definition(n, "before")).collect();
        let second: Vec<_> = names.iter().map(|n| definition(n, "after")).collect();
        let all = |verdicts: Vec<Verdict>, what| verdicts.iter().all(|v| *v == what);
        assert!(all(store.check(&first).await.unwrap(), Verdict::Serve));
        assert!(all(store.check(&second).await.unwrap(), Verdict::HoldBack));

        let accepts = names.iter().map(|name| {
            let (store, name) = (store.clone(), name.clone());
            tokio::spawn(async move { store.accept(&name).await })
        });
        for accepted in futures::future::join_all(accepts).await {
            accepted.unwrap().unwrap();
        }
        let list = store.read().await.unwrap();
        assert!(list.pending.is_empty(), "{:?}", list.pending.keys());
        assert!(
            list.pins
                .values()
                .all(|pin| pin.definition["description"] == "after")
        );
        assert!(all(store.check(&second).await.unwrap(), Verdict::Serve));
    }

    /// A symbolic link planted at the lock file's name is refused: the pins are not changed
    /// and the link's target is neither created nor locked.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_symbolic_link_at_the_pin_file_s_lock_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join("pins.json.lock")).unwrap();
        let store = PinStore::File(dir.path().join("pins.json"));

        let refused = store.check(&[definition("search", "v1")]).await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(!target.exists(), "the link's target was created");
        assert!(
            !dir.path().join("pins.json").exists(),
            "the pins were written"
        );
    }

    /// A forgotten pin takes its waiting change with it, is recorded, and the tool is
    /// pinned afresh when offered again; forgetting what is not pinned says so.
    #[tokio::test]
    async fn a_forgotten_pin_is_pinned_afresh_when_offered_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = PinStore::File(dir.path().join("pins.json"));
        store
            .check(&[definition("search", "before")])
            .await
            .unwrap();
        let changed = store.check(&[definition("search", "after")]).await.unwrap();
        assert_eq!(changed, [Verdict::HoldBack]);

        store.forget("search").await.unwrap();
        let error = store.forget("search").await.unwrap_err();
        assert!(matches!(error, PinError::NotPinned { .. }), "{error}");
        assert_eq!(store.read().await.unwrap(), PinList::default());
        let file = PinFile::load(&dir.path().join("pins.json")).unwrap();
        let last = file.history.last().unwrap();
        assert_eq!(
            (last.tool.as_str(), last.event.as_str()),
            ("search", "forgotten")
        );
        assert_eq!(
            last.fingerprint,
            pinned_form(&definition("search", "before")).0
        );

        let again = store.check(&[definition("search", "after")]).await.unwrap();
        assert_eq!(again, [Verdict::Serve]);
    }
}
