//! Decisions racing on one waiting call, in an order the tests choose: a store that holds
//! every running-record write until it is let go stands between the decisions and the
//! gateway's store, so that one approver's record arrives exactly when the test says.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use toolgate_core::User;
use toolgate_core::external::async_trait;
use toolgate_core::suspension::{RetryApproval, SuspensionStore};
use toolgate_core::{InvokeOptions, ToolError};

use super::*;
use crate::auth::hash_key;
use crate::extensions::Extensions;
use crate::gateway::{BuildOn, Gateway};
use crate::identity::KeyCache;
use crate::state::SharedState;
use crate::webhooks::DecisionSummary;

/// The gateway's store, holding each write of a running record — kept conditionally or
/// not — until [`release`](Self::release) lets one go. [`arrived`](Self::arrived) is
/// told when one waits.
struct HoldsRunningRecords {
    inner: Arc<dyn SuspensionStore>,
    arrived: Notify,
    released: Semaphore,
}

impl HoldsRunningRecords {
    async fn hold(&self, outcome: &DecidedCall) {
        if is_running_record(&outcome.result) {
            self.arrived.notify_one();
            self.released.acquire().await.expect("open").forget();
        }
    }

    fn release(&self) {
        self.released.add_permits(1);
    }
}

#[async_trait]
impl SuspensionStore for HoldsRunningRecords {
    async fn save(&self, call: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        self.inner.save(call).await
    }
    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.inner.take(id).await
    }
    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.inner.get(id).await
    }
    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        self.inner.expired_owner(id).await
    }
    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        self.inner.keep_retry_approval(approval).await
    }
    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        self.hold(&outcome).await;
        self.inner.keep_outcome(outcome).await
    }
    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        self.hold(&record).await;
        self.inner.keep_running(record, token).await
    }
    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        self.inner.remove_running(id, token).await
    }
    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        self.inner.outcome(id).await
    }
}

/// A gateway whose `sleep` waits for approval, on the in-memory store, with its outcomes
/// kept through a [`HoldsRunningRecords`].
async fn gateway() -> (Arc<Gateway>, Arc<HoldsRunningRecords>) {
    let yaml = format!(
        "tools:\n  builtin: [sleep]\nusers:\n  - {{id: bob, key_sha256: \"{}\"}}\npolicies:\n  approval:\n    tools: [sleep]\n",
        hash_key("tg_bob")
    );
    let config = crate::config::parse(&yaml).expect("the configuration");
    let shared = SharedState::new(&config).await.expect("the state");
    let (keys, extensions) = (KeyCache::default(), Extensions::default());
    let on = BuildOn {
        shared: &shared,
        keys: &keys,
        extensions: &extensions,
    };
    let mut gateway = Gateway::build(config, &on).await.expect("the gateway");
    let held = Arc::new(HoldsRunningRecords {
        inner: Arc::clone(&gateway.suspensions),
        arrived: Notify::new(),
        released: Semaphore::new(0),
    });
    gateway.suspensions = held.clone();
    (Arc::new(gateway), held)
}

/// bob's call of `sleep`, waiting for approval.
async fn waiting_call(gateway: &Gateway) -> SuspendedInvocation {
    let options = InvokeOptions::new().user(User::new("bob"));
    let pipeline = gateway.pipeline();
    let waiting = pipeline.invoke("sleep", json!({"ms": 1}), options).await;
    let Err(ToolError::Suspended { suspension_id, .. }) = waiting else {
        panic!("the call did not wait: {waiting:?}");
    };
    let saved = pipeline.suspended(&suspension_id).await.expect("the store");
    saved.expect("the call waits")
}

fn approver(gateway: &Arc<Gateway>, id: &str) -> Caller {
    Caller {
        user: Arc::new(User::new(id).with_roles(["admin"])),
        token: None,
        gateway: Arc::clone(gateway),
    }
}

/// What `resume` carries out for `decision` by `by`, as `options` say.
fn resumption(
    by: &Caller,
    decision: ResumeDecision,
    options: ResumeOptions,
    running: Option<String>,
) -> Resumption {
    Resumption {
        told: DecisionSummary::of(&decision, &by.user),
        decision,
        options,
        running,
        stop: tokio_util::sync::CancellationToken::new(),
    }
}

#[tokio::test]
async fn a_losing_approvers_running_record_never_lands_over_the_rejection_that_won() {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let (alice, carol) = (approver(&gateway, "alice"), approver(&gateway, "carol"));

    // carol approves: her running record is on its way to the store...
    let approving = tokio::spawn({
        let (saved, id) = (saved.clone(), id.clone());
        async move {
            let running = keep_running(&carol, &id, &saved, "approve").await;
            let approve = resumption(
                &carol,
                ResumeDecision::Approve,
                ResumeOptions::new(),
                Some(running),
            );
            decide(&carol, &id, &saved, approve, &Drain::new()).await
        }
    });
    held.arrived.notified().await;
    // ...when alice's rejection takes the call and keeps its outcome.
    let reason = "not today".to_owned();
    let reject = ResumeDecision::Reject { reason };
    let rejected = resumption(&alice, reject, ResumeOptions::new(), None);
    let rejected = decide(&alice, &id, &saved, rejected, &Drain::new()).await;
    let rejected = rejected.unwrap_or_else(|e| panic!("alice's rejection: {}", e.code()));
    assert!(matches!(rejected.status, ToolStatus::Error));
    held.release();
    let lost = approving.await.expect("carol's decision ends");

    let lost = lost.expect_err("carol found the call taken");
    assert_eq!(lost.status(), StatusCode::NOT_FOUND);
    let kept = gateway
        .suspensions
        .outcome(&id)
        .await
        .unwrap()
        .expect("an outcome");
    assert_eq!(kept.result["status"], "error", "{}", kept.result);
    assert_eq!(kept.result["error"]["code"], "rejected", "{}", kept.result);
    assert_eq!(kept.suspended_at, Some(saved.suspended_at));
}

#[tokio::test]
async fn an_approval_that_fails_before_the_take_removes_its_own_running_record_only() {
    let (gateway, held) = gateway().await;
    // Nothing is held: three running records are written.
    for _ in 0..3 {
        held.release();
    }
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let carol = approver(&gateway, "carol");
    // Resumed as someone else than the call's maker: refused before anything is taken.
    let as_mallory = ResumeOptions::new().user(User::new("mallory"));

    let running = keep_running(&carol, &id, &saved, "approve").await;
    assert!(is_running_record(
        &gateway
            .suspensions
            .outcome(&id)
            .await
            .unwrap()
            .unwrap()
            .result
    ));
    let approve = resumption(
        &carol,
        ResumeDecision::Approve,
        as_mallory.clone(),
        Some(running),
    );
    let refused = decide(&carol, &id, &saved, approve, &Drain::new()).await;

    assert!(refused.is_err(), "the approval failed");
    assert!(still_waits(&carol, &id).await, "the call still waits");
    assert_eq!(
        gateway.suspensions.outcome(&id).await,
        Ok(None),
        "her record is gone"
    );

    // Another decision's record is not hers to remove.
    let theirs = running_record(
        &id,
        &saved.user,
        "sleep",
        "approve",
        "alice",
        SystemTime::now(),
        Duration::from_secs(60),
    );
    assert_eq!(
        gateway.suspensions.keep_running(theirs, "alices").await,
        Ok(true)
    );
    let mine = keep_running(&carol, &id, &saved, "approve").await;
    let approve = resumption(&carol, ResumeDecision::Approve, as_mallory, Some(mine));
    assert!(
        decide(&carol, &id, &saved, approve, &Drain::new())
            .await
            .is_err()
    );
    let kept = gateway
        .suspensions
        .outcome(&id)
        .await
        .unwrap()
        .expect("alice's record");
    assert_eq!(kept.result["decided_by"], "alice", "{}", kept.result);
}
