//! The `CallOptions` extractor and `invocation_response`, through a real axum router.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::post;
use http::Request;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use toolgate_core::prelude::*;
use toolgate_http::{CallOptions, Caller, invocation_response};
use tower::ServiceExt;

/// A tool that answers who called it, in which session, with which request id.
fn whoami() -> impl Tool {
    tool_fn_with_context(
        "whoami",
        "Says who is calling.",
        |_: (), ctx: &ToolInvokeContext| {
            Box::pin(async move {
                Ok::<_, ToolError>(json!({
                    "user": ctx.user().id,
                    "session": ctx.session_id(),
                    "request": ctx.request_id().to_string(),
                }))
            })
        },
    )
}

async fn invoke(
    State(pipeline): State<Pipeline>,
    Path(tool): Path<String>,
    call: CallOptions,
    body: axum::body::Bytes,
) -> Response {
    let input: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    invocation_response(&pipeline.invoke_detailed(&tool, input, call.options).await)
}

fn app() -> Router {
    let pipeline = Pipeline::builder().tool(whoami()).build().unwrap();
    Router::new()
        .route("/tools/{tool}", post(invoke))
        .with_state(pipeline)
}

async fn send(request: Request<Body>) -> (u16, Value) {
    let response = app().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn the_caller_in_the_extensions_is_the_invocations_user() {
    let mut request = Request::post("/tools/whoami")
        .body(Body::from("null"))
        .unwrap();
    request
        .extensions_mut()
        .insert(Caller::new(User::new("alice")));
    let (status, body) = send(request).await;
    assert_eq!(status, 200);
    assert_eq!(body["output"]["user"], "alice");
    assert!(body["attempts"].is_number() && body["duration_ms"].is_number());
}

#[tokio::test]
async fn session_and_request_id_headers_reach_the_invocation() {
    let mut request = Request::post("/tools/whoami")
        .header("x-session-id", "chat-9")
        .header("x-request-id", "req-1")
        .body(Body::from("null"))
        .unwrap();
    request
        .extensions_mut()
        .insert(Caller::new(User::new("bob")));
    let (_, body) = send(request).await;
    assert_eq!(body["output"]["session"], r#"[null,"bob","chat-9"]"#);
    assert_eq!(body["output"]["request"], "req-1");
}

#[tokio::test]
async fn a_request_without_a_caller_is_answered_401_unauthenticated() {
    let request = Request::post("/tools/whoami")
        .body(Body::from("null"))
        .unwrap();
    let (status, body) = send(request).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthenticated");
}

#[tokio::test]
async fn an_unknown_tool_is_answered_with_the_gateway_error_body() {
    let mut request = Request::post("/tools/nope")
        .body(Body::from("null"))
        .unwrap();
    request
        .extensions_mut()
        .insert(Caller::new(User::new("bob")));
    let (status, body) = send(request).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "unknown_tool");
}
