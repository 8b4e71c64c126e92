//! The `Metrics` hook under a recorder that removes idle series: the Prometheus exporter
//! with an idle timeout, installed for this test binary alone (the renewal it needs is
//! process-wide).

mod common;

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_hooks::metrics::{Metrics, renew_handles};

/// The exporter's idle timeout: how long a series goes without an update before a
/// rendering removes it.
const IDLE: Duration = Duration::from_millis(200);

fn exporter() -> PrometheusHandle {
    PrometheusBuilder::new()
        .idle_timeout(
            MetricKindMask::COUNTER | MetricKindMask::HISTOGRAM,
            Some(IDLE),
        )
        .install_recorder()
        .expect("one recorder for this test binary")
}

/// The value `/metrics` shows for the successful calls of `tool`, if it shows the series.
fn successes(exporter: &PrometheusHandle, tool: &str) -> Option<u64> {
    let series =
        format!("toolgate_calls_total{{tool=\"{tool}\",outcome=\"success\",code=\"ok\"}} ");
    let text = exporter.render();
    let line = text.lines().find(|line| line.starts_with(&series))?;
    Some(line[series.len()..].parse().expect("a counter's value"))
}

/// Waits until the exporter removed the series of `tool`: past the idle timeout, the
/// rendering after the one that last saw it change removes it. Sleeping longer on a busy
/// machine only makes that surer.
async fn until_removed(exporter: &PrometheusHandle, tool: &str) {
    for _ in 0..50 {
        tokio::time::sleep(IDLE + Duration::from_millis(50)).await;
        if successes(exporter, tool).is_none() {
            return;
        }
    }
    panic!("the idle series of `{tool}` were never removed");
}

#[tokio::test]
async fn renewed_handles_bring_back_a_series_the_exporter_removed_and_keep_the_count_of_one_it_shows()
 {
    let exporter = exporter();
    let pipeline = Pipeline::builder()
        .tool(common::read_only("quiet", |_| Ok(json!("ok"))))
        .tool(common::read_only("busy", |_| Ok(json!("ok"))))
        .hook(Metrics::new())
        .build()
        .unwrap();
    let call = |tool: &'static str| {
        let pipeline = &pipeline;
        async move {
            pipeline
                .invoke(tool, json!({}), InvokeOptions::new())
                .await
                .expect("the call succeeds");
        }
    };

    call("quiet").await;
    assert_eq!(successes(&exporter, "quiet"), Some(1));
    until_removed(&exporter, "quiet").await;

    // `busy` is seen by a rendering and renewed while its series is shown: its next call
    // goes on counting in the same series.
    call("busy").await;
    assert_eq!(successes(&exporter, "busy"), Some(1));
    renew_handles();
    call("busy").await;
    assert_eq!(successes(&exporter, "busy"), Some(2));

    // `quiet`'s handle was kept from before the removal; renewed, its next call registers
    // the series again and it shows, counting from zero.
    call("quiet").await;
    assert_eq!(
        successes(&exporter, "quiet"),
        Some(1),
        "a call after the exporter removed the tool's idle series must show again"
    );
}
