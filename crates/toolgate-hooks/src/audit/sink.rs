//! Where audit records go: the [`AuditSink`] trait and the tracing, JSON-lines file,
//! channel and in-memory sinks.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

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
/// written with one `write` call, so lines from concurrent calls never interleave).
#[derive(Clone, Debug)]
pub struct JsonLinesSink {
    file: Arc<Mutex<File>>,
}

impl JsonLinesSink {
    /// Opens (or creates) `path` for appending.
    ///
    /// # Errors
    ///
    /// [`AuditError::Open`] when the file cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| AuditError::Open {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        Ok(JsonLinesSink {
            file: Arc::new(Mutex::new(file)),
        })
    }
}

impl AuditSink for JsonLinesSink {
    fn name(&self) -> &str {
        "json_lines"
    }

    fn write<'a>(&'a self, record: &'a AuditRecord) -> BoxFuture<'a, Result<(), AuditError>> {
        let fail = |reason: String| AuditError::Write {
            sink: "json_lines".to_owned(),
            reason,
        };
        let result = serde_json::to_vec(record)
            .map_err(|e| fail(e.to_string()))
            .and_then(|mut line| {
                line.push(b'\n');
                let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
                file.write_all(&line)
                    .and_then(|()| file.flush())
                    .map_err(|e| fail(e.to_string()))
            });
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
