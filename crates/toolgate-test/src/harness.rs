//! [`TestPipeline`]: a pipeline builder for tests, with a shared [`StageLog`].

use std::fmt;

use toolgate_core::error::BuildError;
use toolgate_core::hook::IntoHook;
use toolgate_core::{Pipeline, PipelineBuilder, Tool};

use crate::{RecordingHook, ScriptedTool, StageLog};

/// Builds a [`Pipeline`] for a test in one expression. Wiring mistakes (a tool name taken
/// twice, a hook for a tool that is not there) panic at [`build`](Self::build) with the
/// builder's message instead of returning errors, because in a test they are bugs of the
/// test; [`try_build`](Self::try_build) returns them.
///
/// It owns a [`StageLog`]; [`recording`](Self::recording) adds a [`RecordingHook`] that
/// records into it.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::prelude::*;
/// use toolgate_test::{assert_entries, ScriptedTool, TestPipeline};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let quota = StageSet::of(&[Stage::WillAcquireQuota, Stage::DidReleaseQuota]);
/// let test = TestPipeline::new()
///     .tool(ScriptedTool::returning("t", json!(1)))
///     .recording("outer", |h| h.with_priority(10).with_stages(quota))
///     .recording("inner", |h| h.with_stages(quota));
/// let log = test.log();
/// let pipeline = test.build();
///
/// pipeline.invoke("t", json!({}), InvokeOptions::new()).await.unwrap();
/// assert_entries(&log, &[
///     (Stage::WillAcquireQuota, "outer"),
///     (Stage::WillAcquireQuota, "inner"),
///     (Stage::DidReleaseQuota, "inner"),
///     (Stage::DidReleaseQuota, "outer"),
/// ]);
/// # }
/// ```
pub struct TestPipeline {
    builder: PipelineBuilder,
    log: StageLog,
}

impl Default for TestPipeline {
    fn default() -> Self {
        Self::new()
    }
}

impl TestPipeline {
    /// No tools, no hooks, an empty log.
    pub fn new() -> Self {
        TestPipeline {
            builder: Pipeline::builder(),
            log: StageLog::new(),
        }
    }

    /// The log [`recording`](Self::recording) hooks write to.
    pub fn log(&self) -> StageLog {
        self.log.clone()
    }

    /// Registers a scripted tool (keep a clone to read its counters). A name the registry
    /// refuses fails [`build`](Self::build).
    #[must_use]
    pub fn tool(mut self, tool: ScriptedTool) -> Self {
        self.builder = self.builder.tool(tool.into_erased());
        self
    }

    /// Registers a typed tool. A name the registry refuses fails [`build`](Self::build).
    #[must_use]
    pub fn typed_tool<T: Tool>(mut self, tool: T) -> Self {
        self.builder = self.builder.tool(tool);
        self
    }

    /// Registers a hook, as [`PipelineBuilder::hook`] does: any hook, for every tool with
    /// default options, or a [`HookRegistration`](toolgate_core::hook::HookRegistration) that names the tool, the failure mode,
    /// the priority, or an instance shared with other pipelines.
    #[must_use]
    pub fn hook(mut self, hook: impl IntoHook) -> Self {
        self.builder = self.builder.hook(hook);
        self
    }

    /// Adds a [`RecordingHook`] labelled `label` that records into this pipeline's log,
    /// configured by `configure` (pass `|h| h` to keep the defaults).
    #[must_use]
    pub fn recording(
        mut self,
        label: &str,
        configure: impl FnOnce(RecordingHook) -> RecordingHook,
    ) -> Self {
        let hook = configure(RecordingHook::new(label, &self.log));
        self.builder = self.builder.hook(hook);
        self
    }

    /// Anything else the builder offers (global providers, session bounds, input
    /// limits…): `configure` takes the builder and gives it back.
    #[must_use]
    pub fn configure(mut self, configure: impl FnOnce(PipelineBuilder) -> PipelineBuilder) -> Self {
        self.builder = configure(self.builder);
        self
    }

    /// Builds the pipeline.
    ///
    /// # Panics
    ///
    /// With the builder's message when the wiring is wrong.
    pub fn build(self) -> Pipeline {
        self.try_build()
            .unwrap_or_else(|e| panic!("TestPipeline::build: {e}"))
    }

    /// Builds the pipeline, returning the builder's error (to test the error itself).
    ///
    /// # Errors
    ///
    /// As [`PipelineBuilder::build`].
    pub fn try_build(self) -> Result<Pipeline, BuildError> {
        self.builder.build()
    }
}

impl fmt::Debug for TestPipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestPipeline")
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}
