//! Reading a waiting call over MCP runs `toolgate.outcome` as the caller, through the
//! pipeline: a caller the authorization policy does not allow that tool is told so — never
//! that their task does not exist, which would have their client drop a call that still
//! waits — and may still withdraw the call. The shipped example lets its analyst read his.

use serde_json::Value;
use toolgate_gateway::auth::hash_key;

use super::{approve, call_2026, call_as_task, sleep_waits, task_request};
use crate::common::{EXAMPLE_CONFIG, Gateway, key};

/// `sleep` waits; admins may call everything, analysts `sleep` alone (not
/// `toolgate.outcome`).
fn analysts_may_not_read_outcomes() -> String {
    format!(
        "{}  authorization:\n    rules:\n      - {{ effect: allow, roles: [admin] }}\n      - {{ effect: allow, roles: [analyst], tools: [sleep] }}\n",
        sleep_waits()
    )
}

/// Asserts `answer` is the JSON-RPC error of a read refused by the authorization policy.
fn refused_by_policy(answer: &Value) {
    let error = &answer["error"];
    let said = error["message"].as_str().unwrap_or_default();
    assert!(!said.contains("no task"), "not an unknown task: {answer}");
    assert!(
        said.contains("the authorization policy does not allow you that tool"),
        "{answer}"
    );
    assert!(
        said.contains("ask an operator to allow `toolgate.outcome`"),
        "{answer}"
    );
    assert_eq!(error["data"]["code"], "forbidden", "{answer}");
}

#[tokio::test]
async fn a_caller_not_allowed_the_outcome_tool_is_told_so_and_not_that_the_task_is_unknown() {
    let gateway = Gateway::start(&analysts_may_not_read_outcomes());
    let id = call_as_task(&gateway, "bob").await;

    refused_by_policy(&task_request(&gateway, "bob", "tasks/get", &id).await);
    // Asking again with `requestState` is refused as plainly, not answered as the end
    // of the call.
    let waiting = call_2026(&gateway, "bob", "sleep", None).await["result"].clone();
    let state = waiting["requestState"].as_str().expect("a state");
    refused_by_policy(&call_2026(&gateway, "bob", "sleep", Some(state)).await);

    // Withdrawing is no call of a tool: bob may always withdraw his own waiting call.
    let withdrawn = task_request(&gateway, "bob", "tasks/cancel", &id).await;
    assert_eq!(withdrawn["result"]["resultType"], "complete", "{withdrawn}");
    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 404, "withdrawn: {}", approved.body);
}

/// The shipped example configuration, with the tests' keys for its alice and bob.
fn example_config() -> String {
    let example = std::fs::read_to_string(EXAMPLE_CONFIG).expect("the example configuration");
    let mut config = example.clone();
    for (user, demo_key) in [
        ("alice", "tg_demo_alice_admin_key"),
        ("bob", "tg_demo_bob_analyst_key"),
    ] {
        config = config.replace(&hash_key(demo_key), &hash_key(&key(user)));
    }
    assert_ne!(config, example, "the demo keys' hashes are in the example");
    config
}

#[tokio::test]
async fn with_the_example_configuration_bob_polls_his_waiting_call_as_a_task_until_it_completes() {
    let gateway = Gateway::start(&example_config());
    let id = call_as_task(&gateway, "bob").await;

    let working = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(working["result"]["status"], "working", "{working}");

    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let done = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("slept_ms"), "the call's own result: {done}");
}

#[tokio::test]
async fn a_caller_allowed_the_outcome_tool_reads_a_working_task_under_an_authorization_policy() {
    let config = analysts_may_not_read_outcomes()
        .replace("tools: [sleep] }", "tools: [sleep, toolgate.outcome] }");
    let gateway = Gateway::start(&config);
    let id = call_as_task(&gateway, "bob").await;
    let working = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(working["result"]["status"], "working", "{working}");
    // Another analyst, allowed the tool too, is told only that it is no task of his.
    let stranger = task_request(&gateway, "dave", "tasks/get", &id).await;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
    let said = stranger["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("no task"), "{stranger}");
}

/// An ended task was created when its call was made, not when it is read: the `createdAt`
/// of a completed or a cancelled task is the one it had while its call waited.
#[tokio::test]
async fn an_ended_task_is_created_when_its_call_was_made_not_when_it_is_read() {
    let gateway = Gateway::start(&sleep_waits());
    let approved = call_as_task(&gateway, "bob").await;
    let withdrawn = call_as_task(&gateway, "bob").await;
    let created = |answer: &Value| answer["result"]["createdAt"].as_str().map(str::to_owned);
    let when_approved = created(&task_request(&gateway, "bob", "tasks/get", &approved).await);
    let when_withdrawn = created(&task_request(&gateway, "bob", "tasks/get", &withdrawn).await);
    assert!(when_approved.is_some() && when_withdrawn.is_some());
    // `createdAt` is to the second: read in a later one, "now" would differ.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    let decided = approve(&gateway, "alice", &approved).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let cancel = task_request(&gateway, "bob", "tasks/cancel", &withdrawn).await;
    assert_eq!(cancel["result"]["resultType"], "complete", "{cancel}");

    let done = task_request(&gateway, "bob", "tasks/get", &approved).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(created(&done), when_approved, "{done}");
    let cancelled = task_request(&gateway, "bob", "tasks/get", &withdrawn).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    assert_eq!(created(&cancelled), when_withdrawn, "{cancelled}");
}
