//! A decided call that still runs is its caller's to read: from the moment an approver
//! takes it out of the waiting list until its outcome is kept, `GET /v1/suspensions/{id}`
//! answers `running`, `toolgate.outcome` `{"status": "running"}` and MCP `tasks/get` a
//! `working` task saying who approved it — never "unknown", which would have a client drop
//! a call that runs. Its outcome replaces the running record, counted once against the
//! caller's cap, in memory and on Redis. An approver's `reason` is held to the rule of ids:
//! no control or invisible formatting characters.

use std::time::Duration;

use serde_json::json;

use super::{
    approve, decide, message, show, sleep_waits, suspension_id, takes_tasks, task_request, users,
};
use crate::common::{self, Gateway, client, eventually, invoke, key, post_with};

/// A `tools/call` of `sleep` for `ms` as `user` from a client that takes tasks: its id.
async fn sleep_as_task(gateway: &Gateway, user: &str, ms: u64) -> String {
    let params = json!({"name": "sleep", "arguments": {"ms": ms}, "_meta": takes_tasks()});
    let (status, created) =
        common::mcp_2026(gateway, user, "tools/call", Some("sleep"), params).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    created["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_owned()
}

#[tokio::test]
async fn an_approved_call_still_running_reads_as_running_to_its_caller_everywhere() {
    let gateway = Gateway::start(&sleep_waits());
    // Far longer than the test: it is read while it runs, never waited for.
    let id = sleep_as_task(&gateway, "bob", 600_000).await;
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let approved = post_with(
        &client(),
        &url,
        Some(&key("alice")),
        &json!({"decision": "approve"}),
        &[("x-toolgate-timeout-ms", "300")],
    )
    .await;
    assert_eq!(approved.status, 202, "{}", approved.body);

    let shown = show(&gateway, "bob", &id).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.body["status"], "running", "{}", shown.body);
    assert_eq!(shown.body["tool"], "sleep", "{}", shown.body);
    assert_eq!(shown.body["user"], "bob", "{}", shown.body);
    assert_eq!(shown.body["decided_by"], "alice", "{}", shown.body);
    assert!(shown.body["running_since"].is_string(), "{}", shown.body);
    assert!(shown.body["deadline"].is_string(), "{}", shown.body);
    // An approver sees it as the caller does; another caller not at all.
    assert_eq!(show(&gateway, "carol", &id).await.body["status"], "running");
    let stranger = show(&gateway, "dave", &id).await;
    assert_eq!(stranger.status, 404, "{}", stranger.body);

    let read = invoke(&gateway, "bob", "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["output"]["status"], "running", "{}", read.body);
    assert_eq!(read.body["output"]["decided_by"], "alice", "{}", read.body);
    let theirs = invoke(&gateway, "dave", "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(theirs.error_code(), "unknown_suspension", "{}", theirs.body);

    let task = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(task["result"]["status"], "working", "{task}");
    let said = task["result"]["statusMessage"].as_str().unwrap_or_default();
    assert!(said.starts_with("approved by `alice`; running"), "{task}");
    let stranger = task_request(&gateway, "dave", "tasks/get", &id).await;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");

    // Listed with the decided calls, as running.
    let listed = common::get(
        &client(),
        &gateway.url("/v1/suspensions?status=decided"),
        Some("alice"),
    )
    .await;
    let item = (listed.body["suspensions"].as_array().into_iter().flatten())
        .find(|c| c["id"] == id.as_str())
        .unwrap_or_else(|| panic!("listed: {}", listed.body));
    assert_eq!(item["status"], "running", "{item}");
}

/// bob's outcomes are capped at 2; he makes two calls, both approved: each keeps a
/// running record, then its outcome in its place. Both outcomes are still there.
async fn a_running_record_is_replaced_by_the_outcome_and_counted_once(gateway: &Gateway) {
    let mut ids = Vec::new();
    for ms in [3, 4] {
        let id = suspension_id(&invoke(gateway, "bob", "sleep", json!({"ms": ms})).await);
        let approved = approve(gateway, "alice", &id).await;
        assert_eq!(approved.status, 200, "{}", approved.body);
        ids.push(id);
    }
    for (id, ms) in ids.iter().zip([3, 4]) {
        let outcome = show(gateway, "bob", id).await;
        assert_eq!(outcome.status, 200, "{id} evicted: {}", outcome.body);
        assert_eq!(outcome.body["status"], "decided", "{}", outcome.body);
        assert_eq!(outcome.body["result"]["output"]["slept_ms"], ms);
    }
}

fn capped_at_two(state: &str) -> String {
    format!("{state}{}    max_pending_per_user: 2\n", sleep_waits())
}

#[tokio::test]
async fn a_running_record_is_replaced_by_the_outcome_and_counted_once_in_memory() {
    let gateway = Gateway::start(&capped_at_two(""));
    a_running_record_is_replaced_by_the_outcome_and_counted_once(&gateway).await;
}

#[tokio::test]
async fn a_running_record_is_replaced_by_the_outcome_and_counted_once_on_redis() {
    let test = "a_running_record_is_replaced_by_the_outcome_and_counted_once_on_redis";
    let Some(redis) = common::redis_or_skip(test) else {
        return;
    };
    let prefix = format!("tgtest{}x{:x}", std::process::id(), common::random_u32());
    let state = format!("state:\n  url: {redis}\n  key_prefix: {prefix}\n");
    let gateway = Gateway::start(&capped_at_two(&state));
    a_running_record_is_replaced_by_the_outcome_and_counted_once(&gateway).await;
    drop(gateway);
    common::redis_remove_keys_under(&redis, &prefix);
}

#[tokio::test]
async fn an_approved_call_reads_running_then_its_outcome_once_it_ends() {
    let gateway = Gateway::start(&sleep_waits());
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 1500})).await);
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let approved = post_with(
        &client(),
        &url,
        Some(&key("alice")),
        &json!({"decision": "approve"}),
        &[("x-toolgate-timeout-ms", "100")],
    )
    .await;
    assert_eq!(approved.status, 202, "{}", approved.body);
    eventually(
        "bob reads the call's outcome",
        Duration::from_secs(30),
        || async { show(&gateway, "bob", &id).await.body["status"] == "decided" },
    )
    .await;
    let outcome = show(&gateway, "bob", &id).await;
    assert_eq!(outcome.body["result"]["output"]["slept_ms"], 1500);
}

#[tokio::test]
async fn a_reason_with_a_control_or_bidirectional_character_is_refused_naming_it() {
    let gateway = Gateway::start(&format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n",
        users()
    ));
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 1})).await);
    let forged = "looks fine\n2026-12-06T10:00:00Z INFO approved by security";
    for (decision, reason, named) in [
        ("approve", "ok \u{202e}lave", "U+202E"),
        ("reject", forged, "U+000A"),
        ("approve", "zero\u{200b}width", "U+200B"),
    ] {
        let body = json!({"decision": decision, "reason": reason});
        let refused = decide(&gateway, "alice", &id, body).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_reason"),
            "{}",
            refused.body
        );
        let said = message(&refused);
        assert!(said.contains(named), "{said}");
        assert!(said.contains("control characters"), "{said}");
        assert!(!said.contains('\n') && !said.contains('\u{202e}'), "{said}");
    }
    assert_eq!(show(&gateway, "bob", &id).await.body["status"], "waiting");
    let plain = json!({"decision": "approve", "reason": "ticket 42 — fine by me"});
    let approved = decide(&gateway, "alice", &id, plain).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
}
