//! `PipelineService` composed with real tower middleware.

use std::time::Duration;

use serde_json::json;
use toolgate_core::prelude::*;
use toolgate_http::{PipelineService, ToolCall};
use tower::{BoxError, ServiceBuilder, ServiceExt};

fn pipeline() -> Pipeline {
    Pipeline::builder()
        .tool(tool_fn("ping", "Answers pong.", |_: ()| async {
            Ok::<_, ToolError>("pong")
        }))
        .tool(tool_fn("slow", "Takes a minute.", |_: ()| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, ToolError>("done")
        }))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_call_through_a_concurrency_limit_returns_the_tools_output() {
    let service = ServiceBuilder::new()
        .concurrency_limit(1)
        .service(PipelineService::new(pipeline()));
    let output = service
        .oneshot(ToolCall::new("ping", json!(null)))
        .await
        .unwrap();
    assert_eq!(output, json!("pong"));
}

#[tokio::test]
async fn a_tool_error_comes_out_as_the_services_error() {
    let error = PipelineService::new(pipeline())
        .oneshot(ToolCall::new("nope", json!(null)))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "unknown_tool");
}

#[tokio::test(start_paused = true)]
async fn tower_timeout_ends_a_slow_call() {
    let service = ServiceBuilder::new()
        .timeout(Duration::from_secs(1))
        .service(PipelineService::new(pipeline()));
    let error: BoxError = service
        .oneshot(ToolCall::new("slow", json!(null)))
        .await
        .unwrap_err();
    assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
}

#[tokio::test]
async fn the_options_of_a_call_reach_the_pipeline() {
    let pipeline = Pipeline::builder()
        .tool(tool_fn_with_context(
            "whoami",
            "Says who is calling.",
            |_: (), ctx: &ToolInvokeContext| {
                Box::pin(async move { Ok::<_, ToolError>(ctx.user().id.clone()) })
            },
        ))
        .build()
        .unwrap();
    let call =
        ToolCall::new("whoami", json!(null)).options(InvokeOptions::new().user(User::new("carol")));
    let output = PipelineService::new(pipeline).oneshot(call).await.unwrap();
    assert_eq!(output, json!("carol"));
}
