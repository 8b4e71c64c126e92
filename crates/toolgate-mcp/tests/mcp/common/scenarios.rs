//! The behaviours every transport must show, run by `stdio.rs` and `http.rs` against the
//! demo server (whose principal has no roles).

use std::time::Duration;

use rmcp::model::ErrorCode;
use rmcp::service::ServiceError;
use serde_json::json;

use super::{Client, call, call_until_ok, is_error, text, within};

pub async fn list_shows_schemas_and_annotations_and_hides_admin_tools(client: &Client) {
    let tools = within(20, "tools/list", client.peer().list_all_tools())
        .await
        .expect("tools/list is answered");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "echo",
        "add",
        "slow",
        "metered_ping",
        "delete_all",
        "pid",
        "whoami",
        "session",
    ] {
        assert!(
            names.contains(&expected),
            "`{expected}` missing from {names:?}"
        );
    }
    assert!(
        !names.contains(&"admin_stats"),
        "admin_stats is listed to a non-admin: {names:?}"
    );

    let add = tools
        .iter()
        .find(|t| t.name == "add")
        .expect("add is listed");
    assert_eq!(add.input_schema["type"], json!("object"));
    assert!(
        add.input_schema["properties"]["a"].is_object(),
        "{:?}",
        add.input_schema
    );
    assert_eq!(
        add.description.as_deref(),
        Some("Adds two integers between -1000 and 1000.")
    );
    let output = add
        .output_schema
        .as_ref()
        .expect("add declares an output schema");
    assert_eq!(output["type"], json!("object"));
    let hints = add.annotations.as_ref().expect("add has annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    assert_eq!(hints.idempotent_hint, Some(true));

    let delete = tools
        .iter()
        .find(|t| t.name == "delete_all")
        .expect("delete_all is listed");
    assert_eq!(
        delete.annotations.as_ref().and_then(|a| a.destructive_hint),
        Some(true)
    );
    // A tool without arguments is listed with an (empty) object schema, as MCP requires.
    let pid = tools
        .iter()
        .find(|t| t.name == "pid")
        .expect("pid is listed");
    assert_eq!(pid.input_schema["type"], json!("object"));
    assert!(
        pid.output_schema.is_none(),
        "a number output is not an MCP output schema"
    );
}

pub async fn call_returns_structured_content_for_an_object_output(client: &Client) {
    let result = call(client, "add", json!({"a": 2, "b": 40}))
        .await
        .expect("answered");
    assert!(!is_error(&result), "{}", text(&result));
    assert_eq!(result.structured_content, Some(json!({"sum": 42})));
    assert_eq!(text(&result), r#"{"sum":42}"#);

    let result = call(client, "echo", json!({"text": "hi"}))
        .await
        .expect("answered");
    assert_eq!(text(&result), "hi");
    assert_eq!(
        result.structured_content, None,
        "echo has no object output schema"
    );
}

pub async fn invalid_arguments_are_a_tool_error_naming_the_argument(client: &Client) {
    let result = call(client, "add", json!({"a": 5000, "b": 1}))
        .await
        .expect("answered");
    assert!(
        is_error(&result),
        "a validation error is a tool error, not a protocol error"
    );
    let message = text(&result);
    assert!(
        message.starts_with("invalid arguments: argument `a`"),
        "{message}"
    );
    assert_eq!(error_code(&result), Some("invalid_input".to_owned()));
}

pub async fn policy_denial_is_a_tool_error_with_the_reason(client: &Client) {
    let result = call(client, "delete_all", json!({}))
        .await
        .expect("answered");
    assert!(is_error(&result));
    assert_eq!(text(&result), "`delete_all` needs the operator role");
    assert_eq!(error_code(&result), Some("forbidden".to_owned()));
}

pub async fn rate_limit_answers_with_the_retry_after_delay(client: &Client) {
    for _ in 0..2 {
        let result = call(client, "metered_ping", json!({}))
            .await
            .expect("answered");
        assert_eq!(text(&result), "pong");
    }
    let result = call(client, "metered_ping", json!({}))
        .await
        .expect("answered");
    assert!(is_error(&result));
    let message = text(&result);
    assert!(
        message.starts_with("rate limited, retry after "),
        "{message}"
    );
    assert!(message.ends_with(" ms"), "{message}");
    let meta = result.meta.as_ref().expect("the error carries _meta");
    let detail = &meta.0["io.toolgate/error"];
    assert_eq!(detail["code"], json!("rate_limited"));
    assert_eq!(detail["status"], json!(429));
    let delay = detail["retryAfterMs"]
        .as_u64()
        .expect("retryAfterMs is a number");
    assert!(delay > 0 && delay <= 60_000, "{delay}");
}

pub async fn unknown_and_hidden_tools_are_protocol_errors(client: &Client) {
    for tool in ["no_such_tool", "admin_stats"] {
        let error = call(client, tool, json!({}))
            .await
            .expect_err("a protocol error");
        match error {
            ServiceError::McpError(e) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
                assert!(
                    e.message.contains(&format!("unknown tool `{tool}`")),
                    "{}",
                    e.message
                );
            }
            other => panic!("expected a JSON-RPC error for `{tool}`, got {other:?}"),
        }
    }
}

pub async fn calls_of_one_connection_share_its_session(client: &Client, other: &Client) {
    let first = text(&call(client, "session", json!({})).await.expect("answered"));
    let second = text(&call(client, "session", json!({})).await.expect("answered"));
    let elsewhere = text(&call(other, "session", json!({})).await.expect("answered"));
    assert!(!first.is_empty(), "calls carry a session id");
    assert_eq!(first, second, "one connection is one session");
    assert_ne!(first, elsewhere, "two connections are two sessions");
}

/// A client cancels a long call (rmcp sends `notifications/cancelled` when the call's
/// future is dropped); the concurrency permit the call held comes back.
pub async fn cancelled_call_releases_its_concurrency_permit(client: &Client) {
    let (mut long, refused) = hold_the_permit(client).await;
    assert_eq!(
        text(&refused),
        "too many concurrent calls, retry after 500 ms"
    );

    long.abort();
    let _ = (&mut long).await;
    let result = call_until_ok(client, "slow", json!({"ms": 1}), 10).await;
    assert_eq!(text(&result), "worked 1 ms");
}

type LongCall = tokio::task::JoinHandle<Result<rmcp::model::CallToolResult, ServiceError>>;

/// Starts a long `slow` call that holds the only permit, and shows it does: another call
/// is refused. Requests may overtake each other on the way (HTTP), so a long call that
/// lost the race for the permit is started again.
pub async fn hold_the_permit(client: &Client) -> (LongCall, rmcp::model::CallToolResult) {
    let start = || {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(super::params("slow", json!({"ms": 120_000})))
                .await
        })
    };
    let mut long = start();
    let refused = within(10, "the long call holds the permit", async {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if long.is_finished() {
                let lost = (&mut long).await.expect("the task ran").expect("answered");
                assert!(
                    text(&lost).starts_with("too many concurrent calls"),
                    "{}",
                    text(&lost)
                );
                long = start();
                continue;
            }
            let probe = call(client, "slow", json!({"ms": 1}))
                .await
                .expect("answered");
            if is_error(&probe) {
                return probe;
            }
        }
    })
    .await;
    (long, refused)
}

fn error_code(result: &rmcp::model::CallToolResult) -> Option<String> {
    let meta = result.meta.as_ref()?;
    meta.0
        .get("io.toolgate/error")?
        .get("code")?
        .as_str()
        .map(str::to_owned)
}
