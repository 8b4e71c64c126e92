//! A caller may withdraw their call while it runs after an approval (MCP `tasks/cancel`,
//! SEP-2663): the withdrawal is kept at once — the task reads `cancelled`, and stays so
//! once the call ends —, the gateway running the call stops it within a second or two,
//! on whichever replica the cancel arrived, and the approver waiting on `resume` is told
//! that the caller withdrew it (409 `withdrawn`), not a failure. In memory and on Redis.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{show, takes_tasks, task_request, users};
use crate::common::{self, Answer, Gateway, client, eventually, invoke, key, post_with};

/// `sleep` waits for approval, and every call is audited to `audit`.
fn audited_sleep_waits(state: &str, audit: &Path) -> String {
    format!(
        "{state}tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n\
audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
        users(),
        audit.display()
    )
}

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

/// The audit record of bob's approved run, once written (the only one in these tests).
async fn audited_run(audit: &Path) -> Value {
    let mut found = None;
    eventually(
        "the approved run is audited",
        Duration::from_secs(10),
        || {
            found = std::fs::read_to_string(audit)
                .unwrap_or_default()
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|record| record.get("approval").is_some() && record["user_id"] == "bob");
            let done = found.is_some();
            async move { done }
        },
    )
    .await;
    found.expect("found")
}

/// bob's `sleep` of ten minutes waits as a task on `running_on`; alice approves it there
/// and waits for the answer; once it runs, bob cancels the task on `cancelled_on`.
async fn a_running_call_cancelled_by_its_caller_is_stopped_and_stays_cancelled(
    running_on: &Gateway,
    cancelled_on: &Gateway,
    audit: &Path,
) {
    let id = sleep_as_task(running_on, "bob", 600_000).await;
    let url = running_on.url(&format!("/v1/suspensions/{id}/resume"));
    let began = Instant::now();
    let approver = tokio::spawn(async move {
        let body = json!({"decision": "approve"});
        let timeout = [("x-toolgate-timeout-ms", "60000")];
        post_with(&client(), &url, Some(&key("alice")), &body, &timeout).await
    });
    eventually(
        "the approved call runs",
        Duration::from_secs(10),
        || async { show(cancelled_on, "bob", &id).await.body["status"] == "running" },
    )
    .await;

    let cancel = task_request(cancelled_on, "bob", "tasks/cancel", &id).await;
    assert_eq!(cancel["result"]["resultType"], "complete", "{cancel}");
    // Cancelled from the acknowledgement on, on either replica.
    for gateway in [cancelled_on, running_on] {
        let task = task_request(gateway, "bob", "tasks/get", &id).await;
        assert_eq!(task["result"]["status"], "cancelled", "{task}");
    }

    // The approver is told, long before the ten minutes (or the call's deadline of 30 s).
    let answered: Answer = tokio::time::timeout(Duration::from_secs(20), approver)
        .await
        .expect("the approver is answered once the call is stopped")
        .expect("the request ran");
    assert!(began.elapsed() < Duration::from_secs(20));
    assert_eq!(
        (answered.status, answered.error_code()),
        (409, "withdrawn"),
        "{}",
        answered.body
    );
    let said = answered.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.contains("`bob`, who made the call")
            && said.contains("withdrew it while it ran")
            && said.contains("`sleep` was stopped"),
        "{said}"
    );

    // The tool was cancelled, not run to its end, and the audit says so.
    let record = audited_run(audit).await;
    assert_eq!(record["code"], "cancelled", "{record}");
    assert_eq!(record["approval"]["decided_by"], "alice", "{record}");

    // Still cancelled once the call ended, and withdrawn wherever it is read.
    let task = task_request(running_on, "bob", "tasks/get", &id).await;
    assert_eq!(task["result"]["status"], "cancelled", "{task}");
    let said = task["result"]["statusMessage"].as_str().unwrap_or_default();
    assert!(said.contains("withdrawn by `bob`"), "{task}");
    let shown = show(running_on, "bob", &id).await;
    assert_eq!(shown.body["status"], "decided", "{}", shown.body);
    assert_eq!(
        shown.body["result"]["error"]["code"], "withdrawn",
        "{}",
        shown.body
    );
    let read = invoke(running_on, "bob", "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(
        read.body["output"]["result"]["error"]["code"], "withdrawn",
        "{}",
        read.body
    );
}

#[tokio::test]
async fn a_running_call_cancelled_by_its_caller_is_stopped_and_stays_cancelled_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gateway = Gateway::start(&audited_sleep_waits("", &audit));
    a_running_call_cancelled_by_its_caller_is_stopped_and_stays_cancelled(
        &gateway, &gateway, &audit,
    )
    .await;
}

#[tokio::test]
async fn a_running_call_cancelled_on_another_replica_is_stopped_and_stays_cancelled_on_redis() {
    let test =
        "a_running_call_cancelled_on_another_replica_is_stopped_and_stays_cancelled_on_redis";
    let Some(redis) = common::redis_or_skip(test) else {
        return;
    };
    let prefix = format!("tgtest{}x{:x}", std::process::id(), common::random_u32());
    let state = format!("state:\n  url: {redis}\n  key_prefix: {prefix}\n");
    let dir = tempfile::tempdir().unwrap();
    let audit: [PathBuf; 2] = [dir.path().join("a.jsonl"), dir.path().join("b.jsonl")];
    let running_on = Gateway::start(&audited_sleep_waits(&state, &audit[0]));
    let cancelled_on = Gateway::start(&audited_sleep_waits(&state, &audit[1]));
    a_running_call_cancelled_by_its_caller_is_stopped_and_stays_cancelled(
        &running_on,
        &cancelled_on,
        &audit[0],
    )
    .await;
    drop((running_on, cancelled_on));
    common::redis_remove_keys_under(&redis, &prefix);
}

#[tokio::test]
async fn a_cancel_after_the_call_ended_is_acknowledged_and_the_task_stays_completed() {
    let gateway = Gateway::start(&super::sleep_waits());
    let id = sleep_as_task(&gateway, "bob", 1).await;
    let approved = super::approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);

    let cancel = task_request(&gateway, "bob", "tasks/cancel", &id).await;
    assert_eq!(cancel["result"]["resultType"], "complete", "{cancel}");
    let task = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(task["result"]["status"], "completed", "{task}");
    // Nobody else may withdraw it.
    let stranger = task_request(&gateway, "dave", "tasks/cancel", &id).await;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
}
