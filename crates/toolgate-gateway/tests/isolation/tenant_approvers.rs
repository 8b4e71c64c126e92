//! An approver of one tenant approves within it and sees nothing of another: an expired
//! call of another tenant is as unknown to them as the waiting call was; what covers every
//! tenant — the per-tool statistics and the pins — is an operator's (an approver without a
//! tenant) only. An approver's own call is not theirs to approve, whichever protocol it
//! was made over. And a decision that is not one is told by its field, in words.
//!
//! Users, by API key: `alice` an approver of no tenant (an operator), `olga` an approver of
//! `acme`, `bob` an analyst of `globex`.

use std::time::Duration;

use serde_json::json;
use toolgate_gateway::auth::hash_key;

use crate::common::{
    Answer, Gateway, client, eventually, get, invoke, key, mcp_rpc, open_session, post, user_yaml,
};

/// A `users:` entry of `id` in `tenant`, with the key of `key_name`.
fn tenant_user_yaml(id: &str, tenant: &str, key_name: &str, roles: &[&str]) -> String {
    format!(
        "  - {{ id: {id}, tenant: {tenant}, key_sha256: \"{}\", roles: [{}] }}\n",
        hash_key(&key(key_name)),
        roles.join(", ")
    )
}

fn users() -> String {
    format!(
        "users:\n{}{}{}",
        user_yaml("alice", &["admin"]),
        tenant_user_yaml("olga", "acme", "olga", &["admin"]),
        tenant_user_yaml("bob", "globex", "bob", &["analyst"]),
    )
}

async fn show(gateway: &Gateway, user: &str, id: &str) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}"));
    get(&client(), &url, Some(user)).await
}

async fn reject(gateway: &Gateway, user: &str, id: &str) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    post(&client(), &url, Some(user), &json!({"decision": "reject"})).await
}

async fn delete(gateway: &Gateway, user: &str, path: &str) -> Answer {
    let request = client().delete(gateway.url(path)).bearer_auth(key(user));
    Answer::read(request.send().await.expect("the gateway answers")).await
}

#[tokio::test]
async fn another_tenants_expired_call_is_unknown_to_an_approver_of_one_tenant() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n    expire_after: 1s\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let made = invoke(&gateway, "bob", "sleep", json!({"ms": 1})).await;
    assert_eq!(made.status, 202, "{}", made.body);
    let id = made.body["suspension_id"].as_str().unwrap().to_owned();
    assert_eq!(
        show(&gateway, "olga", &id).await.status,
        404,
        "hidden while it waits"
    );
    eventually("bob's call expires", Duration::from_secs(30), || async {
        show(&gateway, "bob", &id).await.status == 410
    })
    .await;

    let never = format!("susp-{}", "0".repeat(32));
    for (what, id) in [("bob's expired call", &id), ("an id never given", &never)] {
        let (shown, rejected) = (
            show(&gateway, "olga", id).await,
            reject(&gateway, "olga", id).await,
        );
        assert_eq!(
            (
                shown.status,
                shown.error_code(),
                rejected.status,
                rejected.error_code()
            ),
            (404, "unknown_suspension", 404, "unknown_suspension"),
            "{what}, to olga of acme: {} / {}",
            shown.body,
            rejected.body
        );
    }
    // Its caller and an operator are told it expired.
    for user in ["bob", "alice"] {
        let shown = show(&gateway, user, &id).await;
        assert_eq!(
            (shown.status, shown.error_code()),
            (410, "suspension_expired"),
            "{user}"
        );
    }
}

#[tokio::test]
async fn the_statistics_and_pins_of_every_tenant_are_an_operators_and_not_a_tenant_approvers() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "tools:\n  builtin: [echo]\n{}pins:\n  path: {}\npolicies:\n  approval:\n    tools: []\n",
        users(),
        dir.path().join("pins.json").display()
    );
    let gateway = Gateway::start(&config);
    let called = invoke(&gateway, "bob", "echo", json!({"text": "globex's project"})).await;
    assert_eq!(called.status, 200, "{}", called.body);
    eventually("bob's call is counted", Duration::from_secs(10), || async {
        let stats = get(&client(), &gateway.url("/v1/admin/stats"), Some("alice")).await;
        stats.body["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["tool"] == "echo" && t["calls"] == 1))
    })
    .await;

    let refused = [
        get(&client(), &gateway.url("/v1/admin/stats"), Some("olga")).await,
        delete(&gateway, "olga", "/v1/admin/stats").await,
        get(&client(), &gateway.url("/v1/admin/pins"), Some("olga")).await,
        delete(&gateway, "olga", "/v1/admin/pins/echo").await,
        post(
            &client(),
            &gateway.url("/v1/admin/pins/echo/accept"),
            Some("olga"),
            &json!({}),
        )
        .await,
    ];
    for answer in &refused {
        assert_eq!(
            (answer.status, answer.error_code()),
            (403, "not_an_operator"),
            "{}",
            answer.body
        );
        let message = answer.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("tenant `acme`"), "{message}");
        assert!(!message.contains("globex"), "{message}");
    }
    // Nothing was reset: the operator still sees bob's call, and may see the pins.
    let stats = get(&client(), &gateway.url("/v1/admin/stats"), Some("alice")).await;
    assert!(
        stats.body["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["tool"] == "echo" && t["calls"] == 1)),
        "{}",
        stats.body
    );
    let pins = get(&client(), &gateway.url("/v1/admin/pins"), Some("alice")).await;
    assert_eq!(pins.status, 200, "{}", pins.body);
    // Their own tenant's decisions stay theirs to see.
    let decisions = get(&client(), &gateway.url("/v1/admin/decisions"), Some("olga")).await;
    assert_eq!(decisions.status, 200, "{}", decisions.body);
}

#[tokio::test]
async fn a_decision_that_is_not_one_is_told_by_its_field_in_words() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let made = invoke(&gateway, "bob", "sleep", json!({"ms": 1})).await;
    let id = made.body["suspension_id"].as_str().unwrap().to_owned();
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let cases = [
        (json!({"decision": 5}), "`decision`", "a string"),
        (
            json!({"decision": "maybe"}),
            "`decision` must be `approve`, `reject`, `complete` or `approve_retry`, not `maybe`",
            "",
        ),
        (
            json!({"decision": "approve", "reason": 7}),
            "`reason`",
            "a string",
        ),
        (
            json!({"decision": "approve", "output": {}}),
            "`output` goes only with",
            "complete",
        ),
        (
            json!({"decision": "approve_retry", "reason": "ok"}),
            "`reason` goes only with",
            "reject",
        ),
        (json!({"decision": "complete"}), "needs an `output`", ""),
        (json!({"reason": "ok"}), "`decision`", "missing"),
        (
            json!({"decision": "approve", "extra": 1}),
            "`extra`",
            "unknown field",
        ),
    ];
    for (body, says, and) in cases {
        let answer = post(&client(), &url, Some("alice"), &body).await;
        let message = answer.body["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            (answer.status, answer.error_code()),
            (400, "bad_json"),
            "{body}: {}",
            answer.body
        );
        assert!(
            message.contains(says) && message.contains(and),
            "{body}: {message}"
        );
        assert!(
            !message.contains("variant") && !message.contains("identifier"),
            "{body}: {message}"
        );
    }
    // The call still waits, and a decision that is one decides it.
    let approved = post(
        &client(),
        &url,
        Some("alice"),
        &json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
}

#[tokio::test]
async fn an_approvers_call_made_over_mcp_is_not_theirs_to_approve_over_v1_nor_another_tenants() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let session = open_session(&gateway, "alice").await;
    let params = json!({"name": "sleep", "arguments": {"ms": 1}});
    let waiting = mcp_rpc(&gateway, "alice", &session, "tools/call", params).await;
    let id = waiting["_meta"]["io.toolgate/error"]["suspensionId"]
        .as_str()
        .unwrap_or_else(|| panic!("the suspension id: {waiting}"))
        .to_owned();
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    for decision in ["approve", "approve_retry"] {
        let own = post(
            &client(),
            &url,
            Some("alice"),
            &json!({ "decision": decision }),
        )
        .await;
        assert_eq!(
            (own.status, own.error_code()),
            (403, "four_eyes"),
            "{decision}: {}",
            own.body
        );
    }
    // An approver of acme does not see a call of no tenant, nor does a caller of globex.
    assert_eq!(reject(&gateway, "olga", &id).await.status, 404);
    assert_eq!(show(&gateway, "bob", &id).await.status, 404);
    assert_eq!(
        show(&gateway, "alice", &id).await.status,
        200,
        "it still waits"
    );
}
