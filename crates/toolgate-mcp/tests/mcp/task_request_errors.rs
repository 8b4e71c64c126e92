//! Malformed or unanswerable `tasks/*` requests (the tasks extension, SEP-2663) are
//! answered with a JSON-RPC error in plain words: what is wrong and what to send — never
//! serde's wording or a Rust type name, never a long id repeated whole, never a control
//! character a terminal or a log would act on.
//!
//! Sent as raw JSON-RPC in a streamable HTTP session of a client that declares the
//! extension, to a server that serves tasks (it has an outcome tool).

use crate::common;

use crate::common::{RawHttp, within};
use rmcp::transport::StreamableHttpServerConfig;
use serde_json::{Value, json};
use toolgate_core::tool::tool_fn;
use toolgate_core::{Pipeline, ToolError};
use toolgate_mcp::McpServer;

/// What the outcome tool is asked: `{"id": SUSPENSION_ID}`.
#[derive(serde::Deserialize, garde::Validate, schemars::JsonSchema)]
struct Asked {
    #[garde(skip)]
    id: String,
}

/// The outcome tool: it knows no call (every id is unknown).
fn outcomes() -> impl toolgate_core::tool::IntoTool {
    tool_fn(
        "outcome",
        "Outcomes of waiting calls.",
        |asked: Asked| async move { Err::<Value, _>(ToolError::UnknownSuspension { id: asked.id }) },
    )
}

struct Served {
    url: String,
    http: reqwest::Client,
}

async fn serve() -> Served {
    let pipeline = Pipeline::builder().tool(outcomes()).build().expect("built");
    let service = McpServer::new(pipeline)
        .outcome_tool("outcome")
        .http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", service);
    let url = format!("{}/mcp", common::serve_on_loopback(app).await);
    Served {
        url,
        http: reqwest::Client::new(),
    }
}

impl Served {
    fn raw(&self) -> RawHttp<'_> {
        RawHttp {
            http: &self.http,
            url: &self.url,
            version: "2025-11-25",
            bearer: None,
        }
    }

    /// A session of a client that declares the tasks extension.
    async fn session(&self) -> String {
        let capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        self.raw().session(capabilities, "tasks-test").await
    }

    /// The JSON-RPC error `method` with `params` is answered in `session`.
    async fn error(&self, session: &str, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
        let response = self.raw().post(Some(session), &request).await;
        let body = within(10, "the answer", response.text())
            .await
            .expect("read");
        let data = body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .find(|data| !data.is_empty())
            .unwrap_or(&body);
        let answer: Value = serde_json::from_str(data).expect("a JSON-RPC answer");
        assert_eq!(answer["id"], 9, "{method} {params}: {answer}");
        assert!(answer["error"].is_object(), "{method} {params}: {answer}");
        answer["error"].clone()
    }
}

/// Asserts `error` is `code`, says `says`, and reads as words a user knows.
fn plain(error: &Value, code: i64, says: &str) {
    assert_eq!(error["code"], code, "{error}");
    let message = error["message"].as_str().expect("a message");
    assert!(message.contains(says), "{message:?} does not say {says:?}");
    assert!(
        message.len() < 400,
        "{} bytes: {message:.200}",
        message.len()
    );
    for rust in [
        "invalid type",
        "expected",
        "String",
        "struct",
        "variant",
        "::",
    ] {
        assert!(!message.contains(rust), "{message:?} says {rust:?}");
    }
    assert!(
        !message.chars().any(char::is_control),
        "{message:?} holds a control character"
    );
}

#[tokio::test]
async fn malformed_tasks_requests_are_invalid_params_naming_what_is_wrong() {
    let served = serve().await;
    let session = served.session().await;
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let missing = served.error(&session, method, json!({})).await;
        plain(&missing, -32602, "`taskId` is missing: give a string");
        let number = served.error(&session, method, json!({"taskId": 7})).await;
        plain(&number, -32602, "`taskId` must be a string, not a number");
    }
    let no_responses = served
        .error(&session, "tasks/update", json!({"taskId": "t"}))
        .await;
    plain(&no_responses, -32602, "`inputResponses` is missing");
}

#[tokio::test]
async fn an_unknown_task_is_named_cut_short_and_escaped() {
    let served = serve().await;
    let session = served.session().await;
    let huge = "x".repeat(1_000_000);
    for method in ["tasks/get", "tasks/cancel"] {
        let unknown = served
            .error(&session, method, json!({"taskId": "t-1"}))
            .await;
        plain(&unknown, -32602, "no task `t-1` of yours");
        let long = served
            .error(&session, method, json!({"taskId": huge}))
            .await;
        plain(&long, -32602, &format!("no task `{}…`", "x".repeat(64)));
        let control = served
            .error(&session, method, json!({"taskId": "a\u{1b}[2Jb\nc"}))
            .await;
        plain(&control, -32602, r"no task `a\u{1b}[2Jb\nc`");
    }
    let updated = served
        .error(
            &session,
            "tasks/update",
            json!({"taskId": "a\u{7}", "inputResponses": {}}),
        )
        .await;
    plain(&updated, -32602, r"no task `a\u{7}`");
}

#[tokio::test]
async fn a_tasks_method_the_server_does_not_serve_is_method_not_found_in_words() {
    let served = serve().await;
    let session = served.session().await;
    let result = served
        .error(&session, "tasks/result", json!({"taskId": "t"}))
        .await;
    plain(
        &result,
        -32601,
        "method `tasks/result` is not supported by this server",
    );
}

#[tokio::test]
async fn an_unknown_method_is_repeated_cut_and_with_its_hiding_characters_escaped() {
    let served = serve().await;
    let session = served.session().await;
    let turned = served
        .error(&session, "evil/\u{202e}gnp.exe\n", json!({}))
        .await;
    plain(
        &turned,
        -32601,
        r"method `evil/\u{202e}gnp.exe\n` is not supported by this server",
    );
    let long = served
        .error(&session, &format!("x/{}", "y".repeat(5000)), json!({}))
        .await;
    plain(
        &long,
        -32601,
        &format!(
            "method `x/{}…` is not supported by this server",
            "y".repeat(62)
        ),
    );
}
