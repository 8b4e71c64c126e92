//! Structured logs on stderr (stdout carries `tools` output and MCP over stdio).
//!
//! Logs never carry input values. Some dependencies log whole messages at `debug` and
//! `trace` (rmcp logs every JSON-RPC message with its arguments and results; the HTTP
//! stacks log headers and bodies), so they stay at `info` whatever the level (rmcp at
//! `warn`: it logs every notification it receives at `info`, whole), unless the filter
//! names them itself (`rmcp=debug`): an operator who does so asks for payloads.
//!
//! The Redis client's own lines are held to the first about each node every 10 s, with a
//! summary line for the rest ([`ClientLogLimit`]).
//!
//! Every line is scrubbed of the credentials the gateway holds ([`scrub_secrets`]) on its
//! way to stderr, whoever logged it: even payloads an operator asked for do not show an
//! upstream's token.
//!
//! Every line also has its control characters escaped at the same place (`\r`, `\u001b`,
//! …), in messages and field values alike, whoever logged them: text an upstream or a
//! caller chose (a stderr line, a tool name, an error) cannot move the cursor, start a
//! line of its own or forge one on an operator's terminal.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use opentelemetry_sdk::trace::SdkTracer;
use toolgate_hooks::secrets::Scrubber;
use toolgate_redis::ClientLogLimit;
use tracing_subscriber::filter::{Directive, LevelFilter, filter_fn};
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

/// Stderr, through the scrubber and the escaping of control characters. The formatter
/// hands over each event as one complete line, so a credential is never split across two
/// writes, and the line's own end is its last byte.
struct ScrubbedStderr {
    /// Whether the formatter colours the line itself (stderr is a terminal): its colour
    /// sequences pass.
    colours: bool,
}

impl Write for ScrubbedStderr {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let scrubbed = SECRETS.load().scrub_bytes(line);
        let scrubbed = scrubbed.as_deref().unwrap_or(line);
        let escaped = escape_controls(scrubbed, self.colours);
        std::io::stderr()
            .lock()
            .write_all(escaped.as_deref().unwrap_or(scrubbed))?;
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `line` with every control character escaped but the line feed that ends it (C0, DEL,
/// and C1 — which some terminals obey as well), as a JSON string would write it, so a
/// JSON line stays valid JSON; `None` when there is none. With `colours`, the formatter's
/// colour sequences (`ESC [ digits ; … m`) pass: they change colours only, and the
/// formatter itself escapes ESC in what it is given to log.
pub(crate) fn escape_controls(line: &[u8], colours: bool) -> Option<Vec<u8>> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    if !(0..body.len()).any(|i| control_at(body, i).is_some()) {
        return None;
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut i = 0;
    while i < body.len() {
        if colours && let Some(length) = colour_sequence(&body[i..]) {
            out.extend_from_slice(&body[i..i + length]);
            i += length;
            continue;
        }
        let Some((code, width)) = control_at(body, i) else {
            out.push(body[i]);
            i += 1;
            continue;
        };
        match code {
            0x0a => out.extend_from_slice(b"\\n"),
            0x0d => out.extend_from_slice(b"\\r"),
            0x09 => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(format!("\\u{code:04x}").as_bytes()),
        }
        i += width;
    }
    out.extend_from_slice(&line[body.len()..]);
    Some(out)
}

/// The control character at `bytes[i]`, if one starts there: its code point and how many
/// bytes it takes (a C1 character is two in UTF-8).
fn control_at(bytes: &[u8], i: usize) -> Option<(u8, usize)> {
    match bytes[i] {
        b @ (0x00..0x20 | 0x7f) => Some((b, 1)),
        0xc2 => bytes
            .get(i + 1)
            .filter(|next| (0x80..0xa0).contains(*next))
            .map(|next| (*next, 2)),
        _ => None,
    }
}

/// The length of the colour sequence `bytes` starts with (`ESC [`, digits and `;`, `m`).
fn colour_sequence(bytes: &[u8]) -> Option<usize> {
    let rest = bytes.strip_prefix(b"\x1b[")?;
    let params = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b';')
        .count();
    (rest.get(params) == Some(&b'm')).then_some(2 + params + 1)
}

/// The Redis client (redis-rs) logs a line for nearly every request it re-routes while a
/// cluster fails over: the first line about each node per this interval is shown, and one
/// summary line per node counts the rest.
const REDIS_CLIENT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The dependencies that log payloads, with the level each is held at unless the filter
/// names it. rmcp logs every message below `info`, and every notification it receives
/// at `info`, whole and in Rust's form (`received notification
/// notification=LoggingMessageNotification(…)`): a peer that sends notifications without
/// end would fill the log with what it chose, so rmcp is held at `warn`.
const PAYLOAD_TARGETS: [(&str, LevelFilter); 5] = [
    ("rmcp", LevelFilter::WARN),
    ("hyper", LevelFilter::INFO),
    ("hyper_util", LevelFilter::INFO),
    ("h2", LevelFilter::INFO),
    ("reqwest", LevelFilter::INFO),
];

/// Installs the global subscriber: `RUST_LOG` if set, else `level`. Colours only when
/// stderr is a terminal. With `tracer`, the spans under
/// [`SPAN_TARGET`](toolgate_core::SPAN_TARGET) are exported through it as well (spans
/// only: log events stay in the log).
pub fn init(format: LogFormat, level: &str, tracer: Option<SdkTracer>) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let spec = spec(rust_log.as_deref(), level);
    let filter = filter(spec);
    // Unless the operator asks for rmcp's lines, its line for every error a request was
    // answered with goes: the caller was answered, and the line is the caller's to cause.
    let answered_errors = names(spec, "rmcp");
    let colours = std::io::stderr().is_terminal();
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colours)
        .with_writer(move || ScrubbedStderr { colours });
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
        .with(
            fmt.with_filter(redis_client.clone())
                .with_filter(filter)
                .with_filter(filter_fn(move |meta| {
                    answered_errors || !is_answered_error(meta)
                })),
        )
        .with(otel)
        .try_init();
    if installed.is_ok() && tokio::runtime::Handle::try_current().is_ok() {
        // Runs as long as the process: the summaries of the held lines.
        drop(redis_client.summarize_every_interval());
    }
}

/// The filter's directives: `rust_log` when set, not blank and valid, else `level`, else
/// (a blank `level`) `info`. A blank filter is valid to `EnvFilter` and logs nothing at
/// all — audit records written to the log included — which nobody means by leaving it
/// empty.
fn spec<'a>(rust_log: Option<&'a str>, level: &'a str) -> &'a str {
    rust_log
        .filter(|spec| !spec.trim().is_empty() && EnvFilter::try_new(spec).is_ok())
        .unwrap_or(if level.trim().is_empty() {
            "info"
        } else {
            level
        })
}

/// The filter of `spec`, with the payload targets it does not name held at their level
/// ([`PAYLOAD_TARGETS`]), or at the filter's own level when that is quieter.
fn filter(spec: &str) -> EnvFilter {
    let (mut filter, spec) = match EnvFilter::try_new(spec) {
        Ok(filter) => (filter, spec),
        Err(_) => (EnvFilter::new("info"), "info"),
    };
    let overall = overall_level(spec);
    for (target, held) in PAYLOAD_TARGETS {
        if !names(spec, target)
            && let Ok(directive) = format!("{target}={}", held.min(overall)).parse::<Directive>()
        {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// The level of what the filter's directives do not name: its last bare level (`warn` in
/// `warn,toolgate=debug`), else off, as `EnvFilter` has it.
fn overall_level(spec: &str) -> LevelFilter {
    spec.split(',')
        .filter_map(|directive| directive.trim().parse::<LevelFilter>().ok())
        .next_back()
        .unwrap_or(LevelFilter::OFF)
}

/// Whether `meta` is rmcp's line for an error a request was answered with (`response
/// error`, at `warn`, with the request's `id` and the error in its Rust form,
/// `ErrorData { code: ErrorCode(-32602), … }`): a caller's mistake (a bad argument, an
/// unknown method) is answered to the caller, and a warning per mistake would let any
/// caller fill the log with warnings, in Rust's words.
fn is_answered_error(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_event()
        && *meta.level() == tracing::Level::WARN
        && meta.target() == "rmcp::service"
        && meta.fields().field("id").is_some()
        && meta.fields().field("error").is_some()
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
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::{Context, SubscriberExt};

    use super::{escape_controls, filter, names, spec};

    /// The events `emit` logs that pass the filter of `spec`, as `target LEVEL`.
    fn passed(spec: &str, emit: fn()) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Kept(Arc<Mutex<Vec<String>>>);

        impl<S: tracing::Subscriber> Layer<S> for Kept {
            fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
                let meta = event.metadata();
                let line = format!("{} {}", meta.target(), meta.level());
                self.0.lock().unwrap().push(line);
            }
        }

        let kept = Kept::default();
        let subscriber =
            tracing_subscriber::registry().with(kept.clone().with_filter(filter(spec)));
        tracing::subscriber::with_default(subscriber, emit);
        kept.0.lock().unwrap().clone()
    }

    /// rmcp's line for a notification it received, a warning of rmcp's, and a line of
    /// the gateway's own.
    fn lines() {
        tracing::info!(target: "rmcp::service", notification = "LoggingMessageNotification(…)", "received notification");
        tracing::warn!(target: "rmcp::service", "serve finished with an error");
        tracing::info!(target: "toolgate::serve", "listening");
    }

    #[test]
    fn rmcps_line_for_every_notification_is_left_out_unless_the_filter_names_rmcp() {
        let without_notifications = ["rmcp::service WARN", "toolgate::serve INFO"];
        assert_eq!(passed("info", lines), without_notifications);
        assert_eq!(passed("debug", lines), without_notifications);
        assert_eq!(passed("trace,toolgate=debug", lines), without_notifications);
        assert_eq!(
            passed("info,rmcp=info", lines),
            [
                "rmcp::service INFO",
                "rmcp::service WARN",
                "toolgate::serve INFO"
            ]
        );
        assert_eq!(
            passed("info,rmcp::service=debug", lines),
            [
                "rmcp::service INFO",
                "rmcp::service WARN",
                "toolgate::serve INFO"
            ]
        );
    }

    #[test]
    fn a_payload_target_is_never_louder_than_the_filter_itself() {
        assert!(passed("error", lines).is_empty());
        assert_eq!(passed("toolgate=info", lines), ["toolgate::serve INFO"]);
        assert_eq!(passed("warn", lines), ["rmcp::service WARN"]);
    }

    #[test]
    fn control_characters_are_escaped_but_the_line_end_and_colours_stay() {
        let escaped = |line: &[u8], colours| {
            String::from_utf8(escape_controls(line, colours).unwrap_or(line.to_vec())).unwrap()
        };
        assert_eq!(
            escaped(b"up said: ok\rWARN forged\n", false),
            "up said: ok\\rWARN forged\n"
        );
        assert_eq!(
            escaped("a\x1b[2Jb\x07c\u{85}d\te\n".as_bytes(), false),
            "a\\u001b[2Jb\\u0007c\\u0085d\\te\n"
        );
        assert_eq!(escaped(b"two\nlines\n", false), "two\\nlines\n");
        assert_eq!(
            escaped(b"\x1b[2mdim\x1b[0m x\x1b]0;title\x07\n", true),
            "\x1b[2mdim\x1b[0m x\\u001b]0;title\\u0007\n"
        );
        assert!(escape_controls("plain é ünïcode\n".as_bytes(), false).is_none());
    }

    #[test]
    fn a_payload_target_counts_as_named_only_when_a_directive_is_about_it() {
        assert!(names("debug,rmcp=debug", "rmcp"));
        assert!(names("rmcp::transport=trace", "rmcp"));
        assert!(names("rmcp", "rmcp"));
        assert!(!names("debug", "rmcp"));
        assert!(!names("rmcpx=debug,toolgate=trace", "rmcp"));
    }

    #[test]
    fn a_blank_filter_logs_at_info_not_nothing() {
        assert_eq!(spec(Some(""), "warn"), "warn");
        assert_eq!(spec(Some("  "), "warn"), "warn");
        assert_eq!(spec(None, ""), "info");
        assert_eq!(spec(Some(""), " "), "info");
        assert_eq!(spec(Some("debug"), ""), "debug");
        let emit = || tracing::info!(target: "toolgate_gateway::audit", "a record");
        assert_eq!(
            passed(spec(Some(""), ""), emit),
            ["toolgate_gateway::audit INFO"]
        );
    }
}
