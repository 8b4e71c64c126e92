//! An approver whose client goes away while the call they approved runs: the decision
//! holds. The call runs to its end, its caller reads the outcome, and the decision is
//! recorded (logged, in the decided listing and history) — and a shutdown waits for the
//! call as for any other in flight.
//!
//! The approver's request is dropped once the call has left the waiting list and while
//! its `sleep` still runs; with the decision taken inside the request, that would cancel
//! the call and lose every trace of it.

use std::time::Duration;

use serde_json::json;
use tokio::task::JoinHandle;

use super::{list, listed_ids, show, suspension_id, users};
use crate::common::{Answer, Gateway, client, eventually, get, invoke, post};

/// How long the approved call sleeps: long enough for the test to drop the approver's
/// request while it runs, on a loaded machine too.
const SLEEP_MS: u64 = 3000;

/// `sleep` waits for approval; the shutdown grace is `grace`.
fn config(grace: &str) -> String {
    format!(
        "server:\n  shutdown_grace: {grace}\n  request_timeout: 5m\n\
tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n",
        users()
    )
}

/// Bob's `sleep` of [`SLEEP_MS`] waits; alice approves it and her client goes away once
/// the call has left the waiting list (it runs), before it is answered. The call's id.
async fn approve_and_leave(gateway: &Gateway) -> String {
    let id = suspension_id(&invoke(gateway, "bob", "sleep", json!({"ms": SLEEP_MS})).await);
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let approving: JoinHandle<Answer> = tokio::spawn(async move {
        post(
            &client(),
            &url,
            Some("alice"),
            &json!({"decision": "approve"}),
        )
        .await
    });
    eventually(
        "the approved call leaves the waiting list",
        Duration::from_secs(20),
        || async { show(gateway, "alice", &id).await.body["status"] != "waiting" },
    )
    .await;
    assert!(
        !approving.is_finished(),
        "the approver was answered before their client went away: the test proves nothing"
    );
    // Dropping the request closes its connection.
    approving.abort();
    let _ = approving.await;
    id
}

/// The line of the log that says the call `id` was decided, if there is one.
fn decided_line(log: &str, id: &str) -> Option<String> {
    log.lines()
        .find(|line| line.contains("a waiting call was decided") && line.contains(id))
        .map(str::to_owned)
}

#[tokio::test]
async fn an_approval_whose_approver_goes_away_runs_and_is_recorded() {
    let gateway = Gateway::start(&config("30s"));

    let id = approve_and_leave(&gateway).await;

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
    assert_eq!(
        result["status"], "success",
        "the call ran to its end: {result}"
    );
    assert_eq!(result["output"]["slept_ms"], SLEEP_MS, "{result}");

    assert!(
        listed_ids(&list(&gateway, "alice", "status=decided").await).contains(&id),
        "listed as decided"
    );
    let history = get(
        &client(),
        &gateway.url("/v1/admin/decisions"),
        Some("alice"),
    )
    .await;
    assert_eq!(history.status, 200, "{}", history.body);
    let decision = history.body["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["id"] == id.as_str())
        .unwrap_or_else(|| panic!("the decision is in the history: {}", history.body));
    assert_eq!(decision["decision"], "approve", "{decision}");
    assert_eq!(decision["decided_by"], "alice", "{decision}");
    assert_eq!(decision["outcome"], "success", "{decision}");
    gateway
        .wait_for_log("a waiting call was decided", 1, Duration::from_secs(10))
        .await;
    let line = decided_line(&gateway.stderr(), &id).expect("the decision is logged");
    for fact in ["alice", "approve", "bob", "success"] {
        assert!(line.contains(fact), "{fact} missing: {line}");
    }
}

#[tokio::test]
async fn a_shutdown_waits_for_an_approved_call_whose_approver_went_away() {
    let mut gateway = Gateway::start(&config("60s"));

    let id = approve_and_leave(&gateway).await;
    gateway.signal("TERM");

    let exit = gateway.wait_exit(Duration::from_secs(30)).await;
    let log = gateway.stderr();
    let exit = exit.unwrap_or_else(|| panic!("still running after the call's end:\n{log}"));
    assert!(exit.success(), "exit {exit}; stderr:\n{log}");
    let line = decided_line(&log, &id)
        .unwrap_or_else(|| panic!("the gateway stopped before the call was decided:\n{log}"));
    assert!(line.contains("success"), "the call ran to its end: {line}");
}

#[tokio::test]
async fn an_approved_call_whose_approver_went_away_is_cut_at_the_end_of_the_grace() {
    let mut gateway = Gateway::start(&config("300ms"));

    let id = approve_and_leave(&gateway).await;
    gateway.signal("TERM");

    let exit = gateway.wait_exit(Duration::from_secs(30)).await;
    let log = gateway.stderr();
    let exit = exit.unwrap_or_else(|| panic!("still running after the grace:\n{log}"));
    assert!(exit.success(), "exit {exit}; stderr:\n{log}");
    let line = decided_line(&log, &id)
        .unwrap_or_else(|| panic!("the cut call was not decided before the exit:\n{log}"));
    assert!(line.contains("error"), "the cut ended the call: {line}");
}
