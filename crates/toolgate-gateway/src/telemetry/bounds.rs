//! A bound on what one exported span may hold, whatever callers and upstreams send.
//!
//! The export queue is bounded by a count of spans ([`MAX_QUEUE`](super::MAX_QUEUE)), not
//! by their size, and some of a span's text is chosen by a caller or an upstream: the
//! tool name a `tools/call` asks for (known or not, in the span's name and
//! `gen_ai.tool.name`), its JSON-RPC id (`jsonrpc.request.id`, any string the body limit
//! allows), an imported tool's description. Unbounded, a caller's `tools/call`s with
//! ids and names of half a megabyte each fill the queue with gigabytes while the
//! collector is slow or down. So every span is cut here, on its way into the queue: its
//! name to [`MAX_NAME_BYTES`], each text attribute to [`MAX_ATTRIBUTE_BYTES`] (the
//! captured arguments and results, cut at 16 KiB by the pipeline already, to
//! [`MAX_VALUE_BYTES`]), at a character boundary and marked `…[truncated]`.

use std::borrow::Cow;
use std::time::Duration;

use opentelemetry::{Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// The longest span name exported: `tools/call ` and an MCP tool name (at most 128
/// characters) fit many times over.
pub const MAX_NAME_BYTES: usize = 256;

/// The longest text attribute exported, but the captured values.
pub const MAX_ATTRIBUTE_BYTES: usize = 4 * 1024;

/// The longest captured argument or result exported (the pipeline's own cut, and its mark).
pub const MAX_VALUE_BYTES: usize = 16 * 1024 + MARK.len();

/// The attributes that hold captured values (`capture_arguments`, `capture_results`).
const VALUES: [&str; 2] = ["gen_ai.tool.call.arguments", "gen_ai.tool.call.result"];

/// What ends a cut text.
const MARK: &str = "…[truncated]";

/// `inner`, handed every span cut to the bounds above.
#[derive(Debug)]
pub(super) struct Bounded<P> {
    inner: P,
}

impl<P> Bounded<P> {
    pub(super) fn new(inner: P) -> Self {
        Bounded { inner }
    }
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        bound(&mut span);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Cuts `span`'s name and text attributes to their bounds.
fn bound(span: &mut SpanData) {
    if let Some(name) = cut(&span.name, MAX_NAME_BYTES) {
        span.name = Cow::Owned(name);
    }
    for KeyValue { key, value, .. } in &mut span.attributes {
        let Value::String(text) = value else { continue };
        let limit = if VALUES.contains(&key.as_str()) {
            MAX_VALUE_BYTES
        } else {
            MAX_ATTRIBUTE_BYTES
        };
        if let Some(short) = cut(text.as_str(), limit) {
            *text = StringValue::from(short);
        }
    }
}

/// `text` cut to at most `limit` bytes, its mark included, when it is longer.
fn cut(text: &str, limit: usize) -> Option<String> {
    if text.len() <= limit {
        return None;
    }
    let mut end = limit - MARK.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}{MARK}", &text[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_at_a_character_boundary_and_marked() {
        assert_eq!(cut("short", 10), None);
        let long = "é".repeat(1000);
        let short = cut(&long, MAX_NAME_BYTES).unwrap();
        assert!(short.len() <= MAX_NAME_BYTES, "{}", short.len());
        assert!(short.ends_with(MARK) && short.starts_with("éé"));
    }
}
