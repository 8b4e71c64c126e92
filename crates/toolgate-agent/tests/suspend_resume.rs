//! Human-in-the-loop: suspensions from a blocking tool or an approval hook, resumed with
//! approve, reject or complete; stores in memory and in a JSON file.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{
    ExecuteOptions, JsonFileSuspensionStore, ResumeDecision, ResumeError, ResumeOptions,
    SuspensionLimits, SuspensionStore, ToolCall, ToolStatus,
};
use toolgate_core::User;

fn transfer() -> Vec<ToolCall> {
    vec![
        ToolCall::new("t1", "transfer", json!({ "text": "10 EUR" })),
        ToolCall::new("e1", "echo", json!({ "text": "still here" })),
    ]
}

#[tokio::test]
async fn approval_hook_suspends_and_approve_runs_the_tool_once_without_rerunning_others() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    assert_eq!(results[0].status, ToolStatus::Suspended);
    assert_eq!(
        results[0].metadata.suspension_reason.as_deref(),
        Some("a person must approve money transfers")
    );
    assert!(results[0].output.is_none() && results[0].error.is_none());
    assert_eq!(results[1].output, Some(json!("still here")));
    assert_eq!(Runs::of(&runs.transfer), 0);

    let id = results[0].suspension_id().unwrap();
    let resumed = system
        .resume(id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(resumed.call_id, "t1");
    assert_eq!(resumed.output, Some(json!("transferred 10 EUR")));
    assert_eq!(resumed.metadata.attempts, 1);
    assert_eq!(
        resumed.metadata.repairs.len(),
        1,
        "metadata gathered before the suspension is kept"
    );
    assert_eq!(Runs::of(&runs.transfer), 1);
}

#[tokio::test]
async fn reject_fails_the_call_with_the_reason_and_never_runs_the_tool() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    let id = results[0].suspension_id().unwrap();
    let resumed = system
        .resume(
            id,
            ResumeDecision::Reject {
                reason: "not this month".into(),
            },
            ResumeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.status, ToolStatus::Error);
    assert_eq!(resumed.error_code(), Some("rejected"));
    assert_eq!(resumed.error.as_ref().unwrap().message, "not this month");
    assert_eq!(Runs::of(&runs.transfer), 0);
}

#[tokio::test]
async fn unknown_and_already_used_suspension_ids_are_clear_errors() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let missing = system
        .resume("susp-nope", ResumeDecision::Approve, ResumeOptions::new())
        .await;
    assert_eq!(
        missing,
        Err(ResumeError::UnknownSuspension {
            id: "susp-nope".into()
        })
    );

    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    let id = results[0].suspension_id().unwrap();
    system
        .resume(id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    let again = system
        .resume(id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap_err();
    assert!(
        again.to_string().contains("already been resumed"),
        "{again}"
    );
    assert_eq!(Runs::of(&runs.transfer), 1);
}

#[tokio::test]
async fn blocking_tool_approved_runs_the_tool_itself() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({ "question": "Color?" }),
            )],
            ExecuteOptions::new(),
        )
        .await;
    let id = results[0].suspension_id().unwrap();
    let resumed = system
        .resume(id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(resumed.output, Some(json!("(default answer to Color?)")));
    assert_eq!(Runs::of(&runs.ask_user), 1);
}

#[tokio::test]
async fn suspensions_in_a_json_file_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    let runs = Arc::new(Runs::default());

    let id = {
        let store =
            Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
        let system = system(&runs, state())
            .suspension_store(store)
            .build()
            .unwrap();
        let results = system
            .execute_tools(THREAD, transfer(), ExecuteOptions::new())
            .await;
        results[0].suspension_id().unwrap().to_owned()
    };
    assert!(path.exists());

    // A new process: a new store from the same file, a new system.
    let store =
        Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
    assert_eq!(store.len(), 1);
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();
    let resumed = system
        .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(
        (resumed.call_id.as_str(), resumed.output),
        ("t1", Some(json!("transferred 10 EUR")))
    );
    assert!(store.is_empty());
    // Another restart: the store is dropped (with the system that holds it) first.
    drop((system, store));
    let reopened = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap();
    assert!(
        reopened.is_empty(),
        "a resumed call is removed from the file too"
    );
}

#[tokio::test]
async fn corrupt_suspension_file_is_moved_aside_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    std::fs::write(&path, "{ not json").unwrap();
    let store = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap();
    assert!(store.is_empty());
    let aside = store.moved_aside().unwrap();
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "{ not json");
    assert!(!path.exists());
}

/// `n` calls of `transfer`, each waiting for approval.
fn transfers(n: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| {
            ToolCall::new(
                format!("t{i}"),
                "transfer",
                json!({ "text": format!("{i} EUR") }),
            )
        })
        .collect()
}

/// Runs `calls` one after the other as `user`.
fn as_user(user: &str) -> ExecuteOptions {
    ExecuteOptions::new()
        .user(User::new(user))
        .concurrency(toolgate_agent::Concurrency::Sequential)
}

#[tokio::test]
async fn a_file_store_refuses_one_user_past_their_cap_and_other_users_still_park() {
    let dir = tempfile::tempdir().unwrap();
    let limits = SuspensionLimits {
        max_per_user: 2,
        ..SuspensionLimits::default()
    };
    let path = dir.path().join("s.json");
    let store = Arc::new(JsonFileSuspensionStore::open(&path, limits).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();

    let mallory = system
        .execute_tools(THREAD, transfers(3), as_user("mallory"))
        .await;
    let ann = system
        .execute_tools(THREAD, transfers(1), as_user("ann"))
        .await;

    assert_eq!(mallory[0].status, ToolStatus::Suspended);
    assert_eq!(mallory[1].status, ToolStatus::Suspended);
    assert_eq!(mallory[2].error_code(), Some("too_many_suspended"));
    let message = &mallory[2].error.as_ref().unwrap().message;
    assert!(
        message.contains("`mallory` already has 2 calls waiting")
            && message.contains("wait until an approver decides"),
        "{message}"
    );
    assert_eq!(
        ann[0].status,
        ToolStatus::Suspended,
        "other users are unaffected"
    );
    assert_eq!(
        (
            store.waiting_for(&User::new("mallory")),
            store.waiting_for(&User::new("ann"))
        ),
        (2, 1)
    );
    drop((system, store));
    let reopened = JsonFileSuspensionStore::open(&path, limits).unwrap();
    assert_eq!(reopened.len(), 3, "the refused call never reached the file");
    assert_eq!(Runs::of(&runs.transfer), 0);
}

#[tokio::test]
async fn an_expired_call_in_a_file_store_answers_expired_frees_its_place_and_leaves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    let limits = SuspensionLimits {
        max_per_user: 1,
        expire_after: Duration::from_secs(3600),
        ..SuspensionLimits::default()
    };
    let seconds = Arc::new(AtomicU64::new(0));
    let read = Arc::clone(&seconds);
    let start = SystemTime::now();
    let store = Arc::new(
        JsonFileSuspensionStore::open(&path, limits)
            .unwrap()
            .with_clock(move || start + Duration::from_secs(read.load(Ordering::SeqCst))),
    );
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();
    let first = system
        .execute_tools(THREAD, transfers(1), as_user("ann"))
        .await;
    let id = first[0].suspension_id().unwrap().to_owned();
    let refused = system
        .execute_tools(THREAD, transfers(1), as_user("ann"))
        .await;
    assert_eq!(refused[0].error_code(), Some("too_many_suspended"));

    seconds.store(3600, Ordering::SeqCst);

    let answer = system
        .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
        .await;
    assert_eq!(answer, Err(ResumeError::Expired { id: id.clone() }));
    assert!(answer.unwrap_err().to_string().contains("expired"));
    assert_eq!(Runs::of(&runs.transfer), 0, "an expired call never runs");
    let again = system
        .execute_tools(THREAD, transfers(1), as_user("ann"))
        .await;
    assert_eq!(again[0].status, ToolStatus::Suspended, "its place is free");
    let file = std::fs::read_to_string(&path).unwrap();
    assert!(
        !file.contains(&id),
        "the expired call left the file: {file}"
    );
}

#[tokio::test]
async fn a_call_that_expired_while_the_process_was_down_is_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    let runs = Arc::new(Runs::default());
    let id = {
        let store =
            Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
        let system = system(&runs, state())
            .suspension_store(store)
            .build()
            .unwrap();
        let results = system
            .execute_tools(THREAD, transfers(1), as_user("ann"))
            .await;
        results[0].suspension_id().unwrap().to_owned()
    };
    // The file says the call expired a minute ago, as it would after a day-long outage.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let a_minute_ago = SystemTime::now() - Duration::from_secs(60);
    file[&id]["expires_at"] = serde_json::to_value(a_minute_ago).unwrap();
    std::fs::write(&path, file.to_string()).unwrap();

    let store = JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap();

    assert!(store.is_empty());
    assert_eq!(
        store.get(&id).await,
        Err(toolgate_agent::SuspensionStoreError::Expired { id: id.clone() })
    );
}

#[tokio::test]
async fn a_blocking_tool_behind_an_approval_policy_waits_for_both_in_turn() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .mode("transfer", toolgate_agent::ExecutionMode::Blocking)
        .build()
        .unwrap();
    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    let policy = results[0].suspension_id().unwrap();
    assert_eq!(
        results[0].metadata.suspension_reason.as_deref(),
        Some("a person must approve money transfers")
    );

    let approved = system
        .resume(policy, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(
        approved.status,
        ToolStatus::Suspended,
        "approving the policy hands the call to the person"
    );
    assert_eq!(
        approved.metadata.suspension_reason.as_deref(),
        Some("waiting for a person to complete `transfer`")
    );
    assert_eq!(Runs::of(&runs.transfer), 0);

    let done = system
        .resume(
            approved.suspension_id().unwrap(),
            ResumeDecision::Complete {
                output: json!("sent by hand"),
            },
            ResumeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(done.output, Some(json!("sent by hand")));
    assert!(done.metadata.extra.is_empty(), "{:?}", done.metadata.extra);
    assert_eq!(Runs::of(&runs.transfer), 0);
}

/// Counts how often the authorization and parse stages run.
#[derive(Default)]
struct CountStages {
    authorize: Arc<AtomicUsize>,
    parse: Arc<AtomicUsize>,
}

#[toolgate_core::hook]
impl toolgate_core::Hook for CountStages {
    fn will_authorize(
        &self,
        _ctx: &mut toolgate_core::ToolInvokeContext,
    ) -> toolgate_core::HookResult {
        self.authorize.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn will_parse_input(
        &self,
        _ctx: &mut toolgate_core::ToolInvokeContext,
    ) -> toolgate_core::HookResult {
        self.parse.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn resume_authorizes_again_but_does_not_rerun_the_other_stages_before_the_suspension() {
    let runs = Arc::new(Runs::default());
    let counts = CountStages::default();
    let (authorized, parsed) = (Arc::clone(&counts.authorize), Arc::clone(&counts.parse));
    let pipeline = common::pipeline(&runs).hook(counts);
    let system = toolgate_agent::ToolSystem::builder(pipeline, state())
        .build()
        .unwrap();
    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    assert_eq!(authorized.load(Ordering::SeqCst), 2, "one per call");
    assert_eq!(parsed.load(Ordering::SeqCst), 2, "one per call");
    system
        .resume(
            results[0].suspension_id().unwrap(),
            ResumeDecision::Approve,
            ResumeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        authorized.load(Ordering::SeqCst),
        3,
        "access is decided again when the call resumes"
    );
    assert_eq!(
        parsed.load(Ordering::SeqCst),
        2,
        "the input stages ran before the call waited and do not run again"
    );
    assert_eq!(Runs::of(&runs.transfer), 1);
}

/// A tool system whose `transfer` call waits for approval: its runs, its thread state, the
/// system, and the suspension id.
async fn transfer_waiting_for_approval() -> (
    Arc<Runs>,
    Arc<toolgate_agent::InMemoryStateManager>,
    toolgate_agent::ToolSystem,
    String,
) {
    let runs = Arc::new(Runs::default());
    let state = state();
    let system = system(&runs, Arc::clone(&state)).build().unwrap();
    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    let id = results[0].suspension_id().unwrap().to_owned();
    (runs, state, system, id)
}

#[tokio::test]
async fn approving_a_call_whose_tool_was_disabled_while_it_waited_rejects_it_without_running() {
    let (runs, state, system, id) = transfer_waiting_for_approval().await;
    assert!(state.disable_tool(THREAD, "transfer"));

    let resumed = system
        .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(resumed.status, ToolStatus::Error);
    assert_eq!(resumed.error_code(), Some("rejected"));
    assert!(
        resumed
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("was disabled in this thread"),
        "{:?}",
        resumed.error
    );
    assert_eq!(Runs::of(&runs.transfer), 0);
    // The suspension was used up: the call ended.
    assert!(matches!(
        system
            .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
            .await,
        Err(ResumeError::UnknownSuspension { .. })
    ));
}

#[tokio::test]
async fn an_approval_that_cannot_be_checked_keeps_the_call_waiting() {
    let (runs, state, system, id) = transfer_waiting_for_approval().await;
    let config = state.config(THREAD).unwrap();
    assert!(state.remove_thread(THREAD));

    let refused = system
        .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
        .await;
    assert!(
        matches!(refused, Err(ResumeError::ThreadConfigUnavailable { ref thread, .. }) if thread == THREAD),
        "{refused:?}"
    );
    assert_eq!(Runs::of(&runs.transfer), 0);

    // Once the thread's configuration is back, the same approval runs the tool.
    state.set_config(THREAD, config);
    let resumed = system
        .resume(&id, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(resumed.output, Some(json!("transferred 10 EUR")));
    assert_eq!(Runs::of(&runs.transfer), 1);
}

/// A pipeline whose `wipe` calls all wait for a person, over `store`; `runs` counts the
/// wipes.
fn wiping_pipeline(
    store: Arc<JsonFileSuspensionStore>,
    runs: &Arc<AtomicUsize>,
) -> toolgate_core::Pipeline {
    use toolgate_core::hook::hook_fn;
    use toolgate_core::{Pipeline, Stage, ToolError, tool_fn};
    let runs = Arc::clone(runs);
    Pipeline::builder()
        .generation("config-1")
        .tool(tool_fn("wipe", "Wipes the disk.", move |_: ()| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("wiped")
            }
        }))
        .hook(hook_fn(Stage::WillCheckConsent, |ctx| {
            ctx.suspend("a person approves wipes").into()
        }))
        .suspension_store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_approval_for_a_retry_given_before_a_restart_lets_the_same_call_run_once_after_it() {
    use toolgate_core::{InvokeOptions, ToolError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    let runs = Arc::new(AtomicUsize::new(0));
    let ann = || InvokeOptions::new().user(User::new("ann").with_tenant("acme"));
    {
        let store =
            Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
        let pipeline = wiping_pipeline(store, &runs);
        let waiting = pipeline
            .invoke("wipe", json!(null), ann())
            .await
            .unwrap_err();
        let ToolError::Suspended { suspension_id, .. } = waiting else {
            panic!("{waiting}")
        };
        pipeline
            .approve_retry(&suspension_id, Some("boss".into()))
            .await
            .unwrap();
    }

    // A new process: a new store from the same file, a new pipeline.
    let store =
        Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
    let pipeline = wiping_pipeline(store, &runs);
    let retried = pipeline.invoke("wipe", json!(null), ann()).await;
    let again = pipeline
        .invoke("wipe", json!(null), ann())
        .await
        .unwrap_err();

    assert_eq!(retried.unwrap(), json!("wiped"));
    assert_eq!(again.code(), "suspended", "the approval was good once");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_resumed_after_a_restart_is_cut_to_the_result_limit_of_the_batch_that_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("suspensions.json");
    let runs = Arc::new(Runs::default());
    let long = |id: &str| ToolCall::new(id, "transfer", json!({ "text": "x".repeat(5_000) }));
    let ids: Vec<String> = {
        let store =
            Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
        let system = system(&runs, state())
            .suspension_store(store)
            .build()
            .unwrap();
        let results = system
            .execute_tools(
                THREAD,
                vec![long("t1"), long("t2")],
                ExecuteOptions::new().result_max_chars(200),
            )
            .await;
        results
            .iter()
            .map(|r| r.suspension_id().unwrap().to_owned())
            .collect()
    };
    let store =
        Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
    let system = system(&runs, state())
        .suspension_store(store)
        .build()
        .unwrap();

    // Waiting did not lift the batch's limit to the thread's (the default, 60,000).
    let resumed = system
        .resume(&ids[0], ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap();
    assert_eq!(resumed.status, ToolStatus::Success);
    let text = resumed.content_text();
    assert!(
        text.chars().count() <= 200,
        "{} chars",
        text.chars().count()
    );
    let truncation = resumed.metadata.truncation.unwrap();
    assert_eq!((truncation.original_chars, truncation.limit), (5_012, 200));
    assert!(
        resumed.metadata.extra.is_empty(),
        "the kept limit stays out of the result: {:?}",
        resumed.metadata.extra
    );

    // A limit given at resume still wins.
    let resumed = system
        .resume(
            &ids[1],
            ResumeDecision::Approve,
            ResumeOptions::new().result_max_chars(1_000),
        )
        .await
        .unwrap();
    assert_eq!(resumed.metadata.truncation.unwrap().limit, 1_000);
}

/// `n` calls of `transfer` whose text is `chars` control characters, each six bytes once
/// serialized (`\u0001`).
fn large_transfers(n: usize, chars: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| {
            ToolCall::new(
                format!("t{i}"),
                "transfer",
                json!({ "text": "\u{1}".repeat(chars) }),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_file_store_refuses_one_user_past_their_byte_bound_and_other_users_still_park() {
    let dir = tempfile::tempdir().unwrap();
    let limits = SuspensionLimits {
        max_bytes_per_user: 1_000_000,
        ..SuspensionLimits::default()
    };
    let path = dir.path().join("s.json");
    let store = Arc::new(JsonFileSuspensionStore::open(&path, limits).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();

    // 50,000 control characters: 50 KB in memory, 300 KB each once serialized.
    let alice = system
        .execute_tools(THREAD, large_transfers(4, 50_000), as_user("alice"))
        .await;
    let bob = system
        .execute_tools(THREAD, transfers(1), as_user("bob"))
        .await;

    let statuses: Vec<ToolStatus> = alice.iter().map(|result| result.status).collect();
    assert_eq!(
        statuses[..3],
        [ToolStatus::Suspended; 3],
        "{:?}",
        alice[0].error
    );
    assert_eq!(alice[3].error_code(), Some("too_many_suspended"));
    let message = &alice[3].error.as_ref().unwrap().message;
    assert!(
        message.contains("`alice` waiting for approval would take more than 1000000 bytes")
            && message.contains("smaller arguments"),
        "{message}"
    );
    assert_eq!(
        bob[0].status,
        ToolStatus::Suspended,
        "other users are unaffected"
    );
    assert_eq!(store.waiting_for(&User::new("alice")), 3);
    let file = std::fs::metadata(&path).unwrap().len();
    assert!(file < 1_100_000, "the file holds at most the bound: {file}");
    assert_eq!(Runs::of(&runs.transfer), 0);
}

#[tokio::test]
async fn a_blocking_call_keeps_its_arguments_once_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    let store =
        Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();
    let question = "Deploy the release named kestrel-4711 today?";

    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new(
                "q",
                "ask_user",
                json!({ "question": question }),
            )],
            ExecuteOptions::new(),
        )
        .await;

    let id = results[0].suspension_id().unwrap();
    let file = std::fs::read_to_string(&path).unwrap();
    assert_eq!(file.matches(question).count(), 1, "{file}");
    let written: serde_json::Value = serde_json::from_str(&file).unwrap();
    assert_eq!(written[id]["input"], json!({ "question": question }));
    assert_eq!(written[id]["payload"], json!({ "tool": "ask_user" }));
}

#[tokio::test]
async fn a_blocking_call_an_earlier_version_wrote_with_its_arguments_twice_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    let runs = Arc::new(Runs::default());
    let id = {
        let store =
            Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
        let system = system(&runs, state())
            .suspension_store(store)
            .build()
            .unwrap();
        let results = system
            .execute_tools(
                THREAD,
                vec![ToolCall::new(
                    "q",
                    "ask_user",
                    json!({ "question": "Deploy?" }),
                )],
                ExecuteOptions::new(),
            )
            .await;
        results[0].suspension_id().unwrap().to_owned()
    };
    // As an earlier version wrote it: the arguments in the payload too.
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    file[&id]["payload"] = json!({ "tool": "ask_user", "arguments": { "question": "Deploy?" } });
    std::fs::write(&path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();

    let store =
        Arc::new(JsonFileSuspensionStore::open(&path, SuspensionLimits::default()).unwrap());
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();
    let waiting = store.get(&id).await.unwrap().unwrap();
    let resumed = system
        .resume(
            &id,
            ResumeDecision::Complete {
                output: json!("yes"),
            },
            ResumeOptions::new(),
        )
        .await
        .unwrap();

    assert_eq!(
        waiting.payload["arguments"],
        json!({ "question": "Deploy?" })
    );
    assert_eq!(resumed.output, Some(json!("yes")));
    assert!(store.is_empty());
}

#[tokio::test]
async fn a_forged_suspension_id_is_repeated_cut_and_escaped() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let forged = format!("{}\n\x1b[2J{}", "x".repeat(100), "y".repeat(1_000_000));

    let refused = system
        .resume(&forged, ResumeDecision::Approve, ResumeOptions::new())
        .await
        .unwrap_err();

    let message = refused.to_string();
    assert!(message.len() < 300, "{} bytes", message.len());
    assert!(
        message.contains(&format!("`{}…`", "x".repeat(64))),
        "{message}"
    );
    assert!(!message.chars().any(char::is_control), "{message:?}");
    assert_eq!(refused, ResumeError::UnknownSuspension { id: forged });
}
