use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline, ToolError, tool_fn};
use toolgate_hooks::OnBackendError;
use toolgate_hooks::partition::Partition;
use toolgate_hooks::quota::{
    InMemoryQuota, Quota, QuotaBackend, QuotaBackendError, QuotaDecision, QuotaLease, QuotaRequest,
    Rate, RateError,
};
use toolgate_hooks::retry::{Retry, RetryBudget};

use crate::support::{IDEMPOTENT, as_caller, as_user, counting_tool, ok_tool, runs};

fn limited(rate: Rate, partition: Partition, backend: &InMemoryQuota) -> Pipeline {
    let (builder, _) = ok_tool(Pipeline::builder(), "a");
    let (builder, _) = ok_tool(builder, "b");
    builder
        .hook(
            Quota::builder(rate)
                .partition(partition)
                .backend(Arc::new(backend.clone()))
                .build(),
        )
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn over_the_limit_is_a_retry_after_with_the_exact_wait() {
    let backend = InMemoryQuota::default();
    let pipeline = limited(Rate::per_minute(2).unwrap(), Partition::User, &backend);
    for _ in 0..2 {
        pipeline
            .invoke("a", json!(null), as_user("ann"))
            .await
            .unwrap();
    }
    let err = pipeline
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("rate_limited", 429));
    assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(30)));
    assert!(err.to_string().ends_with("retry after 30000 ms"), "{err}");

    tokio::time::advance(Duration::from_secs(30) - Duration::from_millis(1)).await;
    assert_eq!(
        pipeline
            .invoke("a", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .retry_after_delay(),
        Some(Duration::from_millis(1))
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(
        pipeline
            .invoke("a", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_changed_by_a_reload_keeps_what_each_caller_spent() {
    // The same backend serves the pipeline of each configuration, as the gateway's does.
    let backend = InMemoryQuota::default();
    let before = limited(Rate::per_minute(3).unwrap(), Partition::User, &backend);
    for _ in 0..3 {
        before
            .invoke("a", json!(null), as_user("ann"))
            .await
            .unwrap();
    }
    // The operator lowers the limit in the middle of ann's flood.
    let after = limited(Rate::per_minute(2).unwrap(), Partition::User, &backend);
    let err = after
        .invoke("a", json!(null), as_user("ann"))
        .await
        .expect_err("what ann spent at the old rate still counts at the new one");
    assert_eq!((err.code(), err.status()), ("rate_limited", 429));
    // Someone who spent nothing has the new rate's whole budget.
    for _ in 0..2 {
        after
            .invoke("a", json!(null), as_user("bob"))
            .await
            .unwrap();
    }
    // Raising it back counts what was spent meanwhile too.
    tokio::time::advance(err.retry_after_delay().unwrap()).await;
    after
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap();
    let again = limited(Rate::per_minute(3).unwrap(), Partition::User, &backend);
    assert_eq!(
        again
            .invoke("a", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "rate_limited"
    );
    assert_eq!(
        backend.key_count(),
        2,
        "one state per key, whatever the rate"
    );
}

#[tokio::test(start_paused = true)]
async fn a_flood_from_ann_of_globex_does_not_spend_the_rate_limit_of_ann_of_acme() {
    let backend = InMemoryQuota::default();
    // The default partition: per caller and tool.
    let pipeline = limited(Rate::per_hour(2).unwrap(), Partition::default(), &backend);
    for _ in 0..2 {
        pipeline
            .invoke("a", json!(null), as_caller("ann", "globex"))
            .await
            .unwrap();
    }
    for _ in 0..10 {
        let flood = pipeline.invoke("a", json!(null), as_caller("ann", "globex"));
        assert_eq!(flood.await.unwrap_err().code(), "rate_limited");
    }
    for _ in 0..2 {
        let acme = pipeline.invoke("a", json!(null), as_caller("ann", "acme"));
        assert!(acme.await.is_ok(), "ann of acme has her own budget");
    }
    assert!(
        pipeline
            .invoke("a", json!(null), as_user("ann"))
            .await
            .is_ok(),
        "so does the ann without a tenant"
    );

    let per_user = limited(
        Rate::per_hour(1).unwrap(),
        Partition::User,
        &InMemoryQuota::default(),
    );
    per_user
        .invoke("a", json!(null), as_caller("ann", "globex"))
        .await
        .unwrap();
    assert!(
        per_user
            .invoke("b", json!(null), as_caller("ann", "acme"))
            .await
            .is_ok(),
        "per user: ann of acme has her own budget"
    );
}

/// A quota backend that grants every call and keeps the keys it was asked for.
#[derive(Clone, Default)]
struct KeysAsked(Arc<Mutex<Vec<String>>>);

#[toolgate_hooks::async_trait]
impl QuotaBackend for KeysAsked {
    async fn acquire(&self, request: QuotaRequest<'_>) -> Result<QuotaDecision, QuotaBackendError> {
        self.0.lock().unwrap().push(request.key.to_owned());
        Ok(QuotaDecision::Granted(QuotaLease::settled()))
    }
}

impl KeysAsked {
    /// The keys `pipeline` asks for when `options`' caller calls tool `a`, per user and
    /// per user and tool.
    async fn of(options: impl Fn() -> InvokeOptions) -> Vec<String> {
        let keys = KeysAsked::default();
        let (builder, _) = ok_tool(Pipeline::builder(), "a");
        let pipeline = builder
            .hook(
                Quota::builder(Rate::per_hour(1).unwrap())
                    .name("per-user")
                    .partition(Partition::User)
                    .backend(Arc::new(keys.clone()))
                    .build(),
            )
            .hook(
                Quota::builder(Rate::per_hour(1).unwrap())
                    .backend(Arc::new(keys.clone()))
                    .build(),
            )
            .build()
            .unwrap();
        pipeline.invoke("a", json!(null), options()).await.unwrap();
        keys.0.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn the_budget_keys_of_a_caller_without_a_tenant_are_what_they_were() {
    assert_eq!(
        KeysAsked::of(|| as_user("ann")).await,
        ["per-user\u{1f}u\u{1f}ann", "quota\u{1f}ut\u{1f}a\u{1f}ann"]
    );
}

#[tokio::test]
async fn the_budget_keys_of_a_caller_in_a_tenant_name_the_tenant() {
    assert_eq!(
        KeysAsked::of(|| as_caller("ann", "acme")).await,
        [
            "per-user\u{1f}u\u{1f}\u{0}4:acme\u{0}ann",
            "quota\u{1f}ut\u{1f}a\u{1f}\u{0}4:acme\u{0}ann"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn burst_caps_how_many_calls_a_rested_key_makes_at_once() {
    let backend = InMemoryQuota::default();
    let rate = Rate::per_second(10).unwrap().with_burst(3).unwrap();
    let pipeline = limited(rate, Partition::User, &backend);
    for _ in 0..3 {
        pipeline
            .invoke("a", json!(null), as_user("ann"))
            .await
            .unwrap();
    }
    let err = pipeline
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.retry_after_delay(), Some(Duration::from_millis(100)));
}

#[tokio::test(start_paused = true)]
async fn each_partition_key_has_its_own_budget() {
    let backend = InMemoryQuota::default();
    let per_user = limited(Rate::per_hour(1).unwrap(), Partition::User, &backend);
    per_user
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap();
    assert!(
        per_user
            .invoke("b", json!(null), as_user("bob"))
            .await
            .is_ok(),
        "bob has his own budget"
    );
    assert_eq!(
        per_user
            .invoke("b", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "rate_limited",
        "per user: every tool"
    );

    let per_tool = limited(
        Rate::per_hour(1).unwrap(),
        Partition::Tool,
        &InMemoryQuota::default(),
    );
    per_tool
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap();
    assert_eq!(
        per_tool
            .invoke("a", json!(null), as_user("bob"))
            .await
            .unwrap_err()
            .code(),
        "rate_limited",
        "per tool: every user"
    );
    assert!(
        per_tool
            .invoke("b", json!(null), as_user("bob"))
            .await
            .is_ok()
    );

    let per_pair = limited(
        Rate::per_hour(1).unwrap(),
        Partition::UserTool,
        &InMemoryQuota::default(),
    );
    per_pair
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap();
    assert!(
        per_pair
            .invoke("b", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    assert!(
        per_pair
            .invoke("a", json!(null), as_user("bob"))
            .await
            .is_ok()
    );
    assert!(
        per_pair
            .invoke("a", json!(null), as_user("ann"))
            .await
            .is_err()
    );

    let per_tenant = Partition::custom(|ctx| ctx.user().tenant.clone().unwrap_or_default());
    let by_tenant = limited(
        Rate::per_hour(1).unwrap(),
        per_tenant,
        &InMemoryQuota::default(),
    );
    let acme =
        |id: &str| InvokeOptions::new().user(toolgate_core::User::new(id).with_tenant("acme"));
    by_tenant
        .invoke("a", json!(null), acme("ann"))
        .await
        .unwrap();
    assert!(
        by_tenant
            .invoke("b", json!(null), acme("bob"))
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn one_invocation_takes_one_unit_however_many_attempts() {
    let backend = InMemoryQuota::default();
    let (builder, runs_) = counting_tool(Pipeline::builder(), "flaky", IDEMPOTENT, |run| {
        if run < 2 {
            Err(ToolError::transient("hiccup"))
        } else {
            Ok(json!("ok"))
        }
    });
    let pipeline = builder
        .hook(
            Quota::builder(Rate::per_hour(2).unwrap())
                .backend(Arc::new(backend.clone()))
                .build(),
        )
        .hook(
            Retry::builder()
                .max_attempts(3)
                .budget(RetryBudget::unlimited())
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    assert_eq!(
        pipeline
            .invoke("flaky", json!(null), as_user("ann"))
            .await
            .unwrap(),
        json!("ok")
    );
    assert_eq!(runs(&runs_), 3);
    assert!(
        pipeline
            .invoke("flaky", json!(null), as_user("ann"))
            .await
            .is_ok(),
        "one unit left"
    );
    assert_eq!(
        pipeline
            .invoke("flaky", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "rate_limited"
    );
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_held_during_the_call_and_back_after_success_error_and_drop() {
    let backend = InMemoryQuota::default();
    let seen = backend.clone();
    let pipeline = Pipeline::builder()
        .tool(tool_fn("peek", "Reports units in use.", move |_: ()| {
            let in_use = seen.in_use();
            async move { Ok::<_, ToolError>(in_use) }
        }))
        .tool(tool_fn("fail", "Fails.", |_: ()| async {
            Err::<(), _>(ToolError::execution("no"))
        }))
        .tool(tool_fn("hang", "Never ends.", |_: ()| {
            std::future::pending::<Result<(), ToolError>>()
        }))
        .hook(
            Quota::builder(Rate::per_second(1000).unwrap())
                .backend(Arc::new(backend.clone()))
                .build(),
        )
        .build()
        .unwrap();

    assert_eq!(
        pipeline
            .invoke("peek", json!(null), as_user("ann"))
            .await
            .unwrap(),
        json!(1)
    );
    assert_eq!(backend.in_use(), 0);
    assert!(
        pipeline
            .invoke("fail", json!(null), as_user("ann"))
            .await
            .is_err()
    );
    assert_eq!(backend.in_use(), 0);
    let dropped = tokio::time::timeout(
        Duration::from_millis(10),
        pipeline.invoke("hang", json!(null), as_user("ann")),
    )
    .await;
    assert!(dropped.is_err());
    tokio::task::yield_now().await;
    assert_eq!(backend.in_use(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_distinct_keys_stays_within_the_cap_and_idle_keys_are_swept() {
    let backend = InMemoryQuota::builder()
        .max_keys(100)
        .sweep_interval(Duration::from_secs(10))
        .build();
    let pipeline = limited(Rate::per_second(1).unwrap(), Partition::User, &backend);
    let mut refused = 0;
    for i in 0..1000 {
        if let Err(err) = pipeline
            .invoke("a", json!(null), as_user(&format!("u{i}")))
            .await
        {
            assert_eq!((err.code(), err.status()), ("quota_unavailable", 503));
            refused += 1;
        }
    }
    assert_eq!(backend.key_count(), 100);
    assert_eq!(refused, 900);
    // Once their budget has come back, old keys are swept to make room.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(
        pipeline
            .invoke("a", json!(null), as_user("newcomer"))
            .await
            .is_ok()
    );
    assert!(backend.key_count() <= 100);
    backend.sweep();
    tokio::time::advance(Duration::from_secs(2)).await;
    backend.sweep();
    assert_eq!(backend.key_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_backend_lets_calls_through_when_fail_open() {
    let backend = InMemoryQuota::builder().max_keys(1).build();
    let (builder, _) = ok_tool(Pipeline::builder(), "a");
    let pipeline = builder
        .hook(
            Quota::builder(Rate::per_hour(1).unwrap())
                .partition(Partition::User)
                .backend(Arc::new(backend.clone()))
                .on_backend_error(OnBackendError::FailOpen)
                .build(),
        )
        .build()
        .unwrap();
    pipeline
        .invoke("a", json!(null), as_user("ann"))
        .await
        .unwrap();
    assert!(
        pipeline
            .invoke("a", json!(null), as_user("bob"))
            .await
            .is_ok()
    );
}

#[test]
fn rates_that_cannot_be_enforced_are_typed_errors() {
    assert_eq!(Rate::per_second(0), Err(RateError::Zero));
    assert!(matches!(
        Rate::new(10, Duration::from_nanos(5)),
        Err(RateError::TooFine { .. })
    ));
    assert_eq!(
        Rate::per_second(1).unwrap().with_burst(0),
        Err(RateError::Zero)
    );
}
