//! Decisions racing on one waiting call, in an order the tests choose: a store that holds
//! chosen writes until they are let go stands between the decisions and the gateway's
//! store, so that one approver's step arrives exactly when the test says.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Where the next [`held`](Self::held) steps wait until the test lets them go (none
/// unless it says): [`arrived`](Self::arrived) is told when one waits,
/// [`release`](Self::release) lets one go.
struct Gate {
    held: AtomicUsize,
    arrived: Notify,
    released: Semaphore,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            held: AtomicUsize::new(0),
            arrived: Notify::new(),
            released: Semaphore::new(0),
        }
    }
}

impl Gate {
    async fn hold(&self) {
        let held =
            (self.held).fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if held.is_ok() {
            self.arrived.notify_one();
            self.released.acquire().await.expect("open").forget();
        }
    }

    fn release(&self) {
        self.released.add_permits(1);
    }
}

/// The gateway's store, holding at [`takes`](Self::takes) takes of a call (with a running
/// record or not), at [`approvals`](Self::approvals) keeps of an approval for a retry,
/// at [`ends`](Self::ends) ends of a decided call kept over its running record, and at
/// [`outcomes`](Self::outcomes) outcomes kept over anything; and failing the next
/// [`failing_ends`](Self::failing_ends) ends kept over a running record, as a store that
/// does not answer.
#[derive(Default)]
struct Holds {
    inner: Option<Arc<dyn SuspensionStore>>,
    takes: Gate,
    approvals: Gate,
    ends: Gate,
    outcomes: Gate,
    failing_ends: AtomicUsize,
    /// Takes whose answer the store loses: the call is taken (with its running record),
    /// the take fails as a store past its deadline does, and a moment later the call is
    /// put back to wait and its record removed — as the Redis store undoes such a take.
    lost_takes: AtomicUsize,
}

impl Holds {
    fn inner(&self) -> &dyn SuspensionStore {
        self.inner.as_deref().expect("the gateway's store")
    }
}

#[async_trait]
impl SuspensionStore for Holds {
    async fn save(&self, call: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        self.inner().save(call).await
    }
    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.takes.hold().await;
        self.inner().take(id).await
    }
    async fn take_running(
        &self,
        id: &str,
        record: DecidedCall,
        token: &str,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.takes.hold().await;
        let taken = self.inner().take_running(id, record, token).await;
        let lost = (self.lost_takes)
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match (lost, taken) {
            (Ok(_), Ok(Some(call))) => {
                let store = self.inner.clone().expect("the gateway's store");
                let (id, token) = (id.to_owned(), token.to_owned());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    store.save(call).await.expect("put back");
                    store.remove_running(&id, &token).await.expect("removed");
                });
                Err(SuspensionStoreError::Unavailable(
                    "Redis gave no answer in time".to_owned(),
                ))
            }
            (_, taken) => taken,
        }
    }
    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.inner().get(id).await
    }
    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        self.inner().expired_owner(id).await
    }
    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        self.approvals.hold().await;
        self.inner().keep_retry_approval(approval).await
    }
    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        self.outcomes.hold().await;
        self.inner().keep_outcome(outcome).await
    }
    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        self.inner().keep_running(record, token).await
    }
    async fn keep_outcome_over_running(
        &self,
        outcome: DecidedCall,
    ) -> Result<bool, SuspensionStoreError> {
        self.ends.hold().await;
        let failing = (self.failing_ends)
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(SuspensionStoreError::Unavailable(
                "the store did not answer in time".to_owned(),
            ));
        }
        self.inner().keep_outcome_over_running(outcome).await
    }
    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        self.inner().remove_running(id, token).await
    }
    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        self.inner().list(filter, after, limit).await
    }
    async fn claim_expired(
        &self,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        self.inner().claim_expired(limit).await
    }
    async fn use_retry_approval(
        &self,
        key: &str,
    ) -> Result<Option<RetryApproval>, SuspensionStoreError> {
        self.inner().use_retry_approval(key).await
    }
    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        self.inner().outcome(id).await
    }
}

/// A gateway whose `sleep` waits for approval, on the in-memory store, with its calls and
/// outcomes kept through a [`Holds`], which holds nothing until the test says.
async fn gateway() -> (Arc<Gateway>, Arc<Holds>) {
    let yaml = format!(
        "tools:\n  builtin: [sleep]\nusers:\n  - {{id: bob, key_sha256: \"{}\"}}\npolicies:\n  approval:\n    tools: [sleep]\n",
        hash_key("tg_bob")
    );
    let config = crate::config::parse(&yaml).expect("the configuration");
    let mut shared = SharedState::new(&config).await.expect("the state");
    let held = Arc::new(Holds {
        inner: Some(shared.suspensions.store()),
        ..Holds::default()
    });
    shared.suspensions = crate::state::Suspensions::Wrapped(held.clone());
    let (keys, extensions) = (KeyCache::default(), Extensions::default());
    let on = BuildOn {
        shared: &shared,
        keys: &keys,
        extensions: &extensions,
    };
    let gateway = Gateway::build(config, &on).await.expect("the gateway");
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
    running: Option<RunningRecord>,
) -> Resumption {
    Resumption {
        told: DecisionSummary::of(&decision, &by.user),
        decision,
        options,
        running,
        stop: tokio_util::sync::CancellationToken::new(),
    }
}

/// What `resume` carries out for an approval by `by`, keeping its running record.
fn approval(
    by: &Caller,
    id: &str,
    saved: &SuspendedInvocation,
    options: ResumeOptions,
) -> Resumption {
    let running = running_record_of(by, id, saved, "approve");
    resumption(by, ResumeDecision::Approve, options, Some(running))
}

/// The outcome kept for the call `id`, running record or not.
async fn kept(gateway: &Gateway, id: &str) -> DecidedCall {
    let kept = gateway.suspensions.outcome(id).await.expect("the store");
    kept.expect("something kept")
}

#[tokio::test]
async fn a_losing_approvers_running_record_never_lands_over_the_rejection_that_won() {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let (alice, carol) = (approver(&gateway, "alice"), approver(&gateway, "carol"));
    held.takes.held.store(1, Ordering::SeqCst);

    // carol approves: her take, with her running record, is on its way to the store...
    let approving = tokio::spawn({
        let (saved, id) = (saved.clone(), id.clone());
        async move {
            let approve = approval(&carol, &id, &saved, ResumeOptions::new());
            decide(&carol, &id, &saved, approve, &Drain::new()).await
        }
    });
    held.takes.arrived.notified().await;
    // ...when alice's rejection takes the call and keeps its outcome.
    let reason = "not today".to_owned();
    let reject = ResumeDecision::Reject { reason };
    let rejected = resumption(&alice, reject, ResumeOptions::new(), None);
    let rejected = decide(&alice, &id, &saved, rejected, &Drain::new()).await;
    let rejected = rejected.unwrap_or_else(|e| panic!("alice's rejection: {}", e.code()));
    assert!(matches!(rejected.status, ToolStatus::Error));
    held.takes.release();
    let lost = approving.await.expect("carol's decision ends");

    let lost = lost.expect_err("carol found the call taken");
    assert_eq!(lost.status(), StatusCode::NOT_FOUND);
    let kept = kept(&gateway, &id).await;
    assert_eq!(kept.result["status"], "error", "{}", kept.result);
    assert_eq!(kept.result["error"]["code"], "rejected", "{}", kept.result);
    assert_eq!(kept.suspended_at, Some(saved.suspended_at));
}

#[tokio::test]
async fn while_the_winners_call_runs_its_caller_reads_the_winner_not_the_approver_who_lost() {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let (alice, carol) = (approver(&gateway, "alice"), approver(&gateway, "carol"));
    held.takes.held.store(1, Ordering::SeqCst);
    held.ends.held.store(1, Ordering::SeqCst);

    // carol approves first, but her take waits on its way to the store...
    let losing = tokio::spawn({
        let (saved, id) = (saved.clone(), id.clone());
        async move {
            let approve = approval(&carol, &id, &saved, ResumeOptions::new());
            decide(&carol, &id, &saved, approve, &Drain::new()).await
        }
    });
    held.takes.arrived.notified().await;
    // ...while alice approves with a shorter deadline, takes the call and runs it.
    let winning = tokio::spawn({
        let (saved, id) = (saved.clone(), id.clone());
        let alice = alice.clone();
        async move {
            let options = ResumeOptions::new();
            let approve = resumption(
                &alice,
                ResumeDecision::Approve,
                options,
                Some(RunningRecord {
                    record: running_record(
                        &id,
                        &saved.user,
                        "sleep",
                        "approve",
                        "alice",
                        SystemTime::now(),
                        Duration::from_secs(7),
                    ),
                    token: decision_token(),
                }),
            );
            decide(&alice, &id, &saved, approve, &Drain::new()).await
        }
    });
    // Her call ran; its end waits on its way to the store: the caller reads the record.
    held.ends.arrived.notified().await;
    let running = kept(&gateway, &id).await;
    held.ends.release();
    held.takes.release();
    let won = winning.await.expect("alice's decision ends");
    let lost = losing.await.expect("carol's decision ends");

    assert!(is_running_record(&running.result), "{}", running.result);
    assert_eq!(running.result["decided_by"], "alice", "{}", running.result);
    let since = running.result["running_since"].as_str().expect("since");
    let deadline = running.result["deadline"].as_str().expect("a deadline");
    let since = humantime::parse_rfc3339(since).expect("a time");
    let deadline = humantime::parse_rfc3339(deadline).expect("a time");
    assert_eq!(
        deadline.duration_since(since).ok(),
        Some(Duration::from_secs(7)),
        "alice's deadline"
    );
    assert!(won.is_ok(), "alice's call ran");
    assert_eq!(
        lost.expect_err("carol lost").status(),
        StatusCode::NOT_FOUND
    );
    let ended = kept(&gateway, &id).await;
    assert_eq!(ended.result["status"], "success", "{}", ended.result);
}

#[tokio::test]
async fn an_approval_that_fails_before_the_take_keeps_no_running_record_and_leaves_anothers() {
    let (gateway, _held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let carol = approver(&gateway, "carol");
    // Resumed as someone else than the call's maker: refused before anything is taken.
    let as_mallory = ResumeOptions::new().user(User::new("mallory"));

    let approve = approval(&carol, &id, &saved, as_mallory.clone());
    let refused = decide(&carol, &id, &saved, approve, &Drain::new()).await;

    assert!(refused.is_err(), "the approval failed");
    assert!(still_waits(&carol, &id).await, "the call still waits");
    assert_eq!(
        gateway.suspensions.outcome(&id).await,
        Ok(None),
        "no record"
    );

    // A record another decision left behind is not this one's to remove.
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
    let approve = approval(&carol, &id, &saved, as_mallory);
    assert!(
        decide(&carol, &id, &saved, approve, &Drain::new())
            .await
            .is_err()
    );
    let kept = kept(&gateway, &id).await;
    assert_eq!(kept.result["decided_by"], "alice", "{}", kept.result);
}

#[tokio::test]
async fn a_decision_that_panics_after_its_take_leaves_a_failed_outcome_not_its_running_record() {
    let (gateway, _held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let carol = approver(&gateway, "carol");
    let running = running_record_of(&carol, &id, &saved, "approve");
    let if_it_panics = end_abandoned(&carol, &Drain::new(), &id, &saved, Some(&running));
    let panicking = {
        let (gateway, id) = (gateway.clone(), id.clone());
        async move {
            let store = &gateway.suspensions;
            let taken = store
                .take_running(&id, running.record, &running.token)
                .await;
            assert!(taken.expect("the store").is_some(), "carol took the call");
            panic!("a bug between the take and the end")
        }
    };

    let wait = Duration::from_secs(60);
    let told_running = StatusCode::ACCEPTED.into_response();
    let answer = settle(
        &Drain::new(),
        &id,
        wait,
        told_running,
        panicking,
        if_it_panics,
    )
    .await;

    assert_eq!(answer.unwrap_err().code(), "internal");
    let kept = kept(&gateway, &id).await;
    assert!(!is_running_record(&kept.result), "{}", kept.result);
    assert_eq!(kept.result["error"]["code"], "internal", "{}", kept.result);
    assert!(!still_waits(&carol, &id).await);
}

#[tokio::test]
async fn a_withdrawal_while_a_call_is_approved_for_a_retry_stays_its_outcome() {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let carol = approver(&gateway, "carol");
    held.approvals.held.store(1, Ordering::SeqCst);

    // carol approves for a retry: the call is taken, and her approval is on its way...
    let approving = tokio::spawn({
        let (saved, id) = (saved.clone(), id.clone());
        async move {
            let running = running_record_of(&carol, &id, &saved, "approve_retry");
            approve_retry(&carol, &Drain::new(), &id, &saved, Some(running)).await
        }
    });
    held.approvals.arrived.notified().await;
    // ...when bob withdraws it, over its running record, as MCP `tasks/cancel` does.
    let withdrawn = DecidedCall::new(
        &id,
        &saved.user,
        json!({"status": "error", "error": {"code": "withdrawn"}}),
    );
    let store = &gateway.suspensions;
    assert_eq!(store.keep_outcome_over_running(withdrawn).await, Ok(true));
    held.approvals.release();
    let approved = approving.await.expect("carol's decision ends");

    assert!(approved.is_ok(), "the approval for a retry was kept");
    let kept = kept(&gateway, &id).await;
    assert_eq!(kept.result["error"]["code"], "withdrawn", "{}", kept.result);
}

#[tokio::test]
async fn a_rejected_calls_caller_reads_the_rejection_from_its_take_on_never_an_unknown_call() {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let alice = approver(&gateway, "alice");
    let bob = Caller {
        user: Arc::new(User::new("bob")),
        token: None,
        gateway: Arc::clone(&gateway),
    };
    held.outcomes.held.store(1, Ordering::SeqCst);

    // alice rejects: her take is done, and the rejection's outcome is on its way...
    let rejecting = tokio::spawn({
        let (saved, id) = (saved.clone(), id.clone());
        async move {
            let reject = ResumeDecision::Reject {
                reason: "not today".to_owned(),
            };
            let rejected = resumption(&alice, reject, ResumeOptions::new(), None);
            decide(&alice, &id, &saved, rejected, &Drain::new()).await
        }
    });
    held.outcomes.arrived.notified().await;
    // ...when bob reads his call, over HTTP and with the outcome tool.
    let shown = show(Extension(bob), Path(id.clone())).await;
    let options = InvokeOptions::new().user(User::new("bob"));
    let asked = json!({"id": id});
    let outcome_tool = crate::outcomes::OUTCOME_TOOL;
    let told = gateway
        .pipeline()
        .invoke(outcome_tool, asked, options)
        .await;
    held.outcomes.release();
    let rejected = rejecting.await.expect("alice's decision ends");

    let Json(shown) = shown.unwrap_or_else(|e| panic!("bob was told {}", e.code()));
    assert_eq!(shown["status"], "decided", "{shown}");
    assert_eq!(shown["result"]["error"]["code"], "rejected", "{shown}");
    assert!(
        shown["result"]["error"]["message"]
            .as_str()
            .is_some_and(|said| said.contains("not today")),
        "{shown}"
    );
    let told = told.unwrap_or_else(|e| panic!("the outcome tool told bob {}", e.code()));
    assert_eq!(told["result"]["error"]["code"], "rejected", "{told}");
    assert!(rejected.is_ok(), "alice's rejection was recorded");
    let kept = kept(&gateway, &id).await;
    assert_eq!(kept.result["error"]["code"], "rejected", "{}", kept.result);
}

/// carol approves bob's call, which runs; as it ends, the store fails to keep its end
/// `failures` times in a row. What carol is answered, and the drain that counts the tries.
async fn approved_as_the_store_fails(
    failures: usize,
) -> (Arc<Gateway>, String, Drain, Result<ToolResult, ApiError>) {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let carol = approver(&gateway, "carol");
    held.failing_ends.store(failures, Ordering::SeqCst);
    let drain = Drain::new();
    let approve = approval(&carol, &id, &saved, ResumeOptions::new());
    let approved = decide(&carol, &id, &saved, approve, &drain).await;
    (gateway, id, drain, approved)
}

#[tokio::test(start_paused = true)]
async fn an_end_the_store_failed_to_keep_is_kept_when_tried_again_without_holding_the_answer() {
    let (gateway, id, drain, approved) = approved_as_the_store_fails(3).await;

    let approved = approved.unwrap_or_else(|e| panic!("carol was told {}", e.code()));
    assert_eq!(approved.status.as_str(), "success");
    let running = kept(&gateway, &id).await;
    assert!(is_running_record(&running.result), "{}", running.result);
    assert_eq!(
        drain.calls_in_flight(),
        1,
        "the tries are counted by the drain"
    );

    tokio::time::sleep(Duration::from_secs(5)).await;
    let ended = kept(&gateway, &id).await;
    assert_eq!(ended.result["status"], "success", "{}", ended.result);
    assert_eq!(drain.calls_in_flight(), 0, "the tries ended");
}

#[tokio::test(start_paused = true)]
async fn an_end_tried_again_never_lands_over_the_callers_withdrawal_made_meanwhile() {
    let (gateway, id, drain, approved) = approved_as_the_store_fails(1).await;
    assert!(approved.is_ok(), "carol's call ran");
    assert_eq!(drain.calls_in_flight(), 1, "the end is tried again");

    // bob withdraws the call before the end is tried again, as MCP `tasks/cancel` does.
    let bob = User::new("bob");
    let withdrawn = json!({"status": "error", "error": {"code": "withdrawn"}});
    let withdrawn = DecidedCall::new(&id, &bob, withdrawn);
    let store = &gateway.suspensions;
    assert_eq!(store.keep_outcome_over_running(withdrawn).await, Ok(true));
    tokio::time::sleep(Duration::from_secs(5)).await;

    assert_eq!(drain.calls_in_flight(), 0, "the end was tried again");
    let kept = kept(&gateway, &id).await;
    assert_eq!(kept.result["error"]["code"], "withdrawn", "{}", kept.result);
}

#[tokio::test(start_paused = true)]
async fn tries_of_an_end_stop_within_a_bound_or_at_the_end_of_the_shutdown_grace() {
    let (_gateway, _id, drain, approved) = approved_as_the_store_fails(usize::MAX).await;
    assert!(approved.is_ok(), "carol's call ran");
    assert_eq!(drain.calls_in_flight(), 1, "the end is tried again");
    drain.start();
    drain.cut();
    tokio::time::timeout(Duration::from_secs(1), drain.calls_finished())
        .await
        .expect("the cut stops the tries");

    let (_gateway, _id, drain, _) = approved_as_the_store_fails(usize::MAX).await;
    assert_eq!(drain.calls_in_flight(), 1, "the end is tried again");
    tokio::time::sleep(KEPT_AGAIN_WITHIN - Duration::from_secs(1)).await;
    assert_eq!(drain.calls_in_flight(), 1, "still tried");
    drain.start();
    tokio::time::timeout(Duration::from_secs(2), drain.calls_finished())
        .await
        .expect("the tries are given up once the bound is reached");
}

/// An approval whose take the store lost (the Redis store undoes such a take a moment
/// later): nothing was decided — the approver is told so, and nothing is kept as the
/// call's outcome, recorded as a decision or told to webhooks — and once the take is
/// undone the call waits, and the next approval runs it once.
#[tokio::test(start_paused = true)]
async fn an_approval_whose_take_the_store_lost_decides_nothing_and_the_call_waits_again() {
    let (gateway, held) = gateway().await;
    let saved = waiting_call(&gateway).await;
    let id = saved.id.clone();
    let carol = approver(&gateway, "carol");
    held.lost_takes.store(1, Ordering::SeqCst);

    let approve = approval(&carol, &id, &saved, ResumeOptions::new());
    let refused = decide(&carol, &id, &saved, approve, &Drain::new()).await;
    let refused = refused.expect_err("the take failed");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let told = refused.body().message.clone();
    assert!(told.contains("nothing was decided"), "{told}");

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        gateway.suspensions.outcome(&id).await,
        Ok(None),
        "no outcome kept"
    );
    let decisions = gateway
        .history
        .newest(crate::console::history::Viewer::Everyone, 10)
        .await
        .expect("the history");
    assert!(decisions.is_empty(), "a decision recorded: {decisions:?}");
    assert!(still_waits(&carol, &id).await, "the call waits again");

    let approve = approval(&carol, &id, &saved, ResumeOptions::new());
    let approved = decide(&carol, &id, &saved, approve, &Drain::new()).await;
    let approved = approved.unwrap_or_else(|e| panic!("carol was told {}", e.code()));
    assert_eq!(approved.status.as_str(), "success");
    let decisions = gateway
        .history
        .newest(crate::console::history::Viewer::Everyone, 10)
        .await
        .expect("the history");
    assert_eq!(decisions.len(), 1, "{decisions:?}");
}
