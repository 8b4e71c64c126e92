//! Where audit records go: the [`AuditSink`] trait and the tracing, JSON-lines file,
//! channel and in-memory sinks.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::AuditRecord;

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
pub trait AuditSink: Send + Sync + 'static {
    /// A name for error messages.
    fn name(&self) -> &str;

    /// Takes one record.
    fn write<'a>(&'a self, record: &'a AuditRecord) -> BoxFuture<'a, Result<(), AuditError>>;

    /// Makes every record taken so far durable (for sinks that buffer). The default does
    /// nothing.
    fn flush(&self) -> BoxFuture<'_, Result<(), AuditError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Writes each record as one `tracing` event at INFO on target `toolgate::audit`, with
/// the record as a JSON field.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

impl AuditSink for TracingSink {
    fn name(&self) -> &str {
        "tracing"
    }

    fn write<'a>(&'a self, record: &'a AuditRecord) -> BoxFuture<'a, Result<(), AuditError>> {
        if !tracing::enabled!(target: "toolgate::audit", tracing::Level::INFO) {
            return Box::pin(std::future::ready(Ok(())));
        }
        let result = serde_json::to_string(record)
            .map(|json| tracing::info!(target: "toolgate::audit", record = %json, "audit"))
            .map_err(|e| AuditError::Write {
                sink: "tracing".to_owned(),
                reason: e.to_string(),
            });
        Box::pin(std::future::ready(result))
    }
}

/// Appends each record as one line of JSON to a file (opened in append mode; a line is
/// written whole under a lock, so lines from concurrent calls never interleave).
///
/// [`open`](Self::open) writes every record through to the file before the call goes on.
/// [`open_buffered`](Self::open_buffered) keeps records in memory and writes them in
/// batches — at least every `flush_every`, when 64 KiB have gathered, on
/// [`flush`](AuditSink::flush), and when the sink is dropped — which takes a system call
/// off every invocation at the price of losing at most `flush_every` of records if the
/// process is killed.
#[derive(Clone, Debug)]
pub struct JsonLinesSink {
    file: Arc<Mutex<BufWriter<File>>>,
    buffered: bool,
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
                    let flushed = file.lock().unwrap_or_else(|p| p.into_inner()).flush();
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
            file: Arc::new(Mutex::new(BufWriter::with_capacity(64 * 1024, file))),
            buffered,
        })
    }

    fn fail(reason: String) -> AuditError {
        AuditError::Write {
            sink: "json_lines".to_owned(),
            reason,
        }
    }
}

impl AuditSink for JsonLinesSink {
    fn name(&self) -> &str {
        "json_lines"
    }

    fn write<'a>(&'a self, record: &'a AuditRecord) -> BoxFuture<'a, Result<(), AuditError>> {
        // A record is a few hundred bytes: room for it up front, not grown by doubling.
        let mut line = Vec::with_capacity(512);
        let result = serde_json::to_writer(&mut line, record)
            .map_err(|e| Self::fail(e.to_string()))
            .and_then(|()| {
                line.push(b'\n');
                let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
                file.write_all(&line)
                    .and_then(|()| if self.buffered { Ok(()) } else { file.flush() })
                    .map_err(|e| Self::fail(e.to_string()))
            });
        Box::pin(std::future::ready(result))
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), AuditError>> {
        let result = self
            .file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush()
            .map_err(|e| Self::fail(e.to_string()));
        Box::pin(std::future::ready(result))
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

impl AuditSink for ChannelSink {
    fn name(&self) -> &str {
        "channel"
    }

    fn write<'a>(&'a self, record: &'a AuditRecord) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            self.sender
                .send(record.clone())
                .await
                .map_err(|_| AuditError::Write {
                    sink: "channel".to_owned(),
                    reason: "the receiver was dropped".to_owned(),
                })
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

impl AuditSink for MemorySink {
    fn name(&self) -> &str {
        "memory"
    }

    fn write<'a>(&'a self, record: &'a AuditRecord) -> BoxFuture<'a, Result<(), AuditError>> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
        Box::pin(std::future::ready(Ok(())))
    }
}
