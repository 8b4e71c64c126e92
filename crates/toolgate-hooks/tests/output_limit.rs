//! Output limits: truncation on a character boundary with a marker, or failure.

mod common;

use serde_json::{Value, json};
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_hooks::output_limit::{OutputLimit, Overflow, TRUNCATION_METADATA_KEY};

async fn run(
    output: Value,
    limit: OutputLimit,
) -> (Result<Value, toolgate_core::ToolError>, Option<Value>) {
    let (audit, sink) = common::memory_audit();
    let p = Pipeline::builder()
        .tool(common::read_only("t", move |_| Ok(output.clone())))
        .hook(limit)
        .hook(audit)
        .build()
        .unwrap();
    let out = p.invoke("t", json!({}), InvokeOptions::new()).await;
    (
        out,
        common::only_record(&sink)
            .metadata
            .get(TRUNCATION_METADATA_KEY)
            .cloned(),
    )
}

#[tokio::test]
async fn output_within_the_limit_is_untouched() {
    let (out, note) = run(json!("short"), OutputLimit::new().max_bytes(100)).await;
    assert_eq!(out.unwrap(), json!("short"));
    assert_eq!(note, None);
}

#[tokio::test]
async fn a_long_string_is_cut_on_a_char_boundary_with_a_marker_saying_how_much() {
    let text = "ü".repeat(100); // 200 bytes, two per char
    let (out, note) = run(json!(text), OutputLimit::new().max_bytes(51)).await;
    let out = out.unwrap();
    let cut = out.as_str().unwrap();
    assert!(cut.len() <= 51, "{}", cut.len());
    let kept = cut.split(" [truncated ").next().unwrap();
    assert!(kept.chars().all(|c| c == 'ü') && !kept.is_empty());
    let cut_bytes = 200 - kept.len();
    assert!(
        cut.ends_with(&format!(" [truncated {cut_bytes} bytes]")),
        "{cut}"
    );
    assert_eq!(
        note,
        Some(json!({ "original_bytes": 202, "returned_bytes": cut.len() }))
    );
}

#[tokio::test]
async fn a_structured_output_becomes_its_cut_json_text() {
    let rows: Vec<Value> = (0..50).map(|i| json!({ "row": i })).collect();
    let (out, _) = run(json!(rows), OutputLimit::new().max_bytes(80)).await;
    let out = out.unwrap();
    let text = out.as_str().unwrap();
    assert!(text.starts_with("[{\"row\":0},{\"row\":1}"), "{text}");
    assert!(text.contains("[truncated ") && text.len() <= 80, "{text}");
}

#[tokio::test]
async fn fail_mode_refuses_with_a_message_that_says_what_to_do() {
    let (out, _) = run(
        json!("x".repeat(500)),
        OutputLimit::new()
            .max_bytes(100)
            .on_overflow(Overflow::Fail),
    )
    .await;
    let err = out.unwrap_err();
    assert_eq!((err.code(), err.status()), ("output_too_large", 502));
    assert!(
        err.to_string()
            .contains("502 bytes, over the limit of 100 bytes"),
        "{err}"
    );
}

#[tokio::test]
async fn a_per_tool_limit_overrides_the_default() {
    let (out, _) = run(
        json!("x".repeat(500)),
        OutputLimit::new().max_bytes(10).tool_max_bytes("t", 1000),
    )
    .await;
    assert_eq!(out.unwrap(), json!("x".repeat(500)));
}

#[tokio::test]
async fn a_limit_smaller_than_the_marker_still_returns_only_the_marker() {
    let (out, _) = run(json!("abcdef".repeat(10)), OutputLimit::new().max_bytes(5)).await;
    assert_eq!(out.unwrap(), json!(" [truncated 60 bytes]"));
}
