//! The [`Metrics`] hook and its builder.

use std::sync::Arc;

use ::metrics::{Label, SharedString, counter, histogram};
use toolgate_core::{Hook, HookFuture, Stage, StageSet, ToolError, ToolInvokeContext};

use crate::cache::CACHE_METADATA_KEY;

/// Records calls, outcomes, latencies, cache lookups and rate-limit rejections at
/// `on_metrics`. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct Metrics {
    calls: SharedString,
    call_duration: SharedString,
    hook_duration: SharedString,
    cache_lookups: SharedString,
    rate_limited: SharedString,
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
        // Shared names: handing one to the recorder on every call is a reference count,
        // not a copy of the string.
        let name = |suffix: &str| {
            SharedString::from_shared(Arc::from(format!("{}_{suffix}", self.prefix)))
        };
        Metrics {
            calls: name("calls_total"),
            call_duration: name("call_duration_seconds"),
            hook_duration: name("hook_duration_seconds"),
            cache_lookups: name("cache_lookups_total"),
            rate_limited: name("rate_limited_total"),
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
            None => ("success", Label::from_static_parts("code", "ok")),
            Some(ToolError::Suspended { .. }) => {
                ("suspended", Label::from_static_parts("code", "suspended"))
            }
            Some(e) => ("error", Label::new("code", e.code().to_owned())),
        };
        counter!(
            self.calls.clone(),
            vec![
                Label::new("tool", tool.clone()),
                Label::from_static_parts("outcome", outcome),
                code
            ]
        )
        .increment(1);
        histogram!(
            self.call_duration.clone(),
            vec![
                Label::new("tool", tool.clone()),
                Label::from_static_parts("outcome", outcome)
            ]
        )
        .record(ctx.elapsed().as_secs_f64());
        for timing in ctx.hook_timings() {
            histogram!(
                self.hook_duration.clone(),
                vec![
                    Label::new("tool", tool.clone()),
                    Label::from_static_parts("stage", timing.stage.name()),
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
                    Label::from_static_parts("result", result)
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
