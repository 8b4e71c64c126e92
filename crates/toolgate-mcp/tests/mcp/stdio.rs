//! The MCP server over stdio, in a child process, driven by the rmcp client.

use crate::common;

use crate::common::{scenarios, stdio_client};
use serde_json::json;

#[tokio::test]
async fn stdio_lists_tools_with_schemas_and_annotations_filtered_per_principal() {
    let client = stdio_client(&[]).await;
    scenarios::list_shows_schemas_and_annotations_and_hides_admin_tools(&client).await;

    let admin = stdio_client(&[("TOOLGATE_DEMO_ROLES", "admin")]).await;
    let tools = common::within(20, "tools/list", admin.peer().list_all_tools())
        .await
        .expect("listed");
    assert!(
        tools.iter().any(|t| t.name == "admin_stats"),
        "an admin sees admin_stats"
    );
    let result = common::call(&admin, "admin_stats", json!({}))
        .await
        .expect("answered");
    assert_eq!(common::text(&result), "all quiet");
}

#[tokio::test]
async fn stdio_call_returns_structured_content() {
    let client = stdio_client(&[]).await;
    scenarios::call_returns_structured_content_for_an_object_output(&client).await;
}

#[tokio::test]
async fn stdio_invalid_arguments_are_a_tool_error() {
    let client = stdio_client(&[]).await;
    scenarios::invalid_arguments_are_a_tool_error_naming_the_argument(&client).await;
}

#[tokio::test]
async fn stdio_policy_denial_is_a_tool_error() {
    let client = stdio_client(&[]).await;
    scenarios::policy_denial_is_a_tool_error_with_the_reason(&client).await;

    let operator = stdio_client(&[("TOOLGATE_DEMO_ROLES", "operator")]).await;
    let result = common::call(&operator, "delete_all", json!({}))
        .await
        .expect("answered");
    assert_eq!(common::text(&result), "deleted nothing");
}

#[tokio::test]
async fn stdio_rate_limit_answers_with_retry_after() {
    let client = stdio_client(&[]).await;
    scenarios::rate_limit_answers_with_the_retry_after_delay(&client).await;
}

#[tokio::test]
async fn stdio_unknown_tool_is_a_json_rpc_error() {
    let client = stdio_client(&[]).await;
    scenarios::unknown_and_hidden_tools_are_protocol_errors(&client).await;
}

#[tokio::test]
async fn stdio_connection_is_the_session_scope() {
    let client = stdio_client(&[]).await;
    let other = stdio_client(&[]).await;
    scenarios::calls_of_one_connection_share_its_session(&client, &other).await;
}

#[tokio::test]
async fn stdio_cancellation_notification_releases_the_concurrency_permit() {
    let client = stdio_client(&[]).await;
    scenarios::cancelled_call_releases_its_concurrency_permit(&client).await;
}

#[tokio::test]
async fn stdio_principal_comes_from_the_server_configuration() {
    let client = stdio_client(&[("TOOLGATE_DEMO_USER", "carol")]).await;
    let result = common::call(&client, "whoami", json!({}))
        .await
        .expect("answered");
    assert_eq!(common::text(&result), "carol");
}
