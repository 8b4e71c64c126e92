//! The audit trail as OTLP log records (`telemetry.logs.audit`): every line of the chained
//! audit file, exported as it is written.
//!
//! Each line becomes one log record whose body is the line, byte for byte, so a receiver
//! checks the chain as `toolgate audit verify` does: the SHA-256 of a record's body is the
//! next record's `prev`. The attributes repeat what a pipeline filters and groups on:
//! `toolgate.audit.seq`, `toolgate.audit.chain`, `toolgate.audit.prev`,
//! `toolgate.audit.hash` (this line's SHA-256), and for a call `toolgate.audit.request_id`,
//! `toolgate.audit.suspension_id` (a call that waited, and the call resumed after it),
//! `enduser.id`, `toolgate.audit.tenant` (the user's tenant, when they have one: a user id
//! is unique only within its tenant), `gen_ai.tool.name`, `toolgate.audit.outcome`, `toolgate.audit.code` and
//! `http.response.status_code`. The event name says which kind of line it is:
//! `toolgate.audit.record`, `toolgate.audit.checkpoint`, or `toolgate.audit.gap` for the
//! marker of records the sink could not write (with `toolgate.audit.gap.records`). A
//! record written while its call's span is being traced carries the span's trace and span
//! ids.

use std::sync::{Arc, LazyLock};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use serde_json::Value;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The exporter of the process's audit lines, while telemetry runs with
/// `telemetry.logs.audit`: each configuration's audit sink taps into it when it is built.
static AUDIT_LOGS: LazyLock<ArcSwapOption<AuditLogs>> = LazyLock::new(ArcSwapOption::empty);

/// Exports audit lines through a logger of the process's log provider.
pub(crate) struct AuditLogs {
    logger: SdkLogger,
}

impl AuditLogs {
    /// Makes `provider`'s audit logger the one audit sinks tap into.
    pub(super) fn install(provider: &SdkLoggerProvider) {
        AUDIT_LOGS.store(Some(Arc::new(AuditLogs {
            logger: provider.logger("toolgate.audit"),
        })));
    }

    /// Stops handing audit lines to the exporter (before it shuts down).
    pub(super) fn uninstall() {
        AUDIT_LOGS.store(None);
    }

    /// Whether an exporter runs (telemetry started with `telemetry.logs.audit`).
    pub(crate) fn running() -> bool {
        AUDIT_LOGS.load().is_some()
    }

    /// Queues `line` (one line of the audit file, without its newline) for export, while
    /// an exporter runs. Never blocks: the batch processor drops a record when its queue
    /// is full.
    pub(crate) fn export(line: &[u8]) {
        if let Some(logs) = &*AUDIT_LOGS.load() {
            logs.emit(line);
        }
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let now = SystemTime::now();
        let mut record = self.logger.create_log_record();
        record.set_timestamp(now);
        record.set_observed_timestamp(now);
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        record.add_attribute(
            "toolgate.audit.hash",
            toolgate_hooks::audit::line_hash(line),
        );
        if let Some(checkpoint) = parsed.get("checkpoint") {
            record.set_event_name("toolgate.audit.checkpoint");
            for (field, key) in [
                ("chain", "toolgate.audit.chain"),
                ("hash", "toolgate.audit.checkpoint.hash"),
                ("signature", "toolgate.audit.checkpoint.signature"),
            ] {
                if let Some(value) = checkpoint.get(field).and_then(Value::as_str) {
                    record.add_attribute(key, value.to_owned());
                }
            }
            if let Some(seq) = checkpoint.get("seq").and_then(Value::as_i64) {
                record.add_attribute("toolgate.audit.seq", seq);
            }
        } else {
            match parsed.get("gap") {
                Some(gap) => {
                    record.set_event_name("toolgate.audit.gap");
                    if let Some(records) = gap.get("records").and_then(Value::as_i64) {
                        record.add_attribute("toolgate.audit.gap.records", records);
                    }
                }
                None => record.set_event_name("toolgate.audit.record"),
            }
            if let Some(seq) = parsed.get("seq").and_then(Value::as_i64) {
                record.add_attribute("toolgate.audit.seq", seq);
            }
            for (field, key) in [
                ("chain", "toolgate.audit.chain"),
                ("prev", "toolgate.audit.prev"),
                ("request_id", "toolgate.audit.request_id"),
                // Ties a call that waited to the call resumed after the decision.
                ("suspension_id", "toolgate.audit.suspension_id"),
                ("user_id", "enduser.id"),
                // A user id is unique only within its tenant: `ann` of acme and `ann` of
                // globex are told apart by this, as the line tells them apart.
                ("tenant", "toolgate.audit.tenant"),
                ("tool", "gen_ai.tool.name"),
                ("outcome", "toolgate.audit.outcome"),
                ("code", "toolgate.audit.code"),
            ] {
                if let Some(value) = parsed.get(field).and_then(Value::as_str) {
                    record.add_attribute(key, value.to_owned());
                }
            }
            if let Some(status) = parsed.get("status").and_then(Value::as_i64) {
                record.add_attribute("http.response.status_code", status);
            }
            // The line is written from the call's `will_audit`, inside its span.
            let context = tracing::Span::current().context();
            let span = opentelemetry::trace::TraceContextExt::span(&context);
            let span = span.span_context();
            if span.is_valid() {
                record.set_trace_context(span.trace_id(), span.span_id(), Some(span.trace_flags()));
            }
        }
        record.set_body(AnyValue::String(text.into_owned().into()));
        self.logger.emit(record);
    }
}
