//! Approvals as single-use capabilities bound to the exact call (issue #34, item 1): each
//! property of docs/policies.md "What an approval is bound to" has its test here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolgate_core::approval::digest;
use toolgate_core::suspension::{
    InMemorySuspensionStore, ResumeDecision, SuspensionLimits, SuspensionStore,
};
use toolgate_core::{
    Hook, HookResult, InvokeOptions, JsonTool, Pipeline, PipelineBuilder, ToolError,
    ToolInvokeContext, hook,
};
use toolgate_hooks::consent::Consent;
use toolgate_hooks::repair::ArgumentRepair;
use toolgate_hooks::validation::Validation;

use crate::support::{as_user, runs};

/// `wipe` and `erase` take `{disk: integer, mode: "fast"|"slow" = "fast"}`, need approval,
/// count their runs, and fail when asked to wipe disk 13.
fn builder(description: &str) -> (PipelineBuilder, Arc<AtomicU32>) {
    let runs = Arc::new(AtomicU32::new(0));
    let schema = json!({
        "type": "object",
        "properties": {
            "disk": {"type": "integer"},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"}
        },
        "required": ["disk"],
        "additionalProperties": false
    });
    let mut builder = Pipeline::builder()
        .hook(ArgumentRepair::new())
        .hook(Validation::new())
        .hook(Consent::builder().tool("wipe").tool("erase").build());
    for name in ["wipe", "erase"] {
        let seen = Arc::clone(&runs);
        builder = builder.tool(JsonTool::new(
            name,
            description,
            schema.clone(),
            move |input: &Value, _| {
                seen.fetch_add(1, Ordering::SeqCst);
                let disk = input["disk"].clone();
                Box::pin(async move {
                    if disk == 13 {
                        return Err(ToolError::execution("disk 13 is unlucky"));
                    }
                    Ok(json!({ "wiped": disk }))
                })
            },
        ));
    }
    (builder, runs)
}

fn pipeline() -> (Pipeline, Arc<AtomicU32>) {
    let (builder, runs) = builder("Wipes a disk.");
    (builder.build().unwrap(), runs)
}

async fn wait(pipeline: &Pipeline, tool: &str, input: Value, user: &str) -> String {
    match pipeline.invoke(tool, input, as_user(user)).await {
        Err(ToolError::Suspended { suspension_id, .. }) => suspension_id,
        other => panic!("expected the call to wait, got {other:?}"),
    }
}

/// How each call ended, sorted: `ran`, or its error code.
fn ended_with<const N: usize>(results: [Result<Value, ToolError>; N]) -> [String; N] {
    let mut codes = results.map(|r| r.map_or_else(|e| e.code().to_owned(), |_| "ran".to_owned()));
    codes.sort_unstable();
    codes
}

fn decided_by(who: &str) -> InvokeOptions {
    InvokeOptions::new().decided_by(who)
}

#[tokio::test]
async fn an_approval_covers_the_validated_defaulted_input_not_the_raw_json() {
    let (pipeline, runs_) = pipeline();
    let id = wait(&pipeline, "wipe", json!({"disk": "7"}), "ann").await;
    let waiting = pipeline.suspended(&id).await.unwrap().unwrap();
    assert_eq!(waiting.input, json!({"disk": 7, "mode": "fast"}));
    let binding = waiting
        .binding
        .clone()
        .expect("the pipeline binds every waiting call");
    assert_eq!(binding.input, digest(&json!({"mode": "fast", "disk": 7.0})));
    assert_eq!(
        (binding.user.as_str(), binding.tool.as_str()),
        ("ann", "wipe")
    );

    pipeline
        .approve_retry(&id, Some("boss".into()))
        .await
        .unwrap();
    // Written another way — key order, the default spelled out, a number — it is the
    // same call, and it uses the approval.
    let out = pipeline
        .invoke("wipe", json!({"mode": "fast", "disk": 7}), as_user("ann"))
        .await;

    assert_eq!(out, Ok(json!({"wiped": 7})));
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test]
async fn two_concurrent_retries_on_one_approval_run_the_tool_once() {
    let (pipeline, runs_) = pipeline();
    let id = wait(&pipeline, "wipe", json!({"disk": 1}), "ann").await;
    pipeline.approve_retry(&id, None).await.unwrap();

    let (a, b) = tokio::join!(
        pipeline.invoke("wipe", json!({"disk": 1}), as_user("ann")),
        pipeline.invoke("wipe", json!({"disk": 1}), as_user("ann")),
    );

    let codes = ended_with([a, b]);
    assert_eq!(codes, ["ran", "suspended"]);
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test]
async fn two_concurrent_resumes_of_one_call_run_it_once() {
    let (pipeline, runs_) = pipeline();
    let id = wait(&pipeline, "wipe", json!({"disk": 1}), "ann").await;

    let (a, b) = tokio::join!(
        pipeline.resume(&id, ResumeDecision::Approve, decided_by("boss")),
        pipeline.resume(&id, ResumeDecision::Approve, decided_by("eve")),
    );

    let codes = ended_with([a, b]);
    assert_eq!(codes, ["ran", "unknown_suspension"]);
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test]
async fn an_approved_call_that_fails_has_used_its_approval() {
    let (pipeline, runs_) = pipeline();
    let resumed = wait(&pipeline, "wipe", json!({"disk": 13}), "ann").await;
    let retried = wait(&pipeline, "erase", json!({"disk": 13}), "ann").await;

    let failed = pipeline
        .resume(&resumed, ResumeDecision::Approve, decided_by("boss"))
        .await;
    let again = pipeline
        .resume(&resumed, ResumeDecision::Approve, decided_by("boss"))
        .await;
    pipeline
        .approve_retry(&retried, Some("boss".into()))
        .await
        .unwrap();
    let retry_failed = pipeline
        .invoke("erase", json!({"disk": 13}), as_user("ann"))
        .await;
    let retry_again = pipeline
        .invoke("erase", json!({"disk": 13}), as_user("ann"))
        .await;

    assert_eq!(failed.unwrap_err().code(), "tool_error");
    assert_eq!(again.unwrap_err().code(), "unknown_suspension");
    assert_eq!(retry_failed.unwrap_err().code(), "tool_error");
    assert_eq!(retry_again.unwrap_err().code(), "suspended", "waits anew");
    assert_eq!(runs(&runs_), 2);
}

#[tokio::test]
async fn a_mismatched_retry_waits_anew_and_leaves_the_approval_in_place() {
    let (pipeline, runs_) = pipeline();
    let id = wait(&pipeline, "wipe", json!({"disk": 1}), "ann").await;
    pipeline
        .approve_retry(&id, Some("boss".into()))
        .await
        .unwrap();

    let mismatches = [
        ("wipe", json!({"disk": 2}), "ann"),
        ("wipe", json!({"disk": 1, "mode": "slow"}), "ann"),
        ("wipe", json!({"disk": 1}), "mallory"),
        ("erase", json!({"disk": 1}), "ann"),
    ];
    for (tool, input, user) in mismatches {
        let refused = pipeline.invoke(tool, input.clone(), as_user(user)).await;
        assert_eq!(
            refused.unwrap_err().code(),
            "suspended",
            "{tool} {input} by {user}"
        );
    }
    let real = pipeline
        .invoke("wipe", json!({"disk": 1}), as_user("ann"))
        .await;

    assert_eq!(real, Ok(json!({"wiped": 1})), "the approval was not burnt");
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test]
async fn an_approval_for_a_retry_is_not_used_by_the_same_user_id_in_another_tenant() {
    let (pipeline, runs_) = pipeline();
    let in_tenant = |tenant: &str| {
        InvokeOptions::new().user(toolgate_core::User::new("ann").with_tenant(tenant))
    };
    let id = match pipeline
        .invoke("wipe", json!({"disk": 1}), in_tenant("acme"))
        .await
    {
        Err(ToolError::Suspended { suspension_id, .. }) => suspension_id,
        other => panic!("expected the call to wait, got {other:?}"),
    };
    pipeline
        .approve_retry(&id, Some("boss".into()))
        .await
        .unwrap();

    let elsewhere = pipeline
        .invoke("wipe", json!({"disk": 1}), in_tenant("globex"))
        .await;
    assert_eq!(elsewhere.unwrap_err().code(), "suspended");
    assert_eq!(runs(&runs_), 0);
    let real = pipeline
        .invoke("wipe", json!({"disk": 1}), in_tenant("acme"))
        .await;
    assert_eq!(real, Ok(json!({"wiped": 1})), "the approval was not burnt");
}

#[tokio::test]
async fn a_call_resumed_as_the_same_user_id_of_another_tenant_is_refused_and_still_waits() {
    let (pipeline, runs_) = pipeline();
    let ann_of = |tenant: &str| toolgate_core::User::new("ann").with_tenant(tenant);
    let id = match pipeline
        .invoke(
            "wipe",
            json!({"disk": 1}),
            InvokeOptions::new().user(ann_of("acme")),
        )
        .await
    {
        Err(ToolError::Suspended { suspension_id, .. }) => suspension_id,
        other => panic!("expected the call to wait, got {other:?}"),
    };
    let as_other = InvokeOptions::new().user(ann_of("globex"));
    let refused = pipeline
        .resume(&id, ResumeDecision::Approve, as_other)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains(
            "made by `ann` of tenant `acme`, and the host resumed it as `ann` of tenant `globex`"
        ),
        "{refused}"
    );
    assert_eq!(runs(&runs_), 0);
    let ran = pipeline
        .resume(
            &id,
            ResumeDecision::Approve,
            InvokeOptions::new().user(ann_of("acme")),
        )
        .await;
    assert_eq!(ran, Ok(json!({"wiped": 1})), "the call still waited");
}

#[tokio::test]
async fn an_approval_for_one_large_id_is_not_used_by_a_neighbouring_one() {
    // Past 2^53 a double cannot tell these apart, nor can RFC 8785's canonical form.
    let (approved, neighbour) = (1_234_567_890_123_456_789u64, 1_234_567_890_123_456_800u64);
    let (pipeline, runs_) = pipeline();
    let id = wait(&pipeline, "wipe", json!({"disk": approved}), "ann").await;
    pipeline
        .approve_retry(&id, Some("boss".into()))
        .await
        .unwrap();

    let other = pipeline
        .invoke("wipe", json!({"disk": neighbour}), as_user("ann"))
        .await;
    assert_eq!(other.unwrap_err().code(), "suspended");
    assert_eq!(runs(&runs_), 0);
    let real = pipeline
        .invoke("wipe", json!({"disk": approved}), as_user("ann"))
        .await;
    assert_eq!(real, Ok(json!({"wiped": approved})));
}

#[tokio::test]
async fn a_retry_under_another_configuration_generation_does_not_use_the_approval() {
    let store: Arc<dyn SuspensionStore> = Arc::new(InMemorySuspensionStore::default());
    let make = |generation: &str| {
        let (builder, runs) = builder("Wipes a disk.");
        let pipeline = builder
            .suspension_store(Arc::clone(&store))
            .generation(generation)
            .build()
            .unwrap();
        (pipeline, runs)
    };
    let (old, old_runs) = make("g1");
    let (new, new_runs) = make("g2");
    let id = wait(&old, "wipe", json!({"disk": 1}), "ann").await;
    old.approve_retry(&id, None).await.unwrap();

    let under_new = new.invoke("wipe", json!({"disk": 1}), as_user("ann")).await;
    let under_old = old.invoke("wipe", json!({"disk": 1}), as_user("ann")).await;

    assert_eq!(under_new.unwrap_err().code(), "suspended");
    assert_eq!(under_old, Ok(json!({"wiped": 1})));
    assert_eq!((runs(&old_runs), runs(&new_runs)), (1, 0));
}

#[tokio::test]
async fn a_resume_where_the_tools_definition_changed_is_refused_and_the_call_still_waits() {
    let store: Arc<dyn SuspensionStore> = Arc::new(InMemorySuspensionStore::default());
    let make = |description: &str, generation: &str| {
        let (builder, runs) = builder(description);
        let pipeline = builder
            .suspension_store(Arc::clone(&store))
            .generation(generation)
            .build()
            .unwrap();
        (pipeline, runs)
    };
    let (parked_on, runs_) = make("Wipes a disk.", "g1");
    let (redefined, _) = make("Wipes a disk, and its backups.", "g1");
    let (reconfigured, reconfigured_runs) = make("Wipes a disk.", "g2");
    let id = wait(&parked_on, "wipe", json!({"disk": 1}), "ann").await;
    let other = wait(&parked_on, "wipe", json!({"disk": 2}), "ann").await;

    let refused = redefined
        .resume(&id, ResumeDecision::Approve, decided_by("boss"))
        .await
        .unwrap_err();
    let not_for_retry = redefined.approve_retry(&id, None).await.unwrap_err();
    let still_waiting = parked_on.suspended(&id).await.unwrap();
    let ran = parked_on
        .resume(&id, ResumeDecision::Approve, decided_by("boss"))
        .await;
    // Another configuration generation resumes it: its hooks authorize it again.
    let ran_elsewhere = reconfigured
        .resume(&other, ResumeDecision::Approve, decided_by("boss"))
        .await;

    assert_eq!(
        (refused.code(), refused.status()),
        ("approval_mismatch", 409)
    );
    assert!(
        refused.to_string().contains("the tool's definition"),
        "{refused}"
    );
    assert_eq!(not_for_retry.code(), "approval_mismatch");
    assert!(
        still_waiting.is_some(),
        "a mismatch does not use the call up"
    );
    assert_eq!(ran, Ok(json!({"wiped": 1})));
    assert_eq!(ran_elsewhere, Ok(json!({"wiped": 2})));
    assert_eq!((runs(&runs_), runs(&reconfigured_runs)), (1, 1));
}

#[tokio::test]
async fn a_rejection_is_accepted_whatever_changed() {
    let store: Arc<dyn SuspensionStore> = Arc::new(InMemorySuspensionStore::default());
    let (builder_old, _) = builder("Wipes a disk.");
    let old = builder_old
        .suspension_store(Arc::clone(&store))
        .build()
        .unwrap();
    let (builder_new, _) = builder("Wipes a disk, and its backups.");
    let new = builder_new
        .suspension_store(Arc::clone(&store))
        .build()
        .unwrap();
    let id = wait(&old, "wipe", json!({"disk": 1}), "ann").await;

    let rejected = new
        .resume(
            &id,
            ResumeDecision::Reject {
                reason: "no".into(),
            },
            decided_by("boss"),
        )
        .await;

    assert_eq!(rejected.unwrap_err().code(), "rejected");
    assert!(old.suspended(&id).await.unwrap().is_none());
}

#[tokio::test]
async fn an_approval_for_a_retry_is_void_once_run_within_has_passed() {
    let now = SystemTime::now();
    let seconds = Arc::new(AtomicU64::new(0));
    let read = Arc::clone(&seconds);
    let store = InMemorySuspensionStore::new(SuspensionLimits::default())
        .with_clock(move || now + Duration::from_secs(read.load(Ordering::SeqCst)));
    let (builder, runs_) = builder("Wipes a disk.");
    let pipeline = builder
        .suspension_store(Arc::new(store))
        .approval_run_within(Duration::from_secs(600))
        .build()
        .unwrap();
    let first = wait(&pipeline, "wipe", json!({"disk": 1}), "ann").await;
    let second = wait(&pipeline, "wipe", json!({"disk": 2}), "ann").await;
    let one = pipeline
        .approve_retry(&first, Some("boss".into()))
        .await
        .unwrap();
    pipeline
        .approve_retry(&second, Some("boss".into()))
        .await
        .unwrap();

    seconds.store(599, Ordering::SeqCst);
    let within = pipeline
        .invoke("wipe", json!({"disk": 1}), as_user("ann"))
        .await;
    seconds.store(601, Ordering::SeqCst);
    let past = pipeline
        .invoke("wipe", json!({"disk": 2}), as_user("ann"))
        .await;

    assert_eq!(
        one.expires_at
            .duration_since(one.decided_at)
            .unwrap()
            .as_secs(),
        600
    );
    assert_eq!(within, Ok(json!({"wiped": 1})));
    assert_eq!(past.unwrap_err().code(), "suspended");
    assert_eq!(runs(&runs_), 1);
}

/// On a resumed call, holds the call at the semaphore stage for `hold`, as a queue for a
/// concurrency permit would.
struct SlowPermit {
    hold: Duration,
}

#[hook]
impl Hook for SlowPermit {
    async fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.resumed().is_some() {
            tokio::time::sleep(self.hold).await;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_call_that_cannot_start_within_run_within_does_not_run() {
    let run_with_hold = |hold: u64| async move {
        let (builder, runs_) = builder("Wipes a disk.");
        let pipeline = builder
            .hook(SlowPermit {
                hold: Duration::from_secs(hold),
            })
            .approval_run_within(Duration::from_secs(15 * 60))
            .build()
            .unwrap();
        let id = wait(&pipeline, "wipe", json!({"disk": 1}), "ann").await;
        let out = pipeline
            .resume(&id, ResumeDecision::Approve, decided_by("boss"))
            .await;
        (out, runs(&runs_))
    };

    let (in_time, ran) = run_with_hold(14 * 60).await;
    assert_eq!((in_time, ran), (Ok(json!({"wiped": 1})), 1));
    let (late, ran) = run_with_hold(16 * 60).await;
    let late = late.unwrap_err();
    assert_eq!(
        (late.code(), late.status(), ran),
        ("approval_expired", 410, 0)
    );
}

#[tokio::test]
async fn a_call_run_on_an_approval_for_a_retry_records_who_approved_it() {
    let (builder, _) = builder("Wipes a disk.");
    let seen = Arc::new(std::sync::Mutex::new(None));
    let record = Arc::clone(&seen);
    let pipeline = builder
        .hook(toolgate_core::hook::hook_fn(
            toolgate_core::Stage::WillExecute,
            move |ctx| {
                *record.lock().unwrap() = Some((
                    ctx.decided_by().map(str::to_owned),
                    ctx.approved_retry_of().map(str::to_owned),
                ));
                Ok(()).into()
            },
        ))
        .build()
        .unwrap();
    let id = wait(&pipeline, "wipe", json!({"disk": 1}), "ann").await;
    pipeline
        .approve_retry(&id, Some("boss".into()))
        .await
        .unwrap();

    pipeline
        .invoke("wipe", json!({"disk": 1}), as_user("ann"))
        .await
        .unwrap();

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, Some((Some("boss".to_owned()), Some(id))));
}
