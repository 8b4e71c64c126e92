//! Structured logs on stderr (stdout carries `tools` output and MCP over stdio).
//!
//! Logs never carry input values. Some dependencies log whole messages at `debug` and
//! `trace` (rmcp logs every JSON-RPC message with its arguments and results; the HTTP
//! stacks log headers and bodies), so they stay at `info` whatever the level, unless the
//! filter names them itself (`rmcp=debug`): an operator who does so asks for payloads.
//!
//! The Redis client's own lines are held to the first about each node every 10 s, with a
//! summary line for the rest ([`ClientLogLimit`]).
//!
//! Every line is scrubbed of the credentials the gateway holds ([`scrub_secrets`]) on its
//! way to stderr, whoever logged it: even payloads an operator asked for do not show an
//! upstream's token.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use opentelemetry_sdk::trace::SdkTracer;
use toolgate_hooks::secrets::Scrubber;
use toolgate_redis::ClientLogLimit;
use tracing_subscriber::filter::{Directive, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

/// The credentials scrubbed from log lines: set at start and on every reload.
static SECRETS: LazyLock<ArcSwap<Scrubber>> =
    LazyLock::new(|| ArcSwap::from_pointee(Scrubber::default()));

/// Scrubs the credentials `scrubber` knows from every log line from now on (replacing
/// the set given before).
pub fn scrub_secrets(scrubber: Scrubber) {
    SECRETS.store(Arc::new(scrubber));
}

/// Stderr, through the scrubber. The formatter hands over each event as one complete
/// line, so a credential is never split across two writes.
struct ScrubbedStderr;

impl Write for ScrubbedStderr {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let mut stderr = std::io::stderr().lock();
        match SECRETS.load().scrub_bytes(line) {
            Some(clean) => stderr.write_all(&clean)?,
            None => stderr.write_all(line)?,
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The Redis client (redis-rs) logs a line for nearly every request it re-routes while a
/// cluster fails over: the first line about each node per this interval is shown, and one
/// summary line per node counts the rest.
const REDIS_CLIENT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The dependencies that log payloads below `info`.
const PAYLOAD_TARGETS: [&str; 5] = ["rmcp", "hyper", "hyper_util", "h2", "reqwest"];

/// Installs the global subscriber: `RUST_LOG` if set, else `level`. Colours only when
/// stderr is a terminal. With `tracer`, the spans under
/// [`SPAN_TARGET`](toolgate_core::SPAN_TARGET) are exported through it as well (spans
/// only: log events stay in the log).
pub fn init(format: LogFormat, level: &str, tracer: Option<SdkTracer>) {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref(), level);
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(|| ScrubbedStderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    let otel = tracer.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter_fn(|meta| {
                !meta.is_event() && meta.target() == toolgate_core::SPAN_TARGET
            }))
    });
    let redis_client = ClientLogLimit::new(REDIS_CLIENT_LOG_INTERVAL);
    let installed = tracing_subscriber::registry()
        .with(fmt.with_filter(redis_client.clone()).with_filter(filter))
        .with(otel)
        .try_init();
    if installed.is_ok() && tokio::runtime::Handle::try_current().is_ok() {
        // Runs as long as the process: the summaries of the held lines.
        drop(redis_client.summarize_every_interval());
    }
}

/// The filter of `rust_log` (when set and valid) or `level`, with the payload targets it
/// does not name held at `info`.
fn filter(rust_log: Option<&str>, level: &str) -> EnvFilter {
    let spec = rust_log
        .filter(|spec| EnvFilter::try_new(spec).is_ok())
        .unwrap_or(level);
    let mut filter = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
    for target in PAYLOAD_TARGETS {
        if !names(spec, target)
            && let Ok(directive) = format!("{target}=info").parse::<Directive>()
        {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// Whether one of the filter's directives is about `target` or one of its modules.
fn names(spec: &str, target: &str) -> bool {
    spec.split(',').any(|directive| {
        let named = directive
            .split(['=', '['])
            .next()
            .unwrap_or_default()
            .trim();
        named == target || named.starts_with(&format!("{target}::"))
    })
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_payload_target_counts_as_named_only_when_a_directive_is_about_it() {
        assert!(names("debug,rmcp=debug", "rmcp"));
        assert!(names("rmcp::transport=trace", "rmcp"));
        assert!(names("rmcp", "rmcp"));
        assert!(!names("debug", "rmcp"));
        assert!(!names("rmcpx=debug,toolgate=trace", "rmcp"));
    }
}
