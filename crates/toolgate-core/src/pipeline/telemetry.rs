//! The spans an OpenTelemetry exporter reads: one per invocation, named and attributed
//! by the OpenTelemetry GenAI conventions for tool execution, and one per stage that ran
//! hooks, as its children.
//!
//! They are `tracing` spans — the core depends on no OpenTelemetry crate — under the
//! target [`TARGET`] at level `TRACE`, apart from the `toolgate.invoke` span logs carry.
//! Field names follow the conventions (`gen_ai.tool.name`…), and the `otel.*` fields are
//! the ones `tracing-opentelemetry` reads for a span's name, kind and status. At `TRACE`
//! they cost one comparison with the subscriber's level hint when nothing wants them (no
//! subscriber, or a log filter at `info`), and never reach an ordinary log line: a
//! subscriber turns them on by naming the target, as the gateway's OTLP exporter does.

use serde_json::Value;
use tracing::field::Empty;

use crate::context::{RequestId, ToolInvokeContext};
use crate::error::hides_text;
use crate::stage::Stage;

/// The target of every span made for OpenTelemetry.
pub const TARGET: &str = "toolgate::otel";

/// The longest argument or result value a span records; longer ones are cut at a
/// character boundary and marked.
const MAX_VALUE_BYTES: usize = 16 * 1024;

/// Which values of a call its `execute_tool` span records (the OpenTelemetry
/// conventions' opt-in `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result`). Both
/// off by default: arguments and results may carry personal data.
///
/// # Examples
///
/// ```
/// use toolgate_core::{Pipeline, SpanValues};
///
/// let pipeline = Pipeline::builder()
///     .span_values(SpanValues { arguments: true, results: false })
///     .build()
///     .unwrap();
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanValues {
    /// Record the arguments as the tool ran with them: after validation, normalization
    /// and redaction (never injected secrets, which live outside the input).
    pub arguments: bool,
    /// Record the result the caller gets: after output redaction, validation and
    /// transformation. Not recorded when the call failed.
    pub results: bool,
}

/// `execute_tool {name}`: `Display` without a `String` made when nobody reads it.
struct SpanName<'a>(&'a str);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "execute_tool {}", self.0)
    }
}

/// A value that a caller chose (a request id, a user id), as a log line shows it: as it
/// is, but with the characters a message escapes ([`shown_text`](crate::error::shown_text))
/// escaped here too ([`hides_text`]: control characters such as `\n` and `\u{1b}`, the line
/// and paragraph separators, the bidirectional controls such as `\u{202e}`, invisible
/// formatting characters) — so that an id cannot forge a log line, move a reader's cursor
/// or make the line read backwards. Written as it streams, without allocating.
pub(super) struct Printable<T>(pub T);

impl<T: std::fmt::Display> std::fmt::Display for Printable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Escaping<'a, 'b>(&'a mut std::fmt::Formatter<'b>);
        impl std::fmt::Write for Escaping<'_, '_> {
            fn write_str(&mut self, text: &str) -> std::fmt::Result {
                let mut rest = text;
                while let Some(at) = rest.find(hides_text) {
                    self.0.write_str(&rest[..at])?;
                    let hiding = rest[at..].chars().next().unwrap_or_default();
                    write!(self.0, "{}", hiding.escape_default())?;
                    rest = &rest[at + hiding.len_utf8()..];
                }
                self.0.write_str(rest)
            }
        }
        std::fmt::write(&mut Escaping(f), format_args!("{}", self.0))
    }
}

/// The invocation's span: `execute_tool {tool}`, kind internal.
#[inline]
pub(super) fn invocation_span(tool: &str, description: &str, call_id: &RequestId) -> tracing::Span {
    tracing::trace_span!(
        target: TARGET,
        "execute_tool",
        otel.name = %SpanName(tool),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.type = "function",
        gen_ai.tool.description = description,
        gen_ai.tool.call.id = %Printable(call_id),
        error.type = Empty,
        otel.status_code = Empty,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    )
}

/// The span of one stage that has hooks, a child of the invocation's: named after the
/// stage (`will_authorize`).
#[inline(always)]
pub(super) fn stage_span(stage: Stage) -> tracing::Span {
    tracing::trace_span!(
        target: TARGET,
        "stage",
        otel.name = stage.name(),
        toolgate.stage = stage.name(),
    )
}

/// Records how the call ended on its span: `error.type` and an error status for a failed
/// call (a call waiting for approval or for input has not failed), and the values
/// `values` asks for.
pub(super) fn record_end(span: &tracing::Span, ctx: &ToolInvokeContext, values: SpanValues) {
    match &ctx.error {
        Some(error) if !error.is_waiting() => {
            span.record("error.type", error.code());
            span.record("otel.status_code", "error");
        }
        Some(_) => {}
        None => {
            if values.results
                && let Some(output) = ctx.output()
            {
                span.record("gen_ai.tool.call.result", bounded_json(output).as_str());
            }
        }
    }
    if values.arguments {
        span.record(
            "gen_ai.tool.call.arguments",
            bounded_json(ctx.input()).as_str(),
        );
    }
}

/// `value` as JSON text, at most [`MAX_VALUE_BYTES`] of it.
fn bounded_json(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > MAX_VALUE_BYTES {
        let mut end = MAX_VALUE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("…[truncated]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_cut_at_a_character_boundary_and_marked() {
        let long = Value::String("é".repeat(MAX_VALUE_BYTES));
        let text = bounded_json(&long);
        assert!(text.ends_with("…[truncated]"));
        assert!(text.len() <= MAX_VALUE_BYTES + "…[truncated]".len());
        assert_eq!(bounded_json(&Value::from(7)), "7");
    }

    fn logged(text: &str) -> String {
        Printable(text).to_string()
    }

    #[test]
    fn a_bidi_override_in_a_request_id_is_escaped_in_the_log() {
        // Shown as is, U+202E would make the rest of the line read backwards: `txt.exe`.
        assert_eq!(logged("req-\u{202e}exe.txt"), r"req-\u{202e}exe.txt");
        for bidi in [
            '\u{061c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
            '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            assert_eq!(
                logged(&format!("a{bidi}b")),
                format!("a\\u{{{:x}}}b", u32::from(bidi))
            );
        }
    }

    #[test]
    fn a_line_separator_in_a_user_id_is_escaped_in_the_log() {
        assert_eq!(
            logged("mallory\u{2028}INFO forged\u{2029}"),
            r"mallory\u{2028}INFO forged\u{2029}"
        );
    }

    #[test]
    fn ordinary_text_and_control_characters_are_logged_as_before() {
        assert_eq!(logged("call-7 é 中 🙂"), "call-7 é 中 🙂");
        assert_eq!(
            logged("x\nINFO\r\t\u{1b}[2K\u{7f}\u{85}"),
            r"x\nINFO\r\t\u{1b}[2K\u{7f}\u{85}"
        );
    }

    #[test]
    fn the_log_escapes_exactly_the_characters_a_message_escapes() {
        for c in '\0'..=char::MAX {
            let text = c.to_string();
            assert_eq!(
                logged(&text),
                crate::error::shown_text(&text, 1),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }
}
