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
//! (and counted in the SDK's warning at shutdown) — and memory stays bounded. At shutdown
//! [`Telemetry::shutdown`] flushes what is queued.
//!
//! Trace context comes in from the W3C `traceparent`/`tracestate` headers of `/v1`
//! requests, and from those headers or an MCP request's `params._meta` (which wins) on
//! `/mcp`; it goes out to imported upstreams in their `tools/call` `_meta`.

use std::collections::HashMap;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};

use crate::config::{OtlpProtocol, TelemetryConfig};

/// The most spans waiting for export; past it new spans are dropped.
pub const MAX_QUEUE: usize = 2048;

/// Why trace export could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter could not be built.
    #[error(
        "cannot start the OTLP trace exporter ({0}): check `telemetry.otlp`, or remove the `telemetry` section to run without trace export"
    )]
    Exporter(String),
}

/// The running exporter. Call [`shutdown`](Self::shutdown) before the process exits, or
/// the spans still queued are lost.
pub struct Telemetry {
    provider: SdkTracerProvider,
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
        let headers: HashMap<String, String> = (config.otlp.headers.iter())
            .map(|(name, value)| (name.clone(), value.0.clone()))
            .collect();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url(&config.otlp.endpoint.0))
            .with_timeout(config.otlp.timeout)
            .with_headers(headers)
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
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        Ok(Telemetry { provider })
    }

    /// The tracer the `tracing` layer exports through.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("toolgate")
    }

    /// Exports what is still queued (waiting at most the export timeout) and stops the
    /// exporter's thread.
    pub async fn shutdown(self) {
        let provider = self.provider;
        // The SDK waits on its thread: not on a runtime worker.
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly; spans still queued may be lost");
        }
    }
}

/// The OTLP/HTTP traces URL of a collector's base URL (`http://collector:4318` →
/// `http://collector:4318/v1/traces`), kept as it is when it already names the path.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(
            traces_url("http://c:4318"),
            "http://c:4318/v1/traces".to_owned()
        );
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c/v1/traces"), "http://c/v1/traces");
    }
}
