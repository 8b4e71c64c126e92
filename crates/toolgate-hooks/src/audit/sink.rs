//! Where audit records go: the [`AuditSink`] trait and the tracing, JSON-lines file,
//! channel and in-memory sinks.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::AuditRecord;
use super::chain::{ChainOptions, ChainWriter};
use super::claim::{Claim, claim};
use super::gap::Gap;
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
    /// Another process writes the file: its lock file is held.
    #[error(
        "audit file `{path}` is written by another process (it holds the lock file `{lock}`): \
         two processes must not write one audit file, so give each gateway (each replica) its \
         own `audit.path`"
    )]
    InUse {
        /// The audit file.
        path: String,
        /// The lock file beside it.
        lock: String,
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
///
/// While the file takes no writes (a full disk), up to 16 MiB of lines wait in memory and
/// are written, in order, when it has room. A record past that is dropped (its `write`
/// fails) before it is linked, and the next line the sink writes is a
/// [gap marker](super::Gap) declaring what was dropped, linked where the records would
/// have been — also written by a [`flush`](AuditSink::flush) and the close.
///
/// One process writes a file: opening one takes an advisory lock on `.NAME.lock`, a file
/// left beside it (rotation moves the audit file, not the lock; the name is outside the
/// `NAME.*` of the rotated files), held until the last sink of the process on that file is
/// dropped, and another process opening the same path is refused with
/// [`AuditError::InUse`]. Sinks of one process share the lock (a reload
/// opens the new sink while the old one finishes its calls). A device or a pipe is not
/// locked.
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

/// What gathers before a buffered sink writes it out.
const BATCH: usize = 64 * 1024;

/// The most a sink holds while its file takes no writes (a full disk): past it, a record
/// is dropped before it is linked into the chain, and a [gap marker](super::Gap) in its
/// place declares it when the sink has room again.
const MAX_WAITING: usize = 16 << 20;

/// What a record's line may take beyond its JSON: the chain's link (`seq`, `chain`,
/// `prev`), the newline and a checkpoint after it.
const LINK_ROOM: usize = 1024;

/// The file (or, in tests, a writer that fails as a full disk does), and the bytes not
/// written to it yet: whole lines, in order.
///
/// A write the disk cuts short leaves part of a line in the file; the rest waits here and
/// is written, before anything else, when the file takes writes again, so the line is
/// finished rather than the next one glued to its first half (a line no verifier could
/// read, nor anything after it). A buffered writer that sends a long line straight to the
/// file forgets the rest of it on an error; this never does.
struct Lines {
    file: Box<dyn Write + Send>,
    waiting: Vec<u8>,
}

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines")
            .field("waiting", &self.waiting.len())
            .finish()
    }
}

impl Lines {
    fn new(file: Box<dyn Write + Send>) -> Self {
        Lines {
            file,
            waiting: Vec::with_capacity(BATCH),
        }
    }

    /// Whether `bytes` more may wait: always when nothing waits, else when they stay
    /// within [`MAX_WAITING`], after writing out what the file takes now.
    ///
    /// # Errors
    ///
    /// The file's error when it took too little: the lines must not be kept.
    fn room(&mut self, bytes: usize) -> std::io::Result<()> {
        let fits =
            |lines: &Lines| lines.waiting.is_empty() || lines.waiting.len() + bytes <= MAX_WAITING;
        if fits(self) {
            return Ok(());
        }
        let flushed = self.flush();
        if fits(self) {
            return Ok(());
        }
        Err(flushed
            .err()
            .unwrap_or_else(|| std::io::ErrorKind::WriteZero.into()))
    }

    /// Takes whole lines, to be written by the next [`flush`](Self::flush). Ask for
    /// [`room`](Self::room) first: this keeps them whatever the bound.
    fn push(&mut self, lines: &[u8]) {
        self.waiting.extend_from_slice(lines);
    }

    /// Writes out what waits; what the file does not take stays, to be written first next
    /// time.
    fn flush(&mut self) -> std::io::Result<()> {
        while !self.waiting.is_empty() {
            match self.file.write(&self.waiting) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.waiting.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.file.flush()
    }
}

/// The file, and the chain its lines carry.
#[derive(Debug)]
struct Output {
    file: Lines,
    path: PathBuf,
    chain: Option<ChainWriter>,
    rotation: Option<Rotating>,
    tap: Option<Tap>,
    /// The records dropped since the last line the file was given, to be declared by a
    /// marker before the next.
    dropped: Option<Gap>,
    /// This process's claim on the file, held while the sink is open (none in tests that
    /// write to memory).
    claim: Option<Claim>,
}

impl Output {
    /// Links `record` (one JSON object) into the chain and writes it — after the marker
    /// of the records dropped before it, if any, so that the marker stands where they
    /// would have.
    ///
    /// # Errors
    ///
    /// [`Written::Lost`] when the record was dropped (the file took nothing while
    /// [`MAX_WAITING`] bytes waited): it was not linked, and counts in the next marker.
    /// [`Written::Waiting`] when it was kept but not written.
    fn record(&mut self, record: &[u8], through: bool) -> Result<(), Written> {
        let marker = self.dropped.as_ref().map(Gap::marker);
        let needed = record.len() + marker.as_ref().map_or(0, |m| m.len() + LINK_ROOM) + LINK_ROOM;
        if let Err(e) = self.file.room(needed) {
            match &mut self.dropped {
                Some(gap) => gap.add(record.len()),
                None => self.dropped = Some(Gap::begin(record.len(), &e)),
            }
            return Err(Written::Lost(e));
        }
        let mut lines = Vec::with_capacity(needed);
        if let Some(marker) = marker {
            self.declare(&marker, &mut lines);
        }
        self.link(record, &mut lines);
        self.write(&lines, through)
    }

    /// Appends to `out` the line of `record`, linked into the chain if there is one.
    fn link(&mut self, record: &[u8], out: &mut Vec<u8>) {
        match &mut self.chain {
            Some(chain) => chain.append(record, out),
            None => {
                out.extend_from_slice(record);
                out.push(b'\n');
            }
        }
    }

    /// Appends to `out` the gap marker `marker` of the records dropped, linked as a record
    /// is, and forgets them.
    fn declare(&mut self, marker: &[u8], out: &mut Vec<u8>) {
        if let Some(gap) = self.dropped.take() {
            tracing::warn!(
                target: "toolgate::audit",
                records = gap.records,
                bytes = gap.bytes,
                reason = ?gap.reason,
                "audit records were lost while the file took no writes; a gap marker in the chain declares them"
            );
        }
        self.link(marker, out);
    }

    /// What a flush or the close adds: the marker of records dropped, when there is
    /// room for it now, and the chain's checkpoint.
    fn closing_lines(&mut self) -> Vec<u8> {
        let mut lines = Vec::new();
        if let Some(marker) = self.dropped.as_ref().map(Gap::marker)
            && self.file.room(marker.len() + LINK_ROOM).is_ok()
        {
            self.declare(&marker, &mut lines);
        }
        if let Some(chain) = &mut self.chain {
            chain.checkpoint(&mut lines);
        }
        lines
    }

    /// Writes `line` (whole lines, given [`room`](Lines::room)) and rotates the file when
    /// it is due.
    ///
    /// # Errors
    ///
    /// [`Written::Waiting`] when the lines were kept but not written.
    fn write(&mut self, line: &[u8], through: bool) -> Result<(), Written> {
        self.file.push(line);
        self.tell(line);
        if self.rotation.as_mut().is_some_and(|r| r.wrote(line.len())) {
            let mut checkpoint = Vec::new();
            if let Some(chain) = &mut self.chain {
                chain.checkpoint(&mut checkpoint);
            }
            self.file.push(&checkpoint);
            self.tell(&checkpoint);
            self.file.flush().map_err(Written::Waiting)?;
            if let Some(rotation) = &mut self.rotation {
                // The other sinks of this process on the file (a reload's) wait: two
                // never move it aside at once. No other process writes it (the claim).
                let rotations = self.claim.as_ref().map(|c| c.rotations.clone());
                let _rotating = rotations
                    .as_ref()
                    .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()));
                let file = rotation.rotate().map_err(Written::Waiting)?;
                self.file = Lines::new(Box::new(file));
            }
            return Ok(());
        }
        if through || self.file.waiting.len() >= BATCH {
            self.file.flush().map_err(Written::Waiting)
        } else {
            Ok(())
        }
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

/// Why a line is not in the file.
#[derive(Debug)]
enum Written {
    /// It was not kept: the record is lost (a gap marker will say so).
    Lost(std::io::Error),
    /// It waits in memory, to be written when the file takes writes again.
    Waiting(std::io::Error),
}

impl Drop for Output {
    /// Writes out what waits, declares records dropped, and signs the chain's last
    /// records, so a clean close leaves nothing unsigned or undeclared.
    fn drop(&mut self) {
        let line = self.closing_lines();
        if let Some(gap) = &self.dropped {
            tracing::error!(
                records = gap.records,
                "audit records were lost and no gap marker could declare them: the file took no writes until the sink closed"
            );
        }
        self.file.push(&line);
        let written = self.file.flush();
        match written {
            Err(e) if line.is_empty() => {
                tracing::error!(error = %e, "audit records could not be written to their file");
            }
            Err(e) => {
                tracing::error!(error = %e, "the audit file's last checkpoint could not be written");
            }
            Ok(()) => self.tell(&line),
        }
    }
}

impl JsonLinesSink {
    /// Opens (or creates) `path` for appending; every record is written through.
    ///
    /// # Errors
    ///
    /// [`AuditError::Open`] when the file cannot be opened; [`AuditError::InUse`] when
    /// another process writes it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        Self::open_with(path.as_ref(), false)
    }

    /// Opens (or creates) `path` for appending, writing records in batches at least every
    /// `flush_every`. Call it inside a tokio runtime: the periodic flush is a task that
    /// ends when the sink is dropped.
    ///
    /// # Errors
    ///
    /// [`AuditError::Open`] when the file cannot be opened; [`AuditError::InUse`] when
    /// another process writes it.
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
        // Claimed before it is opened: another process's file is not even created.
        let claim = claim(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| AuditError::Open {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        let sink = Self::writing_to(Box::new(file), path, buffered);
        sink.file.lock().unwrap_or_else(|p| p.into_inner()).claim = Some(claim);
        Ok(sink)
    }

    fn writing_to(file: Box<dyn Write + Send>, path: &Path, buffered: bool) -> Self {
        JsonLinesSink {
            file: Arc::new(Mutex::new(Output {
                file: Lines::new(file),
                path: path.to_owned(),
                chain: None,
                rotation: None,
                tap: None,
                dropped: None,
                claim: None,
            })),
            buffered,
        }
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
        match output.record(&line, !self.buffered) {
            Ok(()) => Ok(()),
            Err(Written::Lost(e)) => Err(Self::fail(format!(
                "{e}; the file has taken nothing while {} MiB of records waited, so this one \
                 is dropped, and a gap marker in the chain will declare it when the file takes \
                 writes again",
                MAX_WAITING >> 20
            ))),
            Err(Written::Waiting(e)) => {
                // Kept, and written first when the file takes writes again.
                tracing::error!(error = %e, "audit records wait in memory: their file takes no writes");
                Ok(())
            }
        }
    }

    /// Writes out buffered records, the gap marker of records dropped since the last one
    /// written and, for a chained sink with a signing key, a checkpoint of the records not
    /// yet signed: what is durable is signed too (at shutdown, before anything that ships
    /// the lines stops).
    async fn flush(&self) -> Result<(), AuditError> {
        let mut output = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let lines = output.closing_lines();
        if !lines.is_empty() {
            output.write(&lines, false).map_err(|e| match e {
                Written::Lost(e) | Written::Waiting(e) => Self::fail(e.to_string()),
            })?;
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

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::audit::ChainOptions;
    use crate::audit::verify::{AuditFile, verify};

    /// A disk that takes `room` more bytes, cuts the write that passes them short, then
    /// refuses every write with "no space left" until it is given room again.
    #[derive(Clone, Default)]
    struct Disk(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Disk {
        fn room(&self, bytes: usize) {
            self.0.lock().unwrap().1 = bytes;
        }

        fn contents(&self) -> Vec<u8> {
            self.0.lock().unwrap().0.clone()
        }
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut disk = self.0.lock().unwrap();
            let (written, room) = &mut *disk;
            if *room == 0 {
                return Err(io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(*room);
            written.extend_from_slice(&buf[..n]);
            *room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn record(tool: &str, bytes: usize) -> AuditRecord {
        let mut record: AuditRecord = serde_json::from_value(serde_json::json!({
            "request_id": "r", "user_id": "ann", "tool": tool, "tool_version": "1",
            "started_at_ms": 0, "duration_us": 0, "outcome": "success", "status": 200,
            "attempts": 1, "decisions": [], "stages": [], "input_hash": "h",
        }))
        .unwrap();
        record.input = Some(serde_json::Value::String("x".repeat(bytes)));
        record
    }

    #[tokio::test]
    async fn a_line_the_full_disk_cut_short_is_finished_when_it_has_room_not_glued_to_the_next() {
        for (buffered, size) in [(false, 100_000), (false, 300), (true, 100_000)] {
            let disk = Disk::default();
            disk.room(150_000);
            let sink = JsonLinesSink::writing_to(
                Box::new(disk.clone()),
                Path::new("audit.jsonl"),
                buffered,
            )
            .chained(ChainOptions::default());
            // The disk fills in the middle of a record; more calls come while it is full.
            for i in 0..6 {
                let _ = sink.write(&record(&format!("full{i}"), size)).await;
                let _ = sink.flush().await;
            }
            disk.room(usize::MAX);
            for i in 0..3 {
                sink.write(&record(&format!("room{i}"), size))
                    .await
                    .unwrap();
            }
            sink.flush().await.unwrap();
            let file = AuditFile::new("audit.jsonl", disk.contents());
            let verified = verify(&[file], None);
            let verified =
                verified.unwrap_or_else(|e| panic!("buffered {buffered}, {size} bytes: {e}"));
            assert_eq!(
                verified.records, 9,
                "buffered {buffered}, {size} bytes: {verified}"
            );
        }
    }

    /// Fills a full disk's sink past what it holds: how many records it took and how
    /// many it dropped.
    async fn overflow(sink: &JsonLinesSink) -> (u64, u64) {
        let (mut kept, mut dropped) = (0, 0);
        for i in 0..20 {
            match sink.write(&record(&format!("full{i}"), 1 << 20)).await {
                Ok(()) => kept += 1,
                Err(_) => dropped += 1,
            }
        }
        (kept, dropped)
    }

    #[tokio::test]
    async fn records_dropped_past_the_bound_are_declared_by_a_marker_in_the_chain() {
        for (buffered, then_records) in [(false, 2), (true, 2), (false, 0)] {
            let case = format!("buffered {buffered}, {then_records} record(s) after");
            let disk = Disk::default();
            disk.room(1000);
            let sink =
                JsonLinesSink::writing_to(Box::new(disk.clone()), Path::new("a.jsonl"), buffered)
                    .chained(ChainOptions::default());
            let (kept, dropped) = overflow(&sink).await;
            assert!(
                kept >= 15 && dropped >= 1,
                "{case}: {kept} kept, {dropped} dropped"
            );
            disk.room(usize::MAX);
            for i in 0..then_records {
                sink.write(&record(&format!("room{i}"), 10)).await.unwrap();
            }
            // With no record after the gap, the flush (shutdown, reload) declares it.
            sink.flush().await.unwrap();
            let file = AuditFile::new("a.jsonl", disk.contents());
            let verified = verify(&[file], None).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(verified.gaps.len(), 1, "{case}: {verified}");
            let gap = &verified.gaps[0].gap;
            assert_eq!(
                (gap.records, gap.reason),
                (dropped, crate::audit::GapReason::DiskFull),
                "{case}"
            );
            assert!(gap.bytes > dropped << 20, "{case}: {gap:?}");
            assert_eq!(
                verified.gaps[0].seq,
                kept + 1,
                "{case}: the marker follows the last record kept"
            );
            assert_eq!(verified.records, kept + 1 + then_records, "{case}");
        }
    }

    #[tokio::test]
    async fn an_unchained_file_gets_the_marker_too() {
        let disk = Disk::default();
        disk.room(1000);
        let sink = JsonLinesSink::writing_to(Box::new(disk.clone()), Path::new("a"), false);
        let (_, dropped) = overflow(&sink).await;
        disk.room(usize::MAX);
        sink.write(&record("room", 10)).await.unwrap();
        let contents = String::from_utf8(disk.contents()).unwrap();
        let markers: Vec<&str> = contents
            .lines()
            .filter(|l| l.starts_with(r#"{"gap":"#))
            .collect();
        assert_eq!(markers.len(), 1);
        assert!(
            markers[0].contains(&format!(r#""records":{dropped},"#)),
            "{}",
            markers[0]
        );
    }
}
