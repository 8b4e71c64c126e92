//! Human-in-the-loop: suspensions from a blocking tool or an approval hook, resumed with
//! approve, reject or complete; stores in memory and in a JSON file.

mod common;

use std::sync::Arc;

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{
    ExecuteOptions, JsonFileSuspensionStore, ResumeDecision, ResumeError, ResumeOptions,
    SuspensionStore, ToolCall, ToolStatus,
};

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
        let store = Arc::new(JsonFileSuspensionStore::open(&path, 100).unwrap());
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
    let store = Arc::new(JsonFileSuspensionStore::open(&path, 100).unwrap());
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
    let reopened = JsonFileSuspensionStore::open(&path, 100).unwrap();
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
    let store = JsonFileSuspensionStore::open(&path, 100).unwrap();
    assert!(store.is_empty());
    let aside = store.moved_aside().unwrap();
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "{ not json");
    assert!(!path.exists());
}

#[tokio::test]
async fn a_full_file_store_refuses_more_and_the_call_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(JsonFileSuspensionStore::open(dir.path().join("s.json"), 1).unwrap());
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .suspension_store(store.clone())
        .build()
        .unwrap();
    let calls = vec![
        ToolCall::new("a", "transfer", json!({ "text": "1" })),
        ToolCall::new("b", "transfer", json!({ "text": "2" })),
    ];
    let results = system
        .execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new().concurrency(toolgate_agent::Concurrency::Sequential),
        )
        .await;
    assert_eq!(results[0].status, ToolStatus::Suspended);
    assert_eq!(results[1].error_code(), Some("internal"));
    assert!(
        results[1]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("resume or reject some first")
    );
    assert!(
        store
            .get(results[0].suspension_id().unwrap())
            .await
            .unwrap()
            .is_some()
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

/// Counts how often the authorization stage runs.
struct CountAuthorize(Arc<std::sync::atomic::AtomicUsize>);

#[toolgate_core::hook]
impl toolgate_core::Hook for CountAuthorize {
    fn will_authorize(
        &self,
        _ctx: &mut toolgate_core::ToolInvokeContext,
    ) -> toolgate_core::HookResult {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn resume_does_not_rerun_stages_before_the_suspension() {
    let runs = Arc::new(Runs::default());
    let authorized = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut pipeline = common::pipeline(&runs);
    pipeline.hook(CountAuthorize(Arc::clone(&authorized)));
    let system = toolgate_agent::ToolSystem::builder(pipeline, state())
        .build()
        .unwrap();
    let results = system
        .execute_tools(THREAD, transfer(), ExecuteOptions::new())
        .await;
    assert_eq!(
        authorized.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one per call"
    );
    system
        .resume(
            results[0].suspension_id().unwrap(),
            ResumeDecision::Approve,
            ResumeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        authorized.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "authorization ran before the suspension and is not run again"
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
