//! Embedding toolgate in your own axum server: your auth middleware puts a `Caller` in the
//! request, one `/tools/{tool}` route invokes the pipeline, errors answer through
//! `HttpError`. It serves on loopback, calls itself over real HTTP, prints what it saw and
//! exits.

use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Router, routing::post};
use serde_json::{Value, json};
use toolgate::prelude::*;
use toolgate_http::{CallOptions, Caller, HttpError, JsonInput, invocation_response};

/// Your authentication: a bearer key names the user.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let user = match request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        Some("Bearer alice-key") => User::new("alice"),
        _ => {
            return HttpError::new(
                http::StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "send `Authorization: Bearer <your key>`",
            )
            .into_response();
        }
    };
    request.extensions_mut().insert(Caller::new(user));
    next.run(request).await
}

/// One route for every tool: the body is the tool's arguments.
async fn invoke(
    State(pipeline): State<Pipeline>,
    Path(tool): Path<String>,
    call: CallOptions,
    JsonInput(input): JsonInput,
) -> Response {
    let options = call.options.timeout(Duration::from_secs(10));
    invocation_response(&pipeline.invoke_detailed(&tool, input, options).await)
}

#[derive(serde::Deserialize, serde::Serialize, garde::Validate, schemars::JsonSchema)]
struct Divide {
    #[garde(skip)]
    a: f64,
    #[garde(skip)]
    b: f64,
}

fn pipeline() -> Result<Pipeline, Box<dyn std::error::Error>> {
    let pipeline = Pipeline::builder()
        .tool(tool_fn_with_context(
            "whoami",
            "Names the caller.",
            |_: (), ctx: &ToolInvokeContext| {
                Box::pin(async move { Ok::<_, ToolError>(ctx.user().id.clone()) })
            },
        ))
        .tool(tool_fn(
            "divide",
            "Divides a by b.",
            |d: Divide| async move { Ok(d.a / d.b) },
        ))
        .tool(tool_fn(
            "report",
            "Builds the daily report.",
            |_: ()| async {
                Err::<Value, _>(ToolError::retry_after(
                    Duration::from_millis(1500),
                    "the report is being built",
                ))
            },
        ))
        .build()?;
    Ok(pipeline)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app = Router::new()
        .route("/tools/{tool}", post(invoke))
        .layer(middleware::from_fn(authenticate))
        .with_state(pipeline()?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = reqwest::Client::new();
    let calls = [
        ("whoami", json!(null), Some("alice-key"), 200),
        ("divide", json!({"a": 1, "b": 4}), Some("alice-key"), 200),
        ("report", json!(null), Some("alice-key"), 429),
        ("divide", json!({"a": "one"}), Some("alice-key"), 400),
        ("nope", json!(null), Some("alice-key"), 404),
        ("whoami", json!(null), None, 401),
    ];
    for (tool, input, key, expected) in calls {
        let mut request = client.post(format!("{base}/tools/{tool}")).json(&input);
        if let Some(key) = key {
            request = request.bearer_auth(key).header("x-session-id", "demo");
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").cloned();
        let body: Value = response.json().await?;
        println!(
            "POST /tools/{tool} {input} -> {status} {body}{}",
            retry_after
                .map(|v| format!(" (Retry-After: {v:?})"))
                .unwrap_or_default()
        );
        if status != expected {
            return Err(format!("{tool}: expected {expected}, got {status}").into());
        }
    }
    Ok(())
}
