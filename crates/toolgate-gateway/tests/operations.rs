//! Running the gateway: batches and approvals, metrics, graceful shutdown on SIGTERM and
//! configuration reload on SIGHUP.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    Answer, Gateway, client, eventually, fresh_client, get, invoke, key, mcp, metric, open_session,
    post, user_yaml,
};
use reqwest::Method;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Batches and suspensions

fn approval_config() -> String {
    format!(
        "tools:\n  builtin: [calculator, sleep]\nusers:\n{}{}\
policies:\n  approval:\n    tools: [sleep]\n    approver_roles: [admin]\n",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["analyst"]),
    )
}

fn openai_call(id: &str, tool: &str, arguments: Value) -> Value {
    json!({
        "id": id,
        "type": "function",
        "function": {"name": tool, "arguments": arguments.to_string()}
    })
}

/// Sends bob's batch of a calculator call and a sleep call (which needs approval); returns
/// the sleep call's suspension id.
async fn batch_with_a_suspended_sleep(gateway: &Gateway) -> String {
    let message = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [
            openai_call("call_calc", "calculator", json!({"expression": "6*7"})),
            openai_call("call_sleep", "sleep", json!({"ms": 50})),
        ]
    });
    let answer = post(
        &client(),
        &gateway.url("/v1/tool-calls?format=openai"),
        Some("bob"),
        &message,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let results = answer.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{}", answer.body);
    assert_eq!(results[0]["call_id"], "call_calc");
    assert_eq!(results[0]["status"], "success", "{}", answer.body);
    assert_eq!(results[0]["output"]["result"], 42);
    assert_eq!(results[1]["call_id"], "call_sleep");
    assert_eq!(results[1]["status"], "suspended", "{}", answer.body);
    let messages = answer.body["messages"]
        .as_array()
        .expect("OpenAI tool messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["tool_call_id"], "call_calc");
    assert_eq!(messages[1]["tool_call_id"], "call_sleep");
    results[1]["metadata"]["suspension_id"]
        .as_str()
        .expect("metadata.suspension_id")
        .to_owned()
}

fn resume_url(gateway: &Gateway, id: &str) -> String {
    gateway.url(&format!("/v1/suspensions/{id}/resume?format=openai"))
}

#[tokio::test]
async fn a_batch_suspends_the_call_that_needs_approval_until_an_approver_resumes_it() {
    let gateway = Gateway::start(&approval_config());
    let client = client();
    let id = batch_with_a_suspended_sleep(&gateway).await;
    let approve = json!({"decision": "approve"});

    let by_bob = post(&client, &resume_url(&gateway, &id), Some("bob"), &approve).await;
    assert_eq!(by_bob.status, 403, "{}", by_bob.body);
    assert_eq!(by_bob.error_code(), "not_an_approver");

    let by_alice = post(&client, &resume_url(&gateway, &id), Some("alice"), &approve).await;
    assert_eq!(by_alice.status, 200, "{}", by_alice.body);
    let result = &by_alice.body["results"][0];
    assert_eq!(result["status"], "success", "{}", by_alice.body);
    assert_eq!(result["call_id"], "call_sleep");
    assert_eq!(result["output"]["slept_ms"], 50);

    let again = post(&client, &resume_url(&gateway, &id), Some("alice"), &approve).await;
    assert_eq!(again.status, 404, "{}", again.body);
    assert_eq!(again.error_code(), "unknown_suspension");
}

#[tokio::test]
async fn a_rejected_suspension_ends_in_a_rejected_error() {
    let gateway = Gateway::start(&approval_config());
    let id = batch_with_a_suspended_sleep(&gateway).await;
    let shown = get(
        &client(),
        &gateway.url(&format!("/v1/suspensions/{id}")),
        Some("bob"),
    )
    .await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.body["tool"], "sleep");

    let answer = post(
        &client(),
        &resume_url(&gateway, &id),
        Some("alice"),
        &json!({"decision": "reject", "reason": "no"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = &answer.body["results"][0];
    assert_eq!(result["status"], "error", "{}", answer.body);
    assert_eq!(result["error"]["code"], "rejected");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("no"),
        "{}",
        answer.body
    );
    assert!(result.get("output").is_none(), "{}", answer.body);
}

#[tokio::test]
async fn an_approval_after_a_reload_removed_the_tool_does_not_run_it() {
    let gateway = Gateway::start(&approval_config());
    let id = batch_with_a_suspended_sleep(&gateway).await;

    let without_sleep = format!(
        "tools:\n  builtin: [calculator]\nusers:\n{}{}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["analyst"]),
    );
    std::fs::write(&gateway.config, without_sleep).unwrap();
    gateway.signal("HUP");
    eventually(
        "the reload removes sleep",
        Duration::from_secs(30),
        || async {
            let listed = get(&client(), &gateway.url("/v1/tools"), Some("alice")).await;
            listed.status == 200 && !listed.body.to_string().contains("\"sleep\"")
        },
    )
    .await;

    let approve = json!({"decision": "approve"});
    let (client, url) = (client(), resume_url(&gateway, &id));
    let approve_as_alice = || post(&client, &url, Some("alice"), &approve);
    let answer = approve_as_alice().await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = &answer.body["results"][0];
    assert_eq!(result["call_id"], "call_sleep");
    assert_eq!(result["status"], "error", "{}", answer.body);
    assert_eq!(result["error"]["code"], "unknown_tool", "{}", answer.body);
    let text = result["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("`sleep` no longer exists"), "{text}");
    assert!(result.get("output").is_none(), "{}", answer.body);

    let again = approve_as_alice().await;
    assert_eq!(again.status, 404, "the call ended: {}", again.body);
}

// ---------------------------------------------------------------------------------------
// Metrics

#[tokio::test]
async fn metrics_count_every_call_by_outcome_and_every_request_by_status() {
    let config = format!(
        "tools:\n  builtin: [calculator, sleep]\nusers:\n{}\
policies:\n  timeouts:\n    tools: {{ sleep: 50ms }}\n",
        user_yaml("alice", &["admin"])
    );
    let gateway = Gateway::start(&config);
    for expression in ["1+1", "2*3", "7-1", "10/2"] {
        let answer = invoke(
            &gateway,
            "alice",
            "calculator",
            json!({"expression": expression}),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // A number where a string belongs, and an expression without a value: both the
    // caller's mistake.
    for expression in [json!(5), json!("1/0")] {
        let answer = invoke(
            &gateway,
            "alice",
            "calculator",
            json!({"expression": expression}),
        )
        .await;
        assert_eq!(answer.status, 400, "{}", answer.body);
    }
    let late = invoke(&gateway, "alice", "sleep", json!({"ms": 10_000})).await;
    assert_eq!(late.status, 504, "{}", late.body);
    let stranger = post(
        &client(),
        &gateway.url("/v1/tools/calculator/invoke"),
        None,
        &json!({"expression": "1"}),
    )
    .await;
    assert_eq!(stranger.status, 401);

    let response = client()
        .get(gateway.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let calls = |labels: &[(&str, &str)]| metric(&text, "toolgate_calls_total", labels);
    let calculator = ("tool", "calculator");
    assert_eq!(
        calls(&[calculator, ("outcome", "success"), ("code", "ok")]),
        4.0,
        "{text}"
    );
    assert_eq!(calls(&[calculator, ("outcome", "error")]), 2.0, "{text}");
    assert_eq!(
        calls(&[calculator, ("code", "invalid_input")]),
        2.0,
        "{text}"
    );
    assert_eq!(
        calls(&[("tool", "sleep"), ("outcome", "error"), ("code", "timeout")]),
        1.0,
        "{text}"
    );
    // The unauthenticated request never reached the pipeline.
    assert_eq!(calls(&[]), 7.0, "{text}");

    let requests = |status: &str| {
        metric(
            &text,
            "toolgate_http_requests_total",
            &[
                ("route", "/v1/tools/{name}/invoke"),
                ("method", "POST"),
                ("status", status),
            ],
        )
    };
    assert_eq!(requests("200"), 4.0, "{text}");
    assert_eq!(requests("400"), 2.0, "{text}");
    assert_eq!(requests("504"), 1.0, "{text}");
    assert_eq!(requests("401"), 1.0, "{text}");
}

/// The series of `/metrics` that name `tool`.
fn series_of<'a>(text: &'a str, tool: &str) -> Vec<&'a str> {
    let label = format!("tool=\"{tool}\"");
    text.lines()
        .filter(|line| !line.starts_with('#') && line.contains(&label))
        .collect()
}

#[tokio::test]
async fn series_left_idle_leave_metrics_and_count_again_from_zero_when_called() {
    let config = |tools: &str| {
        format!(
            "server:\n  metrics_idle_timeout: 1s\ntools:\n  builtin: [{tools}]\nusers:\n{}",
            user_yaml("alice", &["admin"])
        )
    };
    let gateway = Gateway::start(&config("calculator, echo"));
    let add = || {
        invoke(
            &gateway,
            "alice",
            "calculator",
            json!({"expression": "1+1"}),
        )
    };
    let echo = invoke(&gateway, "alice", "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.status, 200, "{}", echo.body);
    assert_eq!(add().await.status, 200);
    let text = gateway.metrics().await;
    assert!(!series_of(&text, "echo").is_empty(), "{text}");

    // The reload removes `echo`; `calculator`, called after it, has its handles kept by
    // the new configuration's hook.
    std::fs::write(&gateway.config, config("calculator")).unwrap();
    gateway.reload(1).await;
    assert_eq!(add().await.status, 200);
    let calls = |text: &str| {
        metric(
            text,
            "toolgate_calls_total",
            &[("tool", "calculator"), ("outcome", "success")],
        )
    };
    let invokes = |text: &str| {
        metric(
            text,
            "toolgate_http_requests_total",
            &[("route", "/v1/tools/{name}/invoke"), ("status", "200")],
        )
    };
    let text = gateway.metrics().await;
    assert_eq!((calls(&text), invokes(&text)), (2.0, 3.0), "{text}");

    // Idle for a second, every series of a call goes: the removed tool's and the kept one's.
    eventually(
        "the idle series leave /metrics",
        Duration::from_secs(30),
        || async {
            let text = gateway.metrics().await;
            series_of(&text, "echo").is_empty()
                && series_of(&text, "calculator").is_empty()
                && invokes(&text) == 0.0
        },
    )
    .await;

    // Called again, the tool shows again, counting from zero, and so does its route.
    assert_eq!(add().await.status, 200);
    let text = gateway.metrics().await;
    assert_eq!(
        (calls(&text), invokes(&text)),
        (1.0, 1.0),
        "a call after its series left /metrics must show in a new series:\n{text}"
    );
    assert!(series_of(&text, "echo").is_empty(), "{text}");
}

// ---------------------------------------------------------------------------------------
// SIGTERM: drain

/// One `sleep` call at a time (globally), so that a probe call tells whether a long call is
/// in flight: the probe is refused with 503 `overloaded` while it is. Calls may run for
/// five minutes; with `audit`, every call's record is written through to that file.
fn drain_config(grace: &str, audit: Option<&Path>) -> String {
    let audit = audit.map_or_else(String::new, |path| {
        format!(
            "audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
            path.display()
        )
    });
    format!(
        "server:\n  shutdown_grace: {grace}\n  request_timeout: 5m\ntools:\n  builtin: [sleep]\n\
users:\n{}policies:\n  concurrency:\n    - {{ name: one-sleep, limit: 1, partition: global, tools: [sleep] }}\n\
{audit}",
        user_yaml("alice", &["admin"])
    )
}

/// Polls until a `sleep` call is in flight (see [`drain_config`]).
async fn until_a_sleep_is_in_flight(gateway: &Gateway) {
    eventually(
        "the long call is in flight",
        Duration::from_secs(30),
        || async {
            let probe = invoke(gateway, "alice", "sleep", json!({"ms": 0})).await;
            assert!(
                probe.status == 200 || probe.error_code() == "overloaded",
                "unexpected probe answer {}: {}",
                probe.status,
                probe.body
            );
            probe.status == 503
        },
    )
    .await;
}

/// Starts a `sleep` call of `ms` in the background; its answer. A call that happens to
/// arrive while a probe holds the slot is refused with 503 `overloaded`, and sent again.
fn start_sleep(gateway: &Gateway, ms: u64) -> tokio::task::JoinHandle<Answer> {
    let url = gateway.url("/v1/tools/sleep/invoke");
    tokio::spawn(async move {
        loop {
            let answer = post(&client(), &url, Some("alice"), &json!({"ms": ms})).await;
            if answer.error_code() != "overloaded" {
                return answer;
            }
        }
    })
}

/// A gateway draining with `grace`, whose audit records go to a file in `dir`; the path of
/// that file.
fn start_audited(dir: &tempfile::TempDir, grace: &str) -> (Gateway, PathBuf) {
    let audit = dir.path().join("audit.jsonl");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(&config, drain_config(grace, Some(&audit))).expect("writing the config");
    (Gateway::start_file(&config), audit)
}

/// The audit records in the JSON-lines file at `path`.
fn audit_records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str(line).expect("an audit record is one JSON line"))
        .collect()
}

/// Waits for the gateway to exit after SIGTERM; panics unless it exits 0 within `limit`.
async fn assert_exits_cleanly(gateway: &mut Gateway, limit: Duration) {
    let exit = gateway.wait_exit(limit).await;
    let exit = exit.unwrap_or_else(|| {
        panic!(
            "still running {limit:?} after the drain should have ended:\n{}",
            gateway.stderr()
        )
    });
    assert!(exit.success(), "exit {exit}; stderr:\n{}", gateway.stderr());
}

#[tokio::test]
async fn while_draining_readiness_is_503_new_calls_are_refused_and_the_call_in_flight_finishes() {
    let mut gateway = Gateway::start(&drain_config("60s", None));
    let call = start_sleep(&gateway, 5000);
    until_a_sleep_is_in_flight(&gateway).await;

    gateway.signal("TERM");
    // New connections are still accepted, so that probes see the drain.
    let readyz = gateway.url("/readyz");
    eventually(
        "/readyz answers 503 after SIGTERM",
        Duration::from_secs(10),
        || async { get(&fresh_client(), &readyz, None).await.status == 503 },
    )
    .await;
    let ready = get(&fresh_client(), &readyz, None).await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.body, json!({"status": "draining"}));
    assert_eq!(ready.header("connection"), Some("close"));
    let health = get(&fresh_client(), &gateway.url("/healthz"), None).await;
    assert_eq!(health.status, 200, "{}", health.body);

    let refused = invoke(&gateway, "alice", "sleep", json!({"ms": 0})).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.error_code(), "shutting_down", "{}", refused.body);
    assert!(
        refused.error_message().contains("another replica"),
        "{}",
        refused.body
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("connection"), Some("close"));
    let tools_list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let (status, _, text) = mcp(&gateway, Method::POST, "alice", None, Some(tools_list)).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("shutting_down"), "{text}");

    let answer = call.await.expect("the call in flight is answered");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["output"]["slept_ms"], 5000);
    assert_eq!(answer.header("connection"), Some("close"));
    // The drain ends when the last call does, long before the 60 s grace.
    assert_exits_cleanly(&mut gateway, Duration::from_secs(20)).await;
}

#[tokio::test]
async fn a_call_still_running_when_the_grace_ends_is_answered_503_and_audited() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut gateway, audit) = start_audited(&dir, "500ms");
    let call = start_sleep(&gateway, 240_000);
    until_a_sleep_is_in_flight(&gateway).await;

    gateway.signal("TERM");
    let cut = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the call is cut long before its 240 s sleep ends")
        .expect("the cut call is answered");
    assert_eq!(cut.status, 503, "{}", cut.body);
    assert_eq!(cut.error_code(), "shutting_down", "{}", cut.body);
    let message = cut.error_message();
    assert!(
        message.contains("shut down before the call finished") && message.contains("idempotent"),
        "{message}"
    );
    assert_eq!(
        cut.header("retry-after"),
        None,
        "a call that may have had effects is not to be retried blindly"
    );
    assert_exits_cleanly(&mut gateway, Duration::from_secs(30)).await;
    assert!(
        gateway.stderr().contains("shutdown grace expired"),
        "{}",
        gateway.stderr()
    );

    let request_id = cut
        .header("x-request-id")
        .expect("the answer names its call");
    let records = audit_records(&audit);
    let record = records
        .iter()
        .find(|r| r["request_id"] == request_id)
        .unwrap_or_else(|| panic!("no audit record of call {request_id} in {records:#?}"));
    assert_eq!(record["tool"], "sleep", "{record}");
    assert_eq!(record["outcome"], "error", "{record}");
    // The record says what the caller was told.
    assert_eq!(
        (&record["code"], &record["status"]),
        (&json!("shutting_down"), &json!(503)),
        "{record}"
    );
}

#[tokio::test]
async fn an_mcp_call_still_running_when_the_grace_ends_gets_an_error_result_and_is_audited() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut gateway, audit) = start_audited(&dir, "500ms");
    let session = open_session(&gateway, "alice").await;
    let long_call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                           "params": {"name": "sleep", "arguments": {"ms": 240_000}}});
    let calling = async {
        loop {
            let sent = Some(long_call.clone());
            let answer = mcp(&gateway, Method::POST, "alice", Some(&session), sent).await;
            // Sent again when a probe held the slot, as `start_sleep` does.
            if !answer.2.contains("overloaded") {
                return answer;
            }
        }
    };
    let terminating = async {
        until_a_sleep_is_in_flight(&gateway).await;
        gateway.signal("TERM");
    };
    let ((status, _, text), ()) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(calling, terminating)
    })
    .await
    .expect("the call is cut long before its 240 s sleep ends");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"isError\":true"), "{text}");
    assert!(text.contains("shutting_down"), "{text}");
    assert!(
        text.contains("shut down before the call finished"),
        "{text}"
    );
    assert_exits_cleanly(&mut gateway, Duration::from_secs(30)).await;

    let records = audit_records(&audit);
    let record = records
        .iter()
        .find(|r| r["session_id"] == session.as_str() && r["code"] == "shutting_down")
        .unwrap_or_else(|| panic!("no audit record of the cut call in {records:#?}"));
    assert_eq!(record["tool"], "sleep", "{record}");
    assert_eq!(record["outcome"], "error", "{record}");
}

#[tokio::test]
async fn a_batch_cut_when_the_grace_ends_reports_its_unfinished_call_as_shutting_down() {
    let mut gateway = Gateway::start(&drain_config("500ms", None));
    let message = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [openai_call("call_long", "sleep", json!({"ms": 240_000}))]
    });
    let url = gateway.url("/v1/tool-calls?format=openai");
    let calling = async {
        loop {
            let answer = post(&client(), &url, Some("alice"), &message).await;
            // Sent again when a probe held the slot, as `start_sleep` does.
            if answer.body["results"][0]["error"]["code"] != "overloaded" {
                return answer;
            }
        }
    };
    let terminating = async {
        until_a_sleep_is_in_flight(&gateway).await;
        gateway.signal("TERM");
    };
    let (answer, ()) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(calling, terminating)
    })
    .await
    .expect("the call is cut long before its 240 s sleep ends");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = &answer.body["results"][0];
    assert_eq!(result["call_id"], "call_long", "{}", answer.body);
    assert_eq!(result["status"], "error", "{}", answer.body);
    assert_eq!(result["error"]["code"], "shutting_down", "{}", answer.body);
    assert_exits_cleanly(&mut gateway, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn an_mcp_session_stream_ends_cleanly_when_the_drain_starts() {
    let mut gateway = Gateway::start(&drain_config("60s", None));
    let session = open_session(&gateway, "alice").await;
    let stream = client()
        .get(gateway.url("/mcp"))
        .bearer_auth(key("alice"))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("the session's stream opens");
    assert_eq!(stream.status().as_u16(), 200);

    gateway.signal("TERM");
    // Ended by the gateway, not cut by its exit: the body ends as a body should.
    let ended = tokio::time::timeout(Duration::from_secs(30), stream.text())
        .await
        .expect("the stream ends when the drain starts");
    assert!(ended.is_ok(), "the stream was cut, not ended: {ended:?}");
    // No call is in flight, and the stream does not hold the gateway up.
    assert_exits_cleanly(&mut gateway, Duration::from_secs(20)).await;
}

// ---------------------------------------------------------------------------------------
// SIGHUP: reload

/// alice may call everything; with `with_bob`, bob (analyst) may call the calculator.
fn reload_config(with_bob: bool) -> String {
    let (bob, rule) = if with_bob {
        (
            user_yaml("bob", &["analyst"]),
            "      - { effect: allow, roles: [analyst], tools: [calculator] }\n",
        )
    } else {
        (String::new(), "")
    };
    format!(
        "tools:\n  builtin: [calculator, sleep]\nusers:\n{}{bob}\
policies:\n  authorization:\n    rules:\n      - {{ effect: allow, roles: [admin] }}\n{rule}  \
concurrency:\n    - {{ name: one-sleep, limit: 1, partition: global, tools: [sleep] }}\n",
        user_yaml("alice", &["admin"]),
    )
}

const REFUSED: &str = "the new configuration was refused";

#[tokio::test]
async fn sighup_keeps_the_old_configuration_when_the_new_file_is_broken_and_applies_a_good_one() {
    let gateway = Gateway::start(&reload_config(false));
    let calc = json!({"expression": "6*7"});
    assert_eq!(
        invoke(&gateway, "bob", "calculator", calc.clone())
            .await
            .status,
        401
    );

    // Invalid YAML, then a valid document with a misspelt field that would add bob.
    let broken = [
        "tools: [unclosed\n  builtin: {\n".to_owned(),
        reload_config(true).replace("roles: [analyst]", "rolez: [analyst]"),
    ];
    for (n, text) in broken.iter().enumerate() {
        std::fs::write(&gateway.config, text).unwrap();
        gateway.signal("HUP");
        gateway
            .wait_for_log(REFUSED, n + 1, Duration::from_secs(30))
            .await;
        let alice = invoke(&gateway, "alice", "calculator", calc.clone()).await;
        assert_eq!(alice.status, 200, "after broken file {n}: {}", alice.body);
        assert_eq!(alice.body["output"]["result"], 42);
        let bob = invoke(&gateway, "bob", "calculator", calc.clone()).await;
        assert_eq!(bob.status, 401, "after broken file {n}: {}", bob.body);
    }

    // A good file, while a call is in flight.
    let call = start_sleep(&gateway, 3000);
    until_a_sleep_is_in_flight(&gateway).await;
    std::fs::write(&gateway.config, reload_config(true)).unwrap();
    gateway.signal("HUP");
    eventually(
        "bob's key works after the reload",
        Duration::from_secs(30),
        || async {
            invoke(&gateway, "bob", "calculator", calc.clone())
                .await
                .status
                == 200
        },
    )
    .await;
    // The new policy is in force: bob may not call sleep.
    let bob_sleep = invoke(&gateway, "bob", "sleep", json!({"ms": 0})).await;
    assert_eq!(bob_sleep.status, 403, "{}", bob_sleep.body);
    // The long call held its permit across the reload: it is still in flight.
    let probe = invoke(&gateway, "alice", "sleep", json!({"ms": 0})).await;
    assert_eq!(
        probe.status, 503,
        "the long call was no longer in flight after the reload: {}",
        probe.body
    );

    let answer = call.await.expect("the call in flight is answered");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["output"]["slept_ms"], 3000);
    assert_eq!(
        gateway.stderr().matches(REFUSED).count(),
        2,
        "{}",
        gateway.stderr()
    );
}

#[tokio::test]
async fn signals_sent_as_soon_as_the_gateway_announces_itself_are_handled() {
    // A supervisor may reload or stop the gateway the moment it prints its address.
    let config = format!(
        "tools:\n  builtin: [calculator]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    );
    let mut gateway = Gateway::start(&config);
    gateway.signal("HUP");
    gateway
        .wait_for_log("SIGHUP received", 1, Duration::from_secs(30))
        .await;
    gateway
        .wait_for_log("configuration reloaded", 1, Duration::from_secs(30))
        .await;
    let answer = invoke(
        &gateway,
        "alice",
        "calculator",
        json!({"expression": "6*7"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    let mut second = Gateway::start(&config);
    second.signal("TERM");
    let exit = second.wait_exit(Duration::from_secs(15)).await;
    let exit = exit.unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", second.stderr()));
    assert!(exit.success(), "exit {exit}; stderr:\n{}", second.stderr());
    assert!(
        gateway.wait_exit(Duration::ZERO).await.is_none(),
        "the reloaded gateway exited"
    );
}

#[tokio::test]
async fn a_sighup_while_the_gateway_starts_does_not_end_it_and_a_sigterm_stops_the_start() {
    // An upstream that takes the connection and never answers holds the start for its
    // `connect_timeout`, as a slow upstream or Redis does; a configuration push may send
    // SIGHUP to every replica meanwhile.
    use std::os::unix::process::ExitStatusExt;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "tools:\n  builtin: [calculator]\nupstreams:\n  - {{ name: silent, url: \"http://{}/mcp\", connect_timeout: 120s }}\nusers:\n{}",
            silent.local_addr().unwrap(),
            user_yaml("alice", &["admin"])
        ),
    )
    .expect("writing the config");
    let mut child = std::process::Command::new(common::BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting the toolgate binary");
    // It is starting once it has connected to the upstream.
    let (_held, _) = tokio::task::spawn_blocking(move || silent.accept())
        .await
        .unwrap()
        .expect("the gateway connects to its upstream");
    let pid = child.id();
    let send = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{name}");
    };
    send("HUP");
    let exited = |child: &mut std::process::Child, limit: Duration| {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("waiting") {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let after_hup = exited(&mut child, Duration::from_secs(2));
    assert!(
        after_hup.is_none(),
        "a SIGHUP while starting ended the gateway: {after_hup:?}"
    );
    send("TERM");
    let stopped = exited(&mut child, Duration::from_secs(60));
    let Some(stopped) = stopped else {
        let _ = child.kill();
        panic!("still starting a minute after SIGTERM");
    };
    assert!(
        stopped.success(),
        "a SIGTERM while starting stops the start cleanly: {stopped:?} (signal {:?})",
        stopped.signal()
    );
}

#[tokio::test]
async fn serve_starts_from_one_read_of_its_file_so_a_pipe_can_be_served() {
    // A pipe gives its text once: a second read at start (once for the telemetry, once
    // for the rest) would find it empty. So would a file rewritten between two reads
    // give its halves of two versions.
    let config = format!(
        "tools:\n  builtin: [calculator]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    );
    let gateway = Gateway::start_piped(&config);
    let answer = invoke(
        &gateway,
        "alice",
        "calculator",
        json!({"expression": "6*7"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

/// The calls of `tool` a statistics file counts (0 while it does not exist yet).
fn counted_calls(path: &Path, tool: &str) -> u64 {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|stats| stats[tool]["calls"].as_u64())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_reload_that_moves_the_statistics_file_saves_both_and_can_move_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let config = |stats: &Path| {
        format!(
            "tools:\n  builtin: [echo]\nusers:\n{}stats:\n  path: {}\n  autosave: 200ms\n",
            user_yaml("alice", &["admin"]),
            stats.display()
        )
    };
    let echo = || json!({"text": "hi"});
    let mut gateway = Gateway::start(&config(&first));
    assert_eq!(invoke(&gateway, "alice", "echo", echo()).await.status, 200);

    std::fs::write(&gateway.config, config(&second)).unwrap();
    gateway.reload(1).await;
    assert_eq!(
        counted_calls(&first, "echo"),
        1,
        "the file let go of was saved at the reload"
    );
    for _ in 0..2 {
        assert_eq!(invoke(&gateway, "alice", "echo", echo()).await.status, 200);
    }
    eventually(
        "the new file is saved on the autosave interval",
        Duration::from_secs(30),
        || async { counted_calls(&second, "echo") == 2 },
    )
    .await;

    // Back to the first file: it is free again, and read back.
    std::fs::write(&gateway.config, config(&first)).unwrap();
    gateway.reload(2).await;
    assert!(!gateway.stderr().contains(REFUSED), "{}", gateway.stderr());
    assert_eq!(invoke(&gateway, "alice", "echo", echo()).await.status, 200);
    gateway.signal("TERM");
    assert_exits_cleanly(&mut gateway, Duration::from_secs(30)).await;
    assert_eq!(counted_calls(&first, "echo"), 2);
    assert_eq!(counted_calls(&second, "echo"), 2);
}

#[cfg(unix)]
#[tokio::test]
async fn a_reload_that_spells_the_statistics_path_another_way_keeps_the_open_file() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("linked")).unwrap();
    let config = |stats: &Path| {
        format!(
            "tools:\n  builtin: [echo]\nusers:\n{}stats:\n  path: {}\n",
            user_yaml("alice", &["admin"]),
            stats.display()
        )
    };
    let echo = || json!({"text": "hi"});
    let mut gateway = Gateway::start(&config(&real.join("stats.json")));
    assert_eq!(invoke(&gateway, "alice", "echo", echo()).await.status, 200);

    // The same file through a linked directory: not a new file to open (which its own
    // lock would refuse), but the one already open.
    std::fs::write(
        &gateway.config,
        config(&dir.path().join("linked").join("stats.json")),
    )
    .unwrap();
    gateway.signal("HUP");
    eventually(
        "the reload is answered",
        Duration::from_secs(60),
        || async {
            let stderr = gateway.stderr();
            stderr.contains("configuration reloaded") || stderr.contains(REFUSED)
        },
    )
    .await;
    assert!(!gateway.stderr().contains(REFUSED), "{}", gateway.stderr());
    assert_eq!(invoke(&gateway, "alice", "echo", echo()).await.status, 200);
    gateway.signal("TERM");
    assert_exits_cleanly(&mut gateway, Duration::from_secs(30)).await;
    assert_eq!(counted_calls(&real.join("stats.json"), "echo"), 2);
}

#[tokio::test]
async fn a_second_gateway_on_the_same_statistics_file_refuses_to_start_instead_of_saving_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "tools:\n  builtin: [echo]\nusers:\n{}stats:\n  path: {}\n",
            user_yaml("alice", &["admin"]),
            stats.display()
        ),
    )
    .unwrap();
    let mut first = Gateway::start_file(&config);
    assert_eq!(
        invoke(&first, "alice", "echo", json!({"text": "hi"}))
            .await
            .status,
        200
    );

    let listen = ["--listen", "127.0.0.1:0"];
    let args = [
        &["serve", "--config", config.to_str().unwrap()][..],
        &listen,
    ]
    .concat();
    let (status, _, stderr) = common::run(&args, "");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another store (in this process or another) already has the usage statistics file {} open",
            stats.display()
        )),
        "{stderr}"
    );

    // The first one's counts are its own, saved at its shutdown.
    first.signal("TERM");
    assert_exits_cleanly(&mut first, Duration::from_secs(30)).await;
    assert_eq!(counted_calls(&stats, "echo"), 1);
}
