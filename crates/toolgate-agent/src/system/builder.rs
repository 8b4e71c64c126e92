//! [`ToolSystemBuilder`]: modes, stores, sinks, limits, statistics.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::PipelineBuilder;
use toolgate_core::suspension::SuspensionStore;

use super::trace::TraceMetadata;
use super::{Concurrency, Inner, ToolSystem};
use crate::modes::BlockingHook;
use crate::{
    DEFAULT_RESULT_MAX_CHARS, ExecutionMode, ObservationSink, Observer, StateManager, UsageStats,
};

/// Why a tool system could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SystemBuildError {
    /// A mode was set for a tool the pipeline does not have.
    #[error(
        "an execution mode was set for tool `{tool}`, which is not registered: register the tool first or fix the name"
    )]
    UnknownTool {
        /// The name used.
        tool: String,
    },
    /// The pipeline could not be built.
    #[error(transparent)]
    Pipeline(#[from] toolgate_core::error::BuildError),
}

/// Builds a [`ToolSystem`] over a [`PipelineBuilder`] that holds the tools and hooks.
pub struct ToolSystemBuilder {
    pipeline: PipelineBuilder,
    state: Arc<dyn StateManager>,
    modes: HashMap<String, ExecutionMode>,
    sinks: Vec<Arc<dyn ObservationSink>>,
    observation_buffer: usize,
    result_max_chars: usize,
    concurrency: Concurrency,
    timeout: Option<Duration>,
    stats: Option<Arc<UsageStats>>,
}

impl ToolSystemBuilder {
    pub(super) fn new(pipeline: PipelineBuilder, state: Arc<dyn StateManager>) -> Self {
        ToolSystemBuilder {
            pipeline,
            state,
            modes: HashMap::new(),
            sinks: Vec::new(),
            observation_buffer: 256,
            result_max_chars: DEFAULT_RESULT_MAX_CHARS,
            concurrency: Concurrency::Parallel(4),
            timeout: None,
            stats: None,
        }
    }

    /// Sets a tool's execution mode (tools are [`ExecutionMode::Functional`] unless set).
    pub fn mode(mut self, tool: impl Into<String>, mode: ExecutionMode) -> Self {
        self.modes.insert(tool.into(), mode);
        self
    }

    /// Where suspended calls wait (in memory unless set); use a
    /// [`JsonFileSuspensionStore`](crate::JsonFileSuspensionStore) to survive restarts.
    pub fn suspension_store(mut self, store: Arc<dyn SuspensionStore>) -> Self {
        self.pipeline = self.pipeline.suspension_store(store);
        self
    }

    /// Adds an observation sink.
    pub fn sink(mut self, sink: Arc<dyn ObservationSink>) -> Self {
        self.sinks.push(sink);
        self
    }

    /// How many observations each stream subscriber may fall behind by before it loses
    /// the oldest (256 unless set).
    pub fn observation_buffer(mut self, capacity: usize) -> Self {
        self.observation_buffer = capacity;
        self
    }

    /// The result size limit of this instance, in characters (60,000 unless set).
    pub fn result_max_chars(mut self, max_chars: usize) -> Self {
        self.result_max_chars = max_chars;
        self
    }

    /// How batches run unless their options say otherwise (`Parallel(4)` unless set).
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How long each call may take unless its batch says otherwise (no limit unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Records usage statistics here.
    pub fn stats(mut self, stats: Arc<UsageStats>) -> Self {
        self.stats = Some(stats);
        self
    }

    /// Installs the blocking-mode hook and builds the pipeline and the system.
    ///
    /// # Errors
    ///
    /// [`SystemBuildError::UnknownTool`] for a mode set on an unregistered tool;
    /// [`SystemBuildError::Pipeline`] when the pipeline's wiring is wrong.
    pub fn build(self) -> Result<ToolSystem, SystemBuildError> {
        let blocking: HashSet<String> = self
            .modes
            .iter()
            .filter(|(_, mode)| **mode == ExecutionMode::Blocking)
            .map(|(tool, _)| tool.clone())
            .collect();
        let mut builder = self.pipeline.hook(TraceMetadata);
        if !blocking.is_empty() {
            builder = builder.hook(BlockingHook::new(blocking));
        }
        let pipeline = builder.build()?;
        if let Some(tool) = self
            .modes
            .keys()
            .find(|t| pipeline.registry().get(t).is_none())
        {
            return Err(SystemBuildError::UnknownTool { tool: tool.clone() });
        }
        Ok(ToolSystem {
            inner: Arc::new(Inner {
                pipeline,
                state: self.state,
                modes: self.modes,
                observer: Observer::new(self.observation_buffer, self.sinks),
                result_max_chars: self.result_max_chars,
                concurrency: self.concurrency,
                timeout: self.timeout,
                stats: self.stats,
            }),
        })
    }
}
