//! A model's output is attacker-controlled: hostile ids, names, arguments and limits, and
//! the files the agent layer keeps, each answered with a result or a typed error — never a
//! panic, a lost result, or a write outside the agent's own files.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Runs, THREAD, Wait, state, system};
use serde_json::json;
use toolgate_agent::format::{FormatError, gemini};
use toolgate_agent::{
    Arguments, Concurrency, ExecuteOptions, ResumeDecision, ResumeError, ResumeOptions, ToolCall,
    ToolStatus, UsageStats,
};
#[cfg(unix)]
use toolgate_agent::{JsonFileSuspensionStore, SuspensionLimits};
use toolgate_core::{Pipeline, ToolError, User, tool_fn};

#[tokio::test]
async fn a_parallel_bound_of_usize_max_runs_the_batch_instead_of_panicking() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls = vec![
        ToolCall::new("c1", "echo", json!({ "text": "one" })),
        ToolCall::new("c2", "echo", json!({ "text": "two" })),
    ];
    let options = ExecuteOptions::new().concurrency(Concurrency::Parallel(usize::MAX));
    let results = system.execute_tools(THREAD, calls, options).await;
    assert_eq!(results[0].output, Some(json!("one")));
    assert_eq!(results[1].output, Some(json!("two")));
}

#[tokio::test(start_paused = true)]
async fn a_batch_timeout_of_duration_max_means_no_timeout_instead_of_a_panic() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls = vec![ToolCall::new("c1", "sleep", json!({ "ms": 5_000 }))];
    let options = ExecuteOptions::new().timeout(Duration::MAX);
    let results = system.execute_tools(THREAD, calls, options).await;
    assert_eq!(results[0].status, ToolStatus::Success, "{:?}", results[0]);
    assert_eq!(results[0].output, Some(json!(5_000)));
}

#[tokio::test(start_paused = true)]
async fn a_resume_timeout_of_duration_max_runs_the_call_instead_of_losing_it() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls = vec![ToolCall::new("t1", "transfer", json!({ "text": "10 EUR" }))];
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    let id = results[0].suspension_id().unwrap().to_owned();

    let resumed = system
        .resume(
            &id,
            ResumeDecision::Approve,
            ResumeOptions::new().timeout(Duration::MAX),
        )
        .await
        .unwrap();
    assert_eq!(resumed.output, Some(json!("transferred 10 EUR")));
    assert_eq!(Runs::of(&runs.transfer), 1);
}

#[tokio::test]
async fn a_result_limit_smaller_than_the_marker_keeps_the_result_within_the_limit() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    for limit in [0, 1, 10, 50, 80] {
        let calls = vec![ToolCall::new("b", "big", json!({ "chars": 500 }))];
        let options = ExecuteOptions::new().result_max_chars(limit);
        let results = system.execute_tools(THREAD, calls, options).await;
        let text = results[0].output.as_ref().unwrap().as_str().unwrap();
        assert!(
            text.chars().count() <= limit,
            "limit {limit}: {} characters: {text:?}",
            text.chars().count()
        );
        let truncation = results[0].metadata.truncation.unwrap();
        assert_eq!((truncation.original_chars, truncation.limit), (500, limit));
    }
}

#[tokio::test]
async fn unparseable_arguments_are_kept_only_up_to_the_result_size_limit() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let garbage = format!("not json {}", "x".repeat(10 * 1024 * 1024));
    let calls = vec![
        ToolCall::from_json_str("c1", "echo", &garbage),
        ToolCall::from_json_str("c2", "echo", "{oops"),
    ];
    let mut stream = system.subscribe();
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;

    assert_eq!(results[0].error_code(), Some("invalid_input"));
    let raw = results[0].metadata.raw_arguments.as_deref().unwrap();
    assert!(raw.chars().count() <= toolgate_agent::DEFAULT_RESULT_MAX_CHARS);
    assert!(raw.starts_with("not json xxx"));
    assert!(
        raw.contains("the result was 10485769 characters"),
        "says what was cut"
    );
    let observed = stream.recv().await.unwrap();
    let observed = serde_json::to_string(&observed).unwrap();
    assert!(
        observed.len() < 100_000,
        "the observation holds the cut text"
    );
    assert_eq!(
        results[1].metadata.raw_arguments.as_deref(),
        Some("{oops"),
        "short text is kept as sent"
    );
}

#[test]
fn a_gemini_call_id_that_is_not_a_string_is_a_shape_error_naming_it() {
    let response = json!({ "parts": [
        { "functionCall": { "name": "echo", "args": {}, "id": "real-id" } },
        { "functionCall": { "name": "echo", "args": {}, "id": { "forged": true } } },
    ]});
    let error = gemini::parse_function_calls(&response).unwrap_err();
    let FormatError::Shape { path, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(path, "parts[1].functionCall.id");
    assert_eq!(
        error.to_string(),
        "gemini payload: `parts[1].functionCall.id` is missing or is not a string; pass the provider's response as it was received"
    );
    let without = json!({ "parts": [{ "functionCall": { "name": "echo", "id": null } }] });
    assert_eq!(
        gemini::parse_function_calls(&without).unwrap()[0].id,
        "gemini-call-0",
        "a missing or null id still gets a synthetic one"
    );
}

#[test]
fn a_gemini_call_id_in_the_synthetic_form_is_refused_so_no_two_calls_share_an_id() {
    // Sent as is, the first call's id would equal the one made for the second.
    let response = json!({ "parts": [
        { "functionCall": { "name": "echo", "args": {}, "id": "gemini-call-1" } },
        { "functionCall": { "name": "echo", "args": {} } },
    ]});
    let error = gemini::parse_function_calls(&response).unwrap_err();
    assert_eq!(
        error,
        FormatError::ReservedId {
            provider: "gemini",
            path: "parts[0].functionCall.id".into(),
            prefix: gemini::SYNTHETIC_ID_PREFIX,
        }
    );
    assert!(
        error
            .to_string()
            .contains("starts with `gemini-call-`, which toolgate keeps"),
        "{error}"
    );
    let fine = json!({ "parts": [
        { "functionCall": { "name": "echo", "args": {}, "id": "call-gemini-1" } },
        { "functionCall": { "name": "echo", "args": {} } },
    ]});
    let calls = gemini::parse_function_calls(&fine).unwrap();
    assert_eq!(calls[0].id, "call-gemini-1");
    assert_eq!(calls[1].id, "gemini-call-1");
}

#[tokio::test]
async fn an_approval_given_as_another_user_is_a_typed_error_and_the_call_still_waits() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls = vec![ToolCall::new("t1", "transfer", json!({ "text": "10 EUR" }))];
    let ann = ExecuteOptions::new().user(User::new("ann"));
    let results = system.execute_tools(THREAD, calls, ann).await;
    let id = results[0].suspension_id().unwrap().to_owned();

    for decision in [
        ResumeDecision::Approve,
        ResumeDecision::Complete {
            output: json!("forged"),
        },
    ] {
        let error = system
            .resume(&id, decision, ResumeOptions::new().user(User::new("bob")))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            ResumeError::NotTheCaller {
                id: id.clone(),
                resumed_as: "bob".into(),
            }
        );
        assert!(!error.to_string().contains("ann"), "{error}");
    }
    assert_eq!(Runs::of(&runs.transfer), 0);

    let resumed = system
        .resume(
            &id,
            ResumeDecision::Approve,
            ResumeOptions::new().user(User::new("ann")),
        )
        .await
        .unwrap();
    assert_eq!(resumed.output, Some(json!("transferred 10 EUR")));
    assert_eq!(Runs::of(&runs.transfer), 1);
}

#[tokio::test]
async fn a_rejection_given_as_another_user_ends_the_call() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls = vec![ToolCall::new("t1", "transfer", json!({ "text": "10 EUR" }))];
    let ann = ExecuteOptions::new().user(User::new("ann"));
    let results = system.execute_tools(THREAD, calls, ann).await;
    let id = results[0].suspension_id().unwrap().to_owned();

    let rejected = system
        .resume(
            &id,
            ResumeDecision::Reject {
                reason: "not today".into(),
            },
            ResumeOptions::new().user(User::new("boss")),
        )
        .await
        .unwrap();
    assert_eq!(rejected.error_code(), Some("rejected"));
    assert_eq!(Runs::of(&runs.transfer), 0);
}

#[tokio::test]
async fn statistics_never_record_a_tool_name_the_model_made_up() {
    let dir = tempfile::tempdir().unwrap();
    let stats = Arc::new(UsageStats::open(dir.path().join("stats.json")).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .stats(Arc::clone(&stats))
        .build()
        .unwrap();
    let made_up = format!("junk-{}", "x".repeat(100_000));
    let calls = vec![
        ToolCall::new("c1", made_up.clone(), json!({})),
        ToolCall::new("c2", "echo", json!({ "text": "hi" })),
    ];
    // A thread nobody configured: every call fails before its name is checked.
    let results = system
        .execute_tools("unconfigured-thread", calls, ExecuteOptions::new())
        .await;
    assert_eq!(results[0].error_code(), Some("thread_config_unavailable"));
    assert_eq!(results[0].tool_name, made_up, "the result still names it");

    let recorded: Vec<String> = stats.snapshot().into_keys().collect();
    assert_eq!(recorded, ["echo"]);
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_suspension_file_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    let store = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap();
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(Arc::new(store))
        .build()
        .unwrap();
    let calls = vec![ToolCall::new(
        "t1",
        "transfer",
        json!({ "text": "IBAN DE44" }),
    )];
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    assert_eq!(results[0].status, ToolStatus::Suspended);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");

    // A mode the operator chose is kept when the file is rewritten.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let calls = vec![ToolCall::new("t2", "transfer", json!({ "text": "5 EUR" }))];
    system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "{mode:o}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_planted_at_the_temporary_file_name_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    // Every temporary name the store could pick next points at the victim.
    let planted: Vec<_> = (0..200)
        .map(|n| {
            let link = format!("{}.tmp-{}-{n}", path.display(), std::process::id());
            std::os::unix::fs::symlink(&victim, &link).unwrap();
            link
        })
        .collect();
    let store = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap();
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(Arc::new(store))
        .build()
        .unwrap();
    let calls = vec![ToolCall::new("t1", "transfer", json!({ "text": "10 EUR" }))];
    let _ = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;

    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for link in &planted {
        assert!(
            std::fs::symlink_metadata(link).is_ok(),
            "a planted name is skipped, not removed"
        );
    }
}

/// Held: whatever the ids, each result answers its own call, in call order (a call with
/// the empty id with an `invalid_call_id` error).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicate_empty_and_hostile_call_ids_each_get_their_own_result_in_call_order() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let ids = ["dup", "", "dup", "a\0\n\u{1b}[31m", "dup"];
    let calls: Vec<ToolCall> = (0..2_000)
        .map(|i| {
            ToolCall::new(
                ids[i % ids.len()],
                "echo",
                json!({ "text": format!("t{i}") }),
            )
        })
        .collect();
    let options = ExecuteOptions::new().concurrency(Concurrency::Parallel(64));
    let results = system.execute_tools(THREAD, calls, options).await;
    assert_eq!(results.len(), 2_000);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result.call_id, ids[i % ids.len()]);
        if result.call_id.is_empty() {
            assert_eq!(result.error_code(), Some("invalid_call_id"));
        } else {
            assert_eq!(result.output, Some(json!(format!("t{i}"))));
        }
    }
}

/// Held: dropping a batch's future mid-way stops its calls; none keeps running.
#[tokio::test(start_paused = true)]
async fn dropping_a_batch_midway_stops_every_call_it_started() {
    let finished = Arc::new(AtomicUsize::new(0));
    let done = Arc::clone(&finished);
    let pipeline = Pipeline::builder().tool(tool_fn("wait", "Waits.", move |w: Wait| {
        let done = Arc::clone(&done);
        async move {
            tokio::time::sleep(Duration::from_millis(w.ms)).await;
            done.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(w.ms)
        }
    }));
    let state = Arc::new(toolgate_agent::InMemoryStateManager::new());
    let system = toolgate_agent::ToolSystem::builder(pipeline, state)
        .build()
        .unwrap();
    for concurrency in [Concurrency::Sequential, Concurrency::Parallel(4)] {
        let calls: Vec<ToolCall> = (0..4)
            .map(|i| ToolCall::new(format!("c{i}"), "wait", json!({ "ms": 1_000 })))
            .collect();
        let options = ExecuteOptions::new()
            .concurrency(concurrency)
            .user(User::new("ann"));
        let batch = system.execute_tools("t", calls, options);
        let cut = tokio::time::timeout(Duration::from_millis(500), batch).await;
        assert!(cut.is_err(), "the batch was dropped before it finished");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(finished.load(Ordering::SeqCst), 0, "{concurrency:?}");
    }
}

/// Opens a store at `path` on a thread of its own, so a hang shows as a failure.
#[cfg(unix)]
fn open_store_within_seconds(path: std::path::PathBuf) -> Result<String, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let opened = JsonFileSuspensionStore::open(&path, SuspensionLimits::default());
        let _ = tx.send(opened.map(|_| ()).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => Ok("opened".to_owned()),
        Ok(Err(message)) => Err(message),
        Err(_) => Ok("still blocked after 10 s".to_owned()),
    }
}

#[cfg(unix)]
#[test]
fn a_suspension_path_that_is_a_pipe_or_a_device_is_refused_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let message = open_store_within_seconds(fifo).unwrap_err();
    assert!(message.contains("it is not a regular file"), "{message}");

    let zero = dir.path().join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let message = open_store_within_seconds(zero).unwrap_err();
    assert!(message.contains("it is not a regular file"), "{message}");
    assert!(
        !message.contains("InvalidInput") && !message.contains("Os {"),
        "plain words: {message}"
    );
}

/// Broken before: the check compared user ids only, so the same id in another tenant
/// approved (and ran as) another tenant's call.
#[tokio::test]
async fn an_approval_given_as_the_same_user_id_in_another_tenant_is_refused() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls = vec![ToolCall::new("t1", "transfer", json!({ "text": "10 EUR" }))];
    let mut acme_ann = User::new("ann");
    acme_ann.tenant = Some("acme".into());
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new().user(acme_ann.clone()))
        .await;
    let id = results[0].suspension_id().unwrap().to_owned();

    let mut other_ann = User::new("ann");
    other_ann.tenant = Some("globex".into());
    let error = system
        .resume(
            &id,
            ResumeDecision::Approve,
            ResumeOptions::new().user(other_ann),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ResumeError::NotTheCaller { .. }), "{error}");
    assert_eq!(Runs::of(&runs.transfer), 0);

    let resumed = system
        .resume(
            &id,
            ResumeDecision::Approve,
            ResumeOptions::new().user(acme_ann),
        )
        .await
        .unwrap();
    assert_eq!(resumed.output, Some(json!("transferred 10 EUR")));
}

/// Whether `text` (JSON text cut short) ends inside an escape: a lone `\`, or `\u` with
/// fewer than four hex digits.
fn ends_inside_an_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    let escapes_at = |at: usize| {
        bytes[..at]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count()
            % 2
            == 0
    };
    let n = bytes.len();
    if n > 0 && bytes[n - 1] == b'\\' && escapes_at(n - 1) {
        return true;
    }
    (n.saturating_sub(5)..n.saturating_sub(1))
        .any(|at| bytes[at] == b'\\' && bytes[at + 1] == b'u' && escapes_at(at))
}

/// Broken before: an object output rendered as JSON text was cut on a character boundary
/// only, so it could end in `\` or `\u00` before the marker.
#[tokio::test]
async fn a_json_output_cut_to_the_limit_never_ends_inside_an_escape() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    for limit in 100..160 {
        let calls = vec![ToolCall::new(
            "c1",
            "show_chart",
            json!({ "text": "\"\u{1}\\\n".repeat(100) }),
        )];
        let options = ExecuteOptions::new()
            .user(User::new("ann"))
            .result_max_chars(limit);
        let results = system.execute_tools(THREAD, calls, options).await;
        let text = results[0].output.as_ref().unwrap().as_str().unwrap();
        assert!(text.chars().count() <= limit, "{limit}: {text}");
        let (kept, _) = text.split_once("\n[truncated").unwrap();
        assert!(!ends_inside_an_escape(kept), "{limit}: {kept:?}");
        let truncation = results[0].metadata.truncation.unwrap();
        assert_eq!(truncation.kept_chars, kept.chars().count(), "{limit}");
    }
}

/// Broken before: a tool's error message reached the model whole, whatever the result
/// size limit.
#[tokio::test]
async fn an_error_message_over_the_result_limit_is_cut_with_the_marker() {
    let pipeline = Pipeline::builder().tool(tool_fn(
        "fail",
        "Fails with a long message.",
        |s: common::Size| async move { Err::<(), _>(ToolError::execution("é".repeat(s.chars))) },
    ));
    let state = Arc::new(toolgate_agent::InMemoryStateManager::new());
    let system = toolgate_agent::ToolSystem::builder(pipeline, state)
        .result_max_chars(500)
        .build()
        .unwrap();
    let calls = vec![ToolCall::new("c1", "fail", json!({ "chars": 100_000 }))];
    let results = system
        .execute_tools("t", calls, ExecuteOptions::new().user(User::new("ann")))
        .await;
    let error = results[0].error.as_ref().unwrap();
    assert_eq!(error.code, "tool_error");
    assert!(
        error.message.chars().count() <= 500,
        "{}",
        error.message.len()
    );
    assert!(
        error.message.contains("[truncated: the result was"),
        "{}",
        error.message
    );
    assert!(results[0].metadata.truncation.is_some());
}

/// Broken before: the id a model wrote became the call's request id as it was — newlines
/// and terminal escapes into every log line of the call, megabytes into the suspension
/// store. Now such an id runs under a generated request id and still answers its call,
/// after a resume too; an id over 256 bytes is refused without running the tool.
#[tokio::test]
async fn a_call_id_a_model_wrote_is_not_the_request_id_unless_it_is_a_plain_id() {
    let pipeline = Pipeline::builder().tool(toolgate_core::prelude::tool_fn_with_context(
        "whoami",
        "Says its request id.",
        |_: common::NoArgs, ctx: &toolgate_core::ToolInvokeContext| {
            let request = ctx.request_id().to_string();
            Box::pin(async move { Ok::<_, ToolError>(request) })
        },
    ));
    let state = Arc::new(toolgate_agent::InMemoryStateManager::new());
    let system = toolgate_agent::ToolSystem::builder(pipeline, state)
        .mode("whoami", toolgate_agent::ExecutionMode::Blocking)
        .build()
        .unwrap();
    let ann = || ExecuteOptions::new().user(User::new("ann"));
    let hostile = "id\n2026-01-01 INFO forged line \u{1b}[31m";
    let calls = vec![
        ToolCall::new("call_plain-1", "whoami", json!({})),
        ToolCall::new(hostile, "whoami", json!({})),
        ToolCall::new("x".repeat(2_000), "whoami", json!({})),
    ];
    let results = system.execute_tools("t", calls, ann()).await;
    assert_eq!(results[1].call_id, hostile);
    assert_eq!(results[2].error_code(), Some("invalid_call_id"));
    assert_eq!(results[2].call_id.len(), 2_000);
    let message = &results[2].error.as_ref().unwrap().message;
    assert!(
        message.contains("2000 bytes") && message.contains("256 bytes"),
        "{message}"
    );

    for (i, expected) in [(0, Some("call_plain-1")), (1, None)] {
        let id = results[i].suspension_id().unwrap().to_owned();
        let resumed = system
            .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
            .await
            .unwrap();
        assert_eq!(resumed.call_id, results[i].call_id);
        assert!(
            resumed.metadata.extra.is_empty(),
            "{:?}",
            resumed.metadata.extra
        );
        let request = resumed.output.unwrap();
        let request = request.as_str().unwrap();
        match expected {
            Some(id) => assert_eq!(request, id),
            None => assert!(
                request.bytes().all(|b| b.is_ascii_graphic()) && request != hostile,
                "{request:?}"
            ),
        }
    }
}

#[test]
fn arguments_nested_deeper_than_is_read_are_said_so_not_as_a_recursion_limit() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let Arguments::Unparseable { error, .. } = Arguments::from_json_str(&deep) else {
        panic!("200 levels are deeper than is read");
    };
    assert!(
        error.starts_with("arrays and objects nested 128 levels deep or more at line 1 column"),
        "{error}"
    );
    assert!(!error.contains("recursion"), "{error}");
}

/// Broken before: a call with the empty id ran, and its result could not be matched to it;
/// an id of 1,024 bytes passed here while the gateway refused it. Now the empty id is
/// refused like an over-long one, at the one limit the gateway also keeps (in bytes), and
/// ids are opaque: ones that differ only in case or Unicode form are different calls.
#[tokio::test]
async fn an_empty_call_id_is_refused_and_ids_are_compared_byte_for_byte() {
    let system = system(&Arc::new(Runs::default()), state()).build().unwrap();
    let echo = |id: &str| ToolCall::new(id, "echo", json!({ "text": id }));
    let at_the_bound = "i".repeat(toolgate_agent::MAX_CALL_ID_BYTES);
    // 65 characters of four bytes each: within 256 characters, over 256 bytes.
    let wide = "\u{1F600}".repeat(65);
    let calls = vec![
        echo(""),
        echo("call_A"),
        echo("call_a"),
        echo("caf\u{e9}"),
        echo("cafe\u{301}"),
        echo(&at_the_bound),
        echo(&wide),
    ];
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    assert_eq!(results[0].call_id, "");
    assert_eq!(results[0].error_code(), Some("invalid_call_id"));
    let message = &results[0].error.as_ref().unwrap().message;
    assert!(message.contains("empty id"), "{message}");
    for (i, id) in ["call_A", "call_a", "caf\u{e9}", "cafe\u{301}"]
        .iter()
        .enumerate()
    {
        assert_eq!(results[i + 1].call_id, *id);
        assert_eq!(
            results[i + 1].output,
            Some(json!(id)),
            "{:?}",
            results[i + 1]
        );
    }
    assert_eq!(results[5].status, toolgate_agent::ToolStatus::Success);
    assert_eq!(results[6].error_code(), Some("invalid_call_id"));
}
