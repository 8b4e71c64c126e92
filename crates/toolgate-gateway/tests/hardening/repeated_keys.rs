//! A body that names a key twice in one object is refused with 400 `bad_json` naming the
//! key and its object — a call's input, a batch's tool-call arguments, an approver's
//! output for a call they complete — and nothing runs: read as serde_json reads it, the
//! last value would win silently, and a policy and a tool could read different ones. So is
//! a whole number no value holds exactly, which serde_json would round to a float.

use serde_json::{Value, json};

use crate::common::{Answer, Gateway, client, key, user_yaml};

fn config() -> String {
    format!(
        "tools:\n  builtin: [echo]\nusers:\n{}{}\
policies:\n  approval: {{ tools: [echo] }}\n",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["analyst"]),
    )
}

/// `POST path` as `user`, with `body` sent exactly as written.
async fn post_text(gateway: &Gateway, user: &str, path: &str, body: &str) -> Answer {
    let request = client()
        .post(gateway.url(path))
        .bearer_auth(key(user))
        .header("content-type", "application/json")
        .body(body.to_owned());
    Answer::read(request.send().await.expect("the gateway answers")).await
}

fn assert_refused(answer: &Answer, message: &str) {
    assert_eq!(answer.status, 400, "{:?}", answer.body);
    assert_eq!(answer.error_code(), "bad_json");
    assert_eq!(answer.error_message(), message);
}

#[tokio::test]
async fn a_body_naming_a_key_twice_is_refused_and_nothing_runs() {
    let gateway = Gateway::start(&config());

    let refused = post_text(
        &gateway,
        "bob",
        "/v1/tools/echo/invoke",
        r#"{"text": "shown to the policy", "text": "run"}"#,
    )
    .await;
    assert_refused(
        &refused,
        "the request body is refused: the key `text` appears twice in the top-level object: send each key once",
    );

    let batch = json!({"role": "assistant", "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "echo", "arguments": r#"{"text": "a", "text": "b"}"#},
    }]});
    let answered = post_text(&gateway, "bob", "/v1/tool-calls", &batch.to_string()).await;
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    let result = answered.body["results"][0].to_string();
    assert!(result.contains("the key `text` appears twice"), "{result}");

    // Nothing waits: neither call reached the approval.
    let listed =
        crate::common::get(&client(), &gateway.url("/v1/suspensions"), Some("alice")).await;
    assert_eq!(listed.body["suspensions"], json!([]), "{:?}", listed.body);

    // An approver's output for a call they complete, likewise; the call keeps waiting.
    let parked = post_text(&gateway, "bob", "/v1/tools/echo/invoke", r#"{"text": "x"}"#).await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let id = parked.body["suspension_id"].as_str().expect("an id");
    let completed = post_text(
        &gateway,
        "alice",
        &format!("/v1/suspensions/{id}/resume"),
        r#"{"decision": "complete", "output": {"rows": [{"id": 1, "id": 2}]}}"#,
    )
    .await;
    assert_eq!(completed.status, 400, "{:?}", completed.body);
    assert!(
        completed
            .error_message()
            .contains("the key `id` appears twice in the object at `/rows/0`"),
        "{:?}",
        completed.body
    );
    let shown = crate::common::get(
        &client(),
        &gateway.url(&format!("/v1/suspensions/{id}")),
        Some("bob"),
    )
    .await;
    assert_eq!(
        shown.body["status"],
        Value::from("waiting"),
        "{:?}",
        shown.body
    );
}

#[tokio::test]
async fn a_whole_number_past_those_kept_exactly_is_refused_not_rounded() {
    let gateway = Gateway::start(&config());
    let refused = post_text(
        &gateway,
        "bob",
        "/v1/tools/echo/invoke",
        r#"{"text": "x", "n": 18446744073709551617}"#,
    )
    .await;
    assert_refused(
        &refused,
        "the request body is refused: the number 18446744073709551617 at line 1 column 20 is a whole number past those kept exactly (from -9223372036854775808 to 18446744073709551615): it would reach the tool as another number; send it as a string",
    );
    // In a batch's arguments, the one call is refused.
    let batch = json!({"role": "assistant", "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "echo", "arguments": r#"{"text": "a", "n": -9223372036854775809}"#},
    }]});
    let answered = post_text(&gateway, "bob", "/v1/tool-calls", &batch.to_string()).await;
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    let result = answered.body["results"][0].to_string();
    assert!(
        result.contains("the number -9223372036854775809"),
        "{result}"
    );
    // Nothing waits for approval: neither call got that far.
    let listed =
        crate::common::get(&client(), &gateway.url("/v1/suspensions"), Some("alice")).await;
    assert_eq!(listed.body["suspensions"], json!([]), "{:?}", listed.body);

    // An approver's output for a call they complete, likewise; the call keeps waiting.
    let parked = post_text(&gateway, "bob", "/v1/tools/echo/invoke", r#"{"text": "x"}"#).await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let id = parked.body["suspension_id"].as_str().expect("an id");
    let completed = post_text(
        &gateway,
        "alice",
        &format!("/v1/suspensions/{id}/resume"),
        r#"{"decision": "complete", "output": {"n": 18446744073709551616}}"#,
    )
    .await;
    assert_refused(
        &completed,
        "the request body is refused: the number 18446744073709551616 at line 1 column 42 is a whole number past those kept exactly (from -9223372036854775808 to 18446744073709551615): it would reach the tool as another number; send it as a string",
    );
    let shown = crate::common::get(
        &client(),
        &gateway.url(&format!("/v1/suspensions/{id}")),
        Some("bob"),
    )
    .await;
    assert_eq!(shown.body["status"], "waiting", "{:?}", shown.body);
}
