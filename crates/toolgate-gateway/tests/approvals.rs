//! Calls that wait for approval, against the real binary: they count against their caller's
//! rate limits, one user cannot fill the store for everyone, they expire, they wait with
//! the validated and redacted input, they are authorized again when approved, and an
//! approver does not wave their own call through (`policies.approval`).

#[path = "approvals/approver_deadlines.rs"]
mod approver_deadlines;
mod common;
#[path = "approvals/gone_approvers.rs"]
mod gone_approvers;
#[path = "approvals/kept_outcomes.rs"]
mod kept_outcomes;
#[path = "approvals/lost_answers.rs"]
mod lost_answers;
#[path = "approvals/not_taken.rs"]
mod not_taken;
#[path = "approvals/reading_tasks.rs"]
mod reading_tasks;
#[path = "approvals/running_calls.rs"]
mod running_calls;
#[path = "approvals/withdrawn_while_running.rs"]
mod withdrawn_while_running;

use std::time::Duration;

use common::{Answer, Gateway, client, eventually, get, invoke, key, post, user_yaml};
use serde_json::{Value, json};
use toolgate_gateway::auth::hash_key;

/// `users:` with alice and carol (admins) and bob and dave (analysts).
fn users() -> String {
    format!(
        "users:\n{}{}{}{}",
        user_yaml("alice", &["admin"]),
        user_yaml("carol", &["admin"]),
        user_yaml("bob", &["analyst"]),
        user_yaml("dave", &["analyst"]),
    )
}

/// `sleep` waits for approval; the users of [`users`].
fn sleep_waits() -> String {
    format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n",
        users()
    )
}

/// The suspension id of a 202 answer.
fn suspension_id(answer: &Answer) -> String {
    assert_eq!(answer.status, 202, "{}", answer.body);
    assert_eq!(answer.body["status"], "suspended", "{}", answer.body);
    answer.body["suspension_id"]
        .as_str()
        .expect("suspension_id")
        .to_owned()
}

/// `sleep` for 1 ms as `user`: a call that waits for approval in these configurations.
async fn park(gateway: &Gateway, user: &str) -> Answer {
    invoke(gateway, user, "sleep", json!({"ms": 1})).await
}

async fn decide(gateway: &Gateway, approver: &str, id: &str, decision: Value) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    post(&client(), &url, Some(approver), &decision).await
}

async fn approve(gateway: &Gateway, approver: &str, id: &str) -> Answer {
    decide(gateway, approver, id, json!({"decision": "approve"})).await
}

async fn show(gateway: &Gateway, user: &str, id: &str) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}"));
    get(&client(), &url, Some(user)).await
}

fn message(answer: &Answer) -> String {
    answer.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------------------
// Break 6: parked calls are bounded

#[tokio::test]
async fn with_five_a_minute_the_sixth_call_is_refused_whether_or_not_the_first_five_wait() {
    let config = format!(
        "tools:\n  builtin: [calculator, sleep]\n{}{}",
        users(),
        [
            "policies:",
            "  approval:",
            "    tools: [sleep]",
            "  rate_limits:",
            "    - { name: sleepy, rate: 5/minute, partition: user, tools: [sleep] }",
            "    - { name: counting, rate: 5/minute, partition: user, tools: [calculator] }\n",
        ]
        .join("\n")
    );
    let gateway = Gateway::start(&config);

    for _ in 0..5 {
        suspension_id(&park(&gateway, "bob").await);
    }
    let sixth = park(&gateway, "bob").await;

    assert_eq!(sixth.status, 429, "{}", sixth.body);
    assert_eq!(sixth.error_code(), "rate_limited");
    assert!(
        sixth.headers.contains_key("retry-after"),
        "{:?}",
        sixth.headers
    );

    for _ in 0..5 {
        let ran = invoke(&gateway, "bob", "calculator", json!({"expression": "1+1"})).await;
        assert_eq!(ran.status, 200, "{}", ran.body);
    }
    let sixth = invoke(&gateway, "bob", "calculator", json!({"expression": "1+1"})).await;
    assert_eq!(sixth.status, 429, "{}", sixth.body);
}

#[tokio::test]
async fn one_user_at_the_cap_of_waiting_calls_is_refused_and_others_still_park() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n    max_pending_per_user: 3\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let mut bobs = Vec::new();
    for _ in 0..3 {
        bobs.push(suspension_id(&park(&gateway, "bob").await));
    }

    let fourth = park(&gateway, "bob").await;

    assert_eq!(fourth.status, 429, "{}", fourth.body);
    assert_eq!(fourth.error_code(), "too_many_suspended");
    let text = message(&fourth);
    assert!(
        text.contains("`bob` already has 3 calls waiting")
            && text.contains("wait until an approver decides"),
        "{text}"
    );
    suspension_id(&park(&gateway, "dave").await);

    let approved = approve(&gateway, "alice", &bobs[0]).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert!(approved.body["output"].is_object(), "{}", approved.body);
    suspension_id(&park(&gateway, "bob").await);
}

#[tokio::test]
async fn one_user_past_the_bytes_of_waiting_calls_is_refused_and_others_still_park() {
    let config = format!(
        "tools:\n  builtin: [echo]\n{}\
policies:\n  approval:\n    tools: [echo]\n    max_pending_bytes_per_user: 5KiB\n",
        users()
    );
    let gateway = Gateway::start(&config);
    // About 2 KiB each once kept (the input, its digest, the reason, the call's binding):
    // two fit in 5 KiB, a third does not.
    let large = || json!({"text": "x".repeat(1500)});
    let mut bobs = Vec::new();
    for _ in 0..2 {
        bobs.push(suspension_id(
            &invoke(&gateway, "bob", "echo", large()).await,
        ));
    }

    let third = invoke(&gateway, "bob", "echo", large()).await;

    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(third.error_code(), "too_many_suspended");
    let text = message(&third);
    assert!(
        text.contains("5120 bytes") && text.contains("smaller arguments"),
        "{text}"
    );
    suspension_id(&invoke(&gateway, "dave", "echo", large()).await);
    let approved = approve(&gateway, "alice", &bobs[0]).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    suspension_id(&invoke(&gateway, "bob", "echo", large()).await);
}

#[tokio::test]
async fn an_expired_call_says_it_expired_never_runs_and_frees_its_place() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n    max_pending_per_user: 1\n    expire_after: 1s\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let id = suspension_id(&park(&gateway, "bob").await);
    let shown = show(&gateway, "bob", &id).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert!(shown.body["expires_at"].is_string(), "{}", shown.body);
    assert_eq!(
        park(&gateway, "bob").await.status,
        429,
        "bob's one place is taken"
    );

    eventually("the call expires", Duration::from_secs(30), || async {
        show(&gateway, "bob", &id).await.status != 200
    })
    .await;

    let shown = show(&gateway, "bob", &id).await;
    assert_eq!(shown.status, 410, "{}", shown.body);
    assert_eq!(shown.error_code(), "suspension_expired");
    assert!(message(&shown).contains("expired"), "{}", shown.body);
    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 410, "{}", approved.body);
    assert_eq!(approved.error_code(), "suspension_expired");
    suspension_id(&park(&gateway, "bob").await);
}

#[tokio::test]
async fn another_user_gets_404_for_an_expired_call_they_do_not_own() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n    expire_after: 1s\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let id = suspension_id(&park(&gateway, "bob").await);
    assert_eq!(show(&gateway, "dave", &id).await.status, 404, "waiting");
    eventually("the call expires", Duration::from_secs(30), || async {
        show(&gateway, "bob", &id).await.status != 200
    })
    .await;
    let never = format!("susp-{}", "0".repeat(32));
    // Bodies with the id asked for written as `<id>`.
    let body = |answer: &Answer, id: &str| answer.body.to_string().replace(id, "<id>");

    let others = show(&gateway, "dave", &id).await;
    let unknown = show(&gateway, "dave", &never).await;

    assert_eq!(others.status, 404, "{}", others.body);
    assert_eq!(others.error_code(), "unknown_suspension");
    assert_eq!(
        body(&others, &id),
        body(&unknown, &never),
        "as an id never suspended"
    );
    let owners = show(&gateway, "bob", &id).await;
    assert_eq!(owners.status, 410, "{}", owners.body);
    assert_eq!(owners.error_code(), "suspension_expired");
    let approvers = show(&gateway, "carol", &id).await;
    assert_eq!(approvers.status, 410, "{}", approvers.body);

    // The same over MCP's `toolgate.outcome`.
    let outcome = |user: &'static str, id: String| {
        let gateway = &gateway;
        async move {
            let session = common::open_session(gateway, user).await;
            let answer = mcp_call(
                gateway,
                user,
                &session,
                "toolgate.outcome",
                json!({"id": id}),
            )
            .await;
            assert_eq!(answer["isError"], true, "{answer}");
            answer["_meta"]["io.toolgate/error"]["code"].clone()
        }
    };
    assert_eq!(outcome("dave", id.clone()).await, "unknown_suspension");
    assert_eq!(outcome("dave", never).await, "unknown_suspension");
    assert_eq!(outcome("bob", id).await, "suspension_expired");
}

#[tokio::test]
async fn a_waiting_call_keeps_its_validated_redacted_input_and_runs_with_it() {
    let config = format!(
        "tools:\n  builtin: [echo, sleep]\n{}\
policies:\n  approval:\n    tools: [echo, sleep]\n  redaction:\n    detectors: [email]\n",
        users()
    );
    let gateway = Gateway::start(&config);

    for bad in [json!({"ms": "soon"}), json!({"ms": 700_000})] {
        let refused = invoke(&gateway, "bob", "sleep", bad).await;
        assert_eq!(refused.status, 400, "refused, not parked: {}", refused.body);
    }
    let raw = json!({"text": "write to bob@example.com"});
    let id = suspension_id(&invoke(&gateway, "bob", "echo", raw).await);

    let shown = show(&gateway, "alice", &id).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(
        shown.body["input"],
        json!({"text": "write to [REDACTED:email]"})
    );
    assert!(
        !shown.body.to_string().contains("bob@example.com"),
        "{}",
        shown.body
    );

    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.body["output"]["text"], "write to [REDACTED:email]");
}

// ---------------------------------------------------------------------------------------
// Break 7: an approval is checked again

#[tokio::test]
async fn an_approval_after_a_reload_revoked_the_callers_access_refuses_the_call() {
    let config = |bobs_tools: &str| {
        format!(
            "tools:\n  builtin: [calculator, sleep]\n{}{}",
            users(),
            [
                "policies:",
                "  authorization:",
                "    default: deny",
                "    rules:",
                "      - { effect: allow, roles: [admin] }",
                &format!("      - {{ effect: allow, users: [bob], tools: [{bobs_tools}] }}"),
                "  approval:",
                "    tools: [sleep]\n",
            ]
            .join("\n")
        )
    };
    let gateway = Gateway::start(&config("calculator, sleep"));
    let id = suspension_id(&park(&gateway, "bob").await);

    reload(&gateway, &config("calculator"), "bob", "sleep", false).await;

    let approved = approve(&gateway, "alice", &id).await;

    // Answered as the call itself would be: 403 with the error.
    assert_eq!(approved.status, 403, "{}", approved.body);
    assert_eq!(approved.error_code(), "forbidden", "{}", approved.body);
    let text = message(&approved);
    assert!(text.contains("`bob` may no longer call `sleep`"), "{text}");
    assert!(approved.body.get("output").is_none(), "{}", approved.body);
    let again = approve(&gateway, "alice", &id).await;
    assert_eq!(again.status, 404, "the call ended: {}", again.body);
}

#[tokio::test]
async fn an_approved_call_runs_as_its_caller_is_now_and_not_at_all_once_they_are_removed() {
    let config = |bobs: &str| {
        format!(
            "tools:\n  builtin: [sleep]\nusers:\n{}{bobs}{}",
            user_yaml("alice", &["admin"]),
            [
                "policies:",
                "  authorization:",
                "    default: deny",
                "    rules:",
                "      - { effect: allow, roles: [admin] }",
                "      - { effect: allow, roles: [analyst], tools: [sleep] }",
                "  approval:",
                "    tools: [sleep]\n",
            ]
            .join("\n")
        )
    };
    let gateway = Gateway::start(&config(&user_yaml("bob", &["analyst"])));
    let first = suspension_id(&park(&gateway, "bob").await);
    let second = suspension_id(&park(&gateway, "bob").await);

    // Bob is demoted while his calls wait: the rules did not change, his roles did.
    reload(
        &gateway,
        &config(&user_yaml("bob", &["intern"])),
        "bob",
        "sleep",
        false,
    )
    .await;
    let approved = approve(&gateway, "alice", &first).await;
    assert_eq!(approved.status, 403, "{}", approved.body);
    assert_eq!(approved.error_code(), "forbidden", "{}", approved.body);

    // Bob is removed: his call cannot run as anyone, and keeps waiting to be rejected.
    std::fs::write(&gateway.config, config("")).unwrap();
    gateway.signal("HUP");
    eventually("bob is gone", Duration::from_secs(30), || async {
        get(&client(), &gateway.url("/v1/tools"), Some("bob"))
            .await
            .status
            == 401
    })
    .await;
    let approved = approve(&gateway, "alice", &second).await;
    assert_eq!(approved.status, 403, "{}", approved.body);
    assert_eq!(approved.error_code(), "caller_removed", "{}", approved.body);
    assert!(
        message(&approved).contains("reject it instead"),
        "{}",
        approved.body
    );
    let completed = decide(
        &gateway,
        "alice",
        &second,
        json!({"decision": "complete", "output": "done"}),
    )
    .await;
    assert_eq!(
        completed.error_code(),
        "caller_removed",
        "{}",
        completed.body
    );
    assert_eq!(
        show(&gateway, "alice", &second).await.body["status"],
        "waiting"
    );
    let rejected = decide(&gateway, "alice", &second, json!({"decision": "reject"})).await;
    assert_eq!(
        rejected.status, 403,
        "answered as the call: {}",
        rejected.body
    );
    assert_eq!(
        show(&gateway, "alice", &second).await.body["status"],
        "decided"
    );
}

/// A `users:` entry for `id` in `tenant` with `roles`, whose key is `key(key_name)`.
fn tenant_user_yaml(id: &str, tenant: &str, key_name: &str, roles: &[&str]) -> String {
    format!(
        "  - {{ id: {id}, tenant: {tenant}, key_sha256: \"{}\", roles: [{}] }}\n",
        hash_key(&key(key_name)),
        roles.join(", ")
    )
}

#[tokio::test]
async fn an_approved_call_of_ann_of_acme_runs_as_her_and_not_as_ann_of_globex() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    // `ann` of `globex` comes first: a look-up by the id alone finds her.
    let config = |anns: &str| {
        format!(
            "tools:\n  builtin: [sleep]\nusers:\n{}{anns}{}\naudit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
            user_yaml("alice", &["admin"]),
            [
                "policies:",
                "  authorization:",
                "    default: deny",
                "    rules:",
                "      - { effect: allow, roles: [admin] }",
                "      - { effect: allow, roles: [analyst], tools: [sleep] }",
                "  approval:",
                "    tools: [sleep]",
            ]
            .join("\n"),
            audit.display()
        )
    };
    let both = format!(
        "{}{}",
        tenant_user_yaml("ann", "globex", "ann_globex", &["intern"]),
        tenant_user_yaml("ann", "acme", "ann_acme", &["analyst"]),
    );
    let gateway = Gateway::start(&config(&both));
    let first = suspension_id(&park(&gateway, "ann_acme").await);
    let second = suspension_id(&park(&gateway, "ann_acme").await);

    // Run as ann of acme, an analyst: allowed. As ann of globex, an intern, it would be
    // refused.
    let approved = approve(&gateway, "alice", &first).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert!(approved.body["output"].is_object(), "{}", approved.body);
    let mut record = Value::Null;
    eventually(
        "the approved call is audited",
        Duration::from_secs(10),
        || {
            record = (std::fs::read_to_string(&audit).unwrap_or_default().lines())
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|record| record.get("approval").is_some())
                .unwrap_or_default();
            let done = !record.is_null();
            async move { done }
        },
    )
    .await;
    assert_eq!(record["user_id"], "ann", "{record}");
    assert_eq!(record["tenant"], "acme", "{record}");
    assert_eq!(record["outcome"], "success", "{record}");

    // Ann moves to globex, keeping her key: ann of acme is gone, and her waiting call
    // cannot run as the ann of globex she is now.
    std::fs::write(
        &gateway.config,
        config(&tenant_user_yaml("ann", "globex", "ann_acme", &["analyst"])),
    )
    .unwrap();
    gateway.signal("HUP");
    eventually(
        "the old ann of globex is gone",
        Duration::from_secs(30),
        || async {
            get(&client(), &gateway.url("/v1/tools"), Some("ann_globex"))
                .await
                .status
                == 401
        },
    )
    .await;
    let refused = approve(&gateway, "alice", &second).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.error_code(), "caller_removed", "{}", refused.body);
    assert!(
        message(&refused).contains("`ann` of tenant `acme`"),
        "{}",
        refused.body
    );
    assert_eq!(
        show(&gateway, "alice", &second).await.body["status"],
        "waiting"
    );
}

#[tokio::test]
async fn with_four_eyes_an_approver_may_not_approve_their_own_call_but_another_may() {
    let config = sleep_waits();
    let gateway = Gateway::start(&config);
    let id = suspension_id(&park(&gateway, "alice").await);

    for decision in [
        json!({"decision": "approve"}),
        json!({"decision": "complete", "output": {"slept_ms": 0}}),
    ] {
        let own = decide(&gateway, "alice", &id, decision).await;
        assert_eq!(own.status, 403, "{}", own.body);
        assert_eq!(own.error_code(), "four_eyes");
        assert!(
            message(&own).contains("ask another approver"),
            "{}",
            own.body
        );
    }

    let by_carol = approve(&gateway, "carol", &id).await;
    assert_eq!(by_carol.status, 200, "{}", by_carol.body);
    assert!(by_carol.body["output"].is_object(), "{}", by_carol.body);

    let withdrawn = suspension_id(&park(&gateway, "alice").await);
    let rejected = decide(&gateway, "alice", &withdrawn, json!({"decision": "reject"})).await;
    // Allowed, and answered as the call would be: 403 `rejected`.
    assert_eq!(rejected.status, 403, "{}", rejected.body);
    assert_eq!(rejected.error_code(), "rejected", "{}", rejected.body);
}

#[tokio::test]
async fn with_four_eyes_off_an_approver_may_approve_their_own_call() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n    four_eyes: false\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let id = suspension_id(&park(&gateway, "alice").await);

    let own = approve(&gateway, "alice", &id).await;

    assert_eq!(own.status, 200, "{}", own.body);
    assert!(own.body["output"].is_object(), "{}", own.body);
}

// ---------------------------------------------------------------------------------------
// The outcome of a decided call, for its caller (over /v1 and MCP)

/// A `tools/call` in MCP `session`; the result.
async fn mcp_call(
    gateway: &Gateway,
    user: &str,
    session: &str,
    tool: &str,
    arguments: Value,
) -> Value {
    let params = json!({"name": tool, "arguments": arguments});
    common::mcp_rpc(gateway, user, session, "tools/call", params).await
}

#[tokio::test]
async fn an_mcp_caller_learns_its_call_waits_and_fetches_the_outcome_once_approved() {
    let config = sleep_waits();
    let gateway = Gateway::start(&config);
    let session = common::open_session(&gateway, "bob").await;

    let waiting = mcp_call(&gateway, "bob", &session, "sleep", json!({"ms": 1})).await;
    assert_eq!(waiting["isError"], true, "{waiting}");
    let text = waiting["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("waits for a person's approval"), "{text}");
    let id = waiting["_meta"]["io.toolgate/error"]["suspensionId"]
        .as_str()
        .unwrap_or_else(|| panic!("the suspension id in _meta: {waiting}"))
        .to_owned();
    assert!(text.contains(&id), "{text}");

    let asked = mcp_call(
        &gateway,
        "bob",
        &session,
        "toolgate.outcome",
        json!({"id": id}),
    )
    .await;
    assert_ne!(asked["isError"], true, "{asked}");
    assert!(
        asked["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("waiting"),
        "{asked}"
    );

    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);

    // Over MCP…
    let asked = mcp_call(
        &gateway,
        "bob",
        &session,
        "toolgate.outcome",
        json!({"id": id}),
    )
    .await;
    let outcome: Value =
        serde_json::from_str(asked["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(outcome["status"], "decided", "{outcome}");
    assert_eq!(outcome["result"]["status"], "success", "{outcome}");
    assert_eq!(outcome["result"]["output"]["slept_ms"], 1, "{outcome}");
    // …and over /v1.
    let shown = show(&gateway, "bob", &id).await;
    assert_eq!(
        (shown.status, &shown.body["status"]),
        (200, &json!("decided")),
        "{}",
        shown.body
    );

    // Nobody else's.
    let dave = common::open_session(&gateway, "dave").await;
    let other = mcp_call(
        &gateway,
        "dave",
        &dave,
        "toolgate.outcome",
        json!({"id": id}),
    )
    .await;
    assert_eq!(other["isError"], true, "{other}");
    assert_eq!(show(&gateway, "dave", &id).await.status, 404);
}

/// One stateless MCP 2026-07-28 `tools/call` of `tool` as `user`, with `requestState`
/// when given; the JSON-RPC answer.
async fn call_2026(gateway: &Gateway, user: &str, tool: &str, state: Option<&str>) -> Value {
    call_2026_with(gateway, user, tool, json!({"ms": 1}), state).await
}

/// As [`call_2026`], with these arguments.
async fn call_2026_with(
    gateway: &Gateway,
    user: &str,
    tool: &str,
    arguments: Value,
    state: Option<&str>,
) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(state) = state {
        params["requestState"] = json!(state);
    }
    let (status, answer) = common::mcp_2026(gateway, user, "tools/call", Some(tool), params).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn a_2026_caller_is_told_its_call_waits_as_input_required_and_gets_the_result_by_asking_again()
 {
    let config = sleep_waits();
    let gateway = Gateway::start(&config);

    let waiting = call_2026(&gateway, "bob", "sleep", None).await["result"].clone();
    assert_eq!(waiting["resultType"], "input_required", "{waiting}");
    assert!(
        waiting.get("inputRequests").is_none(),
        "nothing is asked of the caller: {waiting}"
    );
    let state = waiting["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let id = waiting["_meta"]["io.toolgate/suspension"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the suspension in _meta: {waiting}"))
        .to_owned();

    // Asking again before anyone decided: still waiting.
    let again = call_2026(&gateway, "bob", "sleep", Some(&state)).await["result"].clone();
    assert_eq!(again["resultType"], "input_required", "{again}");
    // Another user cannot use bob's state.
    let replayed = call_2026(&gateway, "dave", "sleep", Some(&state)).await;
    assert_eq!(
        replayed["error"]["code"], -32602,
        "dave replaying bob's state is refused: {replayed}"
    );

    // The state sent back with other arguments is another call: refused, without
    // touching the call that waits.
    let other = call_2026_with(&gateway, "bob", "sleep", json!({"ms": 2}), Some(&state)).await;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    let said = other["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("other arguments"), "{said}");

    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);

    // The same arguments written another way (`1.0`) are the same call.
    let done =
        call_2026_with(&gateway, "bob", "sleep", json!({"ms": 1.0}), Some(&state)).await["result"]
            .clone();
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_ne!(done["isError"], true, "{done}");
    let text = done["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("slept_ms"),
        "the approved call's own result: {done}"
    );
}

#[tokio::test]
async fn an_approval_for_a_retry_runs_the_same_call_of_the_same_caller_once_and_no_other() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n    run_within: 5m\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 3})).await);

    let decided = decide(&gateway, "alice", &id, json!({"decision": "approve_retry"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["status"], "approved_for_retry");
    assert!(decided.body["expires_at"].is_string(), "{}", decided.body);
    // The caller reading the outcome is told to call again.
    let told = show(&gateway, "bob", &id).await;
    assert!(
        told.body.to_string().contains("approved_for_retry"),
        "{}",
        told.body
    );

    // Other arguments, another caller: other calls, which wait for their own approval.
    suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 4})).await);
    suspension_id(&invoke(&gateway, "dave", "sleep", json!({"ms": 3})).await);
    // The same call runs, once.
    let ran = invoke(&gateway, "bob", "sleep", json!({"ms": 3})).await;
    assert_eq!(ran.status, 200, "{}", ran.body);
    assert_eq!(ran.body["output"]["slept_ms"], 3, "{}", ran.body);
    suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 3})).await);
}

/// Writes `yaml` as the gateway's configuration, reloads it, and waits until `user` sees
/// `tool` listed (or not, as `listed` says).
async fn reload(gateway: &Gateway, yaml: &str, user: &str, tool: &str, listed: bool) {
    std::fs::write(&gateway.config, yaml).unwrap();
    gateway.signal("HUP");
    eventually("the reload", Duration::from_secs(30), || async {
        let tools = get(&client(), &gateway.url("/v1/tools"), Some(user)).await;
        tools.status == 200 && tools.body.to_string().contains(&format!("\"{tool}\"")) == listed
    })
    .await;
}

#[tokio::test]
async fn an_approval_for_a_retry_holds_across_a_reload_of_users_but_not_of_the_policies() {
    let config = |more_users: &str, approval_tools: &str| {
        format!(
            "tools:\n  builtin: [sleep, echo]\n{}{more_users}\
policies:\n  approval:\n    tools: [{approval_tools}]\n",
            users()
        )
    };
    let gateway = Gateway::start(&config("", "sleep"));
    let first = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 1})).await);
    let second = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 2})).await);
    for id in [&first, &second] {
        let decided = decide(&gateway, "alice", id, json!({"decision": "approve_retry"})).await;
        assert_eq!(decided.status, 200, "{}", decided.body);
    }

    // Users change, the policies do not: the approval holds.
    reload(
        &gateway,
        &config(&user_yaml("erin", &["analyst"]), "sleep"),
        "erin",
        "sleep",
        true,
    )
    .await;
    let ran = invoke(&gateway, "bob", "sleep", json!({"ms": 1})).await;
    assert_eq!(ran.status, 200, "{}", ran.body);

    // The policies change: the call is another generation's, and waits anew.
    std::fs::write(&gateway.config, config("", "sleep, echo")).unwrap();
    gateway.signal("HUP");
    eventually("echo needs approval", Duration::from_secs(30), || async {
        invoke(&gateway, "dave", "echo", json!({"text": "hi"}))
            .await
            .status
            == 202
    })
    .await;
    suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 2})).await);
}

/// The `_meta` of a 2026-07-28 request whose client declares the tasks extension.
fn takes_tasks() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
        "io.modelcontextprotocol/clientInfo": {"name": "toolgate-tests", "version": "0"},
    })
}

/// `method` (`tasks/get`, `tasks/cancel`) on task `id` as `user`; the JSON-RPC answer.
async fn task_request(gateway: &Gateway, user: &str, method: &str, id: &str) -> Value {
    let params = json!({"taskId": id, "_meta": takes_tasks()});
    let (status, answer) = common::mcp_2026(gateway, user, method, Some(id), params).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A `tools/call` of `sleep` as `user` from a client that takes tasks: the task's id.
async fn call_as_task(gateway: &Gateway, user: &str) -> String {
    let params = json!({"name": "sleep", "arguments": {"ms": 2}, "_meta": takes_tasks()});
    let (status, created) =
        common::mcp_2026(gateway, user, "tools/call", Some("sleep"), params).await;
    assert_eq!(status, 200, "{created}");
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(task.get("requestState").is_none(), "{created}");
    task["taskId"].as_str().expect("a task id").to_owned()
}

#[tokio::test]
async fn a_caller_that_takes_tasks_polls_its_waiting_call_as_a_task_until_it_completes() {
    let config = sleep_waits();
    let gateway = Gateway::start(&config);
    let id = call_as_task(&gateway, "bob").await;

    let working = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(working["result"]["status"], "working", "{working}");
    let said = working["result"]["statusMessage"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("approval"), "{working}");
    // Another caller neither sees nor cancels bob's task.
    for method in ["tasks/get", "tasks/cancel"] {
        let stranger = task_request(&gateway, "dave", method, &id).await;
        assert_eq!(stranger["error"]["code"], -32602, "{method}: {stranger}");
    }

    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let done = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("slept_ms"), "the call's own result: {done}");
    // Cancelling an ended task is acknowledged and changes nothing.
    let late = task_request(&gateway, "bob", "tasks/cancel", &id).await;
    assert_eq!(late["result"]["resultType"], "complete", "{late}");
    let still = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(still["result"]["status"], "completed", "{still}");
}

#[tokio::test]
async fn a_caller_that_cancels_its_waiting_task_withdraws_the_call() {
    let config = sleep_waits();
    let gateway = Gateway::start(&config);
    let id = call_as_task(&gateway, "bob").await;

    let ack = task_request(&gateway, "bob", "tasks/cancel", &id).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert!(ack["result"].get("status").is_none(), "an empty ack: {ack}");

    let cancelled = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    // The call no longer waits: an approver finds nothing to approve.
    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 404, "{}", approved.body);
}

#[tokio::test]
async fn an_expired_task_has_ended_for_its_caller_and_is_unknown_to_anyone_else() {
    let config =
        sleep_waits().replace("tools: [sleep]\n", "tools: [sleep]\n    expire_after: 1s\n");
    let gateway = Gateway::start(&config);
    let id = call_as_task(&gateway, "bob").await;
    eventually("bob's task expires", Duration::from_secs(30), || async {
        let url = gateway.url(&format!("/v1/suspensions/{id}"));
        get(&client(), &url, Some("bob")).await.status == 410
    })
    .await;

    let never = format!("susp-{}", "0".repeat(32));
    for (what, id) in [("bob's expired task", &id), ("an id never given", &never)] {
        let cancelled = task_request(&gateway, "dave", "tasks/cancel", id).await;
        assert_eq!(cancelled["error"]["code"], -32602, "{what}: {cancelled}");
    }
    // To bob, there is nothing left to cancel, and his task has ended with the expiry.
    let own = task_request(&gateway, "bob", "tasks/cancel", &id).await;
    assert_eq!(own["result"]["resultType"], "complete", "{own}");
    let ended = task_request(&gateway, "bob", "tasks/get", &id).await;
    assert_eq!(ended["result"]["status"], "completed", "{ended}");
    let result = &ended["result"]["result"];
    assert_eq!(result["isError"], true, "{ended}");
    let said = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(said.contains("expired"), "{ended}");
    let stranger = task_request(&gateway, "dave", "tasks/get", &id).await;
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
}

// ---------------------------------------------------------------------------------------
// Operations: listing waiting calls, who decided, and the resume answer

/// `GET /v1/suspensions?{query}` as `user`.
async fn list(gateway: &Gateway, user: &str, query: &str) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions?{query}"));
    get(&client(), &url, Some(user)).await
}

/// The ids of a listing answer, after checking it is one.
fn listed_ids(answer: &Answer) -> Vec<String> {
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body["suspensions"]
        .as_array()
        .unwrap_or_else(|| panic!("a listing: {}", answer.body))
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A gateway where `sleep` and `calculator` wait for approval, with three of bob's
/// `sleep` calls and one of dave's `calculator` calls waiting; (gateway, bob's, dave's).
async fn three_of_bobs_and_one_of_daves() -> (Gateway, Vec<String>, String) {
    let config = format!(
        "tools:\n  builtin: [calculator, sleep]\n{}policies:\n  approval:\n    tools: [sleep, calculator]\n",
        users()
    );
    let gateway = Gateway::start(&config);
    let mut bobs = Vec::new();
    for _ in 0..3 {
        bobs.push(suspension_id(&park(&gateway, "bob").await));
    }
    let daves =
        suspension_id(&invoke(&gateway, "dave", "calculator", json!({"expression": "1+1"})).await);
    bobs.sort();
    (gateway, bobs, daves)
}

#[tokio::test]
async fn an_approver_lists_every_waiting_call_a_page_at_a_time_and_by_each_filter() {
    let (gateway, bobs, daves) = three_of_bobs_and_one_of_daves().await;
    let mut everyone = [bobs.clone(), vec![daves.clone()]].concat();
    everyone.sort();

    let first = list(&gateway, "alice", "limit=3").await;
    let cursor = first.body["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = list(&gateway, "alice", &format!("limit=3&cursor={cursor}")).await;
    let paged = [listed_ids(&first), listed_ids(&second)].concat();

    assert_eq!(
        paged, everyone,
        "every call once, in id order, across pages"
    );
    assert_eq!(listed_ids(&first).len(), 3);
    assert!(second.body["next_cursor"].is_null(), "{}", second.body);
    assert_eq!(listed_ids(&list(&gateway, "alice", "").await), everyone);
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "status=waiting").await),
        everyone
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "tool=calculator").await),
        [daves.as_str()]
    );
    assert_eq!(listed_ids(&list(&gateway, "alice", "user=bob").await), bobs);
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "user=bob&tool=calculator").await),
        Vec::<String>::new()
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "since=2000-01-01T00:00:00Z").await),
        everyone
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "since=2999-01-01T00:00:00Z").await),
        Vec::<String>::new()
    );
    // Each item is what `GET /v1/suspensions/{id}` shows.
    let item = &list(&gateway, "alice", "tool=calculator").await.body["suspensions"][0];
    assert_eq!(*item, show(&gateway, "alice", &daves).await.body);
}

#[tokio::test]
async fn a_caller_lists_only_their_own_waiting_calls_and_may_not_ask_for_anothers() {
    let (gateway, bobs, _) = three_of_bobs_and_one_of_daves().await;

    let own = list(&gateway, "bob", "").await;
    let others = list(&gateway, "bob", "user=dave").await;

    assert_eq!(listed_ids(&own), bobs);
    assert_eq!(listed_ids(&list(&gateway, "bob", "user=bob").await), bobs);
    assert_eq!(
        listed_ids(&list(&gateway, "bob", "tool=calculator").await),
        Vec::<String>::new(),
        "dave's call stays invisible to bob"
    );
    assert_eq!(others.status, 403, "{}", others.body);
    assert_eq!(others.error_code(), "not_an_approver");
    assert!(
        message(&others).contains("leave out `user`"),
        "{}",
        others.body
    );
}

#[tokio::test]
async fn decided_calls_are_listed_with_the_filters_paging_and_authorization_of_waiting_ones() {
    let (gateway, bobs, daves) = three_of_bobs_and_one_of_daves().await;
    for id in [&bobs[0], &bobs[1], &daves] {
        assert_eq!(approve(&gateway, "alice", id).await.status, 200);
    }
    let mut decided = vec![bobs[0].clone(), bobs[1].clone(), daves.clone()];
    decided.sort();

    let first = list(&gateway, "alice", "status=decided&limit=2").await;
    let cursor = first.body["next_cursor"].as_str().expect("a next page");
    let second = list(
        &gateway,
        "alice",
        &format!("status=decided&limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!([listed_ids(&first), listed_ids(&second)].concat(), decided);
    assert!(second.body["next_cursor"].is_null(), "{}", second.body);
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "status=decided&tool=calculator").await),
        [daves.as_str()]
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "status=decided&user=bob").await),
        bobs[..2]
    );
    assert_eq!(
        listed_ids(
            &list(
                &gateway,
                "alice",
                "status=decided&since=2999-01-01T00:00:00Z"
            )
            .await
        ),
        Vec::<String>::new()
    );
    // The waiting listing no longer has them.
    assert_eq!(listed_ids(&list(&gateway, "alice", "").await), bobs[2..]);

    // Each item carries the outcome `GET /v1/suspensions/{id}` gives, its tool and user.
    let item = &list(&gateway, "alice", "status=decided&tool=calculator")
        .await
        .body["suspensions"][0];
    assert_eq!(item["status"], "decided", "{item}");
    assert_eq!(
        (item["tool"].as_str(), item["user"].as_str()),
        (Some("calculator"), Some("dave"))
    );
    assert_eq!(
        item["result"],
        show(&gateway, "dave", &daves).await.body["result"]
    );
    assert!(item["decided_at"].is_string(), "{item}");

    // Bob sees his own decided calls only, and may not ask for dave's.
    let bobs_decided = list(&gateway, "bob", "status=decided").await;
    assert_eq!(listed_ids(&bobs_decided), bobs[..2]);
    let daves_for_bob = list(&gateway, "bob", "status=decided&user=dave").await;
    assert_eq!(daves_for_bob.status, 403, "{}", daves_for_bob.body);
    assert_eq!(daves_for_bob.error_code(), "not_an_approver");
}

/// A gateway where `sleep` waits for approval, with alice (an operator: an approver of no
/// tenant), olga (an approver of `acme`), ann of `acme`, ann of `globex`, bob of `globex`
/// and dave (of no tenant), analysts; their keys are named `alice`, `olga`, `ann_acme`,
/// `ann_globex`, `bob_globex` and `dave`.
fn tenants_config() -> String {
    format!(
        "tools:\n  builtin: [sleep]\nusers:\n{}{}{}{}{}{}policies:\n  approval:\n    tools: [sleep]\n",
        user_yaml("alice", &["admin"]),
        tenant_user_yaml("olga", "acme", "olga", &["admin"]),
        tenant_user_yaml("ann", "acme", "ann_acme", &["analyst"]),
        tenant_user_yaml("ann", "globex", "ann_globex", &["analyst"]),
        tenant_user_yaml("bob", "globex", "bob_globex", &["analyst"]),
        user_yaml("dave", &["analyst"]),
    )
}

/// The waiting calls of [`tenants_config`]'s gateway: two of ann of acme, one each of
/// ann of globex, bob of globex and dave, each list sorted by id.
struct Waiting {
    ann_acme: Vec<String>,
    ann_globex: Vec<String>,
    bob_globex: Vec<String>,
    dave: Vec<String>,
}

async fn calls_of_three_tenants() -> (Gateway, Waiting) {
    let gateway = Gateway::start(&tenants_config());
    let parked = |key: &'static str, n: usize| {
        let gateway = &gateway;
        async move {
            let mut ids = Vec::new();
            for _ in 0..n {
                ids.push(suspension_id(&park(gateway, key).await));
            }
            ids.sort();
            ids
        }
    };
    let waiting = Waiting {
        ann_acme: parked("ann_acme", 2).await,
        ann_globex: parked("ann_globex", 1).await,
        bob_globex: parked("bob_globex", 1).await,
        dave: parked("dave", 1).await,
    };
    (gateway, waiting)
}

fn sorted(lists: &[&[String]]) -> Vec<String> {
    let mut all = lists.concat();
    all.sort();
    all
}

#[tokio::test]
async fn an_operator_lists_one_tenants_calls_and_with_user_that_users_in_that_tenant_alone() {
    let (gateway, w) = calls_of_three_tenants().await;
    let globex = sorted(&[&w.ann_globex, &w.bob_globex]);

    assert_eq!(
        listed_ids(&list(&gateway, "alice", "tenant=acme").await),
        w.ann_acme
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "tenant=globex").await),
        globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "user=ann&tenant=acme").await),
        w.ann_acme,
        "ann of acme's, while ann of globex's waits too"
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "tenant=globex&user=ann").await),
        w.ann_globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "user=ann").await),
        sorted(&[&w.ann_acme, &w.ann_globex]),
        "without a tenant, `user=` is that id in every tenant"
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "no_tenant=true").await),
        w.dave
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "user=ann&no_tenant=true").await),
        Vec::<String>::new()
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "tenant=initech").await),
        Vec::<String>::new()
    );
    let paged = list(&gateway, "alice", "tenant=globex&limit=1").await;
    let cursor = paged.body["next_cursor"].as_str().expect("a next page");
    let rest = list(
        &gateway,
        "alice",
        &format!("tenant=globex&limit=1&cursor={cursor}"),
    )
    .await;
    assert_eq!([listed_ids(&paged), listed_ids(&rest)].concat(), globex);
    for item in list(&gateway, "alice", "tenant=acme").await.body["suspensions"]
        .as_array()
        .unwrap()
    {
        assert_eq!(
            (item["user"].as_str(), item["tenant"].as_str()),
            (Some("ann"), Some("acme"))
        );
    }

    // Decided calls are filtered alike.
    for id in [&w.ann_acme[0], &w.ann_globex[0], &w.dave[0]] {
        assert_eq!(approve(&gateway, "alice", id).await.status, 200);
    }
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "status=decided&user=ann&tenant=acme").await),
        w.ann_acme[..1]
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "status=decided&tenant=globex").await),
        w.ann_globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "status=decided&no_tenant=true").await),
        w.dave
    );
}

#[tokio::test]
async fn an_approver_of_one_tenant_is_refused_another_tenant_and_answered_for_their_own() {
    let (gateway, w) = calls_of_three_tenants().await;

    for query in ["tenant=globex", "no_tenant=true", "user=ann&tenant=globex"] {
        let refused = list(&gateway, "olga", query).await;
        assert_eq!(refused.status, 403, "{query}: {}", refused.body);
        assert_eq!(
            refused.error_code(),
            "not_an_approver_of_tenant",
            "{query}: {}",
            refused.body
        );
        assert!(
            message(&refused).contains("leave out `tenant`"),
            "{query}: {}",
            refused.body
        );
    }
    assert_eq!(
        listed_ids(&list(&gateway, "olga", "tenant=acme").await),
        w.ann_acme
    );
    assert_eq!(
        listed_ids(&list(&gateway, "olga", "user=ann&tenant=acme").await),
        w.ann_acme
    );
    assert_eq!(listed_ids(&list(&gateway, "olga", "").await), w.ann_acme);
    assert_eq!(
        listed_ids(&list(&gateway, "olga", "user=ann").await),
        w.ann_acme,
        "ann of globex stays out of an acme approver's listing"
    );
}

#[tokio::test]
async fn a_caller_asking_for_another_tenant_is_refused_and_for_their_own_is_answered() {
    let (gateway, w) = calls_of_three_tenants().await;

    for (key, query) in [
        ("ann_globex", "tenant=acme"),
        ("ann_globex", "no_tenant=true"),
        ("ann_globex", "user=ann&tenant=acme"),
        ("dave", "tenant=acme"),
    ] {
        let refused = list(&gateway, key, query).await;
        assert_eq!(refused.status, 403, "{key} {query}: {}", refused.body);
        assert_eq!(refused.error_code(), "not_an_approver", "{}", refused.body);
        assert!(
            message(&refused).contains("leave out `tenant`"),
            "{}",
            refused.body
        );
    }
    assert_eq!(
        listed_ids(&list(&gateway, "ann_globex", "tenant=globex").await),
        w.ann_globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "ann_globex", "user=ann&tenant=globex").await),
        w.ann_globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "dave", "no_tenant=true").await),
        w.dave
    );
}

#[tokio::test]
async fn ann_of_globex_listing_her_own_calls_never_sees_those_of_ann_of_acme() {
    let (gateway, w) = calls_of_three_tenants().await;

    assert_eq!(
        listed_ids(&list(&gateway, "ann_globex", "").await),
        w.ann_globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "ann_globex", "user=ann").await),
        w.ann_globex,
        "`user=ann` is her own id: ann of globex, not ann of acme"
    );
    assert_eq!(
        listed_ids(&list(&gateway, "ann_acme", "user=ann").await),
        w.ann_acme
    );
    // Decided, too.
    assert_eq!(approve(&gateway, "alice", &w.ann_acme[0]).await.status, 200);
    assert_eq!(
        approve(&gateway, "alice", &w.ann_globex[0]).await.status,
        200
    );
    assert_eq!(
        listed_ids(&list(&gateway, "ann_globex", "status=decided&user=ann").await),
        w.ann_globex
    );
    assert_eq!(
        listed_ids(&list(&gateway, "ann_globex", "status=decided").await),
        w.ann_globex
    );
}

#[tokio::test]
async fn bad_tenant_values_are_refused_with_bad_tenant_and_what_to_send() {
    let (gateway, _) = calls_of_three_tenants().await;
    let long = "t".repeat(257);

    for (key, query, words) in [
        ("alice", "tenant=".to_owned(), "may not be empty"),
        ("alice", "tenant=%20%20".to_owned(), "may not be empty"),
        ("alice", format!("tenant={long}"), "at most 256 bytes"),
        ("alice", "tenant=ac%0Ame".to_owned(), "control characters"),
        (
            "alice",
            "tenant=ac%1B%5B2Jme".to_owned(),
            "control characters",
        ),
        (
            "alice",
            "tenant=ac%E2%80%8Bme".to_owned(),
            "invisible formatting",
        ),
        (
            "alice",
            "tenant=%E2%80%AEemca".to_owned(),
            "invisible formatting",
        ),
        ("ann_globex", "tenant=".to_owned(), "may not be empty"),
        ("alice", "no_tenant=yes".to_owned(), "`true`"),
        ("alice", "tenant=acme&no_tenant=true".to_owned(), "not both"),
    ] {
        let refused = list(&gateway, key, &query).await;

        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
        assert_eq!(
            refused.error_code(),
            "bad_tenant",
            "{query}: {}",
            refused.body
        );
        let message = message(&refused);
        assert!(message.contains(words), "{query}: {message}");
        assert!(
            !message.contains("``"),
            "{query}: nothing quoted: {message}"
        );
        assert!(
            !message.chars().any(toolgate_core::error::hides_text),
            "{query}: the value is shown escaped: {message:?}"
        );
        assert!(!message.contains(&long), "{query}: cut when shown");
    }
    assert_eq!(
        listed_ids(&list(&gateway, "alice", "tenant=acme&no_tenant=false").await).len(),
        2
    );
}

#[tokio::test]
async fn bad_filters_limits_and_cursors_are_refused_with_their_code() {
    let (gateway, _, _) = three_of_bobs_and_one_of_daves().await;

    for (query, code, words) in [
        ("limit=0", "bad_limit", "a whole number from 1 to 500"),
        ("limit=501", "bad_limit", "a whole number from 1 to 500"),
        ("limit=ten", "bad_limit", "a whole number from 1 to 500"),
        (
            "cursor=page-2",
            "bad_cursor",
            "`next_cursor` of the previous page",
        ),
        ("since=yesterday", "bad_since", "RFC 3339"),
        ("status=bogus", "bad_status", "use `waiting` or `decided`"),
        // A value the message repeats is shown escaped: it cannot forge a log line or
        // turn the message around.
        (
            "limit=1%0Aok%1B%5B2J",
            "bad_limit",
            "not `1\\nok\\u{1b}[2J`",
        ),
        (
            "since=%E2%80%AEyesterday",
            "bad_since",
            "not `\\u{202e}yesterday`",
        ),
    ] {
        let refused = list(&gateway, "alice", query).await;

        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
        assert_eq!(refused.error_code(), code, "{query}: {}", refused.body);
        assert!(
            message(&refused).contains(words),
            "{query}: {}",
            refused.body
        );
        assert!(
            !message(&refused)
                .chars()
                .any(toolgate_core::error::hides_text),
            "{query}: {}",
            refused.body
        );
    }
}

#[tokio::test]
async fn a_decision_is_logged_with_its_approver_decision_and_reason() {
    let (gateway, bobs, daves) = three_of_bobs_and_one_of_daves().await;

    let rejected = decide(
        &gateway,
        "carol",
        &bobs[0],
        json!({"decision": "reject", "reason": "not during the freeze"}),
    )
    .await;
    let approved = approve(&gateway, "alice", &daves).await;

    assert_eq!(rejected.status, 403, "{}", rejected.body);
    assert_eq!(approved.status, 200, "{}", approved.body);
    gateway
        .wait_for_log("a waiting call was decided", 2, Duration::from_secs(10))
        .await;
    let log = gateway.stderr();
    let line = |id: &str| {
        log.lines()
            .find(|line| line.contains("a waiting call was decided") && line.contains(id))
            .unwrap_or_else(|| panic!("no decision logged for {id}:\n{log}"))
            .to_owned()
    };
    let by_carol = line(&bobs[0]);
    for fact in ["carol", "reject", "not during the freeze", "bob", "sleep"] {
        assert!(by_carol.contains(fact), "{fact} missing: {by_carol}");
    }
    let by_alice = line(&daves);
    for fact in ["alice", "approve", "dave", "calculator"] {
        assert!(by_alice.contains(fact), "{fact} missing: {by_alice}");
    }
}

#[tokio::test]
async fn a_reason_past_two_thousand_characters_is_refused_and_the_call_keeps_waiting() {
    let gateway = Gateway::start(&sleep_waits());
    let id = suspension_id(&park(&gateway, "bob").await);
    for decision in ["approve", "reject"] {
        let long = json!({"decision": decision, "reason": "é".repeat(2001)});
        let refused = decide(&gateway, "alice", &id, long).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "reason_too_long"),
            "{}",
            refused.body
        );
        assert!(
            message(&refused).contains("keep it to 2000"),
            "{}",
            refused.body
        );
    }
    assert_eq!(show(&gateway, "bob", &id).await.body["status"], "waiting");
    let at_the_bound = json!({"decision": "approve", "reason": "é".repeat(2000)});
    let approved = decide(&gateway, "alice", &id, at_the_bound).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
}

#[tokio::test]
async fn a_resume_answers_as_invoke_does_and_honours_or_refuses_the_format() {
    let (gateway, bobs, _) = three_of_bobs_and_one_of_daves().await;
    let resume = |id: &str, query: &str| {
        let url = gateway.url(&format!("/v1/suspensions/{id}/resume{query}"));
        async move {
            post(
                &client(),
                &url,
                Some("alice"),
                &json!({"decision": "approve"}),
            )
            .await
        }
    };

    let bogus = resume(&bobs[0], "?format=bogus").await;
    let still = show(&gateway, "alice", &bobs[0]).await;
    let plain = resume(&bobs[0], "").await;
    let openai = resume(&bobs[1], "?format=openai").await;
    let anthropic = resume(&bobs[2], "?format=anthropic").await;

    assert_eq!(bogus.status, 400, "{}", bogus.body);
    assert_eq!(bogus.error_code(), "unknown_format");
    assert!(message(&bogus).contains("toolgate, openai, anthropic or gemini"));
    assert_eq!(
        still.body["status"], "waiting",
        "a refused format used nothing up"
    );
    assert_eq!(plain.status, 200, "{}", plain.body);
    let mut keys: Vec<&str> = plain
        .body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["attempts", "duration_ms", "metadata", "output"],
        "{}",
        plain.body
    );
    assert_eq!(plain.body["output"]["slept_ms"], 1);
    assert_eq!(plain.body["attempts"], 1);
    assert_eq!(
        openai.body["messages"][0]["role"], "tool",
        "{}",
        openai.body
    );
    assert_eq!(openai.body["results"][0]["status"], "success");
    assert!(anthropic.body["message"].is_object(), "{}", anthropic.body);
}

#[tokio::test]
async fn the_audit_record_of_a_decided_call_names_the_approver_the_decision_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n\
audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
        users(),
        audit.display()
    );
    let gateway = Gateway::start(&config);
    let approved_id = suspension_id(&park(&gateway, "bob").await);
    let rejected_id = suspension_id(&park(&gateway, "dave").await);

    let approve = json!({"decision": "approve", "reason": "ticket OPS-7 checked"});
    assert_eq!(
        decide(&gateway, "alice", &approved_id, approve)
            .await
            .status,
        200
    );
    let reject = json!({"decision": "reject", "reason": "not during the freeze"});
    assert_eq!(
        decide(&gateway, "carol", &rejected_id, reject).await.status,
        403
    );

    let mut records: Vec<Value> = Vec::new();
    eventually(
        "the decided calls are audited",
        Duration::from_secs(10),
        || {
            records = std::fs::read_to_string(&audit)
                .unwrap_or_default()
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|record| record.get("approval").is_some())
                .collect();
            let done = records.len() == 2;
            async move { done }
        },
    )
    .await;
    let by_user = |user: &str| {
        records
            .iter()
            .find(|record| record["user_id"] == user)
            .unwrap_or_else(|| panic!("no decided record of {user}: {records:?}"))
            .clone()
    };
    let bobs = by_user("bob");
    assert_eq!(
        bobs["approval"],
        json!({"decision": "approve", "decided_by": "alice", "reason": "ticket OPS-7 checked"}),
        "{bobs}"
    );
    assert_eq!(bobs["outcome"], "success");
    let daves = by_user("dave");
    assert_eq!(
        daves["approval"],
        json!({"decision": "reject", "decided_by": "carol", "reason": "not during the freeze"}),
        "{daves}"
    );
    assert_eq!(daves["code"], "rejected");
}
