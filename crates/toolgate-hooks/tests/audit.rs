//! Audit: one record per invocation with the decision trace; sinks.

mod common;

use std::time::Duration;

use serde_json::json;
use toolgate_core::hook::{FailureMode, HookRegistration};
use toolgate_core::{
    Hook, HookResult, InvokeOptions, Pipeline, Stage, ToolInvokeContext, User, hook,
};
use toolgate_hooks::audit::{
    Audit, AuditRecord, ChannelSink, ClientAddress, JsonLinesSink, Outcome,
};
use toolgate_hooks::fingerprint::KeyedFingerprint;

/// Refuses users named `mallory`.
struct NoMallory;

#[hook]
impl Hook for NoMallory {
    fn name(&self) -> &str {
        "no_mallory"
    }
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.user().id == "mallory" {
            return ctx.abort("not you", "forbidden", 403);
        }
        Ok(())
    }
}

fn pipeline(audit: Audit) -> Pipeline {
    Pipeline::builder()
        .tool(common::read_only("lookup", |input| {
            Ok(json!({ "found": input["q"] }))
        }))
        .record_hook_timings(true)
        .hook(NoMallory)
        .hook(HookRegistration::new(NoMallory).failure(FailureMode::Audit))
        .hook(audit)
        .build()
        .unwrap()
}

fn pipeline_shared(audit: std::sync::Arc<Audit>) -> Pipeline {
    Pipeline::builder()
        .tool(common::read_only("lookup", |input| {
            Ok(json!({ "found": input["q"] }))
        }))
        .hook(HookRegistration::shared(audit))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_successful_call_is_recorded_with_who_what_when_and_hashes_only() {
    let (audit, sink) = common::memory_audit();
    let p = pipeline(audit);
    let options = InvokeOptions::new()
        .user(User::new("ann").with_tenant("acme"))
        .session("s-9")
        .request_id("req-1");
    p.invoke("lookup", json!({ "q": "ann@example.com" }), options)
        .await
        .unwrap();
    let r = common::only_record(&sink);
    assert_eq!(
        (
            r.request_id.as_str(),
            r.session_id.as_deref(),
            r.user_id.as_str(),
            r.tenant.as_deref()
        ),
        ("req-1", Some("s-9"), "ann", Some("acme"))
    );
    assert_eq!(
        (
            r.tool.as_str(),
            r.tool_version.as_str(),
            r.outcome,
            r.code.as_deref(),
            r.status
        ),
        ("lookup", "1", Outcome::Success, None, 200)
    );
    assert_eq!(r.attempts, 1);
    assert!(r.started_at_ms > 1_600_000_000_000);
    assert_eq!(
        r.input_hash,
        KeyedFingerprint::new(common::AUDIT_KEY).of(&json!({ "q": "ann@example.com" }))
    );
    assert_eq!(
        r.output_hash,
        Some(KeyedFingerprint::new(common::AUDIT_KEY).of(&json!({ "found": "ann@example.com" })))
    );
    assert_eq!(
        (r.input, r.output),
        (None, None),
        "values are left out by default"
    );
    assert!(
        !serde_json::to_string(&common::only_record(&sink))
            .unwrap()
            .contains("ann@example.com")
    );
    assert!(
        r.hooks
            .iter()
            .any(|t| t.stage == Stage::WillAuthorize && t.hook == "no_mallory")
    );
    assert!(r.stages.iter().any(|t| t.stage == Stage::WillAuthorize));
}

#[tokio::test]
async fn the_client_address_the_host_binds_is_recorded_and_left_out_when_unknown() {
    let (audit, sink) = common::memory_audit();
    let p = pipeline(audit);
    let client = ClientAddress("2001:db8::7".parse().unwrap());
    let options = InvokeOptions::new()
        .user(User::new("ann"))
        .provide::<ClientAddress>(client);
    p.invoke("lookup", json!({ "q": "x" }), options)
        .await
        .unwrap();
    let record = common::only_record(&sink);
    assert_eq!(record.client_address, Some(client.0));
    let line = serde_json::to_value(&record).unwrap();
    assert_eq!(line["client_address"], json!("2001:db8::7"));

    let (audit, sink) = common::memory_audit();
    let p = pipeline(audit);
    let options = InvokeOptions::new().user(User::new("ann"));
    p.invoke("lookup", json!({ "q": "x" }), options)
        .await
        .unwrap();
    let line = serde_json::to_value(common::only_record(&sink)).unwrap();
    assert!(line.get("client_address").is_none(), "{line}");
}

#[tokio::test]
async fn a_refused_call_records_the_decision_trace_including_shadow_decisions() {
    let (audit, sink) = common::memory_audit();
    let p = pipeline(audit);
    let err = p
        .invoke(
            "lookup",
            json!({ "q": 1 }),
            InvokeOptions::new().user(User::new("mallory")),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    let r = common::only_record(&sink);
    assert_eq!(
        (r.outcome, r.code.as_deref(), r.status, r.attempts),
        (Outcome::Error, Some("forbidden"), 403, 0)
    );
    let trace: Vec<(Stage, &str, &str, bool)> = r
        .decisions
        .iter()
        .map(|d| (d.stage, d.hook.as_str(), d.outcome.as_str(), d.applied))
        .collect();
    assert_eq!(
        trace,
        [(Stage::WillAuthorize, "no_mallory", "forbidden", true)]
    );
    assert_eq!(r.output_hash, None);
}

#[tokio::test]
async fn the_shadow_hook_decision_is_recorded_as_not_applied() {
    let (audit, sink) = common::memory_audit();
    let p = Pipeline::builder()
        .tool(common::read_only("lookup", |_| Ok(json!(1))))
        .hook(HookRegistration::new(NoMallory).failure(FailureMode::Audit))
        .hook(audit)
        .build()
        .unwrap();
    p.invoke(
        "lookup",
        json!({}),
        InvokeOptions::new().user(User::new("mallory")),
    )
    .await
    .unwrap();
    let r = common::only_record(&sink);
    assert_eq!(r.outcome, Outcome::Success);
    assert_eq!(
        (r.decisions[0].outcome.as_str(), r.decisions[0].applied),
        ("forbidden", false)
    );
}

#[tokio::test]
async fn values_are_recorded_when_configured() {
    let sink = toolgate_hooks::audit::MemorySink::new();
    let p = pipeline(
        Audit::builder()
            .sink(sink.clone())
            .include_values(true)
            .build(),
    );
    p.invoke("lookup", json!({ "q": 7 }), InvokeOptions::new())
        .await
        .unwrap();
    let r = common::only_record(&sink);
    assert_eq!(
        (r.input, r.output),
        (Some(json!({ "q": 7 })), Some(json!({ "found": 7 })))
    );
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_is_recorded_as_an_error() {
    let (audit, sink) = common::memory_audit();
    let slow = toolgate_core::JsonTool::new("slow", "", json!({}), |_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(json!(1))
        })
    });
    let p = Pipeline::builder().tool(slow).hook(audit).build().unwrap();
    let err = p
        .invoke(
            "slow",
            json!({}),
            InvokeOptions::new().timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "timeout");
    let r = common::only_record(&sink);
    assert_eq!(
        (r.outcome, r.code.as_deref(), r.status),
        (Outcome::Error, Some("timeout"), 504)
    );
}

#[tokio::test]
async fn the_json_lines_sink_appends_one_parseable_line_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let p = pipeline(
        Audit::builder()
            .sink(JsonLinesSink::open(&path).unwrap())
            .build(),
    );
    for q in 0..3 {
        p.invoke("lookup", json!({ "q": q }), InvokeOptions::new())
            .await
            .unwrap();
    }
    let again = pipeline(
        Audit::builder()
            .sink(JsonLinesSink::open(&path).unwrap())
            .build(),
    );
    again
        .invoke("lookup", json!({ "q": 3 }), InvokeOptions::new())
        .await
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let records: Vec<AuditRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 4, "appended, never truncated");
    assert!(
        records
            .iter()
            .all(|r| r.tool == "lookup" && r.outcome == Outcome::Success)
    );
}

#[tokio::test(start_paused = true)]
async fn a_buffered_json_lines_sink_writes_on_flush_on_its_interval_and_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let lines = || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let audit = Audit::builder()
        .sink(JsonLinesSink::open_buffered(&path, Duration::from_secs(60)).unwrap())
        .build();
    let audit = std::sync::Arc::new(audit);
    let p = pipeline_shared(audit.clone());
    p.invoke("lookup", json!({ "q": 1 }), InvokeOptions::new())
        .await
        .unwrap();
    assert_eq!(lines(), 0, "kept in memory until a flush");
    audit.flush().await.unwrap();
    assert_eq!(lines(), 1, "flush writes what was taken");

    p.invoke("lookup", json!({ "q": 2 }), InvokeOptions::new())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(lines(), 2, "the periodic flush wrote the second record");

    p.invoke("lookup", json!({ "q": 3 }), InvokeOptions::new())
        .await
        .unwrap();
    drop(p);
    drop(audit);
    assert_eq!(lines(), 3, "dropping the sink writes the rest");
}

#[test]
fn the_json_lines_sink_reports_a_path_it_cannot_open() {
    let err = JsonLinesSink::open("/nonexistent-dir/for/sure/audit.jsonl").unwrap_err();
    assert!(err.to_string().contains("could not be opened"), "{err}");
}

#[tokio::test]
async fn the_channel_sink_delivers_records_in_order() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let p = pipeline(Audit::builder().sink(ChannelSink::new(tx)).build());
    p.invoke(
        "lookup",
        json!({ "q": 1 }),
        InvokeOptions::new().request_id("a"),
    )
    .await
    .unwrap();
    let _ = p
        .invoke(
            "lookup",
            json!({ "q": 2 }),
            InvokeOptions::new()
                .request_id("b")
                .user(User::new("mallory")),
        )
        .await;
    let first = rx.recv().await.unwrap();
    let second = rx.recv().await.unwrap();
    assert_eq!(
        (first.request_id.as_str(), first.outcome),
        ("a", Outcome::Success)
    );
    assert_eq!(
        (second.request_id.as_str(), second.outcome),
        ("b", Outcome::Error)
    );
}

#[tokio::test]
async fn a_call_waiting_for_its_callers_input_is_recorded_as_such_not_as_a_failure() {
    let (audit, sink) = common::memory_audit();
    let tool = toolgate_core::JsonTool::new("ask", "Asks the user.", json!({}), |_, _| {
        Box::pin(async {
            Err(toolgate_core::ToolError::InputRequired {
                requests: json!({"name": {"method": "elicitation/create", "params": {}}}),
                state: Some("s".to_owned()),
            })
        })
    });
    let p = Pipeline::builder().tool(tool).hook(audit).build().unwrap();
    let err = p
        .invoke("ask", json!({}), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "input_required");
    let r = common::only_record(&sink);
    assert_eq!(
        (r.outcome, r.code.as_deref(), r.status),
        (Outcome::InputRequired, Some("input_required"), 422)
    );
}

/// A pipeline whose `lookup` waits for consent, audited into the returned sink.
fn lookup_needing_consent() -> (Pipeline, toolgate_hooks::audit::MemorySink) {
    let (audit, sink) = common::memory_audit();
    let pipeline = Pipeline::builder()
        .tool(common::read_only("lookup", |input| {
            Ok(json!({ "found": input["q"] }))
        }))
        .hook(
            toolgate_hooks::consent::Consent::builder()
                .tool("lookup")
                .build(),
        )
        .hook(audit)
        .build()
        .unwrap();
    (pipeline, sink)
}

/// The call of `lookup` with `input` on `p`, as `options` say, which waits: its id.
async fn waiting_lookup(p: &Pipeline, input: serde_json::Value, options: InvokeOptions) -> String {
    match p.invoke("lookup", input, options).await.unwrap_err() {
        toolgate_core::ToolError::Suspended { suspension_id, .. } => suspension_id,
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_call_run_on_an_approval_for_a_retry_records_the_approver_and_the_approved_call() {
    let (p, sink) = lookup_needing_consent();
    let ann = || InvokeOptions::new().user(User::new("ann"));
    let suspension_id = waiting_lookup(&p, json!({"q": 1}), ann()).await;
    p.approve_retry(&suspension_id, Some("boss".into()))
        .await
        .unwrap();

    p.invoke("lookup", json!({"q": 1}), ann()).await.unwrap();

    let records = sink.records();
    let ran = records.last().expect("a record of the retry");
    let approval = ran.approval.as_ref().expect("the approval it ran on");
    assert_eq!(approval.decision, "approve");
    assert_eq!(approval.decided_by.as_deref(), Some("boss"));
    assert_eq!(approval.retry_of.as_deref(), Some(suspension_id.as_str()));
}

#[tokio::test]
async fn an_approvers_tenant_is_recorded_beside_their_id_on_a_resume_and_on_a_retry() {
    let (p, sink) = lookup_needing_consent();
    let ann = || InvokeOptions::new().user(User::new("ann").with_tenant("acme"));
    let boss = User::new("boss").with_tenant("acme");

    // Resumed: approved by boss of acme.
    let waiting = waiting_lookup(&p, json!({"q": 1}), ann()).await;
    p.resume(
        &waiting,
        toolgate_core::suspension::ResumeDecision::Approve,
        InvokeOptions::new().decided_by(&boss),
    )
    .await
    .unwrap();
    // Approved for a retry by boss of acme, then called again.
    let retried = waiting_lookup(&p, json!({"q": 2}), ann()).await;
    p.approve_retry(&retried, Some(toolgate_core::CallerId::of(&boss)))
        .await
        .unwrap();
    p.invoke("lookup", json!({"q": 2}), ann()).await.unwrap();

    let approvals: Vec<_> = sink
        .records()
        .into_iter()
        .filter_map(|record| record.approval)
        .map(|approval| (approval.decided_by, approval.decided_by_tenant))
        .collect();
    let by_boss_of_acme = (Some("boss".to_owned()), Some("acme".to_owned()));
    assert_eq!(approvals, [by_boss_of_acme.clone(), by_boss_of_acme]);
    // An approver without a tenant is recorded as before, without the field.
    let line = serde_json::to_value(toolgate_hooks::audit::ApprovalEntry {
        decision: "approve".into(),
        decided_by: Some("boss".into()),
        decided_by_tenant: None,
        reason: None,
        retry_of: None,
    })
    .unwrap();
    assert_eq!(line, json!({"decision": "approve", "decided_by": "boss"}));
}

/// The audit files in `dir` in the order they were written: rotated ones by their
/// suffix, then the active one.
fn audit_files(dir: &std::path::Path) -> Vec<toolgate_hooks::audit::verify::AuditFile> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        // The sink's lock file, `.audit.jsonl.lock`, is no part of the series.
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort_by_key(|name| (name == "audit.jsonl", name.clone()));
    names
        .into_iter()
        .map(|name| {
            let contents = std::fs::read(dir.join(&name)).unwrap();
            toolgate_hooks::audit::verify::AuditFile::new(name, contents)
        })
        .collect()
}

#[tokio::test]
async fn a_rotated_chain_verifies_across_its_files_and_a_lost_file_shows() {
    use toolgate_hooks::audit::verify::{Problem, verify};
    use toolgate_hooks::audit::{ChainOptions, CheckpointKey, CheckpointPublicKey, Rotation};

    let dir = tempfile::tempdir().unwrap();
    let key = CheckpointKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
    let public = CheckpointPublicKey::from_base64(&key.public_key()).unwrap();
    let sink = JsonLinesSink::open(dir.path().join("audit.jsonl"))
        .unwrap()
        .chained(
            ChainOptions::default()
                .signing_key(key)
                .checkpoint_every(100),
        )
        .rotated(Rotation::new().max_bytes(1500));
    let p = pipeline(Audit::builder().sink(sink).build());
    for q in 0..10 {
        p.invoke("lookup", json!({ "q": q }), InvokeOptions::new())
            .await
            .unwrap();
    }
    drop(p);

    let files = audit_files(dir.path());
    assert!(
        files.len() >= 3,
        "records of ~700 bytes rotate every two or three"
    );
    let verified = verify(&files, Some(&public)).unwrap();
    assert_eq!((verified.chains, verified.records), (1, 10));
    let written = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().metadata().unwrap().len() > 0)
        .count();
    assert_eq!(
        verified.checkpoints, written as u64,
        "one checkpoint closes each rotated file, one the sink's close"
    );

    let mut lost = files.clone();
    lost.remove(1);
    let found = verify(&lost, Some(&public)).unwrap_err();
    assert!(matches!(found.problem, Problem::Missing { .. }), "{found}");
}

#[tokio::test]
async fn a_tapped_sink_hands_over_every_line_it_writes_across_rotations_and_its_close() {
    use std::sync::{Arc, Mutex};
    use toolgate_hooks::audit::{ChainOptions, CheckpointKey, Rotation};

    let dir = tempfile::tempdir().unwrap();
    let key = CheckpointKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
    let tapped = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = tapped.clone();
    let sink =
        JsonLinesSink::open_buffered(dir.path().join("audit.jsonl"), Duration::from_secs(60))
            .unwrap()
            .chained(ChainOptions::default().signing_key(key).checkpoint_every(4))
            .rotated(Rotation::new().max_bytes(1500))
            .tapped(move |line| {
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8(line.to_vec()).unwrap());
            });
    let p = pipeline(Audit::builder().sink(sink).build());
    for q in 0..10 {
        p.invoke("lookup", json!({ "q": q }), InvokeOptions::new())
            .await
            .unwrap();
    }
    // Handed over as written into the buffer, before the file has them.
    assert!(tapped.lock().unwrap().len() >= 10);
    drop(p);

    // The files in writing order: rotated ones by their suffix, then the active one.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|name| (name == "audit.jsonl", name.clone()));
    assert!(names.len() >= 3, "rotated: {names:?}");
    let written: Vec<String> = names
        .iter()
        .flat_map(|name| {
            std::fs::read_to_string(dir.path().join(name))
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let checkpoints = written
        .iter()
        .filter(|l| l.starts_with(r#"{"checkpoint""#))
        .count();
    assert!(
        checkpoints >= 3,
        "every 4 records, each rotation and the close: {written:#?}"
    );
    assert_eq!(
        *tapped.lock().unwrap(),
        written,
        "the same lines, in the same order"
    );
}

#[tokio::test]
async fn flushing_a_chained_sink_signs_its_last_records_once() {
    use toolgate_hooks::audit::{ChainOptions, CheckpointKey};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let key = CheckpointKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
    let sink = JsonLinesSink::open_buffered(&path, Duration::from_secs(60))
        .unwrap()
        .chained(ChainOptions::default().signing_key(key));
    let audit = std::sync::Arc::new(Audit::builder().sink(sink).build());
    let p = pipeline_shared(audit.clone());
    for q in 0..2 {
        p.invoke("lookup", json!({ "q": q }), InvokeOptions::new())
            .await
            .unwrap();
    }
    audit.flush().await.unwrap();
    audit.flush().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "two records and one checkpoint: {lines:#?}");
    assert!(
        lines[2].starts_with(r#"{"checkpoint":{"#) && lines[2].contains(r#""seq":2,"#),
        "{lines:#?}"
    );
}

/// Run in a child process by [`a_second_process_on_an_audit_file_is_refused_until_the_first_lets_it_go`]:
/// opens the audit file named by `TOOLGATE_TEST_AUDIT_FILE` and prints what came of it.
/// Does nothing when run with the other tests.
#[test]
fn open_the_audit_file_in_a_child_process() {
    let Some(path) = std::env::var_os("TOOLGATE_TEST_AUDIT_FILE") else {
        return;
    };
    match JsonLinesSink::open(path) {
        Ok(_) => println!("child: opened"),
        Err(e) => println!("child: refused: {e}"),
    }
}

/// What opening `path` in another process came to (the line the child printed).
fn open_in_another_process(path: &std::path::Path) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "open_the_audit_file_in_a_child_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TOOLGATE_TEST_AUDIT_FILE", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        // The test harness prints the test's name on the same line.
        .find_map(|line| line.split_once("child: ").map(|(_, said)| said))
        .unwrap_or_else(|| panic!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
        .to_owned()
}

#[tokio::test]
async fn a_second_process_on_an_audit_file_is_refused_until_the_first_lets_it_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let first = JsonLinesSink::open(&path).unwrap();
    // A reload opens the new configuration's sink while the old one finishes its calls:
    // sinks of one process share the file, under any spelling of its path.
    let reloaded = JsonLinesSink::open_buffered(
        dir.path().join(".").join("audit.jsonl"),
        Duration::from_secs(1),
    )
    .unwrap();

    let refused = open_in_another_process(&path);
    assert!(
        refused.starts_with("refused: ")
            && refused.contains(&path.display().to_string())
            && refused.contains("another process")
            && refused.contains("its own `audit.path`"),
        "{refused}"
    );
    assert!(
        std::fs::read_to_string(&path).unwrap().is_empty(),
        "the refused process wrote nothing"
    );
    // Still held by the reloaded sink.
    drop(first);
    assert!(
        open_in_another_process(&path).starts_with("refused: "),
        "released before the last sink of the process closed"
    );
    drop(reloaded);
    assert_eq!(open_in_another_process(&path), "opened");
    // And this process may open it again.
    JsonLinesSink::open(&path).unwrap();
}

#[test]
fn the_refusal_is_a_typed_error_naming_the_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    // Another process's lock: a lock taken on the lock file through another open file.
    let held = std::fs::File::create(dir.path().join(".audit.jsonl.lock")).unwrap();
    held.try_lock().unwrap();
    let refused = JsonLinesSink::open(&path).unwrap_err();
    let toolgate_hooks::audit::AuditError::InUse { lock, .. } = &refused else {
        panic!("{refused}")
    };
    assert!(lock.ends_with(".audit.jsonl.lock"), "{refused}");
    assert!(!path.exists(), "the audit file was not even created");
    held.unlock().unwrap();
    JsonLinesSink::open(&path).unwrap();
}

#[test]
fn two_sinks_rotating_one_file_at_once_lose_no_record() {
    use toolgate_hooks::audit::{AuditSink, Rotation};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let record: AuditRecord = serde_json::from_value(json!({
        "request_id": "r", "user_id": "ann", "tool": "lookup", "tool_version": "1",
        "started_at_ms": 0, "duration_us": 0, "outcome": "success", "status": 200,
        "attempts": 1, "decisions": [], "stages": [], "input_hash": "h",
    }))
    .unwrap();
    // Every record rotates the file: two sinks on it (a reload's old and new) move it
    // aside within the same milliseconds.
    const EACH: usize = 400;
    std::thread::scope(|threads| {
        for _ in 0..2 {
            let sink = JsonLinesSink::open(&path)
                .unwrap()
                .rotated(Rotation::new().max_bytes(1));
            let record = &record;
            threads.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                for _ in 0..EACH {
                    runtime.block_on(sink.write(record)).unwrap();
                }
            });
        }
    });
    let mut records = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_name().to_string_lossy().starts_with('.') {
            records += std::fs::read_to_string(entry.path())
                .unwrap()
                .lines()
                .count();
        }
    }
    assert_eq!(
        records,
        2 * EACH,
        "records lost to a rotation over another's file"
    );
}

#[tokio::test]
async fn a_suspended_call_and_its_resumed_call_carry_the_same_suspension_id_and_other_records_none()
{
    let (p, sink) = lookup_needing_consent();
    let ann = || InvokeOptions::new().user(User::new("ann"));
    let suspension_id = waiting_lookup(&p, json!({"q": 1}), ann()).await;
    let records = sink.records();
    let suspended = records.last().unwrap();
    assert_eq!(suspended.outcome, Outcome::Suspended);
    assert_eq!(
        suspended.suspension_id.as_deref(),
        Some(suspension_id.as_str())
    );
    let line = serde_json::to_value(suspended).unwrap();
    assert_eq!(line["suspension_id"], json!(suspension_id));

    // Its resumed call's record carries the same id, whatever request id it ran under.
    p.resume(
        &suspension_id,
        toolgate_core::suspension::ResumeDecision::Approve,
        InvokeOptions::new(),
    )
    .await
    .unwrap();
    let resumed = sink.records().last().cloned().unwrap();
    assert!(resumed.approval.is_some(), "{resumed:?}");
    assert_eq!(
        resumed.suspension_id.as_deref(),
        Some(suspension_id.as_str())
    );

    // A call that never waited has none, and its line no such field.
    let (audit, plain) = common::memory_audit();
    pipeline(audit)
        .invoke("lookup", json!({"q": 2}), InvokeOptions::new())
        .await
        .unwrap();
    let record = common::only_record(&plain);
    assert_eq!(record.suspension_id, None);
    assert!(
        serde_json::to_value(&record)
            .unwrap()
            .get("suspension_id")
            .is_none()
    );
}
