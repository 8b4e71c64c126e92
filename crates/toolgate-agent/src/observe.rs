//! Observations: what the tool system reports about the calls it runs.
//!
//! Recording never blocks or fails a call. Sinks are called inline and must return
//! quickly (a panicking sink is contained and counted); the broadcast stream has a
//! bounded buffer, and a subscriber that falls behind loses the oldest events, which are
//! counted in [`Observer::dropped`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::sync::broadcast;

use crate::ToolResult;

/// One event of the tool system.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Observation {
    /// A call ended (success or error), with its full result.
    ToolExecution {
        /// The thread the call ran in.
        thread_id: String,
        /// The trace id of its batch.
        trace_id: String,
        /// The result, as returned to the caller.
        result: ToolResult,
        /// How long the call took, in milliseconds.
        duration_ms: u64,
        /// Whether the output is for rendering (a display-mode tool).
        display: bool,
    },
    /// A call waits for a person.
    Suspended {
        /// The thread the call ran in.
        thread_id: String,
        /// The trace id of its batch.
        trace_id: String,
        /// The suspended result.
        result: ToolResult,
    },
    /// A suspended call was resumed and ended with this result.
    Resumed {
        /// The thread the call ran in.
        thread_id: String,
        /// `approve`, `reject` or `complete`.
        decision: String,
        /// The result after resuming.
        result: ToolResult,
        /// How long the resumed part took, in milliseconds.
        duration_ms: u64,
        /// Whether the output is for rendering (a display-mode tool).
        display: bool,
    },
}

/// Something that records observations: a log, a UI socket, a test probe.
///
/// `record` is called inline on the call's task: it must not block (hand slow work to a
/// channel or use [`Observer::subscribe`]). A panic in it is contained and counted.
pub trait ObservationSink: Send + Sync + 'static {
    /// Records one observation.
    fn record(&self, observation: &Observation);
}

/// Fans observations out to sinks and to a bounded broadcast stream.
pub struct Observer {
    sinks: Vec<Arc<dyn ObservationSink>>,
    sender: broadcast::Sender<Arc<Observation>>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("sinks", &self.sinks.len())
            .field("subscribers", &self.sender.receiver_count())
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl Observer {
    /// An observer whose stream buffers `capacity` events per subscriber (at least 1).
    pub fn new(capacity: usize, sinks: Vec<Arc<dyn ObservationSink>>) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        Observer {
            sinks,
            sender,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records an observation: every sink, then the stream. Never blocks, never fails.
    pub fn record(&self, observation: Observation) {
        for sink in &self.sinks {
            if catch_unwind(AssertUnwindSafe(|| sink.record(&observation))).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::error!("an observation sink panicked; the observation was dropped for it");
            }
        }
        // An error only means nobody is subscribed: nothing is lost that anyone awaits.
        let _ = self.sender.send(Arc::new(observation));
    }

    /// A new stream of the observations recorded from now on.
    pub fn subscribe(&self) -> ObservationStream {
        ObservationStream {
            receiver: self.sender.subscribe(),
            dropped: Arc::clone(&self.dropped),
        }
    }

    /// Observations lost so far: events a lagging subscriber missed, and sinks that
    /// panicked.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A subscriber's stream of observations.
#[derive(Debug)]
pub struct ObservationStream {
    receiver: broadcast::Receiver<Arc<Observation>>,
    dropped: Arc<AtomicU64>,
}

impl ObservationStream {
    /// The next observation, or `None` once the tool system is gone. Events this stream
    /// missed because it fell behind are skipped and counted in [`Observer::dropped`].
    pub async fn recv(&mut self) -> Option<Arc<Observation>> {
        loop {
            match self.receiver.recv().await {
                Ok(observation) => return Some(observation),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    self.dropped.fetch_add(n, Ordering::Relaxed);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next observation if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Observation>> {
        loop {
            match self.receiver.try_recv() {
                Ok(observation) => return Some(observation),
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    self.dropped.fetch_add(n, Ordering::Relaxed);
                }
                Err(_) => return None,
            }
        }
    }
}
