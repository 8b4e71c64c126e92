//! The Prometheus recorder behind `/metrics`, and its upkeep.
//!
//! The recorder keeps every histogram sample in the histogram's own buffer until something
//! drains it into the summaries `/metrics` renders. Rendering drains it; so does the
//! recorder's upkeep. The exporter runs the upkeep only when it also serves the scrape
//! endpoint itself, which the gateway does not (`/metrics` is one of its routes), so the
//! gateway runs it: without it, memory grows with every call until someone scrapes.

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::task::JoinHandle;

/// How often histogram samples are drained into their summaries. Between two runs the
/// samples of this long are kept (8 bytes each; two histograms per call).
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Installs the Prometheus recorder as the process's metrics recorder, or answers `None`
/// (and logs why) when another recorder is installed already.
pub fn install() -> Option<PrometheusHandle> {
    match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!(error = %e, "metrics recorder not installed; /metrics is off");
            None
        }
    }
}

/// Runs the recorder's upkeep every `interval` until dropped.
#[derive(Debug)]
pub struct Upkeep {
    task: JoinHandle<()>,
}

impl Upkeep {
    /// Starts the upkeep of `handle` on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(handle: PrometheusHandle, interval: Duration) -> Upkeep {
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                handle.run_upkeep();
            }
        });
        Upkeep { task }
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.task.abort();
    }
}
