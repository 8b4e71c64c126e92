//! `telemetry:` — OpenTelemetry trace export (see [`crate::telemetry`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::values::{self, EnvString};

/// `telemetry:` — traces exported over OTLP. Off when the section is absent: nothing is
/// exported and no exporter thread runs.
///
/// The exporter is started once, with the process: a reload applies the span settings
/// (`capture_arguments`, `capture_results`, `stage_spans`) and nothing else of this section
/// ([`exports_like`](Self::exports_like)).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Where the traces go.
    pub otlp: OtlpConfig,
    /// The `service.name` of the exported resource (default `toolgate`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// The share of new traces recorded, from 0 to 1 (default 1). A call that arrives
    /// with a trace context follows its parent's sampling decision.
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
    /// Whether `execute_tool` spans carry the call's arguments
    /// (`gen_ai.tool.call.arguments`, after redaction). Default false.
    #[serde(default)]
    pub capture_arguments: bool,
    /// Whether `execute_tool` spans carry the call's result (`gen_ai.tool.call.result`,
    /// after output redaction). Default false.
    #[serde(default)]
    pub capture_results: bool,
    /// Whether each stage that has hooks gets a span of its own under the call's
    /// `execute_tool` span (default true). Off, a call is one span: stage spans are most of
    /// what exporting costs per call (docs/performance.md).
    #[serde(default = "default_stage_spans")]
    pub stage_spans: bool,
    /// OTLP logs: the audit trail exported as log records (off when absent).
    #[serde(default)]
    pub logs: Option<LogsConfig>,
}

/// `telemetry.logs:` — log records exported over OTLP/HTTP to the same collector as the
/// traces (`/v1/logs`), with the same headers and timeout (docs/gateway.md, "Tracing with
/// OpenTelemetry").
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsConfig {
    /// Export every line of the audit file (`audit: { sink: file }`) — each record with
    /// its `seq`, `chain` and `prev`, each signed checkpoint — as one log record whose
    /// body is the line as written (default false).
    #[serde(default)]
    pub audit: bool,
    /// The most log records waiting for export (default 2048): past it, new ones are
    /// dropped rather than held in memory or slowing a call; the file keeps them all.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
}

impl TelemetryConfig {
    /// Whether an exporter started from `self` exports as one started from `other` would:
    /// the same collector, headers, timeout, resource, sampling and log export. What
    /// differs takes effect on restart only.
    pub fn exports_like(&self, other: &TelemetryConfig) -> bool {
        self.otlp == other.otlp
            && self.service_name == other.service_name
            && self.sample_ratio == other.sample_ratio
            && self.logs == other.logs
    }
}

fn default_max_queue() -> usize {
    crate::telemetry::MAX_QUEUE
}

/// `telemetry.otlp:` — the collector.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); `/v1/traces` is
    /// appended unless the URL already ends with it.
    pub endpoint: EnvString,
    /// The wire protocol: `http/protobuf`, the only one supported.
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// Headers sent with every export (`authorization: Bearer ${OTLP_TOKEN}`). Their
    /// values are secrets: scrubbed from logs, never printed.
    #[serde(default)]
    pub headers: BTreeMap<String, EnvString>,
    /// How long one export may take (default `10s`).
    #[serde(default = "default_timeout", with = "values::duration")]
    pub timeout: Duration,
}

/// The OTLP wire protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (port 4318 by convention).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

fn default_service_name() -> String {
    "toolgate".to_owned()
}

fn default_sample_ratio() -> f64 {
    1.0
}

fn default_stage_spans() -> bool {
    true
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    #[test]
    fn the_section_is_off_when_absent_and_takes_defaults_when_present() {
        assert!(parse("{}").unwrap().telemetry.is_none());
        let config = parse("telemetry: { otlp: { endpoint: \"http://c:4318\" } }").unwrap();
        let telemetry = config.telemetry.unwrap();
        assert_eq!(telemetry.service_name, "toolgate");
        assert_eq!(telemetry.sample_ratio, 1.0);
        assert!(!telemetry.capture_arguments && !telemetry.capture_results);
        assert!(telemetry.stage_spans);
        let off = "telemetry: { otlp: { endpoint: \"http://c:4318\" }, stage_spans: false }";
        assert!(!parse(off).unwrap().telemetry.unwrap().stage_spans);
        assert!(telemetry.logs.is_none());
    }

    #[test]
    fn audit_logs_need_the_audit_file_and_take_a_queue_bound() {
        let file = "audit: { sink: file, path: /tmp/audit.jsonl }\n";
        let logs = "telemetry: { otlp: { endpoint: \"http://c:4318\" }, logs: { audit: true } }\n";
        let logs_config = parse(&format!("{file}{logs}"))
            .unwrap()
            .telemetry
            .unwrap()
            .logs
            .unwrap();
        assert!(logs_config.audit);
        assert_eq!(logs_config.max_queue, 2048);
        for (yaml, says) in [
            (logs.to_owned(), "audit: { sink: file"),
            (
                format!("audit: {{ sink: log }}\n{logs}"),
                "audit: { sink: file",
            ),
            (
                format!(
                    "{file}telemetry: {{ otlp: {{ endpoint: \"http://c\" }}, logs: {{ audit: true, max_queue: 0 }} }}"
                ),
                "at least 1",
            ),
        ] {
            let error = parse(&yaml).expect_err(&yaml).to_string();
            assert!(error.contains(says), "{yaml}: {error}");
        }
    }

    #[test]
    fn a_bad_section_is_refused_with_what_to_do_and_never_quotes_a_header_value() {
        for (yaml, says) in [
            (
                "telemetry: { otlp: { endpoint: \"http://c\" }, sample_ratio: 2 }",
                "between 0 and 1",
            ),
            (
                "telemetry: { otlp: { endpoint: \"collector:4318\" } }",
                "http:// or https://",
            ),
            (
                "telemetry: { otlp: { endpoint: \"http://c\", protocol: grpc } }",
                "http/protobuf",
            ),
            (
                "telemetry: { otlp: { endpoint: \"http://c\", headers: { x-key: \"s3cret\\nvalue\" } } }",
                "not shown",
            ),
        ] {
            let error = parse(yaml).expect_err(yaml).to_string();
            assert!(error.contains(says), "{yaml}: {error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }
}
