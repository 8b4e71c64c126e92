//! The ToolResult JSON contract: field names, presence rules, and a stable round trip.

mod common;

use std::sync::Arc;

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{ExecuteOptions, ToolCall, ToolResult, ToolStatus};
use toolgate_core::ToolError;
use toolgate_core::error::InputViolations;

#[test]
fn success_error_and_suspended_results_have_the_documented_json_shape() {
    let mut success = ToolResult::success("call_1", "get_weather", json!({ "temp_c": 21 }));
    success.metadata.duration_ms = 12;
    success.metadata.attempts = 1;
    success.metadata.trace_id = Some("tr-1".into());
    assert_eq!(
        serde_json::to_value(&success).unwrap(),
        json!({
            "call_id": "call_1",
            "tool_name": "get_weather",
            "status": "success",
            "output": { "temp_c": 21 },
            "metadata": { "duration_ms": 12, "attempts": 1, "mode": "functional", "trace_id": "tr-1" }
        })
    );

    let error = ToolResult::error(
        "call_2",
        "get_weather",
        &ToolError::InvalidInput(InputViolations::one("days", "greater than 14")),
    );
    assert_eq!(
        serde_json::to_value(&error).unwrap(),
        json!({
            "call_id": "call_2",
            "tool_name": "get_weather",
            "status": "error",
            "error": {
                "code": "invalid_input",
                "message": "invalid arguments: argument `days`: greater than 14",
                "violations": [{ "path": "days", "message": "greater than 14" }]
            },
            "metadata": { "duration_ms": 0, "attempts": 0, "mode": "functional" }
        })
    );

    let limited = ToolResult::error(
        "call_3",
        "search",
        &ToolError::retry_after(std::time::Duration::from_millis(1200), "rate limited"),
    );
    assert_eq!(
        serde_json::to_value(&limited).unwrap()["error"]["retry_after_ms"],
        1200
    );

    let suspended = ToolResult::suspended("call_4", "transfer", "susp-1", "a person must approve");
    assert_eq!(
        serde_json::to_value(&suspended).unwrap(),
        json!({
            "call_id": "call_4",
            "tool_name": "transfer",
            "status": "suspended",
            "metadata": {
                "duration_ms": 0, "attempts": 0, "mode": "functional",
                "suspension_id": "susp-1", "suspension_reason": "a person must approve"
            }
        })
    );
}

#[test]
fn results_round_trip_through_json_unchanged() {
    let mut result = ToolResult::success("c", "t", json!([1, 2]));
    result.metadata.sources = vec![json!({ "sourceName": "docs" })];
    result.metadata.extra.insert("cache".into(), json!("hit"));
    let text = serde_json::to_string(&result).unwrap();
    let back: ToolResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back, result);
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
}

#[test]
fn a_suspended_tool_error_becomes_a_suspended_result() {
    let error = ToolError::Suspended {
        suspension_id: "s-1".into(),
        reason: "wait".into(),
    };
    let result = ToolResult::error("c", "t", &error);
    assert_eq!(result.status, ToolStatus::Suspended);
    assert_eq!(result.suspension_id(), Some("s-1"));
    assert!(result.error.is_none());
}

#[tokio::test]
async fn hook_metadata_lands_in_sources_and_attempts_and_duration_are_set() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new(
                "w",
                "get_weather",
                json!({ "city": "Lima", "days": 3 }),
            )],
            ExecuteOptions::new(),
        )
        .await;
    let metadata = &results[0].metadata;
    assert_eq!(
        metadata.sources,
        [json!({ "sourceName": "met-office", "url": "https://example.org/forecast" })]
    );
    assert_eq!(metadata.attempts, 1);
    assert!(metadata.extra.is_empty(), "{:?}", metadata.extra);
}

#[test]
fn content_text_is_what_a_model_reads() {
    assert_eq!(
        ToolResult::success("c", "t", json!("plain")).content_text(),
        "plain"
    );
    assert_eq!(
        ToolResult::success("c", "t", json!({ "a": 1 })).content_text(),
        r#"{"a":1}"#
    );
    let error = ToolResult::error("c", "t", &ToolError::execution("disk full"));
    assert_eq!(
        error.content_text(),
        "error [tool_error]: tool failed: disk full"
    );
    let pending = ToolResult::suspended("c", "t", "s-9", "waiting for approval");
    assert_eq!(
        pending.content_text(),
        "pending: waiting for approval (suspension id s-9)"
    );
}
