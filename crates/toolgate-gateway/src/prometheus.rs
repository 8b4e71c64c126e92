//! The Prometheus recorder behind `/metrics`, and its upkeep.
//!
//! The recorder keeps every histogram sample in the histogram's own buffer until something
//! drains it into the summaries `/metrics` renders. Rendering drains it; so does the
//! recorder's upkeep. The exporter runs the upkeep only when it also serves the scrape
//! endpoint itself, which the gateway does not (`/metrics` is one of its routes), so the
//! gateway runs it: without it, memory grows with every call until someone scrapes.
//!
//! The recorder also removes the counters and histograms not updated for
//! `server.metrics_idle_timeout`, so that the series of tools that are gone do not pile up
//! across reloads. It removes them only while rendering, so the upkeep renders (and drops
//! the text) every half of that time; and since a metric handle kept past its series'
//! removal would update a value nobody sees, every kept handle in the process is renewed
//! right after ([`renew_handles`]).

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use toolgate_hooks::metrics::renew_handles;

/// How often histogram samples are drained into their summaries. Between two runs the
/// samples of this long are kept (8 bytes each; two histograms per call).
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Installs the Prometheus recorder as the process's metrics recorder, removing the
/// counters and histograms not updated for `idle_timeout` when it renders, or answers
/// `None` (and logs why) when another recorder is installed already.
pub fn install(idle_timeout: Duration) -> Option<PrometheusHandle> {
    let installed = PrometheusBuilder::new()
        .idle_timeout(
            MetricKindMask::COUNTER | MetricKindMask::HISTOGRAM,
            Some(idle_timeout),
        )
        .install_recorder();
    match installed {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!(error = %e, "metrics recorder not installed; /metrics is off");
            None
        }
    }
}

/// Runs the recorder's upkeep every `interval`, and removes its idle series every half of
/// its `idle_timeout`, until dropped.
#[derive(Debug)]
pub struct Upkeep {
    task: JoinHandle<()>,
}

impl Upkeep {
    /// Starts the upkeep of `handle`, installed with `idle_timeout`, on the current tokio
    /// runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(handle: PrometheusHandle, interval: Duration, idle_timeout: Duration) -> Upkeep {
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut removed = Instant::now();
            loop {
                ticks.tick().await;
                handle.run_upkeep();
                if removed.elapsed() >= idle_timeout / 2 {
                    remove_idle_series(&handle);
                    removed = Instant::now();
                }
            }
        });
        Upkeep { task }
    }
}

/// Removes the series idle for longer than the recorder's idle timeout, then renews every
/// kept handle, so that none updates a removed series. A handle is renewed at least every
/// half idle timeout, so one kept since its series was last updated was renewed before the
/// series could be removed, and its next use registers the series again.
fn remove_idle_series(handle: &PrometheusHandle) {
    drop(handle.render());
    renew_handles();
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.task.abort();
    }
}
