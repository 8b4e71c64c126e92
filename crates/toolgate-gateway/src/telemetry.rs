//! OpenTelemetry traces over OTLP/HTTP, when `telemetry:` is configured.
//!
//! The spans are the pipeline's and the MCP adapter's `tracing` spans under
//! [`SPAN_TARGET`](toolgate_core::SPAN_TARGET) (`execute_tool {tool}`, a child per stage
//! that ran hooks, `tools/call {tool}` for MCP), bridged by `tracing-opentelemetry`; log
//! events never become span events, so nothing reaches the collector that the scrubbed
//! logs would not show. Metrics stay on the `metrics` facade.
//!
//! Export runs on the SDK's batch thread with a bounded queue ([`MAX_QUEUE`] spans): a
//! collector that is slow or down never slows a call — spans past the bound are dropped
//! (and counted in the SDK's warning at shutdown) — and memory stays bounded: each span is
//! cut to a bounded size on its way into the queue ([`bounds`]), since some of its text
//! (a tool name asked for, a JSON-RPC id) is a caller's. At shutdown
//! [`Telemetry::shutdown`] flushes what is queued.
//!
//! With `telemetry.logs.audit`, every line of the chained audit file is exported too, as
//! an OTLP log record ([`audit_logs`]), through a second batch processor on its own
//! thread: the same bounded queue (`telemetry.logs.max_queue`, default [`MAX_QUEUE`]
//! records; past it new records are dropped, the file keeps them), batches of up to 512
//! records at least every second, each export bounded by `telemetry.otlp.timeout`. The
//! processor's thread is its own upkeep: no runtime task is needed. At shutdown, after the
//! audit file's last checkpoint is written, [`Telemetry::shutdown`] flushes both.
//!
//! Trace context comes in from the W3C `traceparent`/`tracestate` headers of `/v1`
//! requests, and from those headers or an MCP request's `params._meta` (which wins) on
//! `/mcp`; it goes out to imported upstreams in their `tools/call` `_meta`.

pub(crate) mod audit_logs;
mod bounds;

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{BatchLogProcessor, SdkLoggerProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};

use crate::config::{LogsConfig, OtlpConfig, OtlpProtocol, TelemetryConfig};
use audit_logs::AuditLogs;
use bounds::Bounded;

/// The most spans (and, unless `telemetry.logs.max_queue` says otherwise, log records)
/// waiting for export; past it new ones are dropped.
pub const MAX_QUEUE: usize = 2048;

/// The longest the exporters are waited for at shutdown (both at once) while they send what
/// is queued: a collector that is down or never answers delays the exit by this much.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why trace export could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter could not be built.
    #[error(
        "cannot start the OTLP trace exporter ({0}): check `telemetry.otlp`, or remove the `telemetry` section to run without trace export"
    )]
    Exporter(String),
    /// The OTLP log exporter could not be built.
    #[error(
        "cannot start the OTLP log exporter ({0}): check `telemetry.otlp`, or remove `telemetry.logs` to run without log export"
    )]
    LogExporter(String),
}

/// The running exporter. Call [`shutdown`](Self::shutdown) before the process exits, or
/// the spans still queued are lost.
pub struct Telemetry {
    provider: SdkTracerProvider,
    logs: Option<SdkLoggerProvider>,
}

impl Telemetry {
    /// Starts the exporter `config` describes.
    ///
    /// # Errors
    ///
    /// [`TelemetryError::Exporter`] when the exporter cannot be built (its HTTP client,
    /// say).
    pub fn start(config: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let OtlpProtocol::HttpProtobuf = config.otlp.protocol;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(signal_url(&config.otlp.endpoint.0, "traces"))
            .with_timeout(config.otlp.timeout)
            .with_headers(headers(&config.otlp))
            .build()
            // The error names what failed, never the headers' values.
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUE)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded::new(processor))
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(resource(config))
            .build();
        let logs = match &config.logs {
            Some(logs) if logs.audit => {
                let provider = start_logs(config, logs)?;
                AuditLogs::install(&provider);
                Some(provider)
            }
            _ => None,
        };
        Ok(Telemetry { provider, logs })
    }

    /// The tracer the `tracing` layer exports through.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("toolgate")
    }

    /// Exports what is still queued (waiting at most [`SHUTDOWN_TIMEOUT`]) and stops the
    /// exporters' threads. Call it after the gateway has stopped, so that the audit
    /// file's last lines are among what is exported.
    pub async fn shutdown(self) {
        AuditLogs::uninstall();
        let Telemetry { provider, logs } = self;
        // The SDK waits on its threads: not on a runtime worker. Both at once, so that a
        // collector that never answers holds the exit [`SHUTDOWN_TIMEOUT`] once, not twice.
        let traces =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT));
        let logs = logs.map(|logs| {
            tokio::task::spawn_blocking(move || logs.shutdown_with_timeout(SHUTDOWN_TIMEOUT))
        });
        if let Ok(Err(e)) = traces.await {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly; spans still queued may be lost");
        }
        if let Some(logs) = logs
            && let Ok(Err(e)) = logs.await
        {
            tracing::warn!(error = %e, "the log exporter did not shut down cleanly; audit records still queued were not exported (the audit file has them)");
        }
    }
}

/// The log provider of `telemetry.logs`: OTLP/HTTP to the traces' collector, batched on
/// the SDK's thread with a queue of `logs.max_queue` records.
fn start_logs(
    config: &TelemetryConfig,
    logs: &LogsConfig,
) -> Result<SdkLoggerProvider, TelemetryError> {
    let exporter = opentelemetry_otlp::LogExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(signal_url(&config.otlp.endpoint.0, "logs"))
        .with_timeout(config.otlp.timeout)
        .with_headers(headers(&config.otlp))
        .build()
        // The error names what failed, never the headers' values.
        .map_err(|e| TelemetryError::LogExporter(e.to_string()))?;
    let batch = opentelemetry_sdk::logs::BatchConfigBuilder::default()
        .with_max_queue_size(logs.max_queue)
        .build();
    let processor = BatchLogProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    Ok(SdkLoggerProvider::builder()
        .with_log_processor(processor)
        .with_resource(resource(config))
        .build())
}

/// The headers sent with every export.
fn headers(otlp: &OtlpConfig) -> HashMap<String, String> {
    (otlp.headers.iter())
        .map(|(name, value)| (name.clone(), value.0.clone()))
        .collect()
}

/// The resource every export describes: the service.
fn resource(config: &TelemetryConfig) -> Resource {
    Resource::builder()
        .with_service_name(config.service_name.clone())
        .build()
}

/// The OTLP/HTTP URL of `signal` (`traces`, `logs`) at a collector's base URL
/// (`http://collector:4318` → `http://collector:4318/v1/traces`); an endpoint that names
/// a signal's path already (`…/v1/traces`, as the setting was first documented) is read
/// as its base URL.
fn signal_url(endpoint: &str, signal: &str) -> String {
    let mut base = endpoint.trim_end_matches('/');
    for known in ["/v1/traces", "/v1/logs"] {
        base = base.strip_suffix(known).unwrap_or(base);
    }
    format!("{base}/v1/{signal}")
}

#[cfg(test)]
mod tests {
    use super::signal_url;

    #[test]
    fn the_signal_path_is_appended_once() {
        assert_eq!(
            signal_url("http://c:4318", "traces"),
            "http://c:4318/v1/traces".to_owned()
        );
        assert_eq!(
            signal_url("http://c:4318/", "traces"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            signal_url("http://c/v1/traces", "traces"),
            "http://c/v1/traces"
        );
        assert_eq!(signal_url("http://c:4318", "logs"), "http://c:4318/v1/logs");
        assert_eq!(signal_url("http://c/v1/traces", "logs"), "http://c/v1/logs");
    }
}
