//! [`TestPipeline`]: a pipeline builder for tests, with a shared [`StageLog`].

use std::fmt;
use std::sync::Arc;

use toolgate_core::{BuildError, Hook, HookOptions, Pipeline, PipelineBuilder, Tool};

use crate::{RecordingHook, ScriptedTool, StageLog};

/// Builds a [`Pipeline`] for a test in one expression. Wiring mistakes panic with the
/// builder's message instead of returning errors, because in a test they are bugs of the
/// test.
///
/// It owns a [`StageLog`]; [`recording`](Self::recording) adds a [`RecordingHook`] that
/// records into it.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{InvokeOptions, Stage, StageSet};
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

    /// Registers a scripted tool (keep a clone to read its counters).
    ///
    /// # Panics
    ///
    /// When the registry refuses the tool.
    #[must_use]
    pub fn tool(mut self, tool: ScriptedTool) -> Self {
        if let Err(e) = self.builder.erased_tool(tool.into_erased()) {
            panic!("TestPipeline::tool: {e}");
        }
        self
    }

    /// Registers a typed tool.
    ///
    /// # Panics
    ///
    /// When the registry refuses the tool.
    #[must_use]
    pub fn typed_tool<T: Tool>(mut self, tool: T) -> Self {
        if let Err(e) = self.builder.tool(tool) {
            panic!("TestPipeline::typed_tool: {e}");
        }
        self
    }

    /// Adds a hook for every tool.
    #[must_use]
    pub fn hook(mut self, hook: impl Hook) -> Self {
        self.builder.hook(hook);
        self
    }

    /// Adds a hook for every tool, with options.
    #[must_use]
    pub fn hook_with(mut self, hook: impl Hook, options: HookOptions) -> Self {
        self.builder.hook_with(hook, options);
        self
    }

    /// Adds a hook for one tool.
    #[must_use]
    pub fn tool_hook(mut self, tool: &str, hook: impl Hook) -> Self {
        self.builder.tool_hook(tool, hook);
        self
    }

    /// Adds a shared hook instance for every tool.
    #[must_use]
    pub fn shared_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.builder.shared_hook(hook, HookOptions::default(), None);
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
        self.builder.hook(hook);
        self
    }

    /// Anything else the builder offers (global providers, session bounds, input
    /// limits…).
    #[must_use]
    pub fn configure(mut self, configure: impl FnOnce(&mut PipelineBuilder)) -> Self {
        configure(&mut self.builder);
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
    pub fn try_build(mut self) -> Result<Pipeline, BuildError> {
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
