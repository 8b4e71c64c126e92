//! Execution modes and result size limits.

mod common;

use std::sync::Arc;

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{
    DEFAULT_RESULT_MAX_CHARS, ExecuteOptions, ExecutionMode, InMemoryStateManager, Observation,
    ResumeDecision, ResumeOptions, SystemBuildError, ThreadConfig, ToolCall, ToolStatus,
};

#[tokio::test]
async fn blocking_call_is_suspended_and_completed_with_the_persons_answer() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({ "question": "Deploy?" }),
            )],
            ExecuteOptions::new(),
        )
        .await;
    assert_eq!(results[0].status, ToolStatus::Suspended);
    assert_eq!(results[0].metadata.mode, ExecutionMode::Blocking);
    let saved = system
        .pipeline()
        .suspended(results[0].suspension_id().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        saved.input,
        json!({ "question": "Deploy?" }),
        "the person sees the question"
    );
    assert_eq!(
        saved.payload,
        json!({ "tool": "ask_user" }),
        "the arguments are kept once, as the input"
    );

    let resumed = system
        .resume(
            results[0].suspension_id().unwrap(),
            ResumeDecision::Complete {
                output: json!("yes"),
            },
            ResumeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.output, Some(json!("yes")));
    assert_eq!(resumed.metadata.attempts, 0);
    assert_eq!(Runs::of(&runs.ask_user), 0);
}

#[tokio::test]
async fn display_output_is_marked_in_the_result_and_the_observation() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let mut stream = system.subscribe();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("d", "show_chart", json!({ "text": "pie" }))],
            ExecuteOptions::new(),
        )
        .await;
    assert_eq!(results[0].metadata.mode, ExecutionMode::Display);
    assert_eq!(
        serde_json::to_value(&results[0]).unwrap()["metadata"]["mode"],
        "display"
    );
    match &*stream.recv().await.unwrap() {
        Observation::ToolExecution {
            display, result, ..
        } => {
            assert!(*display);
            assert_eq!(result.output, Some(json!({ "chart": "pie" })));
        }
        other => panic!("expected a tool execution, got {other:?}"),
    }
}

#[test]
fn a_mode_for_an_unregistered_tool_fails_the_build() {
    let runs = Arc::new(Runs::default());
    let err = system(&runs, state())
        .mode("ask_usr", ExecutionMode::Blocking)
        .build()
        .unwrap_err();
    assert!(matches!(err, SystemBuildError::UnknownTool { ref tool } if tool == "ask_usr"));
    assert!(err.to_string().contains("register the tool first"));
}

async fn big_output(
    limit_instance: Option<usize>,
    limit_thread: Option<usize>,
    limit_call: Option<usize>,
) -> toolgate_agent::ToolResult {
    let runs = Arc::new(Runs::default());
    let state = Arc::new(InMemoryStateManager::new());
    let mut config = ThreadConfig::enabling(["big"]);
    config.result_max_chars = limit_thread;
    state.set_config(THREAD, config);
    let mut builder = system(&runs, state);
    if let Some(n) = limit_instance {
        builder = builder.result_max_chars(n);
    }
    let system = builder.build().unwrap();
    let mut options = ExecuteOptions::new();
    if let Some(n) = limit_call {
        options = options.result_max_chars(n);
    }
    system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("b", "big", json!({ "chars": 70_000 }))],
            options,
        )
        .await
        .remove(0)
}

#[tokio::test]
async fn default_limit_is_sixty_thousand_characters_with_a_marker_giving_the_original_size() {
    let result = big_output(None, None, None).await;
    let text = result.output.as_ref().unwrap().as_str().unwrap();
    assert_eq!(text.chars().count(), DEFAULT_RESULT_MAX_CHARS);
    assert!(text.starts_with('é'));
    assert!(
        text.ends_with("the result was 70000 characters; the first 59928 are shown]"),
        "{}",
        &text[text.len() - 90..]
    );
    let t = result.metadata.truncation.unwrap();
    assert_eq!(
        (t.original_chars, t.kept_chars, t.limit),
        (70_000, 59_928, 60_000)
    );
}

#[tokio::test]
async fn call_limit_wins_over_thread_limit_which_wins_over_instance_limit() {
    let instance = big_output(Some(1_000), None, None).await;
    assert_eq!(instance.metadata.truncation.unwrap().limit, 1_000);
    let thread = big_output(Some(1_000), Some(500), None).await;
    assert_eq!(thread.metadata.truncation.unwrap().limit, 500);
    let call = big_output(Some(1_000), Some(500), Some(200)).await;
    assert_eq!(call.metadata.truncation.unwrap().limit, 200);
    assert!(call.output.unwrap().as_str().unwrap().chars().count() <= 200);
    let roomy = big_output(Some(10), Some(10), Some(100_000)).await;
    assert!(roomy.metadata.truncation.is_none());
}
