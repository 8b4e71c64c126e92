//! Calls that wait for approval, against the real binary: they count against their caller's
//! rate limits, one user cannot fill the store for everyone, they expire, they wait with
//! the validated and redacted input, they are authorized again when approved, and an
//! approver does not wave their own call through (`policies.approval`).

mod common;

use std::time::Duration;

use common::{Answer, Gateway, client, eventually, get, invoke, post, user_yaml};
use serde_json::{Value, json};

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
    assert_eq!(approved.body["results"][0]["status"], "success");
    suspension_id(&park(&gateway, "bob").await);
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
    let result = &approved.body["results"][0];
    assert_eq!(result["status"], "success", "{}", approved.body);
    assert_eq!(result["output"]["text"], "write to [REDACTED:email]");
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

    std::fs::write(&gateway.config, config("calculator")).unwrap();
    gateway.signal("HUP");
    eventually(
        "the reload denies bob sleep",
        Duration::from_secs(30),
        || async {
            let listed = get(&client(), &gateway.url("/v1/tools"), Some("bob")).await;
            listed.status == 200 && !listed.body.to_string().contains("\"sleep\"")
        },
    )
    .await;

    let approved = approve(&gateway, "alice", &id).await;

    assert_eq!(approved.status, 200, "{}", approved.body);
    let result = &approved.body["results"][0];
    assert_eq!(result["status"], "error", "{}", approved.body);
    assert_eq!(result["error"]["code"], "forbidden", "{}", approved.body);
    let text = result["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("`bob` may no longer call `sleep`"), "{text}");
    assert!(result.get("output").is_none(), "{}", approved.body);
    let again = approve(&gateway, "alice", &id).await;
    assert_eq!(again.status, 404, "the call ended: {}", again.body);
}

#[tokio::test]
async fn with_four_eyes_an_approver_may_not_approve_their_own_call_but_another_may() {
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}policies:\n  approval:\n    tools: [sleep]\n",
        users()
    );
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
    assert_eq!(by_carol.body["results"][0]["status"], "success");

    let withdrawn = suspension_id(&park(&gateway, "alice").await);
    let rejected = decide(&gateway, "alice", &withdrawn, json!({"decision": "reject"})).await;
    assert_eq!(
        rejected.status, 200,
        "withdrawing one's own call is allowed"
    );
    assert_eq!(rejected.body["results"][0]["error"]["code"], "rejected");
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
    assert_eq!(own.body["results"][0]["status"], "success");
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
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n",
        users()
    );
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
    let mut params = json!({"name": tool, "arguments": {"ms": 1}});
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
    let config = format!(
        "tools:\n  builtin: [sleep]\n{}\
policies:\n  approval:\n    tools: [sleep]\n",
        users()
    );
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

    let approved = approve(&gateway, "alice", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);

    let done = call_2026(&gateway, "bob", "sleep", Some(&state)).await["result"].clone();
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_ne!(done["isError"], true, "{done}");
    let text = done["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("slept_ms"),
        "the approved call's own result: {done}"
    );
}
