//! One span per invocation with tool, request id, session id and user id — never input
//! values — and one event per control outcome.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, Once};

use serde_json::json;
use toolgate::core::hook::hook_fn_sync;
use toolgate::core::{Stage, User};
use toolgate_test::{Inject, ScriptedTool, TestPipeline};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, filter};

use crate::{TOOL, options};

thread_local! {
    /// The buffer of the test running on this thread, while it captures.
    static CAPTURE: RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { RefCell::new(None) };
}

/// Writes into the capturing buffer of the current thread.
struct ThreadBuffer;

impl Write for ThreadBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buffer) = &*c.borrow() {
                buffer.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct ThreadWriter;

impl<'a> MakeWriter<'a> for ThreadWriter {
    type Writer = ThreadBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        ThreadBuffer
    }
}

/// One global subscriber for the whole test binary, writing only for threads that capture.
/// (Per-thread `set_default` subscribers race with the callsite interest cache of tests
/// running on other threads, and events go missing.)
fn install_capturing_subscriber() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A dynamic filter: its answer depends on the calling thread, so tracing must ask
        // it on every span and event. (`filter_fn` would have its first answer per
        // callsite cached: a callsite first reached by a test on another thread, which
        // captures nothing, would then stay disabled for these tests too.)
        let capturing = filter::dynamic_filter_fn(|_, _| CAPTURE.with(|c| c.borrow().is_some()));
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(ThreadWriter)
            .with_span_events(FmtSpan::NEW | FmtSpan::CLOSE)
            .with_ansi(false)
            .with_filter(capturing);
        tracing_subscriber::registry().with(layer).init();
    });
}

/// Captures what the current thread logs while `f` runs.
async fn capture<F: std::future::Future<Output = ()>>(f: F) -> String {
    install_capturing_subscriber();
    let buffer = Arc::new(Mutex::new(Vec::new()));
    CAPTURE.with(|c| *c.borrow_mut() = Some(Arc::clone(&buffer)));
    f.await;
    CAPTURE.with(|c| *c.borrow_mut() = None);
    let bytes = buffer.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

const SECRET_INPUT: &str = "card-4111-1111-1111-1111";

/// Runs one call that aborts at `will_authorize` and returns everything it logged.
async fn captured_call(input: serde_json::Value) -> String {
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .recording("policy", |h| {
            h.at(Stage::WillAuthorize, Inject::abort("no", "forbidden", 403))
        })
        .build();
    let call = options()
        .request_id("req-77")
        .session("sess-9")
        .user(User::new("alice"));
    capture(async {
        let _ = pipeline.invoke(TOOL, input, call).await;
    })
    .await
}

#[tokio::test(flavor = "current_thread")]
async fn the_invocation_span_names_tool_request_session_and_user() {
    let text = captured_call(json!({ "card": SECRET_INPUT })).await;

    let span_line = text
        .lines()
        .find(|l| l.contains("toolgate.invoke"))
        .unwrap_or_else(|| panic!("no invocation span in:\n{text}"));
    for field in [
        "tool=t",
        "request_id=req-77",
        "session_id=\"sess-9\"",
        "user_id=alice",
    ] {
        let found = span_line.contains(field) || span_line.contains(&field.replace('"', ""));
        assert!(found, "`{field}` missing from the span: {span_line}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_id_or_user_id_with_a_newline_cannot_forge_a_log_line() {
    let pipeline = TestPipeline::new().tool(ScriptedTool::new(TOOL)).build();
    let forged = "x\nINFO toolgate: access granted to admin\u{1b}[2K";
    let call = options()
        .request_id(forged)
        .user(User::new("mallory\nINFO forged"));
    let text = capture(async {
        let _ = pipeline.invoke(TOOL, json!({}), call).await;
    })
    .await;
    assert!(
        !text.lines().any(|line| line.starts_with("INFO")),
        "a line was forged:\n{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "a terminal escape reached the log:\n{text}"
    );
    assert!(
        text.contains(r"request_id=x\nINFO toolgate: access granted to admin\u{1b}[2K"),
        "{text}"
    );
    assert!(text.contains(r"user_id=mallory\nINFO forged"), "{text}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_bidi_override_or_line_separator_in_an_id_is_escaped_in_the_log() {
    let pipeline = TestPipeline::new().tool(ScriptedTool::new(TOOL)).build();
    // Obeyed, U+202E shows the rest of the line backwards, and U+2028 breaks it in a viewer.
    let call = options()
        .request_id("req-\u{202e}exe.txt")
        .user(User::new("mallory\u{2028}INFO forged"));
    let text = capture(async {
        let _ = pipeline.invoke(TOOL, json!({}), call).await;
    })
    .await;
    assert!(
        !text.contains(['\u{202e}', '\u{2028}']),
        "a bidi control or line separator reached the log:\n{text}"
    );
    assert!(text.contains(r"request_id=req-\u{202e}exe.txt"), "{text}");
    assert!(
        text.contains(r"user_id=mallory\u{2028}INFO forged"),
        "{text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn no_input_value_reaches_any_span_or_event() {
    let text = captured_call(json!({ "card": SECRET_INPUT, "nested": [SECRET_INPUT] })).await;

    assert!(!text.is_empty());
    assert!(
        !text.contains(SECRET_INPUT),
        "an input value was logged:\n{text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_control_outcome_emits_one_event_inside_the_invocation_span() {
    let text = captured_call(json!({})).await;

    let outcomes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("control outcome"))
        .collect();
    assert_eq!(outcomes.len(), 1, "{text}");
    assert!(
        outcomes[0].contains("outcome=\"forbidden\"") || outcomes[0].contains("outcome=forbidden"),
        "{}",
        outcomes[0]
    );
    assert!(outcomes[0].contains("hook=policy"), "{}", outcomes[0]);
    assert!(
        outcomes[0].contains("request_id=req-77"),
        "the event is inside the span: {}",
        outcomes[0]
    );
}

/// Runs one call through a pipeline with hooks at `will_authorize` and `will_audit`, its
/// stage spans on or off, and returns everything it logged (the OpenTelemetry spans under
/// `toolgate::otel` included: the capturing subscriber takes every level).
async fn captured_with_stage_spans(stage_spans: bool) -> String {
    let pipeline = toolgate::core::Pipeline::builder()
        .tool(Arc::new(ScriptedTool::new(TOOL)))
        .hook(hook_fn_sync(Stage::WillAuthorize, |_| Ok(())))
        .hook(hook_fn_sync(Stage::WillAudit, |_| Ok(())))
        .stage_spans(stage_spans)
        .build()
        .unwrap();
    capture(async {
        pipeline
            .invoke(TOOL, json!({}), options().request_id("req-5"))
            .await
            .unwrap();
    })
    .await
}

/// The lines that open a span named `name`: `… parent{…}:name{…}: target: new`.
fn opened<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|line| {
            let Some((path, _target)) =
                line.strip_suffix(": new").and_then(|l| l.rsplit_once(": "))
            else {
                return false;
            };
            // `timestamp LEVEL path`; the span opened is the last of the path.
            let Some((_level, path)) = path
                .split_once(' ')
                .and_then(|(_time, rest)| rest.trim_start().split_once(' '))
            else {
                return false;
            };
            let last = path.rsplit_once("}:").map_or(path, |(_, last)| last);
            last.starts_with(&format!("{name}{{"))
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_traced_call_has_a_span_for_each_stage_with_hooks_inside_its_execute_tool_span() {
    let text = captured_with_stage_spans(true).await;

    assert_eq!(opened(&text, "execute_tool").len(), 1, "{text}");
    let stages = opened(&text, "stage");
    assert_eq!(stages.len(), 2, "one span per stage with hooks:\n{text}");
    assert!(stages[0].contains("will_authorize"), "{}", stages[0]);
    assert!(stages[1].contains("will_audit"), "{}", stages[1]);
    for stage in stages {
        assert!(
            stage.contains("execute_tool{"),
            "a stage span is a child of the invocation's: {stage}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn with_stage_spans_off_a_traced_call_is_one_execute_tool_span() {
    let text = captured_with_stage_spans(false).await;

    assert_eq!(opened(&text, "execute_tool").len(), 1, "{text}");
    assert!(opened(&text, "stage").is_empty(), "{text}");
}
