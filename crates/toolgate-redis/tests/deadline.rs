//! Each backend can have its own Redis deadline: a policy that can afford to wait gets its
//! answer from a slow Redis where one on the default deadline decides without it.

mod common;

use std::time::Duration;

use toolgate_hooks::quota::{QuotaBackend, QuotaDecision, QuotaRequest, Rate};

use common::{Proxy, config, connect, namespace, redis_or_skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_with_a_longer_deadline_waits_for_a_slow_redis_where_the_default_gives_up() {
    let Some(url) = redis_or_skip(
        "a_backend_with_a_longer_deadline_waits_for_a_slow_redis_where_the_default_gives_up",
    )
    .await
    else {
        return;
    };
    let prefix = namespace();
    let proxy = Proxy::start(&url).await;
    let state = connect(&proxy.url(), config(&prefix)).await;
    let hasty = state.quota();
    let patient = state.quota().deadline(Duration::from_secs(5));
    assert_eq!(hasty.call_deadline(), Duration::from_millis(100));
    assert_eq!(patient.call_deadline(), Duration::from_secs(5));
    let rate = Rate::per_minute(60).unwrap();

    // Each reply now takes 300 ms each way through the proxy: past the default 100 ms.
    proxy.slow(Duration::from_millis(300));
    let refused = hasty.acquire(QuotaRequest { key: "k", rate }).await;
    assert!(
        refused.is_err(),
        "the default deadline gives up on a slow Redis and fails closed: {refused:?}"
    );
    assert_eq!(hasty.unavailable_decisions().fail_closed, 1);

    let granted = patient
        .acquire(QuotaRequest { key: "k", rate })
        .await
        .expect("a 5 s deadline waits for Redis");
    assert!(
        matches!(granted, QuotaDecision::Granted(_)),
        "the first unit of a fresh budget is granted"
    );
    assert_eq!(
        patient.unavailable_decisions().total(),
        0,
        "Redis answered: nothing was decided without it"
    );
}
