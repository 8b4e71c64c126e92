//! An approver's deadline (`x-toolgate-timeout-ms`) bounds how long their request waits for
//! the answer, never the call they approve: the call is its caller's, and runs under the
//! bound of a call (`server.request_timeout`) and the tool's `policies.timeouts`. An
//! approver whose deadline passes while the call runs is answered 202 `running`, and the
//! call goes on to its end, recorded as usual; its caller reads its outcome.

use std::time::Duration;

use serde_json::json;

use super::{show, suspension_id, users};
use crate::common::{Answer, Gateway, client, eventually, get, invoke, key, post_with};

/// How long the approved call sleeps: well past the approver's deadline.
const SLEEP_MS: u64 = 2000;

/// The approver's deadline: far shorter than the call.
const APPROVER_TIMEOUT_MS: &str = "300";

/// `sleep` waits for approval; `policies`, when given, adds to `policies:`.
fn config(policies: &str) -> String {
    format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n{policies}",
        users()
    )
}

/// `approver` approves the call `id`, sending `x-toolgate-timeout-ms: timeout_ms`.
async fn approve_within(gateway: &Gateway, approver: &str, id: &str, timeout_ms: &str) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    post_with(
        &client(),
        &url,
        Some(&key(approver)),
        &json!({"decision": "approve"}),
        &[("x-toolgate-timeout-ms", timeout_ms)],
    )
    .await
}

#[tokio::test]
async fn an_approvers_short_deadline_is_answered_running_and_the_call_still_completes() {
    let gateway = Gateway::start(&config(""));
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": SLEEP_MS})).await);

    let approved = approve_within(&gateway, "alice", &id, APPROVER_TIMEOUT_MS).await;

    // The approver is told, without an error, that the call runs and where its outcome is.
    assert_eq!(approved.status, 202, "{}", approved.body);
    assert_eq!(approved.body["status"], "running", "{}", approved.body);
    assert_eq!(
        approved.body["suspension_id"],
        id.as_str(),
        "{}",
        approved.body
    );
    assert_eq!(approved.body["tool"], "sleep", "{}", approved.body);
    assert_eq!(approved.body["user"], "bob", "{}", approved.body);
    assert_eq!(approved.body["decision"], "approve", "{}", approved.body);
    let message = approved.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("GET /v1/suspensions/{id}")),
        "{message}"
    );

    // The call is bob's: it runs to its end, past the approver's deadline.
    eventually(
        "bob reads the outcome of his approved call",
        Duration::from_secs(30),
        || async { show(&gateway, "bob", &id).await.body["status"] == "decided" },
    )
    .await;
    let outcome = show(&gateway, "bob", &id).await;
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert_eq!(outcome.body["status"], "decided", "{}", outcome.body);
    let result = &outcome.body["result"];
    assert_eq!(result["status"], "success", "not cut short: {result}");
    assert_eq!(result["output"]["slept_ms"], SLEEP_MS, "{result}");

    // Recorded as usual: in the decided history, with its outcome.
    let history = get(
        &client(),
        &gateway.url("/v1/admin/decisions"),
        Some("alice"),
    )
    .await;
    assert_eq!(history.status, 200, "{}", history.body);
    let decision = (history.body["decisions"].as_array().into_iter().flatten())
        .find(|d| d["id"] == id.as_str())
        .unwrap_or_else(|| panic!("the decision is in the history: {}", history.body));
    assert_eq!(decision["decided_by"], "alice", "{decision}");
    assert_eq!(decision["outcome"], "success", "{decision}");
}

#[tokio::test]
async fn an_approver_with_time_enough_gets_the_calls_result() {
    let gateway = Gateway::start(&config(""));
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 50})).await);

    let approved = approve_within(&gateway, "alice", &id, "20000").await;

    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.body["output"]["slept_ms"], 50, "{}", approved.body);
}

#[tokio::test]
async fn an_approved_call_is_still_bounded_by_the_tools_timeout_policy() {
    let gateway = Gateway::start(&config("  timeouts:\n    tools: { sleep: 300ms }\n"));
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": SLEEP_MS})).await);

    let approved = approve_within(&gateway, "alice", &id, "20000").await;

    assert_eq!(approved.status, 504, "{}", approved.body);
    assert_eq!(approved.error_code(), "timeout", "{}", approved.body);
}
