//! W3C trace context (`traceparent`, `tracestate`) in and out of MCP messages, as the
//! OpenTelemetry MCP conventions ask: in a request's `params._meta`.
//!
//! Only the OpenTelemetry API is used here (no SDK): a context read from a message
//! becomes the [ambient context](opentelemetry::Context::current) of the work it starts,
//! and the ambient context of an outgoing request is written into it. Without an
//! OpenTelemetry subscriber nothing is ambient and nothing is written.
//!
//! Bad input is never an error: a `traceparent` that does not parse is ignored (the work
//! starts a trace of its own), and a `tracestate` that is malformed or longer than
//! [`MAX_TRACESTATE_BYTES`] is dropped while its `traceparent` is kept.
//!
//! # Examples
//!
//! ```
//! use opentelemetry::trace::TraceContextExt;
//! use toolgate_mcp::trace_context::remote_context;
//!
//! let cx = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)
//!     .expect("a valid traceparent");
//! assert_eq!(
//!     cx.span().span_context().trace_id().to_string(),
//!     "4bf92f3577b34da6a3ce929d0e0e4736"
//! );
//! assert!(remote_context("00-nothex-00f067aa0ba902b7-01", None).is_none());
//! ```

use std::str::FromStr;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};

/// The longest `tracestate` taken in (W3C Trace Context asks vendors to carry at least
/// 512 bytes); a longer one is dropped.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The context of a remote parent from a `traceparent` (and its `tracestate`), or `None`
/// when `traceparent` is not a valid W3C trace parent.
pub fn remote_context(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
    let span_context = parse(traceparent.trim(), tracestate)?;
    Some(Context::new().with_remote_span_context(span_context))
}

/// The `traceparent` and `tracestate` of the current span, if a trace is current.
pub fn current() -> Option<(String, Option<String>)> {
    let cx = Context::current();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    );
    let state = sc.trace_state().header();
    Some((traceparent, (!state.is_empty()).then_some(state)))
}

/// `options` with the current span's trace context in its `_meta`, for a request to an
/// upstream: what lets the upstream's spans join the caller's trace.
pub(crate) fn inject(
    mut options: rmcp::service::PeerRequestOptions,
) -> rmcp::service::PeerRequestOptions {
    if let Some((traceparent, tracestate)) = current() {
        let meta = options.meta.get_or_insert_with(Default::default);
        meta.set_traceparent(traceparent);
        if let Some(state) = tracestate {
            meta.set_tracestate(state);
        }
    }
    options
}

/// `version-traceid-parentid-flags`, per W3C Trace Context level 1: a version other than
/// `ff`, lowercase hex, ids not all zero. A later version may carry more fields after a
/// `-`; version `00` carries exactly four.
fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.splitn(5, '-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    let rest = parts.next();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
        return None;
    }
    if !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = tracestate
        .filter(|s| s.len() <= MAX_TRACESTATE_BYTES)
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        state,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_becomes_a_sampled_remote_parent() {
        let sc = parse(GOOD, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(sc.trace_state().header(), "rojo=00f067aa0ba902b7");
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad, None).is_none(), "{bad:?} was taken");
        }
        // A later version may add fields.
        assert!(parse(&format!("01{}-more", &GOOD[2..]), None).is_some());
    }

    #[test]
    fn an_oversized_or_malformed_tracestate_is_dropped_and_the_parent_kept() {
        let long = format!("k={}", "v".repeat(MAX_TRACESTATE_BYTES));
        for state in [long.as_str(), "not a=valid state,,="] {
            let sc = parse(GOOD, Some(state)).unwrap();
            assert_eq!(sc.trace_state().header(), "", "{state:?} was kept");
        }
    }
}
