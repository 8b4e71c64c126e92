//! Claiming the expiries of calls waiting on Redis ([`SuspensionStore::claim_expired`]):
//! each expired call is given to one replica only — also when the replica that parked it is
//! gone — without its contents, never a call decided before it expired, a page at a time,
//! and every key it leaves expires.

mod common;

use std::time::{Duration, SystemTime};

use futures::future::join_all;
use serde_json::{Map, json};
use toolgate_core::suspension::{SuspendedInvocation, SuspensionLimits, SuspensionStore};
use toolgate_core::{Stage, User};
use toolgate_redis::RedisSuspensions;

use common::{assert_every_key_expires, namespace, redis_or_skip};

/// A call of `ann` waiting for approval until `expires_in` from now.
fn call(id: &str, expires_in: Duration) -> SuspendedInvocation {
    SuspendedInvocation {
        id: id.into(),
        tool: "launch-rocket".into(),
        tool_version: "1".into(),
        session_id: None,
        request_id: format!("req-{id}"),
        user: User::new("ann").with_tenant("acme"),
        input: json!({"plan": "liftoff at dawn"}),
        output: None,
        metadata: Map::new(),
        stage: Stage::WillRedactInput,
        reason: "needs approval".into(),
        payload: json!({"ask": "launch?"}),
        suspended_at: SystemTime::now(),
        expires_at: Some(SystemTime::now() + expires_in),
        binding: None,
    }
}

/// A replica's store under `prefix`, calls waiting at most a minute, at most `total`.
async fn replica(url: &str, prefix: &str, total: usize) -> RedisSuspensions {
    let limits = SuspensionLimits {
        max_per_user: total,
        max_total: total,
        expire_after: Duration::from_secs(60),
        ..SuspensionLimits::default()
    };
    common::replica(url, prefix)
        .await
        .suspensions(limits)
        .with_encryption_key(b"8f3c1e0a9b7d5f2e4c6a8b0d1f3e5a7c9b2d4f6e8a0c1e3b5d7f9a2c4e6b8d0f")
        .unwrap()
}

const SOON: Duration = Duration::from_millis(300);

#[tokio::test]
async fn an_expired_call_is_given_to_one_replica_only_even_after_the_one_that_parked_it_is_gone() {
    let test =
        "an_expired_call_is_given_to_one_replica_only_even_after_the_one_that_parked_it_is_gone";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let parked_on = replica(&url, &prefix, 100).await;
    parked_on.save(call("forgotten", SOON)).await.unwrap();
    parked_on.save(call("decided", SOON)).await.unwrap();
    assert!(
        parked_on.claim_expired(10).await.unwrap().is_empty(),
        "none expired yet"
    );
    assert!(parked_on.take("decided").await.unwrap().is_some());
    drop(parked_on);
    tokio::time::sleep(SOON + Duration::from_millis(100)).await;

    // Eight replicas that never saw the call start claim at once.
    let replicas = join_all((0..8).map(|_| replica(&url, &prefix, 100))).await;
    let claims = join_all(replicas.iter().map(|r| r.claim_expired(10))).await;

    let claimed: Vec<SuspendedInvocation> = claims.into_iter().flat_map(Result::unwrap).collect();
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let told = &claimed[0];
    assert_eq!(
        (told.id.as_str(), told.tool.as_str(), &told.user),
        (
            "forgotten",
            "launch-rocket",
            &User::new("ann").with_tenant("acme")
        )
    );
    assert_eq!((&told.input, &told.payload), (&json!(null), &json!(null)));
    assert!(told.expires_at.is_some_and(|at| at <= SystemTime::now()));
    // The claim removed it from the waiting calls and remembered it as expired, as a
    // look-up does: with nobody looking it up before a save sweeps it, it still answers
    // that it expired, not that it is unknown.
    let base = replicas[0].key_base();
    let mut redis = common::inspect(&url).await;
    let waits: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{base}:calls"))
        .arg("forgotten")
        .query_async(&mut redis)
        .await
        .unwrap();
    let remembered: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{base}:expired"))
        .arg("forgotten")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!((waits.is_some(), remembered.is_some()), (false, true));
    assert!(matches!(
        replicas[0].get("forgotten").await,
        Err(toolgate_core::suspension::SuspensionStoreError::Expired { .. })
    ));
    assert_eq!(
        replicas[0].expired_owner("forgotten").await.unwrap(),
        Some(User::new("ann").with_tenant("acme"))
    );
    assert!(replicas[1].claim_expired(10).await.unwrap().is_empty());
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test]
async fn a_flood_of_expired_calls_is_claimed_a_page_at_a_time_and_the_untold_are_bounded() {
    let test = "a_flood_of_expired_calls_is_claimed_a_page_at_a_time_and_the_untold_are_bounded";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, 20).await;
    // Two floods of 20 calls, each as many as may wait, both expired untold: only the
    // latest `max_total` (20) expiries are kept to tell.
    for flood in ["a", "b"] {
        for i in 0..20 {
            store
                .save(call(&format!("{flood}{i:02}"), SOON))
                .await
                .unwrap();
        }
        tokio::time::sleep(SOON + Duration::from_millis(100)).await;
    }
    store
        .save(call("waits", Duration::from_secs(60)))
        .await
        .unwrap();

    let mut claimed = Vec::new();
    loop {
        let page = store.claim_expired(8).await.unwrap();
        assert!(page.len() <= 8, "{}", page.len());
        if page.is_empty() {
            break;
        }
        claimed.extend(page.into_iter().map(|c| c.id));
    }
    let latest: Vec<String> = (0..20).map(|i| format!("b{i:02}")).collect();
    claimed.sort();
    assert_eq!(
        claimed, latest,
        "the latest flood, each once; the call waiting not"
    );
    assert_every_key_expires(&url, &prefix).await;
}

/// Runs `undo.lua` as the store does for a save or take (`what`) of `id` whose answer did
/// not come, marked with `token`.
async fn undo(url: &str, store: &RedisSuspensions, id: &str, what: &str, token: &str) -> String {
    let source = [
        include_str!("../src/server_clock.lua"),
        include_str!("../src/suspensions/common.lua"),
        include_str!("../src/suspensions/undo.lua"),
    ]
    .join("\n");
    let base = store.key_base();
    let script = redis::Script::new(&source);
    let mut invocation = script.prepare_invoke();
    invocation
        .key(format!("{base}:calls"))
        .arg(base)
        .arg(id)
        .arg(what)
        .arg(token)
        .arg(10)
        .arg(60_000)
        .arg(600_000);
    invocation
        .invoke_async(&mut common::inspect(url).await)
        .await
        .unwrap()
}

/// The field `field` of the row of the call `id`.
async fn row_field(url: &str, store: &RedisSuspensions, id: &str, field: &str) -> String {
    let row = format!("{}:call:{id}", store.key_base());
    redis::cmd("HGET")
        .arg(row)
        .arg(field)
        .query_async(&mut common::inspect(url).await)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_take_undone_keeps_its_calls_expiry_to_tell_and_a_save_undone_is_never_told() {
    let test = "a_take_undone_keeps_its_calls_expiry_to_tell_and_a_save_undone_is_never_told";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, 10).await;
    let expiry = Duration::from_secs(1);
    store.save(call("taken", expiry)).await.unwrap();
    store.save(call("saved", expiry)).await.unwrap();
    store.save(call("decided", expiry)).await.unwrap();
    assert!(store.take("taken").await.unwrap().is_some());
    assert!(store.take("decided").await.unwrap().is_some());

    // As when their answers did not come in time: the take is undone (the call waits
    // again), and so is the save (its caller was told it failed).
    let take = row_field(&url, &store, "taken", "held_by").await;
    assert_eq!(undo(&url, &store, "taken", "take", &take).await, "undone");
    let save = row_field(&url, &store, "saved", "token").await;
    assert_eq!(undo(&url, &store, "saved", "save", &save).await, "undone");
    assert!(store.get("taken").await.unwrap().is_some());
    tokio::time::sleep(expiry + Duration::from_millis(100)).await;

    let claimed: Vec<String> = store
        .claim_expired(10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        claimed,
        ["taken"],
        "the call decided and the save undone: not told"
    );
    assert_every_key_expires(&url, &prefix).await;
}
