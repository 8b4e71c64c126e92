//! Where audit records go: the [`AuditSink`] trait and the tracing, JSON-lines file,
//! channel and in-memory sinks.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::AuditRecord;
use super::chain::{ChainOptions, ChainWriter};
use super::rotation::{Rotating, Rotation};

/// An audit sink failed to take a record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The sink could not write the record.
    #[error("audit sink `{sink}` could not write the record ({reason}): check its destination")]
    Write {
        /// The sink.
        sink: String,
        /// What went wrong.
        reason: String,
    },
    /// The file could not be opened.
    #[error(
        "audit file `{path}` could not be opened for appending ({reason}): check the path and permissions"
    )]
    Open {
        /// The path.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

/// Where audit records go. Object-safe and async, so a remote store can implement it.
///
/// Write `write` (and `flush`, if the sink buffers) as an `async fn` under
/// [`#[async_trait]`](crate::async_trait), re-exported by this crate so that an
/// implementer needs no dependency of their own; `name` stays a plain `fn`.
///
/// # Examples
///
/// Records as lines of JSON for a log shipper, behind an async lock the way a client
/// connection would be:
///
/// ```
/// use std::sync::Arc;
///
/// use serde_json::json;
/// use tokio::sync::Mutex;
/// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::audit::{Audit, AuditError, AuditRecord, AuditSink};
///
/// #[derive(Clone, Default)]
/// struct Shipper(Arc<Mutex<Vec<String>>>);
///
/// #[async_trait]
/// impl AuditSink for Shipper {
///     fn name(&self) -> &str {
///         "shipper"
///     }
///
///     async fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
///         let line = serde_json::to_string(record).map_err(|e| AuditError::Write {
///             sink: "shipper".to_owned(),
///             reason: e.to_string(),
///         })?;
///         self.0.lock().await.push(line);
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shipper = Shipper::default();
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .hook(Audit::builder().sink(shipper.clone()).build())
///     .build()?;
///
/// pipeline.invoke("ping", json!(null), InvokeOptions::new().user(User::new("ann"))).await?;
/// let lines = shipper.0.lock().await;
/// assert_eq!(lines.len(), 1);
/// assert!(lines[0].contains(r#""tool":"ping""#));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait AuditSink: Send + Sync + 'static {
    /// A name for error messages.
    fn name(&self) -> &str;

    /// Takes one record.
    async fn write(&self, record: &AuditRecord) -> Result<(), AuditError>;

    /// Makes every record taken so far durable (for sinks that buffer). The default does
    /// nothing.
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

/// Writes each record as one `tracing` event at INFO on target `toolgate::audit`, with
/// the record as a JSON field.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

#[async_trait]
impl AuditSink for TracingSink {
    fn name(&self) -> &str {
        "tracing"
    }

    async fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if !tracing::enabled!(target: "toolgate::audit", tracing::Level::INFO) {
            return Ok(());
        }
        serde_json::to_string(record)
            .map(|json| tracing::info!(target: "toolgate::audit", record = %json, "audit"))
            .map_err(|e| AuditError::Write {
                sink: "tracing".to_owned(),
                reason: e.to_string(),
            })
    }
}

/// Appends each record as one line of JSON to a file (opened in append mode; a line is
/// written whole under a lock, so lines from concurrent calls never interleave).
///
/// [`open`](Self::open) writes every record through to the file before the call goes on.
/// [`open_buffered`](Self::open_buffered) keeps records in memory and writes them in
/// batches — at least every `flush_every`, when 64 KiB have gathered, on
/// [`flush`](AuditSink::flush) (which also signs a chained sink's last records), and when
/// the sink is dropped — which takes a system call
/// off every invocation at the price of losing at most `flush_every` of records if the
/// process is killed.
///
/// [`chained`](Self::chained) links the lines into a hash chain with signed checkpoints
/// (see [`verify`](super::verify)).
#[derive(Clone, Debug)]
pub struct JsonLinesSink {
    file: Arc<Mutex<Output>>,
    buffered: bool,
}

/// A function that takes one line.
type LineFn = dyn Fn(&[u8]) + Send + Sync;

/// What [`JsonLinesSink::tapped`] hands every line to.
#[derive(Clone)]
struct Tap(Arc<LineFn>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

/// The file, and the chain its lines carry.
#[derive(Debug)]
struct Output {
    file: BufWriter<File>,
    path: PathBuf,
    chain: Option<ChainWriter>,
    rotation: Option<Rotating>,
    tap: Option<Tap>,
}

impl Output {
    /// Writes `line` (whole lines) and rotates the file when it is due.
    fn write(&mut self, line: &[u8], through: bool) -> std::io::Result<()> {
        self.file.write_all(line)?;
        self.tell(line);
        if self.rotation.as_mut().is_some_and(|r| r.wrote(line.len())) {
            let mut checkpoint = Vec::new();
            if let Some(chain) = &mut self.chain {
                chain.checkpoint(&mut checkpoint);
            }
            self.file.write_all(&checkpoint)?;
            self.tell(&checkpoint);
            self.file.flush()?;
            if let Some(rotation) = &mut self.rotation {
                self.file = BufWriter::with_capacity(64 * 1024, rotation.rotate()?);
            }
            return Ok(());
        }
        if through { self.file.flush() } else { Ok(()) }
    }

    /// Hands each of `lines` (without its newline) to the tap, if there is one.
    fn tell(&self, lines: &[u8]) {
        if let Some(tap) = &self.tap {
            for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                (tap.0)(line);
            }
        }
    }
}

impl Drop for Output {
    /// Signs the chain's last records, so a clean close leaves nothing unsigned.
    fn drop(&mut self) {
        if let Some(chain) = &mut self.chain {
            let mut line = Vec::new();
            chain.checkpoint(&mut line);
            if let Err(e) = self.file.write_all(&line).and_then(|()| self.file.flush()) {
                tracing::error!(error = %e, "the audit file's last checkpoint could not be written");
            } else {
                self.tell(&line);
            }
        }
    }
}

impl JsonLinesSink {
    /// Opens (or creates) `path` for appending; every record is written through.
    ///
    /// # Errors
    ///
    /// [`AuditError::Open`] when the file cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        Self::open_with(path.as_ref(), false)
    }

    /// Opens (or creates) `path` for appending, writing records in batches at least every
    /// `flush_every`. Call it inside a tokio runtime: the periodic flush is a task that
    /// ends when the sink is dropped.
    ///
    /// # Errors
    ///
    /// [`AuditError::Open`] when the file cannot be opened.
    pub fn open_buffered(
        path: impl AsRef<Path>,
        flush_every: Duration,
    ) -> Result<Self, AuditError> {
        let sink = Self::open_with(path.as_ref(), true)?;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&sink.file);
            runtime.spawn(async move {
                let mut ticks = tokio::time::interval(flush_every.max(Duration::from_millis(1)));
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let Some(file) = weak.upgrade() else { return };
                    let flushed = file.lock().unwrap_or_else(|p| p.into_inner()).file.flush();
                    if let Err(e) = flushed {
                        tracing::error!(error = %e, "audit records could not be written to their file");
                    }
                }
            });
        }
        Ok(sink)
    }

    fn open_with(path: &Path, buffered: bool) -> Result<Self, AuditError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| AuditError::Open {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        Ok(JsonLinesSink {
            file: Arc::new(Mutex::new(Output {
                file: BufWriter::with_capacity(64 * 1024, file),
                path: path.to_owned(),
                chain: None,
                rotation: None,
                tap: None,
            })),
            buffered,
        })
    }

    /// Links every line from now on into a new hash chain (`seq`, `chain`, `prev`), with
    /// checkpoints signed as `options` says.
    pub fn chained(self, options: ChainOptions) -> Self {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).chain = Some(ChainWriter::new(options));
        self
    }

    /// Starts a new file when this one is full or old, as `rotation` says (see
    /// [`Rotation`]); a chain goes on across the files.
    pub fn rotated(self, rotation: Rotation) -> Self {
        let mut output = self.file.lock().unwrap_or_else(|p| p.into_inner());
        output.rotation = Some(Rotating::new(&output.path, rotation));
        drop(output);
        self
    }

    /// Also hands every line the sink writes to `tap`, without its newline, in file
    /// order, as soon as it is written (into the buffer, for a buffered sink): each
    /// record as linked into the chain (`seq`, `chain` and `prev` first), each
    /// checkpoint, the one written when the sink closes included. The bytes are those of
    /// the file, so the SHA-256 of a record's line is the next record's `prev`. For
    /// shipping the trail elsewhere as it is written (an OTLP log exporter).
    ///
    /// The tap runs under the sink's lock, on the calling task: it must not block or
    /// wait (hand the line to a bounded queue, as a batching exporter does).
    pub fn tapped(self, tap: impl Fn(&[u8]) + Send + Sync + 'static) -> Self {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).tap = Some(Tap(Arc::new(tap)));
        self
    }

    fn fail(reason: String) -> AuditError {
        AuditError::Write {
            sink: "json_lines".to_owned(),
            reason,
        }
    }
}

#[async_trait]
impl AuditSink for JsonLinesSink {
    fn name(&self) -> &str {
        "json_lines"
    }

    async fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        // A record is a few hundred bytes: room for it up front, not grown by doubling.
        let mut line = Vec::with_capacity(512);
        serde_json::to_writer(&mut line, record).map_err(|e| Self::fail(e.to_string()))?;
        let mut output = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // The chain's link is made under the lock: lines reach the file in seq order.
        let line = match &mut output.chain {
            Some(chain) => {
                let mut linked = Vec::with_capacity(line.len() + 160);
                chain.append(&line, &mut linked);
                linked
            }
            None => {
                line.push(b'\n');
                line
            }
        };
        output
            .write(&line, !self.buffered)
            .map_err(|e| Self::fail(e.to_string()))
    }

    /// Writes out buffered records and, for a chained sink with a signing key, a
    /// checkpoint of the records not yet signed: what is durable is signed too (at
    /// shutdown, before anything that ships the lines stops).
    async fn flush(&self) -> Result<(), AuditError> {
        let mut output = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut checkpoint = Vec::new();
        if let Some(chain) = &mut output.chain {
            chain.checkpoint(&mut checkpoint);
        }
        if !checkpoint.is_empty() {
            output
                .write(&checkpoint, false)
                .map_err(|e| Self::fail(e.to_string()))?;
        }
        output.file.flush().map_err(|e| Self::fail(e.to_string()))
    }
}

/// Sends each record into a tokio channel. A full channel makes the record phase wait
/// (backpressure rather than lost records); a closed channel is an error.
#[derive(Clone, Debug)]
pub struct ChannelSink {
    sender: mpsc::Sender<AuditRecord>,
}

impl ChannelSink {
    /// A sink into `sender`.
    pub fn new(sender: mpsc::Sender<AuditRecord>) -> Self {
        ChannelSink { sender }
    }
}

#[async_trait]
impl AuditSink for ChannelSink {
    fn name(&self) -> &str {
        "channel"
    }

    async fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.sender
            .send(record.clone())
            .await
            .map_err(|_| AuditError::Write {
                sink: "channel".to_owned(),
                reason: "the receiver was dropped".to_owned(),
            })
    }
}

/// Keeps records in memory (tests, or a small recent-calls view).
#[derive(Clone, Debug, Default)]
pub struct MemorySink {
    records: Arc<Mutex<Vec<AuditRecord>>>,
}

impl MemorySink {
    /// An empty sink. Clones share the same records.
    pub fn new() -> Self {
        Self::default()
    }

    /// The records so far.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait]
impl AuditSink for MemorySink {
    fn name(&self) -> &str {
        "memory"
    }

    async fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
        Ok(())
    }
}
