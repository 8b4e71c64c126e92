//! The outcomes of decided calls are kept for their callers under a cap per caller: one
//! ordinary user who withdraws their own calls in a loop (each withdrawal keeps an outcome)
//! loses their own oldest outcomes, never another caller's, in memory and on Redis. An
//! outcome Redis could not keep as the call ended is kept once Redis is back, never lost.

use std::time::Duration;

use serde_json::json;

use super::{show, suspension_id, takes_tasks, tenant_user_yaml};
use crate::common::{self, Gateway, OwnRedis, client, eventually, invoke, post, user_yaml};

/// alice: admin of no tenant; bob: analyst of globex; dave: analyst of no tenant. At most
/// 5 calls waiting, or 5 outcomes kept, per caller, and 50 in all. `state`, when given,
/// comes first (a `state:` section).
fn config(state: &str) -> String {
    format!(
        "{state}tools:\n  builtin: [sleep]\nusers:\n{}{}{}policies:\n  approval:\n    tools: [sleep]\n    max_pending: 50\n    max_pending_per_user: 5\n",
        user_yaml("alice", &["admin"]),
        tenant_user_yaml("bob", "globex", "bob_globex", &["analyst"]),
        user_yaml("dave", &["analyst"]),
    )
}

/// Bob's call waits and alice approves it; then dave makes and withdraws (MCP
/// `tasks/cancel`) more calls than the store keeps outcomes in all. Bob still reads his
/// outcome, and dave his latest.
async fn one_callers_withdrawals_leave_another_callers_outcome(gateway: &Gateway) {
    let bobs = suspension_id(&invoke(gateway, "bob_globex", "sleep", json!({"ms": 3})).await);
    let url = gateway.url(&format!("/v1/suspensions/{bobs}/resume"));
    let approved = post(
        &client(),
        &url,
        Some("alice"),
        &json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(show(gateway, "bob_globex", &bobs).await.status, 200);

    let mut daves = String::new();
    for i in 0..60u32 {
        let arguments = json!({"ms": 100 + i});
        let params = json!({"name": "sleep", "arguments": arguments, "_meta": takes_tasks()});
        let (status, created) =
            common::mcp_2026(gateway, "dave", "tools/call", Some("sleep"), params).await;
        assert_eq!(status, 200, "{created}");
        daves = created["result"]["taskId"]
            .as_str()
            .expect("a task")
            .to_owned();
        let params = json!({"taskId": daves, "_meta": takes_tasks()});
        let (status, withdrawn) =
            common::mcp_2026(gateway, "dave", "tasks/cancel", Some(&daves), params).await;
        assert_eq!(status, 200, "{withdrawn}");
    }

    let after = show(gateway, "bob_globex", &bobs).await;
    assert_eq!(
        after.status, 200,
        "dave's 60 withdrawals evicted bob's outcome: {}",
        after.body
    );
    assert_eq!(after.body["status"], "decided", "{}", after.body);
    let latest = show(gateway, "dave", &daves).await;
    assert_eq!(latest.status, 200, "{}", latest.body);
}

#[tokio::test]
async fn one_callers_withdrawals_do_not_evict_another_tenants_kept_outcome() {
    let gateway = Gateway::start(&config(""));
    one_callers_withdrawals_leave_another_callers_outcome(&gateway).await;
}

#[tokio::test]
async fn one_callers_withdrawals_do_not_evict_another_tenants_kept_outcome_on_redis() {
    let test = "one_callers_withdrawals_do_not_evict_another_tenants_kept_outcome_on_redis";
    let Some(redis) = common::redis_or_skip(test) else {
        return;
    };
    let prefix = format!("tgtest{}x{:x}", std::process::id(), common::random_u32());
    let gateway = Gateway::start(&config(&format!(
        "state:\n  url: {redis}\n  key_prefix: {prefix}\n"
    )));
    one_callers_withdrawals_leave_another_callers_outcome(&gateway).await;
    drop(gateway);
    common::redis_remove_keys_under(&redis, &prefix);
}

/// bob's call runs 1.5 s once alice approves it; 0.5 s into the run Redis hangs, so the
/// end of the call cannot be kept, and it is back a moment after alice has her answer.
/// bob reads the call's real outcome soon after — not `running` until its deadline and
/// then `outcome_lost`.
#[tokio::test]
async fn an_outcome_redis_could_not_keep_as_the_call_ended_is_kept_once_redis_is_back() {
    let test = "an_outcome_redis_could_not_keep_as_the_call_ended_is_kept_once_redis_is_back";
    let Some(redis) = OwnRedis::start_or_skip(test) else {
        return;
    };
    let gateway = Gateway::start(&config(&format!(
        "state:\n  url: {}\n  deadline: 200ms\n",
        redis.url
    )));
    let id = suspension_id(&invoke(&gateway, "dave", "sleep", json!({"ms": 1500})).await);
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let approving = tokio::spawn(async move {
        let decision = json!({"decision": "approve"});
        post(&client(), &url, Some("alice"), &decision).await
    });

    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.hang();
    let approved = tokio::time::timeout(Duration::from_secs(10), approving)
        .await
        .expect("alice is answered while Redis hangs")
        .expect("alice's request");
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.resume();

    assert_eq!(approved.status, 200, "{}", approved.body);
    assert!(
        gateway
            .stderr()
            .contains("the outcome of a decided call could not be kept"),
        "the end was not kept at first: {}",
        gateway.stderr()
    );
    eventually(
        "dave reads the outcome",
        Duration::from_secs(10),
        || async {
            let shown = show(&gateway, "dave", &id).await;
            shown.status == 200 && shown.body["status"] == "decided"
        },
    )
    .await;
    let shown = show(&gateway, "dave", &id).await;
    assert_eq!(shown.body["result"]["status"], "success", "{}", shown.body);
    let read = invoke(&gateway, "dave", "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["output"]["status"], "decided", "{}", read.body);
    let result = &read.body["output"]["result"];
    assert_eq!(result["status"], "success", "{}", read.body);
}
