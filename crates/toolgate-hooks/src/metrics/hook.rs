//! The [`Metrics`] hook and its builder.

use std::sync::Arc;

use ::metrics::SharedString;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::handles::{CacheResult, Handles, Names, Observation, Outcome};
use crate::cache::CACHE_METADATA_KEY;

/// Records calls, outcomes, latencies, cache lookups and rate-limit rejections at
/// `on_metrics`. See the [module docs](super).
///
/// Each series is registered with the recorder once, the first time a call records into
/// it; later calls update its handle directly. Clones share those handles.
#[derive(Clone, Debug)]
pub struct Metrics {
    names: Names,
    handles: Arc<Handles>,
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
            names: Names {
                calls: name("calls_total"),
                call_duration: name("call_duration_seconds"),
                hook_duration: name("hook_duration_seconds"),
                cache_lookups: name("cache_lookups_total"),
                rate_limited: name("rate_limited_total"),
            },
            handles: Arc::default(),
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

#[hook]
impl Hook for Metrics {
    fn name(&self) -> &str {
        "metrics"
    }

    fn on_metrics(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let error = ctx.error();
        let outcome = match error {
            None => Outcome::Success,
            Some(ToolError::Suspended { .. }) => Outcome::Suspended,
            Some(ToolError::InputRequired { .. }) => Outcome::InputRequired,
            Some(e) => Outcome::Error(e.code()),
        };
        let cache = ctx
            .metadata()
            .get(CACHE_METADATA_KEY)
            .and_then(|v| v.as_str())
            .map(|result| match result {
                "hit" => CacheResult::Hit,
                "coalesced" => CacheResult::Coalesced,
                _ => CacheResult::Miss,
            });
        let observation = Observation {
            outcome,
            elapsed: ctx.elapsed(),
            hook_timings: ctx.hook_timings(),
            cache,
            rate_limited: error.is_some_and(|e| e.status() == 429 || e.code() == "rate_limited"),
        };
        self.handles
            .record(&self.names, ctx.tool_name(), &observation);
        Ok(())
    }
}
