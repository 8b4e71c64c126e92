use std::time::Duration;

use serde_json::json;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{Pipeline, Stage, ToolError, tool_fn};
use toolgate_hooks::Redaction;
use toolgate_hooks::consent::{Approvals, Consent, Grant};
use toolgate_hooks::partition::Partition;
use toolgate_hooks::quota::{InMemoryQuota, Quota, Rate};

use crate::support::{as_caller, as_user, counting_tool, ok_tool, runs};

fn suspension_id(err: ToolError) -> String {
    match err {
        ToolError::Suspended { suspension_id, .. } => suspension_id,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

fn pipeline_with(
    consent: Consent,
) -> (
    Pipeline,
    Approvals,
    std::sync::Arc<std::sync::atomic::AtomicU32>,
) {
    let approvals = consent.approvals();
    let (builder, runs_) = ok_tool(Pipeline::builder(), "wipe");
    let (builder, _) = ok_tool(builder, "read");
    (builder.hook(consent).build().unwrap(), approvals, runs_)
}

#[tokio::test]
async fn a_call_without_approval_is_suspended_and_does_not_run() {
    let (pipeline, _, runs_) = pipeline_with(Consent::builder().tool("wipe").build());
    let err = pipeline
        .invoke("wipe", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("suspended", 202));
    let id = suspension_id(err);
    let pending = pipeline
        .suspended(&id)
        .await
        .unwrap()
        .expect("the call waits");
    // Asked at consent, the wait begins once the input stages are done.
    assert_eq!(pending.stage, Stage::WillRedactInput);
    assert_eq!(pending.payload["tool"], "wipe");
    assert_eq!(pending.payload["user"], "ann");
    assert!(
        pending.payload.get("input").is_none(),
        "the unredacted input stays out of the payload"
    );
    assert_eq!(runs(&runs_), 0);
}

#[tokio::test]
async fn tools_that_need_no_approval_run_at_once() {
    let (pipeline, _, _) = pipeline_with(Consent::builder().tool("wipe").build());
    assert_eq!(
        pipeline
            .invoke("read", json!(null), as_user("ann"))
            .await
            .unwrap(),
        json!("ok")
    );
}

#[tokio::test]
async fn approving_a_suspended_call_runs_it_once() {
    let (pipeline, approvals, runs_) = pipeline_with(Consent::builder().tool("wipe").build());
    let id = suspension_id(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap_err(),
    );
    let out = approvals
        .approve(&pipeline, &id, false, Default::default())
        .await
        .unwrap();
    assert_eq!(out, json!("ok"));
    assert_eq!(runs(&runs_), 1);
    let again = approvals
        .approve(&pipeline, &id, false, Default::default())
        .await
        .unwrap_err();
    assert_eq!(again.code(), "unknown_suspension");
    // Not remembered: the next call waits again.
    let err = pipeline
        .invoke("wipe", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "suspended");
}

#[tokio::test]
async fn rejecting_a_suspended_call_fails_it_with_rejected() {
    let (pipeline, approvals, runs_) = pipeline_with(Consent::builder().tool("wipe").build());
    let id = suspension_id(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap_err(),
    );
    let err = approvals
        .reject(&pipeline, &id, "not today", Default::default())
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("rejected", 403));
    assert_eq!(err.to_string(), "not today");
    assert_eq!(runs(&runs_), 0);
}

#[tokio::test]
async fn a_remembered_approval_lets_later_calls_of_that_user_through() {
    let (pipeline, approvals, runs_) = pipeline_with(Consent::builder().tool("wipe").build());
    let id = suspension_id(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap_err(),
    );
    approvals
        .approve(&pipeline, &id, true, Default::default())
        .await
        .unwrap();
    assert!(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    assert!(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    assert_eq!(runs(&runs_), 3);
    // Another user still needs approval.
    assert_eq!(
        pipeline
            .invoke("wipe", json!(null), as_user("bob"))
            .await
            .unwrap_err()
            .code(),
        "suspended"
    );
    // Revoked: ann needs approval again.
    assert!(approvals.revoke("ann", "wipe").await.unwrap());
    assert_eq!(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "suspended"
    );
}

#[tokio::test]
async fn a_consent_ann_of_acme_remembered_does_not_let_ann_of_globex_skip_hers() {
    let (pipeline, approvals, runs_) = pipeline_with(Consent::builder().tool("wipe").build());
    let id = suspension_id(
        pipeline
            .invoke("wipe", json!(null), as_caller("ann", "acme"))
            .await
            .unwrap_err(),
    );
    approvals
        .approve(&pipeline, &id, true, Default::default())
        .await
        .unwrap();
    assert!(
        pipeline
            .invoke("wipe", json!(null), as_caller("ann", "acme"))
            .await
            .is_ok(),
        "ann of acme's choice is remembered"
    );
    assert_eq!(runs(&runs_), 2);
    for other in [as_caller("ann", "globex"), as_user("ann")] {
        let err = pipeline.invoke("wipe", json!(null), other).await;
        assert_eq!(err.unwrap_err().code(), "suspended", "another ann is asked");
    }
    assert_eq!(runs(&runs_), 2);

    // A grant given to a caller in a tenant is hers alone too: not the `ann` without
    // a tenant's, whom a bare id names.
    let globex = toolgate_core::User::new("ann").with_tenant("globex");
    approvals.grant(&globex, "wipe", Grant::Once).await.unwrap();
    assert!(!approvals.revoke("ann", "wipe").await.unwrap());
    assert!(
        pipeline
            .invoke("wipe", json!(null), as_caller("ann", "globex"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_one_shot_grant_is_used_by_exactly_one_call() {
    let (pipeline, approvals, runs_) = pipeline_with(Consent::builder().tool("wipe").build());
    approvals.grant("ann", "wipe", Grant::Once).await.unwrap();
    assert!(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    assert_eq!(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "suspended"
    );
    assert_eq!(runs(&runs_), 1);
}

#[tokio::test]
async fn tagged_and_destructive_tools_need_approval() {
    let consent = Consent::builder()
        .tag("payments")
        .destructive_tools(true)
        .build();
    let builder = Pipeline::builder().tool(
        tool_fn("pay", "Pays.", |_: ()| async { Ok::<_, ToolError>("paid") }).tag("payments"),
    );
    let destructive = ToolAnnotations {
        destructive: true,
        ..ToolAnnotations::default()
    };
    let (builder, _) = counting_tool(builder, "drop_table", destructive, |_| Ok(json!("dropped")));
    let (builder, _) = ok_tool(builder, "read");
    let pipeline = builder.hook(consent).build().unwrap();
    assert_eq!(
        pipeline
            .invoke("pay", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "suspended"
    );
    assert_eq!(
        pipeline
            .invoke("drop_table", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "suspended"
    );
    assert!(
        pipeline
            .invoke("read", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_failing_approval_store_refuses_the_call() {
    use toolgate_hooks::async_trait;
    use toolgate_hooks::consent::{ApprovalStore, ApprovalStoreError};

    struct Down;
    #[async_trait]
    impl ApprovalStore for Down {
        async fn grant(&self, _: &str, _: &str, _: Grant) -> Result<(), ApprovalStoreError> {
            Err(ApprovalStoreError::Unavailable("down".into()))
        }
        async fn consume(&self, _: &str, _: &str) -> Result<Option<Grant>, ApprovalStoreError> {
            Err(ApprovalStoreError::Unavailable("down".into()))
        }
        async fn revoke(&self, _: &str, _: &str) -> Result<bool, ApprovalStoreError> {
            Err(ApprovalStoreError::Unavailable("down".into()))
        }
    }
    let (pipeline, _, runs_) = pipeline_with(
        Consent::builder()
            .tool("wipe")
            .store(std::sync::Arc::new(Down))
            .build(),
    );
    let err = pipeline
        .invoke("wipe", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("consent_unavailable", 503));
    assert_eq!(runs(&runs_), 0);
}

#[tokio::test]
async fn a_waiting_call_has_taken_its_quota_unit_and_takes_no_other_when_approved() {
    let consent = Consent::builder().tool("wipe").build();
    let approvals = consent.approvals();
    let quota = InMemoryQuota::default();
    let (builder, _) = ok_tool(Pipeline::builder(), "wipe");
    let pipeline = builder
        .hook(consent)
        .hook(
            Quota::builder(Rate::per_hour(1).unwrap())
                .backend(std::sync::Arc::new(quota.clone()))
                .build(),
        )
        .build()
        .unwrap();
    let id = suspension_id(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap_err(),
    );
    assert_eq!(quota.key_count(), 1, "the waiting call took its unit");
    assert!(
        approvals
            .approve(&pipeline, &id, false, Default::default())
            .await
            .is_ok(),
        "approving it does not take another unit (the budget of one is spent)"
    );
    assert_eq!(quota.in_use(), 0);
}

#[tokio::test]
async fn over_five_an_hour_the_sixth_call_is_refused_whether_or_not_the_first_five_wait() {
    let consent = Consent::builder().tool("wipe").build();
    let (builder, wiped) = ok_tool(Pipeline::builder(), "wipe");
    let (builder, read) = ok_tool(builder, "read");
    let pipeline = builder
        .hook(consent)
        .hook(
            Quota::builder(Rate::per_hour(5).unwrap())
                .partition(Partition::UserTool)
                .build(),
        )
        .build()
        .unwrap();

    for (tool, waits) in [("wipe", true), ("read", false)] {
        for _ in 0..5 {
            let answer = pipeline.invoke(tool, json!(null), as_user("ann")).await;
            assert_eq!(answer.is_err(), waits, "{tool}: {answer:?}");
        }
        let sixth = pipeline
            .invoke(tool, json!(null), as_user("ann"))
            .await
            .unwrap_err();
        assert_eq!(
            (sixth.code(), sixth.status()),
            ("rate_limited", 429),
            "{tool}"
        );
    }
    assert_eq!((runs(&wiped), runs(&read)), (0, 5));
}

#[derive(serde::Deserialize, serde::Serialize, garde::Validate, schemars::JsonSchema)]
struct Message {
    #[garde(length(max = 200))]
    text: String,
}

#[tokio::test]
async fn a_waiting_call_keeps_its_validated_redacted_input_not_the_raw_one() {
    let consent = Consent::builder().tool("send").build();
    let approvals = consent.approvals();
    let pipeline = Pipeline::builder()
        .tool(tool_fn(
            "send",
            "Sends a message.",
            |m: Message| async move { Ok::<_, ToolError>(m.text) },
        ))
        .hook(consent)
        .hook(Redaction::builder().build())
        .build()
        .unwrap();

    let too_long = json!({ "text": "x".repeat(201) });
    let refused = pipeline.invoke("send", too_long, as_user("ann")).await;
    assert_eq!(
        refused.unwrap_err().code(),
        "invalid_input",
        "refused, not parked"
    );

    let raw = json!({ "text": "mail ann@example.com" });
    let id = suspension_id(
        pipeline
            .invoke("send", raw, as_user("ann"))
            .await
            .unwrap_err(),
    );
    let pending = pipeline.suspended(&id).await.unwrap().expect("it waits");
    let stored = serde_json::to_string(&pending).unwrap();
    assert!(!stored.contains("ann@example.com"), "{stored}");
    assert_eq!(pending.input, json!({ "text": "mail [REDACTED:email]" }));

    let out = approvals
        .approve(&pipeline, &id, false, Default::default())
        .await
        .unwrap();
    assert_eq!(
        out,
        json!("mail [REDACTED:email]"),
        "what the tool ran with"
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_grant_outlives_a_call_the_quota_refused_and_is_spent_by_the_call_that_runs() {
    let consent = Consent::builder().tool("wipe").build();
    let approvals = consent.approvals();
    let (builder, wiped) = ok_tool(Pipeline::builder(), "wipe");
    let (builder, _) = ok_tool(builder, "read");
    let pipeline = builder
        .hook(consent)
        .hook(
            Quota::builder(Rate::per_minute(1).unwrap())
                .partition(Partition::User)
                .build(),
        )
        .build()
        .unwrap();
    // Ann's one call a minute goes to another tool.
    assert!(
        pipeline
            .invoke("read", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    approvals.grant("ann", "wipe", Grant::Once).await.unwrap();

    let refused = pipeline
        .invoke("wipe", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((refused.code(), refused.status()), ("rate_limited", 429));
    assert_eq!(runs(&wiped), 0);

    tokio::time::advance(refused.retry_after_delay().unwrap()).await;
    assert_eq!(
        pipeline
            .invoke("wipe", json!(null), as_user("ann"))
            .await
            .unwrap(),
        json!("ok"),
        "the approval still stands: the refused call never ran"
    );
    assert_eq!(runs(&wiped), 1);

    tokio::time::advance(Duration::from_secs(60)).await;
    let again = pipeline
        .invoke("wipe", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(again.code(), "suspended", "the call that ran spent it");
}

/// Holds the first call at the semaphore stage until `open` is notified, then refuses it
/// (`busy`, as a full concurrency queue would); `entered` tells that it is held. Later calls
/// pass.
struct Gate {
    entered: std::sync::Arc<tokio::sync::Notify>,
    open: std::sync::Arc<tokio::sync::Notify>,
    passed: std::sync::atomic::AtomicBool,
}

#[toolgate_core::hook]
impl toolgate_core::Hook for Gate {
    async fn will_acquire_semaphore(
        &self,
        ctx: &mut toolgate_core::ToolInvokeContext,
    ) -> toolgate_core::HookResult {
        if self.passed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        self.entered.notify_one();
        self.open.notified().await;
        ctx.abort("no permit", "busy", 503)
    }
}

#[tokio::test]
async fn a_one_shot_grant_revoked_while_a_call_holds_it_is_not_given_back_when_the_call_fails() {
    let consent = Consent::builder().tool("wipe").build();
    let approvals = consent.approvals();
    let entered = std::sync::Arc::new(tokio::sync::Notify::new());
    let open = std::sync::Arc::new(tokio::sync::Notify::new());
    let (builder, wiped) = ok_tool(Pipeline::builder(), "wipe");
    let pipeline = builder
        .hook(consent)
        .hook(Gate {
            entered: entered.clone(),
            open: open.clone(),
            passed: Default::default(),
        })
        .build()
        .unwrap();
    approvals.grant("ann", "wipe", Grant::Once).await.unwrap();

    let held = tokio::spawn({
        let pipeline = pipeline.clone();
        async move { pipeline.invoke("wipe", json!(null), as_user("ann")).await }
    });
    entered.notified().await;
    assert!(
        approvals.revoke("ann", "wipe").await.unwrap(),
        "the approval a call in flight holds is revoked"
    );
    open.notify_one();
    assert_eq!(held.await.unwrap().unwrap_err().code(), "busy");
    assert_eq!(runs(&wiped), 0);

    let again = pipeline
        .invoke("wipe", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(
        again.code(),
        "suspended",
        "the refused call does not bring the revoked approval back"
    );
}
