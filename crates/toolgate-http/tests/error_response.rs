//! `HttpError`: status codes, `Retry-After` and the JSON body per error kind.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use toolgate_core::ToolError;
use toolgate_http::HttpError;

async fn body(response: Response) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn retry_after_answers_429_with_retry_after_in_whole_seconds_rounded_up() {
    let error = ToolError::retry_after(Duration::from_millis(2001), "slow down");
    let response = HttpError::from(&error).into_response();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    let body = body(response).await;
    assert_eq!(body["error"]["code"], error.code());
    assert_eq!(body["error"]["retry_after_ms"], 2001);
}

#[tokio::test]
async fn a_sub_second_retry_after_still_asks_for_one_second() {
    let error = ToolError::retry_after(Duration::from_millis(10), "slow down");
    let response = HttpError::from(error).into_response();
    assert_eq!(response.headers()["retry-after"], "1");
}

#[tokio::test]
async fn unknown_tool_answers_404_with_the_error_body_and_no_retry_after() {
    let error = ToolError::UnknownTool {
        name: "nope".into(),
    };
    let response = HttpError::from(&error).into_response();
    assert_eq!(response.status(), 404);
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(
        body(response).await,
        json!({"error": {"code": "unknown_tool", "message": error.to_string()}})
    );
}

#[tokio::test]
async fn every_tool_error_answers_with_its_own_status_and_code() {
    let errors = [
        ToolError::UnknownTool { name: "x".into() },
        ToolError::retry_after(Duration::from_secs(1), "later"),
        ToolError::Suspended {
            suspension_id: "s".into(),
            reason: "approval".into(),
        },
    ];
    for error in errors {
        let response = HttpError::from(&error).into_response();
        assert_eq!(response.status().as_u16(), error.status(), "{error}");
        assert_eq!(body(response).await["error"]["code"], error.code());
    }
}

#[tokio::test]
async fn a_route_error_of_its_own_keeps_its_status_code_and_message() {
    let error = HttpError::new(http::StatusCode::BAD_REQUEST, "bad_format", "use json");
    assert_eq!(error.status(), 400);
    let response = error.into_response();
    assert_eq!(response.status(), 400);
    assert_eq!(
        body(response).await,
        json!({"error": {"code": "bad_format", "message": "use json"}})
    );
}

#[tokio::test]
async fn a_request_timeout_closes_the_connection() {
    let error = HttpError::new(http::StatusCode::REQUEST_TIMEOUT, "timeout", "send faster");
    let response = error.into_response();
    assert_eq!(response.headers()["connection"], "close");
}

#[tokio::test]
async fn a_refusal_with_a_status_that_is_not_an_error_answers_500() {
    for status in [200, 204, 302] {
        let refused = ToolError::abort("not today", "refused", status);
        let error = HttpError::from(&refused);
        assert_eq!(error.status(), 500, "{status}");
        assert_eq!(error.body().status, Some(500));
        let waiting = ToolError::RetryAfter {
            delay: Duration::from_secs(1),
            reason: "later".into(),
            code: "busy".into(),
            status,
        };
        let response = HttpError::from(&waiting).into_response();
        assert_eq!(response.status(), 500, "{status}");
        assert_eq!(response.headers()["retry-after"], "1");
    }
    let forbidden = ToolError::abort("no", "forbidden", 403);
    assert_eq!(HttpError::from(&forbidden).status(), 403);
}

#[tokio::test]
async fn a_refused_call_of_a_batch_with_a_status_that_is_not_an_error_answers_500() {
    use std::sync::Arc;
    use toolgate_agent::{ExecuteOptions, InMemoryStateManager, ToolCall, ToolSystem};
    use toolgate_core::prelude::*;

    for status in [200, 204, 302] {
        let tools =
            Pipeline::builder().tool(tool_fn("refuse", "Refuses.", move |_: ()| async move {
                Err::<Value, _>(ToolError::abort("not today", "refused", status))
            }));
        let system = ToolSystem::builder(tools, Arc::new(InMemoryStateManager::new()))
            .build()
            .unwrap();
        let call = ToolCall::new("c1", "refuse", json!(null));
        let results = system
            .execute_tools("t", vec![call], ExecuteOptions::new())
            .await;
        let refused = results[0].error.as_ref().expect("the call is refused");
        assert_eq!(refused.status, Some(500), "{status}");
        let response = HttpError::from(refused).into_response();
        assert_eq!(response.status(), 500, "{status}");
        assert_eq!(body(response).await["error"]["code"], "refused");

        // The same call invoked directly is answered alike.
        let direct = system
            .pipeline()
            .invoke_detailed("refuse", json!(null), InvokeOptions::new())
            .await;
        let response = toolgate_http::invocation_response(&direct);
        assert_eq!(response.status(), 500, "{status}");
    }
}

#[tokio::test]
async fn an_enormous_retry_after_is_told_as_one_day() {
    let one_day = Duration::from_secs(24 * 60 * 60);
    let error = ToolError::RetryAfter {
        delay: Duration::MAX,
        reason: "a hook's arithmetic overflowed".into(),
        code: "rate_limited".into(),
        status: 429,
    };
    assert_eq!(error.retry_after_delay(), Some(one_day));
    assert!(
        error.to_string().ends_with("retry after 86400000 ms"),
        "{error}"
    );
    let response = HttpError::from(&error).into_response();
    assert_eq!(response.headers()["retry-after"], "86400");
    assert_eq!(body(response).await["error"]["retry_after_ms"], 86_400_000);

    // A route's own wait is told the same way.
    let own = HttpError::new(http::StatusCode::TOO_MANY_REQUESTS, "slow_down", "wait")
        .retry_after(Duration::from_millis(u64::MAX));
    assert_eq!(own.body().retry_after_ms, Some(86_400_000));
    assert_eq!(own.into_response().headers()["retry-after"], "86400");
}
