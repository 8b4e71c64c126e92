//! The [`Metrics`] hook and its builder.

use ::metrics::{Label, counter, histogram};
use toolgate_core::{Hook, HookFuture, Stage, StageSet, ToolError, ToolInvokeContext};

use crate::cache::CACHE_METADATA_KEY;

/// Records calls, outcomes, latencies, cache lookups and rate-limit rejections at
/// `on_metrics`. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct Metrics {
    calls: String,
    call_duration: String,
    hook_duration: String,
    cache_lookups: String,
    rate_limited: String,
}

/// Builds a [`Metrics`]. Default prefix: `toolgate`.
#[derive(Clone, Debug)]
pub struct MetricsBuilder {
    prefix: String,
}

impl Default for MetricsBuilder {
    fn default() -> Self {
        MetricsBuilder {
            prefix: "toolgate".to_owned(),
        }
    }
}

impl MetricsBuilder {
    /// The prefix of every metric name (`<prefix>_calls_total`…).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The hook.
    pub fn build(self) -> Metrics {
        let p = self.prefix;
        Metrics {
            calls: format!("{p}_calls_total"),
            call_duration: format!("{p}_call_duration_seconds"),
            hook_duration: format!("{p}_hook_duration_seconds"),
            cache_lookups: format!("{p}_cache_lookups_total"),
            rate_limited: format!("{p}_rate_limited_total"),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        MetricsBuilder::default().build()
    }
}

impl Metrics {
    /// The hook with the default prefix.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder.
    pub fn builder() -> MetricsBuilder {
        MetricsBuilder::default()
    }
}

impl Hook for Metrics {
    fn stages(&self) -> StageSet {
        StageSet::of(&[Stage::OnMetrics])
    }

    fn name(&self) -> &str {
        "metrics"
    }

    fn on_metrics<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let tool = ctx.tool_name().to_owned();
        let (outcome, code) = match ctx.error() {
            None => ("success", "ok".to_owned()),
            Some(ToolError::Suspended { .. }) => ("suspended", "suspended".to_owned()),
            Some(e) => ("error", e.code().to_owned()),
        };
        counter!(
            self.calls.clone(),
            vec![
                Label::new("tool", tool.clone()),
                Label::new("outcome", outcome),
                Label::new("code", code)
            ]
        )
        .increment(1);
        histogram!(
            self.call_duration.clone(),
            vec![
                Label::new("tool", tool.clone()),
                Label::new("outcome", outcome)
            ]
        )
        .record(ctx.elapsed().as_secs_f64());
        for timing in ctx.hook_timings() {
            histogram!(
                self.hook_duration.clone(),
                vec![
                    Label::new("tool", tool.clone()),
                    Label::new("stage", timing.stage.name()),
                    Label::new("hook", timing.hook.to_string()),
                ]
            )
            .record(timing.duration.as_secs_f64());
        }
        if let Some(result) = ctx
            .metadata()
            .get(CACHE_METADATA_KEY)
            .and_then(|v| v.as_str())
        {
            let result = match result {
                "hit" => "hit",
                "coalesced" => "coalesced",
                _ => "miss",
            };
            counter!(
                self.cache_lookups.clone(),
                vec![
                    Label::new("tool", tool.clone()),
                    Label::new("result", result)
                ]
            )
            .increment(1);
        }
        if ctx
            .error()
            .is_some_and(|e| e.status() == 429 || e.code() == "rate_limited")
        {
            counter!(self.rate_limited.clone(), vec![Label::new("tool", tool)]).increment(1);
        }
        HookFuture::ok()
    }
}
