//! The [`Audit`] hook and its builder.

use std::sync::Arc;

use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

use super::{AuditRecord, AuditSink, TracingSink};

/// Writes one [`AuditRecord`] per invocation at `will_audit`, on every path (success,
/// error, suspension, cancellation). See the [module docs](super).
pub struct Audit {
    sinks: Vec<Arc<dyn AuditSink>>,
    include_values: bool,
    stage_timings: bool,
}

/// Builds an [`Audit`]. Defaults: the [`TracingSink`] when no sink is added; input and
/// output as fingerprints only.
#[derive(Default)]
pub struct AuditBuilder {
    sinks: Vec<Arc<dyn AuditSink>>,
    include_values: bool,
    stage_timings: Option<bool>,
}

impl AuditBuilder {
    /// Adds a sink.
    #[must_use]
    pub fn sink(mut self, sink: impl AuditSink) -> Self {
        self.sinks.push(Arc::new(sink));
        self
    }

    /// Records the (redacted) input, output and error message themselves, not only their
    /// fingerprints. Off by default: audit stores tend to outlive the data they mention.
    #[must_use]
    pub fn include_values(mut self, on: bool) -> Self {
        self.include_values = on;
        self
    }

    /// Whether records carry the duration of every stage (default true). Recording them
    /// costs two clock reads per stage with hooks on every call of the pipeline; turn it
    /// off when metrics already give you durations.
    #[must_use]
    pub fn stage_timings(mut self, on: bool) -> Self {
        self.stage_timings = Some(on);
        self
    }

    /// The hook.
    pub fn build(mut self) -> Audit {
        if self.sinks.is_empty() {
            self.sinks.push(Arc::new(TracingSink));
        }
        Audit {
            sinks: self.sinks,
            include_values: self.include_values,
            stage_timings: self.stage_timings.unwrap_or(true),
        }
    }
}

impl Default for Audit {
    fn default() -> Self {
        AuditBuilder::default().build()
    }
}

impl Audit {
    /// The hook with its defaults (records to `tracing`).
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder.
    pub fn builder() -> AuditBuilder {
        AuditBuilder::default()
    }
}

impl Audit {
    /// Makes every record taken so far durable in every sink that buffers (see
    /// [`JsonLinesSink::open_buffered`](super::JsonLinesSink::open_buffered)). Call it
    /// before the process exits.
    ///
    /// # Errors
    ///
    /// The first sink error; the other sinks are still flushed.
    pub async fn flush(&self) -> Result<(), super::AuditError> {
        let mut first = Ok(());
        for sink in &self.sinks {
            if let Err(e) = sink.flush().await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}

#[hook]
impl Hook for Audit {
    fn name(&self) -> &str {
        "audit"
    }

    /// The record lists how long each stage took, so the pipeline records stage durations
    /// for the tools this hook serves.
    fn wants_stage_durations(&self) -> bool {
        self.stage_timings
    }

    async fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let record = AuditRecord::from_context(ctx, self.include_values);
        for sink in &self.sinks {
            if let Err(e) = sink.write(&record).await {
                tracing::error!(sink = sink.name(), error = %e, "audit record lost");
            }
        }
        Ok(())
    }
}
