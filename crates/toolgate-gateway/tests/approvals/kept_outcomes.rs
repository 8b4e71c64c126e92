//! The outcomes of decided calls are kept for their callers under a cap per caller: one
//! ordinary user who withdraws their own calls in a loop (each withdrawal keeps an outcome)
//! loses their own oldest outcomes, never another caller's, in memory and on Redis.

use serde_json::json;

use super::{show, suspension_id, takes_tasks, tenant_user_yaml};
use crate::common::{self, Gateway, client, invoke, post, user_yaml};

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
