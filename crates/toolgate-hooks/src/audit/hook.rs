//! The [`Audit`] hook and its builder.

use std::sync::Arc;

use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

use super::record::RecordRules;
use super::{AuditRecord, AuditSink, TracingSink};
use crate::fingerprint::KeyedFingerprint;
use crate::redaction::Redactor;
use crate::secrets::Scrubber;

/// Writes one [`AuditRecord`] per invocation at `will_audit`, on every path (success,
/// error, suspension, cancellation). See the [module docs](super).
pub struct Audit {
    sinks: Vec<Arc<dyn AuditSink>>,
    rules: RecordRules,
    stage_timings: bool,
}

/// Builds an [`Audit`]. Defaults: the [`TracingSink`] when no sink is added; input and
/// output as fingerprints only, under a random key; no redaction of its own.
#[derive(Default)]
pub struct AuditBuilder {
    sinks: Vec<Arc<dyn AuditSink>>,
    include_values: bool,
    stage_timings: Option<bool>,
    fingerprints: Option<KeyedFingerprint>,
    redactor: Option<Redactor>,
    scrubber: Scrubber,
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

    /// The key input and output fingerprints are taken under (HMAC-SHA-256). Use one key
    /// per deployment, the same on every replica, kept with your other secrets. Without
    /// one, a random key is made when the hook is built: fingerprints then correlate only
    /// among the records of this hook.
    #[must_use]
    pub fn hash_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.fingerprints = Some(KeyedFingerprint::new(key));
        self
    }

    /// Applies `redactor` to what a record keeps of a call whose input or output did not
    /// go through a [`Redaction`](crate::redaction::Redaction) hook — a call refused before
    /// `will_redact_input` (forbidden, rate limited, invalid), or an output that failed
    /// before `will_redact_output` — and to every error message: the record then holds
    /// only redacted values, whichever stage the call ended at. What a blocking detector
    /// finds is replaced as in [`RedactionMode::Redact`](crate::redaction::RedactionMode::Redact).
    /// Pass the redaction hook's [`redactor`](crate::redaction::Redaction::redactor).
    #[must_use]
    pub fn redact_with(mut self, redactor: &Redactor) -> Self {
        self.redactor = Some(redactor.without_blocking());
        self
    }

    /// Scrubs known secret values (credentials the host holds) from every value and
    /// message a record keeps, before it is fingerprinted or written.
    #[must_use]
    pub fn scrub(mut self, scrubber: Scrubber) -> Self {
        self.scrubber = scrubber;
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
            rules: RecordRules {
                include_values: self.include_values,
                fingerprints: self.fingerprints.unwrap_or_else(KeyedFingerprint::random),
                redactor: self.redactor,
                scrubber: self.scrubber,
            },
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

    /// The record this hook writes for the invocation `ctx` describes (at `will_audit`).
    pub fn record(&self, ctx: &ToolInvokeContext) -> AuditRecord {
        AuditRecord::from_context(ctx, &self.rules)
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
        let record = self.record(ctx);
        for sink in &self.sinks {
            if let Err(e) = sink.write(&record).await {
                tracing::error!(sink = sink.name(), error = %e, "audit record lost");
            }
        }
        Ok(())
    }
}
