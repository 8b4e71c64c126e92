//! `policies.cedar` in the real binary: the same decision on `/v1` (single calls and
//! batches), on `/mcp` and in listings; shadow policies recorded in the audit file and in
//! `/metrics`; load errors at their file, line and column from `toolgate check`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{
    Gateway, client, eventually, get, invoke, mcp_rpc, metric, open_session, post, run, user_yaml,
};
use serde_json::{Value, json};

const POLICIES: &str = r#"@id("everyone-calculates")
permit(principal, action == Action::"calculator", resource);

@id("staff-echo")
permit(principal, action == Action::"echo", resource)
when { principal.roles.contains("staff") };

@id("no-drop")
@reason("`echo` never repeats SQL that drops a table")
forbid(principal, action == Action::"echo", resource)
when { context.arguments.text like "*DROP TABLE*" };

@id("watch-mcp-echo")
@mode("shadow")
forbid(principal, action == Action::"echo", resource)
when { context has transport && context.transport == "mcp" };
"#;

/// A gateway with `POLICIES` and an audit file, both in `dir`: alice is staff, carol has
/// no role.
fn start(dir: &Path) -> Gateway {
    let policies = dir.join("echo.cedar");
    std::fs::write(&policies, POLICIES).unwrap();
    let yaml = format!(
        "tools:\n  builtin: [calculator, echo]\nusers:\n{}{}\
policies:\n  cedar:\n    files: [{}]\n\
audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
        user_yaml("alice", &["staff"]),
        user_yaml("carol", &[]),
        policies.display(),
        dir.join("audit.jsonl").display(),
    );
    Gateway::start(&yaml)
}

fn audit_records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("tool").is_some())
        .collect()
}

fn names(tools: &Value) -> Vec<String> {
    let mut names: Vec<String> = tools
        .as_array()
        .expect("a list of tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn v1_calls_and_batches_are_decided_by_the_policies_and_listings_follow() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());

    let ok = invoke(&gateway, "alice", "echo", json!({"text": "hello"})).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let refused = invoke(
        &gateway,
        "alice",
        "echo",
        json!({"text": "x; DROP TABLE users"}),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.error_code(), "forbidden");
    assert!(
        refused
            .error_message()
            .contains("never repeats SQL that drops a table"),
        "{}",
        refused.body
    );
    let carol = invoke(&gateway, "carol", "echo", json!({"text": "hello"})).await;
    assert_eq!(carol.status, 403, "{}", carol.body);
    assert!(
        carol.error_message().contains("no policy permits it"),
        "{}",
        carol.body
    );
    assert!(
        !carol.body.to_string().contains("staff-echo"),
        "no policy id is shown"
    );

    let call = |id: &str, text: &str| {
        json!({"id": id, "type": "function",
            "function": {"name": "echo", "arguments": json!({"text": text}).to_string()}})
    };
    let batch = post(
        &client(),
        &gateway.url("/v1/tool-calls?format=openai"),
        Some("alice"),
        &json!({"role": "assistant", "content": null,
            "tool_calls": [call("1", "fine"), call("2", "DROP TABLE t")]}),
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.body);
    let results = batch.body["results"].as_array().expect("results");
    assert_eq!(results[0]["status"], "success", "{}", batch.body);
    assert_eq!(results[1]["status"], "error", "{}", batch.body);
    assert_eq!(results[1]["error"]["code"], "forbidden", "{}", batch.body);

    let carol_sees = get(&client(), &gateway.url("/v1/tools"), Some("carol")).await;
    assert_eq!(names(&carol_sees.body["tools"]), ["calculator"]);
    let alice_sees = get(&client(), &gateway.url("/v1/tools"), Some("alice")).await;
    assert_eq!(names(&alice_sees.body["tools"]), ["calculator", "echo"]);

    let records = audit_records(dir.path());
    let refusal = records
        .iter()
        .find(|r| r["policies"][0]["determining"] == json!(["no-drop"]))
        .unwrap_or_else(|| panic!("a record of the refusal: {records:#?}"));
    assert_eq!(refusal["policies"][0]["decision"], "deny");
    assert_eq!(refusal["policies"][0]["stage"], "will_normalize_input");
    assert_eq!(refusal["status"], 403);
}

#[tokio::test]
async fn mcp_calls_get_the_same_decision_and_shadow_policies_only_watch() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());
    let session = open_session(&gateway, "alice").await;

    let ok = mcp_rpc(
        &gateway,
        "alice",
        &session,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    )
    .await;
    assert_ne!(ok["isError"], true, "the shadow forbid does not bite: {ok}");
    let refused = mcp_rpc(
        &gateway,
        "alice",
        &session,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "DROP TABLE t"}}),
    )
    .await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused.to_string().contains("never repeats SQL"),
        "{refused}"
    );

    let carol = open_session(&gateway, "carol").await;
    let listed = mcp_rpc(&gateway, "carol", &carol, "tools/list", json!({})).await;
    assert_eq!(names(&listed["tools"]), ["calculator"]);

    let records = audit_records(dir.path());
    let allowed = records
        .iter()
        .find(|r| r["tool"] == "echo" && r["status"] == 200)
        .unwrap_or_else(|| panic!("a record of the allowed call: {records:#?}"));
    assert!(
        !allowed.to_string().contains("call_transport"),
        "the transport a call keeps while it waits is not recorded: {allowed}"
    );
    let decision = &allowed["policies"][0];
    assert_eq!(decision["decision"], "allow");
    assert_eq!(decision["determining"], json!(["staff-echo"]));
    assert_eq!(decision["shadow"]["decision"], "deny", "{decision}");
    assert_eq!(decision["shadow"]["determining"], json!(["watch-mcp-echo"]));
    assert_eq!(decision["shadow"]["disagrees"], true);

    let metrics = gateway.metrics().await;
    // Both MCP calls of echo: the one allowed and the one `no-drop` refused.
    let watched = [
        ("policy", "watch-mcp-echo"),
        ("mode", "shadow"),
        ("decision", "deny"),
    ];
    assert_eq!(
        metric(&metrics, "toolgate_policy_decisions_total", &watched),
        2.0,
        "{metrics}"
    );
    let refused_by = [
        ("policy", "no-drop"),
        ("mode", "enforce"),
        ("decision", "deny"),
    ];
    assert_eq!(
        metric(&metrics, "toolgate_policy_decisions_total", &refused_by),
        1.0
    );
}

#[tokio::test]
async fn a_typo_in_a_policy_is_refused_by_check_and_by_a_reload_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());
    let typo = "permit(principal, action == Action::\"echo\", resource)\nwhen {\n    context.arguments.txet == \"hi\"\n};\n";
    let bad = dir.path().join("typo.cedar");
    std::fs::write(&bad, typo).unwrap();
    let config = std::fs::read_to_string(&gateway.config).unwrap();
    let broken = config.replace("echo.cedar", "typo.cedar");
    let broken_file = dir.path().join("broken.yaml");
    std::fs::write(&broken_file, &broken).unwrap();

    let (status, _, stderr) = run(&["check", "--config", broken_file.to_str().unwrap()], "");
    assert!(!status.success());
    let at = format!("{}:3:5:", bad.display());
    assert!(stderr.contains(&at), "{stderr}");
    assert!(stderr.contains("txet"), "{stderr}");

    // A reload with it keeps the policies that were loaded.
    std::fs::write(&gateway.config, &broken).unwrap();
    gateway.signal("HUP");
    gateway.wait_for_log(&at, 1, Duration::from_secs(10)).await;
    let refused = invoke(&gateway, "alice", "echo", json!({"text": "DROP TABLE t"})).await;
    assert_eq!(refused.status, 403);

    // Fixed, it loads: the policy file's new text is used.
    std::fs::write(&bad, "permit(principal, action, resource);\n").unwrap();
    gateway.signal("HUP");
    eventually(
        "the fixed policies are in force",
        Duration::from_secs(10),
        || async {
            invoke(&gateway, "alice", "echo", json!({"text": "DROP TABLE t"}))
                .await
                .status
                == 200
        },
    )
    .await;
}

/// The configuration of `gateway` with its policy file replaced by `file`, written beside
/// it as `name`.
fn with_policy_file(gateway: &Gateway, dir: &Path, file: &Path, name: &str) -> std::path::PathBuf {
    let config = std::fs::read_to_string(&gateway.config).unwrap();
    let changed = config.replace(
        &dir.join("echo.cedar").display().to_string(),
        &file.display().to_string(),
    );
    let path = dir.join(name);
    std::fs::write(&path, changed).unwrap();
    path
}

#[tokio::test]
async fn a_policy_nested_too_deep_is_refused_by_check_and_a_reload_keeps_the_old_set() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());
    // Far deeper than Cedar's parser survives on any stack: it would abort the process.
    let deep = dir.path().join("deep.cedar");
    std::fs::write(
        &deep,
        format!(
            "permit(principal, action, resource);\nforbid(principal, action, resource) when {{ {}context.arguments.text == \"boom\"{} }};\n",
            "(".repeat(100_000),
            ")".repeat(100_000)
        ),
    )
    .unwrap();
    let config = with_policy_file(&gateway, dir.path(), &deep, "deep.yaml");

    let (status, _, stderr) = run(&["check", "--config", config.to_str().unwrap()], "");
    assert_eq!(status.code(), Some(2), "{stderr}");
    let at = format!("{}:2:75: nested too deep", deep.display());
    assert!(stderr.contains(&at), "{stderr}");
    assert!(stderr.contains("write it flatter"), "{stderr}");

    std::fs::copy(&config, &gateway.config).unwrap();
    gateway.signal("HUP");
    gateway.wait_for_log(&at, 1, Duration::from_secs(30)).await;
    gateway
        .wait_for_log(
            "still serving with the previous one",
            1,
            Duration::from_secs(30),
        )
        .await;
    // The old policies still decide: carol may not echo, SQL that drops is refused.
    let refused = invoke(&gateway, "alice", "echo", json!({"text": "DROP TABLE t"})).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let ok = invoke(&gateway, "alice", "echo", json!({"text": "hello"})).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[cfg(unix)]
#[tokio::test]
async fn a_pipe_or_a_device_named_as_policy_file_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());
    let fifo = dir.path().join("fifo.cedar");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());

    // A reload with the pipe is refused at once (reading it would wait for a writer for
    // ever), and the gateway goes on serving with the policies it had.
    let config = with_policy_file(&gateway, dir.path(), &fifo, "fifo.yaml");
    let zero = with_policy_file(&gateway, dir.path(), Path::new("/dev/zero"), "zero.yaml");
    std::fs::copy(&config, &gateway.config).unwrap();
    gateway.signal("HUP");
    let refusal = format!("{}: is a pipe, not a file", fifo.display());
    gateway
        .wait_for_log(&refusal, 1, Duration::from_secs(30))
        .await;
    let refused = invoke(&gateway, "alice", "echo", json!({"text": "DROP TABLE t"})).await;
    assert_eq!(refused.status, 403, "{}", refused.body);

    // A device is refused unread (`/dev/zero` would fill memory).
    let (status, _, stderr) = run(&["check", "--config", zero.to_str().unwrap()], "");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/zero: is a device, not a file"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_pipe_in_the_configs_place_is_refused_by_a_reload_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());
    std::fs::remove_file(&gateway.config).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&gateway.config)
        .status()
        .unwrap();
    assert!(made.success());
    gateway.signal("HUP");
    gateway
        .wait_for_log(
            "it is a pipe, not a file: name the configuration file itself",
            1,
            Duration::from_secs(30),
        )
        .await;
    // The gateway was not kept waiting: it goes on serving, with the policies it had.
    let refused = invoke(&gateway, "alice", "echo", json!({"text": "DROP TABLE t"})).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
}

#[tokio::test]
async fn check_warns_of_policy_files_with_no_enforced_policy() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path());
    let empty = dir.path().join("empty.cedar");
    std::fs::write(&empty, "// nothing yet\n").unwrap();
    let config = with_policy_file(&gateway, dir.path(), &empty, "empty.yaml");
    let (status, _, stderr) = run(&["check", "--config", config.to_str().unwrap()], "");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let warning = format!(
        "warning: the policy files ({}) hold no enforced policy: every call they decide is denied until a `permit` is added",
        empty.display()
    );
    assert!(stderr.contains(&warning), "{stderr}");
}

/// `sleep` only over MCP, as the caller's transport says; everyone reads their outcomes.
const SLEEP_OVER_MCP: &str = r#"@id("sleep-over-mcp")
permit(principal, action == Action::"sleep", resource)
when { context has transport && context.transport == "mcp" };

@id("outcomes")
permit(principal, action == Action::"toolgate.outcome", resource);
"#;

/// `sleep` anywhere but over MCP.
const SLEEP_NOT_OVER_MCP: &str = r#"@id("sleep-anywhere")
permit(principal, action == Action::"sleep", resource);

@id("no-mcp-sleep")
forbid(principal, action == Action::"sleep", resource)
when { context has transport && context.transport == "mcp" };

@id("outcomes")
permit(principal, action == Action::"toolgate.outcome", resource);
"#;

/// A gateway where `sleep` waits for approval and the policies of `policies` (written to
/// `dir`) decide: bob calls, carol approves.
fn start_approving(dir: &Path, policies: &str) -> (Gateway, std::path::PathBuf) {
    let file = dir.join("sleep.cedar");
    std::fs::write(&file, policies).unwrap();
    let yaml = format!(
        "tools:\n  builtin: [sleep]\nusers:\n{}{}\
policies:\n  cedar:\n    files: [{}]\n  approval:\n    tools: [sleep]\n",
        user_yaml("bob", &[]),
        user_yaml("carol", &["admin"]),
        file.display(),
    );
    (Gateway::start(&yaml), file)
}

/// Bob's MCP `tools/call` of `sleep`, which waits: its suspension id.
async fn bobs_mcp_sleep_waits(gateway: &Gateway) -> String {
    let session = open_session(gateway, "bob").await;
    let params = json!({"name": "sleep", "arguments": {"ms": 1}});
    let waiting = mcp_rpc(gateway, "bob", &session, "tools/call", params).await;
    waiting["_meta"]["io.toolgate/error"]["suspensionId"]
        .as_str()
        .unwrap_or_else(|| panic!("the call waits: {waiting}"))
        .to_owned()
}

async fn approve(gateway: &Gateway, approver: &str, id: &str) -> common::Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    post(
        &client(),
        &url,
        Some(approver),
        &json!({"decision": "approve"}),
    )
    .await
}

#[tokio::test]
async fn an_mcp_call_that_waited_is_decided_on_approval_as_an_mcp_call() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, _) = start_approving(dir.path(), SLEEP_OVER_MCP);
    // Over `/v1` no policy permits bob `sleep`.
    let refused = invoke(&gateway, "bob", "sleep", json!({"ms": 1})).await;
    assert_eq!(refused.status, 403, "{}", refused.body);

    let id = bobs_mcp_sleep_waits(&gateway).await;
    // Carol approves through `/v1`: the call is still bob's MCP call, which may run.
    let approved = approve(&gateway, "carol", &id).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.body["output"]["slept_ms"], 1, "{}", approved.body);
    let shown = approved.body["metadata"].to_string();
    assert!(
        !shown.contains("transport"),
        "the kept transport is not shown: {shown}"
    );
}

#[tokio::test]
async fn a_reload_that_forbids_mcp_calls_stops_an_mcp_call_waiting_for_approval() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, file) = start_approving(dir.path(), SLEEP_OVER_MCP);
    let id = bobs_mcp_sleep_waits(&gateway).await;

    std::fs::write(&file, SLEEP_NOT_OVER_MCP).unwrap();
    gateway.signal("HUP");
    // Once the new policies decide, bob's `/v1` call of `sleep` is permitted (and waits).
    eventually("the reload", Duration::from_secs(30), || async {
        invoke(&gateway, "bob", "sleep", json!({"ms": 1}))
            .await
            .status
            == 202
    })
    .await;

    let approved = approve(&gateway, "carol", &id).await;
    assert_eq!(approved.status, 403, "{}", approved.body);
    assert_eq!(approved.error_code(), "forbidden", "{}", approved.body);
    assert!(approved.body.get("output").is_none(), "{}", approved.body);
}
