//! The suspension store on Redis: calls parked on one replica and decided on another (store
//! and whole pipelines), the caps exact across replicas under concurrency, expiry, a reload
//! of the bounds, approvals for a retry used once, outcomes, a restart, every key with an
//! expiry, encryption at rest, Redis away, and a Redis Cluster.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use redis::AsyncCommands;
use serde_json::{Map, json};
use toolgate_core::approval::CallBinding;
use toolgate_core::hook::hook_fn;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::suspension::{
    DecidedCall, RetryApproval, SuspendedInvocation, SuspensionFilter, SuspensionLimits,
    SuspensionStore, SuspensionStoreError,
};
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, Stage, ToolError, User};
use toolgate_redis::{RedisConfig, RedisState, RedisSuspensions};

use common::cluster::Cluster;
use common::{
    Proxy, assert_every_key_expires, config, connect, inspect, keys_under, namespace, redis_or_skip,
};

const KEY: &str = "8f3c1e0a9b7d5f2e4c6a8b0d1f3e5a7c9b2d4f6e8a0c1e3b5d7f9a2c4e6b8d0f";
const OTHER_KEY: &str = "0000000000000000000000000000000000000000000000000000000000000001";

/// A call of `user` waiting for approval, with an input that names a secret plan.
fn call(id: &str, user: &str) -> SuspendedInvocation {
    SuspendedInvocation {
        id: id.into(),
        tool: "launch-rocket".into(),
        tool_version: "1".into(),
        session_id: None,
        request_id: format!("req-{id}"),
        user: User::new(user),
        input: json!({"target": "the-moon", "plan": "liftoff at dawn"}),
        output: None,
        metadata: Map::new(),
        stage: Stage::WillRedactInput,
        reason: "needs approval".into(),
        payload: json!({"ask": "launch?"}),
        suspended_at: SystemTime::now(),
        expires_at: None,
        binding: None,
    }
}

/// A call of the caller `user` (an id in a tenant, or in none) waiting for approval.
fn call_by(id: &str, user: &User) -> SuspendedInvocation {
    SuspendedInvocation {
        user: user.clone(),
        ..call(id, &user.id)
    }
}

fn limits(per_user: usize, total: usize, expire_after: Duration) -> SuspensionLimits {
    SuspensionLimits {
        max_per_user: per_user,
        max_total: total,
        expire_after,
        ..SuspensionLimits::default()
    }
}

const HOUR: Duration = Duration::from_secs(3600);

/// Two replicas of one store under a fresh prefix, with the same `limits`; `None` when
/// the test is skipped for want of Redis.
async fn two_replicas(
    test: &str,
    limits: SuspensionLimits,
) -> Option<(RedisSuspensions, RedisSuspensions)> {
    let url = redis_or_skip(test).await?;
    let prefix = namespace();
    Some((
        replica(&url, &prefix, limits).await,
        replica(&url, &prefix, limits).await,
    ))
}

/// `n` operations at once, made by `op` with their index on replica `a` or `b` in turn
/// (two replicas racing): their answers, in index order.
async fn alternately<T, Fut>(
    a: &RedisSuspensions,
    b: &RedisSuspensions,
    n: usize,
    op: impl Fn(usize, RedisSuspensions) -> Fut,
) -> Vec<T>
where
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tasks = (0..n).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(op(i, store))
    });
    join_all(tasks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// A replica's store of its own (see [`common::replica`]).
async fn replica(url: &str, prefix: &str, limits: SuspensionLimits) -> RedisSuspensions {
    common::replica(url, prefix).await.suspensions(limits)
}

fn ids(calls: &[SuspendedInvocation]) -> Vec<&str> {
    calls.iter().map(|call| call.id.as_str()).collect()
}

fn approval(user: &str, n: u64, expires_in: Duration) -> RetryApproval {
    RetryApproval {
        binding: CallBinding {
            user: user.into(),
            tenant: None,
            tool: "launch-rocket".into(),
            definition: "sha256:d".into(),
            input: toolgate_core::approval::digest(&json!({"n": n})),
            generation: String::new(),
        },
        suspension_id: format!("s{n}"),
        decided_by: Some("boss".into()),
        decided_by_tenant: None,
        decided_at: SystemTime::now(),
        expires_at: SystemTime::now() + expires_in,
    }
}

fn decided(id: &str) -> DecidedCall {
    DecidedCall {
        id: id.into(),
        user: "ann".into(),
        // Kept and read back with the rest.
        tenant: Some("acme".into()),
        result: json!({"output": format!("done {id}")}),
        decided_at: SystemTime::now(),
        suspended_at: None,
    }
}

#[tokio::test]
async fn a_call_parked_on_one_replica_is_listed_read_and_taken_on_another() {
    let Some(url) =
        redis_or_skip("a_call_parked_on_one_replica_is_listed_read_and_taken_on_another").await
    else {
        return;
    };
    let prefix = namespace();
    let [a, b, c] = [0; 3].map(|_| replica(&url, &prefix, limits(10, 100, HOUR)));
    let (a, b, c) = (a.await, b.await, c.await);
    let parked = call("susp-1", "ann");

    a.save(parked.clone()).await.unwrap();

    let listed = b
        .list(&SuspensionFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&listed), ["susp-1"]);
    let read = b.get("susp-1").await.unwrap().expect("waits");
    let expires_at = read.expires_at.expect("stamped with its expiry");
    let wait = expires_at.duration_since(SystemTime::now()).unwrap();
    assert!(wait > HOUR - Duration::from_secs(60) && wait <= HOUR + Duration::from_secs(60));
    assert_eq!(
        SuspendedInvocation {
            expires_at: None,
            ..read.clone()
        },
        parked
    );
    assert_eq!(b.take("susp-1").await.unwrap(), Some(read));
    assert_eq!(c.take("susp-1").await.unwrap(), None, "taken once");
    assert_eq!(a.get("susp-1").await.unwrap(), None);
    assert!(
        a.list(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_saves_from_two_replicas_keep_exactly_the_per_user_cap() {
    let Some((a, b)) = two_replicas(
        "concurrent_saves_from_two_replicas_keep_exactly_the_per_user_cap",
        limits(5, 1000, HOUR),
    )
    .await
    else {
        return;
    };

    let answers = alternately(&a, &b, 40, |i, store| async move {
        store.save(call(&format!("m{i:02}"), "mallory")).await
    })
    .await;

    let kept = answers.iter().filter(|answer| answer.is_ok()).count();
    let refused = answers
        .iter()
        .filter(|answer| {
            matches!(answer, Err(SuspensionStoreError::UserFull { user, max: 5, .. }) if user == "mallory")
        })
        .count();
    assert_eq!((kept, refused), (5, 35), "{answers:?}");
    let mallory = SuspensionFilter {
        user: Some("mallory".into()),
        ..SuspensionFilter::default()
    };
    assert_eq!(b.list(&mallory, None, 100).await.unwrap().len(), 5);
    a.save(call("ann-1", "ann"))
        .await
        .expect("other users still park");
}

/// A call of `user` whose input holds `chars` control characters, six bytes each once
/// serialized.
fn large_call(id: &str, user: &str, chars: usize) -> SuspendedInvocation {
    SuspendedInvocation {
        input: json!({ "v": "\u{1}".repeat(chars) }),
        ..call(id, user)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_past_its_bytes_is_refused_on_every_replica_and_others_still_park() {
    let one = toolgate_core::suspension::stored_size(&large_call("m00", "mallory", 10_000));
    let Some((a, b)) = two_replicas(
        "a_caller_past_its_bytes_is_refused_on_every_replica_and_others_still_park",
        SuspensionLimits {
            // Room for three of mallory's calls, not four.
            max_bytes_per_user: 3 * one + one / 2,
            ..limits(100, 1000, HOUR)
        },
    )
    .await
    else {
        return;
    };

    let answers = alternately(&a, &b, 12, |i, store| async move {
        store
            .save(large_call(&format!("m{i:02}"), "mallory", 10_000))
            .await
    })
    .await;

    let kept = answers.iter().filter(|answer| answer.is_ok()).count();
    let refused: Vec<_> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert_eq!(kept, 3, "{answers:?}");
    assert!(
        refused.iter().all(
            |e| matches!(e, SuspensionStoreError::UserBytesFull { user, .. } if user == "mallory")
        ),
        "{refused:?}"
    );
    assert_eq!(
        toolgate_core::ToolError::from(refused[0].clone()).code(),
        "too_many_suspended"
    );
    b.save(large_call("ann-1", "ann", 10_000))
        .await
        .expect("other users still park");
    // A decision frees mallory's bytes.
    let mallory = SuspensionFilter {
        user: Some("mallory".into()),
        ..SuspensionFilter::default()
    };
    let waiting = a.list(&mallory, None, 100).await.unwrap();
    assert_eq!(waiting.len(), 3);
    a.take(&waiting[0].id).await.unwrap().expect("it waits");
    b.save(large_call("m99", "mallory", 10_000))
        .await
        .expect("room again after a decision");
}

/// The size of one call of [`large_call`] with 10 000 characters, as the store counts it.
fn one_large() -> usize {
    toolgate_core::suspension::stored_size(&large_call("c00", "u00", 10_000))
}

/// Bounds with room in all for three calls of `one` bytes (each caller far under their
/// own), not four.
fn room_for_three(one: usize) -> SuspensionLimits {
    SuspensionLimits {
        max_bytes_total: 3 * one + one / 2,
        ..limits(100, 1000, HOUR)
    }
}

/// The large call `c<i>` of the caller `u<i>`, each caller's first.
fn large_of(i: usize) -> SuspendedInvocation {
    large_call(&format!("c{i:02}"), &format!("u{i:02}"), 10_000)
}

#[tokio::test]
async fn callers_each_under_their_own_bytes_are_refused_past_the_total_on_every_replica() {
    let one = one_large();
    let Some((a, b)) = two_replicas(
        "callers_each_under_their_own_bytes_are_refused_past_the_total_on_every_replica",
        room_for_three(one),
    )
    .await
    else {
        return;
    };
    let full = SuspensionStoreError::BytesFull {
        max_bytes: 3 * one + one / 2,
    };

    for i in 0..3 {
        let store = if i % 2 == 0 { &a } else { &b };
        store.save(large_of(i)).await.expect("room for three");
    }
    for i in 3..6 {
        let store = if i % 2 == 0 { &a } else { &b };
        assert_eq!(store.save(large_of(i)).await, Err(full.clone()), "u{i:02}");
    }
    assert_eq!(
        toolgate_core::ToolError::from(full.clone()).code(),
        "suspensions_full"
    );
    b.save(call("small", "zed"))
        .await
        .expect("a call that fits below the bound still waits");
    // A decision frees its bytes: a caller refused before now waits, and the bound holds.
    a.take("c00").await.unwrap().expect("it waits");
    b.save(large_of(3))
        .await
        .expect("room again after a decision");
    assert_eq!(a.save(large_of(4)).await, Err(full));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_saves_of_many_callers_keep_exactly_the_total_bytes_across_replicas() {
    let one = one_large();
    let Some((a, b)) = two_replicas(
        "concurrent_saves_of_many_callers_keep_exactly_the_total_bytes_across_replicas",
        room_for_three(one),
    )
    .await
    else {
        return;
    };

    let answers = alternately(&a, &b, 12, |i, store| async move {
        store.save(large_of(i)).await
    })
    .await;

    let kept = answers.iter().filter(|answer| answer.is_ok()).count();
    let refused = answers
        .iter()
        .filter(|answer| {
            matches!(answer, Err(SuspensionStoreError::BytesFull { max_bytes }) if *max_bytes == 3 * one + one / 2)
        })
        .count();
    assert_eq!((kept, refused), (3, 9), "{answers:?}");
    let waiting = b
        .list(&SuspensionFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(waiting.len(), 3);
}

#[tokio::test]
async fn calls_that_expired_free_their_bytes_however_many_expired_at_once() {
    let Some(url) =
        redis_or_skip("calls_that_expired_free_their_bytes_however_many_expired_at_once").await
    else {
        return;
    };
    // Long enough for the 200 saves below to be done before the calls expire on a loaded
    // machine (they took over 1.5 s once under CI), so that the refusal they cause is seen.
    let until = SystemTime::now() + Duration::from_secs(6);
    let small_of = |i: usize| SuspendedInvocation {
        expires_at: Some(until),
        ..call(&format!("e{i:03}"), &format!("u{i:03}"))
    };
    let small = toolgate_core::suspension::stored_size(&small_of(0));
    // Room for 200 of the small calls; the large one fits alone, not beside 72 of them
    // (what is left after a save's first batch of 128 expired calls leaves).
    let bound = 200 * small + small / 2;
    let filler = toolgate_core::suspension::stored_size(&large_call("big", "zed", 0));
    let big = large_call("big", "zed", (bound - 40 * small - filler) / 6);
    let size = toolgate_core::suspension::stored_size(&big);
    assert!(
        size <= bound && 72 * small + size > bound,
        "{size} of {bound}"
    );
    let prefix = namespace();
    let bounds = SuspensionLimits {
        max_bytes_total: bound,
        ..limits(100, 1000, HOUR)
    };
    let a = replica(&url, &prefix, bounds).await;
    let b = replica(&url, &prefix, bounds).await;

    for i in 0..200 {
        a.save(small_of(i)).await.expect("room for 200");
    }
    assert_eq!(
        b.save(call("late", "zed")).await,
        Err(SuspensionStoreError::BytesFull { max_bytes: bound })
    );
    let left = until.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(200)).await;

    b.save(big)
        .await
        .expect("every expired call freed its bytes");
    assert_eq!(
        ids(&a
            .list(&SuspensionFilter::default(), None, 300)
            .await
            .unwrap()),
        ["big"]
    );
}

/// The bytes the store counts its waiting calls at (`<base>:bytes`; none: 0).
async fn counted_bytes(url: &str, store: &RedisSuspensions) -> u64 {
    let mut connection = inspect(url).await;
    let held: Option<u64> = connection
        .get(format!("{}:bytes", store.key_base()))
        .await
        .unwrap();
    held.unwrap_or(0)
}

fn sizes(calls: &[&SuspendedInvocation]) -> u64 {
    calls
        .iter()
        .map(|call| toolgate_core::suspension::stored_size(call) as u64)
        .sum()
}

#[tokio::test]
async fn a_count_of_bytes_made_wrong_or_lost_heals_and_refuses_nothing_wrongly() {
    let Some(url) =
        redis_or_skip("a_count_of_bytes_made_wrong_or_lost_heals_and_refuses_nothing_wrongly")
            .await
    else {
        return;
    };
    let one = one_large();
    let prefix = namespace();
    let a = replica(&url, &prefix, room_for_three(one)).await;
    let b = replica(&url, &prefix, room_for_three(one)).await;
    let full = Err(SuspensionStoreError::BytesFull {
        max_bytes: 3 * one + one / 2,
    });
    let calls: Vec<_> = (0..4).map(large_of).collect();
    a.save(calls[0].clone()).await.unwrap();
    a.save(calls[1].clone()).await.unwrap();
    assert_eq!(
        counted_bytes(&url, &a).await,
        sizes(&[&calls[0], &calls[1]])
    );

    let bytes = format!("{}:bytes", a.key_base());
    let mut connection = inspect(&url).await;
    let (): () = connection
        .set(&bytes, 1_000_000_000_000_000u64)
        .await
        .unwrap();
    b.save(calls[2].clone())
        .await
        .expect("counted again, there is room for a third");
    let three = sizes(&[&calls[0], &calls[1], &calls[2]]);
    assert_eq!(counted_bytes(&url, &a).await, three);
    assert_eq!(a.save(calls[3].clone()).await, full);

    // A count lost (a failover, say) is counted again, and lets nothing past the bound.
    let (): () = connection.del(&bytes).await.unwrap();
    assert_eq!(b.save(calls[3].clone()).await, full);
    assert_eq!(counted_bytes(&url, &a).await, three);
}

#[tokio::test]
async fn a_call_an_earlier_version_removed_stops_counting_its_bytes() {
    let Some(url) =
        redis_or_skip("a_call_an_earlier_version_removed_stops_counting_its_bytes").await
    else {
        return;
    };
    let one = one_large();
    let prefix = namespace();
    let a = replica(&url, &prefix, room_for_three(one)).await;
    let calls: Vec<_> = (0..4).map(large_of).collect();
    for call in &calls[..3] {
        a.save(call.clone()).await.unwrap();
    }
    // An earlier version's take: out of every index and its row gone, its size left.
    let base = a.key_base();
    let mut connection = inspect(&url).await;
    let _: () = redis::pipe()
        .zrem(format!("{base}:calls"), "c00")
        .zrem(format!("{base}:ids"), "c00")
        .zrem(format!("{base}:user:u00"), "c00")
        .hdel(format!("{base}:owners"), "c00")
        .del(format!("{base}:call:c00"))
        .query_async(&mut connection)
        .await
        .unwrap();

    a.save(calls[3].clone())
        .await
        .expect("the call removed no longer counts");
    assert_eq!(
        counted_bytes(&url, &a).await,
        sizes(&[&calls[1], &calls[2], &calls[3]])
    );
    let left: bool = connection
        .hexists(format!("{base}:sizes"), "c00")
        .await
        .unwrap();
    assert!(!left);
}

#[tokio::test]
async fn a_flood_from_ann_of_globex_does_not_take_the_places_of_ann_of_acme_on_any_replica() {
    let test = "a_flood_from_ann_of_globex_does_not_take_the_places_of_ann_of_acme_on_any_replica";
    let Some((a, b)) = two_replicas(test, limits(3, 1000, HOUR)).await else {
        return;
    };
    let globex = User::new("ann").with_tenant("globex");
    let acme = User::new("ann").with_tenant("acme");
    let nobodys = User::new("ann");

    let flood = alternately(&a, &b, 10, |i, store| {
        let globex = globex.clone();
        async move { store.save(call_by(&format!("g{i}"), &globex)).await }
    })
    .await;

    let refused = SuspensionStoreError::user_full(&globex, 3);
    assert_eq!(flood.iter().filter(|saved| saved.is_ok()).count(), 3);
    assert!(
        flood
            .iter()
            .flat_map(|saved| saved.as_ref().err())
            .all(|e| *e == refused)
    );
    assert!(
        refused
            .to_string()
            .starts_with("user `ann` of tenant `globex` already has 3")
    );
    for i in 0..3 {
        b.save(call_by(&format!("a{i}"), &acme))
            .await
            .expect("acme's ann still parks");
        a.save(call_by(&format!("n{i}"), &nobodys))
            .await
            .expect("so does the ann of none");
    }
    let listed = |user: &User| {
        let filter = SuspensionFilter::of_caller(user);
        let store = a.clone();
        async move { ids(&store.list(&filter, None, 100).await.unwrap()).join(" ") }
    };
    assert_eq!(listed(&acme).await, "a0 a1 a2");
    assert_eq!(listed(&nobodys).await, "n0 n1 n2");
    assert_eq!(listed(&globex).await.split(' ').count(), 3);
    // The index of the ann of no tenant is the key every earlier version wrote for `ann`.
    let mut connection = inspect(&common::redis_url()).await;
    let index: Vec<String> = connection
        .zrange(format!("{}:user:ann", a.key_base()), 0, -1)
        .await
        .unwrap();
    assert_eq!(index, ["n0", "n1", "n2"]);
}

#[tokio::test]
async fn retry_approvals_of_ann_of_globex_do_not_take_the_places_of_ann_of_acme() {
    let test = "retry_approvals_of_ann_of_globex_do_not_take_the_places_of_ann_of_acme";
    let Some((a, b)) = two_replicas(test, limits(2, 1000, HOUR)).await else {
        return;
    };
    let of = |tenant: Option<&str>, n: u64| {
        let mut approval = approval("ann", n, HOUR);
        approval.binding.tenant = tenant.map(str::to_owned);
        approval
    };
    for n in 0..2 {
        a.keep_retry_approval(of(Some("globex"), n)).await.unwrap();
    }

    let flood = b.keep_retry_approval(of(Some("globex"), 2)).await;

    let globex = User::new("ann").with_tenant("globex");
    assert_eq!(flood, Err(SuspensionStoreError::user_full(&globex, 2)));
    for n in 0..2 {
        b.keep_retry_approval(of(Some("acme"), n)).await.unwrap();
        a.keep_retry_approval(of(None, n)).await.unwrap();
    }
    let acmes = of(Some("acme"), 0).binding.key();
    assert!(a.use_retry_approval(&acmes).await.unwrap().is_some());
}

#[tokio::test]
async fn an_expired_call_is_told_expired_to_its_own_caller_only_not_to_ann_of_another_tenant() {
    let test =
        "an_expired_call_is_told_expired_to_its_own_caller_only_not_to_ann_of_another_tenant";
    let Some((a, b)) = two_replicas(test, limits(5, 100, HOUR)).await else {
        return;
    };
    let acme = User::new("ann").with_tenant("acme");
    let mut swept = call_by("swept", &acme);
    swept.expires_at = Some(SystemTime::now() + Duration::from_millis(300));
    a.save(swept).await.unwrap();
    let mut looked_up = call_by("looked_up", &acme);
    looked_up.expires_at = Some(SystemTime::now() + Duration::from_millis(300));
    a.save(looked_up).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(b.get("looked_up").await.is_err());

    for id in ["swept", "looked_up"] {
        let owner = b.expired_owner(id).await.unwrap().expect(id);

        // What a host answers 410 to; anyone else gets the 404 of an unknown id.
        let told = |asking: &User| owner.is_same_caller(asking);
        assert!(told(&acme.clone().with_roles(["ops"])), "{id}: {owner:?}");
        assert!(!told(&User::new("ann").with_tenant("globex")), "{id}");
        assert!(!told(&User::new("ann")), "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_saves_of_many_users_keep_exactly_the_total_cap() {
    let Some((a, b)) = two_replicas(
        "concurrent_saves_of_many_users_keep_exactly_the_total_cap",
        limits(5, 7, HOUR),
    )
    .await
    else {
        return;
    };

    let answers = alternately(&a, &b, 30, |i, store| async move {
        store
            .save(call(&format!("c{i:02}"), &format!("u{i}")))
            .await
    })
    .await;

    let kept = answers.iter().filter(|answer| answer.is_ok()).count();
    let full = answers
        .iter()
        .filter(|answer| matches!(answer, Err(SuspensionStoreError::Full { max: 7 })))
        .count();
    assert_eq!((kept, full), (7, 23), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_takes_of_one_call_on_two_replicas_exactly_one_gets_it() {
    let Some((a, b)) = two_replicas(
        "of_concurrent_takes_of_one_call_on_two_replicas_exactly_one_gets_it",
        limits(10, 100, HOUR),
    )
    .await
    else {
        return;
    };
    a.save(call("once", "ann")).await.unwrap();

    let answers = alternately(
        &a,
        &b,
        20,
        |_, store| async move { store.take("once").await },
    )
    .await;

    let got = answers
        .iter()
        .filter(|answer| matches!(answer, Ok(Some(_))))
        .count();
    let none = answers
        .iter()
        .filter(|answer| matches!(answer, Ok(None)))
        .count();
    assert_eq!((got, none), (1, 19), "{answers:?}");
}

#[tokio::test]
async fn a_call_past_its_expiry_answers_expired_on_every_replica_and_frees_its_place() {
    let Some(url) = redis_or_skip(
        "a_call_past_its_expiry_answers_expired_on_every_replica_and_frees_its_place",
    )
    .await
    else {
        return;
    };
    let prefix = namespace();
    let second = Duration::from_secs(1);
    let a = replica(&url, &prefix, limits(1, 100, second)).await;
    let b = replica(&url, &prefix, limits(1, 100, second)).await;
    a.save(call("first", "ann")).await.unwrap();
    let mut sooner = call("sooner", "bob");
    sooner.expires_at = Some(SystemTime::now() + Duration::from_millis(300));
    b.save(sooner).await.unwrap();
    assert!(matches!(
        b.save(call("second", "ann")).await,
        Err(SuspensionStoreError::UserFull { max: 1, .. })
    ));
    assert!(b.get("first").await.unwrap().is_some());

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        a.get("sooner").await,
        Err(SuspensionStoreError::Expired {
            id: "sooner".into()
        }),
        "the call's own expiry, sooner than expire_after, holds"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;

    assert!(
        b.list(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty(),
        "an expired call is not listed"
    );
    b.save(call("second", "ann"))
        .await
        .expect("the expired call no longer counts");
    let expired = SuspensionStoreError::Expired { id: "first".into() };
    assert_eq!(a.take("first").await, Err(expired.clone()));
    assert_eq!(b.get("first").await, Err(expired));
    assert_eq!(b.get("never").await, Ok(None));
    assert_eq!(
        ids(&a
            .list(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap()),
        ["second"]
    );
}

/// `call`, expiring `ms` from now (past already for 0).
fn expiring(id: &str, user: &str, ms: u64) -> SuspendedInvocation {
    let mut suspended = call(id, user);
    suspended.expires_at = Some(SystemTime::now() + Duration::from_millis(ms));
    suspended
}

#[tokio::test]
async fn an_expired_call_is_remembered_with_who_made_it_on_every_replica_so_only_they_are_told() {
    let Some((a, b)) = two_replicas(
        "an_expired_call_is_remembered_with_who_made_it_on_every_replica_so_only_they_are_told",
        limits(5, 100, HOUR),
    )
    .await
    else {
        return;
    };
    a.save(expiring("looked_up", "ann", 300)).await.unwrap();
    a.save(expiring("swept", "bob", 300)).await.unwrap();
    a.save(expiring("waits", "cid", 300_000)).await.unwrap();
    assert_eq!(b.expired_owner("waits").await, Ok(None), "it waits");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Past their expiry their rows are gone; who made them is not.
    assert_eq!(b.expired_owner("swept").await, Ok(Some(User::new("bob"))));

    let looked_up = b.get("looked_up").await;
    // A save removes the expired calls it finds; one saved already past its expiry is
    // remembered as expired at once.
    b.save(expiring("born_expired", "dee", 0)).await.unwrap();

    assert_eq!(
        looked_up,
        Err(SuspensionStoreError::Expired {
            id: "looked_up".into()
        })
    );
    for (id, owner) in [
        ("looked_up", "ann"),
        ("swept", "bob"),
        ("born_expired", "dee"),
    ] {
        assert!(
            matches!(a.get(id).await, Err(SuspensionStoreError::Expired { .. })),
            "{id}"
        );
        assert_eq!(
            a.expired_owner(id).await,
            Ok(Some(User::new(owner))),
            "{id}"
        );
    }
    assert_eq!(a.expired_owner("waits").await, Ok(None));
    assert_eq!(a.expired_owner("never").await, Ok(None));
}

#[tokio::test]
async fn who_made_an_expired_call_is_kept_no_longer_and_for_no_more_ids_than_the_id_itself() {
    let test = "who_made_an_expired_call_is_kept_no_longer_and_for_no_more_ids_than_the_id_itself";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, limits(5, 2, Duration::from_millis(800))).await;
    for id in ["e1", "e2", "e3"] {
        store.save(expiring(id, "ann", 0)).await.unwrap();
    }
    let base = store.key_base().to_owned();
    let mut connection = inspect(&url).await;
    let remembered: Vec<String> = connection
        .zrange(format!("{base}:expired"), 0, -1)
        .await
        .unwrap();
    let mut owned: Vec<String> = connection
        .hkeys(format!("{base}:expired_owners"))
        .await
        .unwrap();
    owned.sort();
    let zset_ttl: i64 = connection.pttl(format!("{base}:expired")).await.unwrap();
    let owners_ttl: i64 = connection
        .pttl(format!("{base}:expired_owners"))
        .await
        .unwrap();

    assert_eq!(remembered, ["e2", "e3"], "the most recent max_total ids");
    assert_eq!(owned, remembered, "their owners, and no others");
    assert!(
        owners_ttl > 0 && owners_ttl <= zset_ttl + 50,
        "{owners_ttl} ms against {zset_ttl} ms"
    );
    assert_eq!(store.expired_owner("e1").await, Ok(None), "forgotten");
    assert_eq!(store.expired_owner("e3").await, Ok(Some(User::new("ann"))));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        store.get("e3").await,
        Ok(None),
        "forgotten after expire_after"
    );
    assert_eq!(store.expired_owner("e3").await, Ok(None));
    for key in [":expired", ":expired_owners"] {
        let exists: bool = connection.exists(format!("{base}{key}")).await.unwrap();
        assert!(!exists, "`{key}` expired with the ids it remembers");
    }
}

#[tokio::test]
async fn an_id_remembered_as_expired_by_an_earlier_version_has_no_owner() {
    let Some(url) =
        redis_or_skip("an_id_remembered_as_expired_by_an_earlier_version_has_no_owner").await
    else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, limits(5, 100, HOUR)).await;
    // What an earlier version wrote: the id in `:expired`, and nothing about its owner.
    let mut connection = inspect(&url).await;
    let expired = format!("{}:expired", store.key_base());
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let _: () = connection.zadd(&expired, "old", now_ms).await.unwrap();
    let _: () = connection.pexpire(&expired, 60_000).await.unwrap();

    assert_eq!(
        store.get("old").await,
        Err(SuspensionStoreError::Expired { id: "old".into() })
    );
    assert_eq!(store.expired_owner("old").await, Ok(None), "nobody's");
}

#[tokio::test]
async fn a_listing_pages_in_id_order_with_filters_and_skips_expired_calls() {
    let Some(url) =
        redis_or_skip("a_listing_pages_in_id_order_with_filters_and_skips_expired_calls").await
    else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, limits(500, 1000, HOUR)).await;
    // More than a page of Redis reads, for the cursor.
    for i in 0..450 {
        store.save(call(&format!("e{i:03}"), "eve")).await.unwrap();
    }
    let mut old = call("a-old", "ann");
    let old_expires = SystemTime::now() + Duration::from_secs(1);
    old.expires_at = Some(old_expires);
    store.save(old).await.unwrap();
    let since = SystemTime::now();
    for (id, user) in [("b", "bob"), ("c", "ann"), ("d", "ann")] {
        store.save(call(id, user)).await.unwrap();
    }
    let ann = SuspensionFilter {
        user: Some("ann".into()),
        ..SuspensionFilter::default()
    };
    let all = SuspensionFilter::default();

    let first = store.list(&ann, None, 2).await.unwrap();
    let second = store.list(&ann, Some("c"), 2).await.unwrap();
    let recent = store
        .list(
            &SuspensionFilter {
                since: Some(since),
                ..SuspensionFilter::default()
            },
            None,
            3,
        )
        .await
        .unwrap();
    let other_tool = SuspensionFilter {
        tool: Some("other".into()),
        ..SuspensionFilter::default()
    };
    let everyone = store.list(&all, None, 1000).await.unwrap();
    let late_page = store.list(&all, Some("e300"), 5).await.unwrap();
    tokio::time::sleep(
        old_expires
            .duration_since(SystemTime::now())
            .unwrap_or_default(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after_expiry = store.list(&ann, None, 10).await.unwrap();

    assert_eq!(ids(&first), ["a-old", "c"]);
    assert_eq!(ids(&second), ["d"]);
    assert_eq!(ids(&recent), ["b", "c", "d"]);
    assert!(store.list(&other_tool, None, 10).await.unwrap().is_empty());
    assert_eq!(everyone.len(), 454);
    assert!(everyone.windows(2).all(|w| w[0].id < w[1].id), "id order");
    assert_eq!(ids(&late_page), ["e301", "e302", "e303", "e304", "e305"]);
    assert_eq!(
        ids(&after_expiry),
        ["c", "d"],
        "the expired call is not listed"
    );
    assert!(store.list(&all, None, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_tenant_listing_pages_that_tenants_calls_in_id_order_and_leaves_out_other_tenants() {
    let test = "a_tenant_listing_pages_that_tenants_calls_in_id_order_and_leaves_out_other_tenants";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix, limits(500, 1000, HOUR)).await;
    let b = replica(&url, &prefix, limits(500, 1000, HOUR)).await;
    let ann_acme = User::new("ann").with_tenant("acme");
    let carol_acme = User::new("carol").with_tenant("acme");
    let ann_globex = User::new("ann").with_tenant("globex");
    let ann = User::new("ann");
    // More than a page of Redis reads of acme's calls, among others' before and after them.
    let mut acme = Vec::new();
    for i in 0..210 {
        let id = format!("c{i:03}");
        a.save(call_by(&id, &carol_acme)).await.unwrap();
        acme.push(id);
    }
    for id in ["a1", "a2"] {
        b.save(call_by(id, &ann_acme)).await.unwrap();
        acme.push(id.to_owned());
    }
    acme.sort();
    for id in ["b1", "d1", "z1"] {
        a.save(call_by(id, &ann_globex)).await.unwrap();
    }
    a.save(call_by("b2", &ann)).await.unwrap();
    let of_tenant = |tenant: Option<&str>| SuspensionFilter {
        tenant: Some(tenant.map(str::to_owned)),
        ..SuspensionFilter::default()
    };
    let acme_filter = of_tenant(Some("acme"));

    let listed = b.list(&acme_filter, None, 1000).await.unwrap();
    let first = a.list(&acme_filter, None, 201).await.unwrap();
    let rest = b
        .list(&acme_filter, Some(&first.last().unwrap().id), 1000)
        .await
        .unwrap();
    let anns_of_acme = SuspensionFilter {
        user: Some("ann".into()),
        ..acme_filter.clone()
    };

    assert_eq!(ids(&listed), acme, "acme's calls, in id order, once each");
    assert_eq!(
        [ids(&first), ids(&rest)].concat(),
        acme,
        "paged by the cursor"
    );
    assert_eq!(
        ids(&a.list(&anns_of_acme, None, 10).await.unwrap()),
        ["a1", "a2"]
    );
    assert_eq!(
        ids(&a.list(&of_tenant(Some("globex")), None, 10).await.unwrap()),
        ["b1", "d1", "z1"]
    );
    assert_eq!(
        ids(&b.list(&of_tenant(None), None, 10).await.unwrap()),
        ["b2"]
    );
    assert!((a.list(&of_tenant(Some("initech")), None, 10).await.unwrap()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_approval_is_used_once_across_replicas_under_concurrency() {
    let Some((a, b)) = two_replicas(
        "a_retry_approval_is_used_once_across_replicas_under_concurrency",
        limits(2, 3, HOUR),
    )
    .await
    else {
        return;
    };
    let kept = approval("ann", 1, HOUR);
    let key = kept.binding.key();
    a.keep_retry_approval(kept.clone()).await.unwrap();

    let answers = alternately(&a, &b, 20, |_, store| {
        let key = key.clone();
        async move { store.use_retry_approval(&key).await }
    })
    .await;

    let used: Vec<_> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().unwrap().as_ref())
        .collect();
    assert_eq!(used, [&kept], "used exactly once");
    let other = approval("bob", 1, HOUR).binding.key();
    assert_eq!(b.use_retry_approval(&other).await, Ok(None));

    // Capped per user and in all, counted apart from waiting calls; void past its expiry.
    a.keep_retry_approval(approval("ann", 2, Duration::from_secs(1)))
        .await
        .unwrap();
    b.keep_retry_approval(approval("ann", 3, HOUR))
        .await
        .unwrap();
    assert!(matches!(
        a.keep_retry_approval(approval("ann", 4, HOUR)).await,
        Err(SuspensionStoreError::UserFull { max: 2, .. })
    ));
    b.keep_retry_approval(approval("bob", 1, HOUR))
        .await
        .unwrap();
    assert_eq!(
        a.keep_retry_approval(approval("cat", 1, HOUR)).await,
        Err(SuspensionStoreError::Full { max: 3 })
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let late = approval("ann", 2, HOUR).binding.key();
    assert_eq!(
        a.use_retry_approval(&late).await,
        Ok(None),
        "void past its expiry"
    );
    a.keep_retry_approval(approval("ann", 5, HOUR))
        .await
        .expect("the void approval freed its place");
    a.save(call("waits", "ann")).await.expect("counted apart");
}

#[tokio::test]
async fn an_outcome_kept_on_one_replica_is_read_on_another_replaced_and_capped() {
    let Some(url) =
        redis_or_skip("an_outcome_kept_on_one_replica_is_read_on_another_replaced_and_capped")
            .await
    else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix, limits(5, 2, HOUR)).await;
    let b = replica(&url, &prefix, limits(5, 2, HOUR)).await;

    let first = decided("x");
    a.keep_outcome(first.clone()).await.unwrap();
    assert_eq!(b.outcome("x").await.unwrap(), Some(first));
    let mut again = decided("x");
    again.result = json!({"output": "replaced"});
    b.keep_outcome(again.clone()).await.unwrap();
    assert_eq!(a.outcome("x").await.unwrap(), Some(again));
    a.keep_outcome(decided("y")).await.unwrap();
    a.keep_outcome(decided("z")).await.unwrap();
    assert_eq!(
        b.outcome("x").await.unwrap(),
        None,
        "the oldest went past the cap"
    );
    assert!(b.outcome("z").await.unwrap().is_some());
    let mut stale = decided("old");
    stale.decided_at = SystemTime::now() - 2 * HOUR;
    a.keep_outcome(stale).await.unwrap();
    assert_eq!(
        b.outcome("old").await.unwrap(),
        None,
        "past expire_after already"
    );
    assert_eq!(b.outcome("never").await.unwrap(), None);
}

/// A caller at their cap loses their own oldest outcome even when it expires last: after a
/// reload made `expire_after` shorter (here a replica configured apart), the outcomes kept
/// since expire first, and taking the soonest to expire would drop each new one in turn.
#[tokio::test]
async fn a_caller_at_the_cap_loses_the_oldest_outcome_though_a_shorter_expiry_came_since() {
    let test = "a_caller_at_the_cap_loses_the_oldest_outcome_though_a_shorter_expiry_came_since";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let day = replica(&url, &prefix, limits(3, 100, 24 * HOUR)).await;
    let minute = replica(&url, &prefix, limits(3, 100, Duration::from_secs(60))).await;
    let ann = User::new("ann");
    for (i, id) in ["d1", "d2", "d3"].into_iter().enumerate() {
        day.keep_outcome(decided_by(id, &ann, i as u64))
            .await
            .unwrap();
    }

    for (i, id) in ["m1", "m2", "m3"].into_iter().enumerate() {
        minute
            .keep_outcome(decided_by(id, &ann, 10 + i as u64))
            .await
            .unwrap();
    }

    let mut kept = outcome_ids_of(&day, &ann).await;
    kept.sort();
    assert_eq!(kept, ["m1", "m2", "m3"], "the day-old outcomes go first");
}

/// The outcome `id` of the caller `user`, decided `ms` milliseconds from now.
fn decided_by(id: &str, user: &User, ms: u64) -> DecidedCall {
    DecidedCall {
        decided_at: SystemTime::now() + Duration::from_millis(ms),
        ..DecidedCall::new(id, user, json!({"output": format!("done {id}")}))
    }
}

async fn outcome_ids_of(store: &RedisSuspensions, user: &User) -> Vec<String> {
    let filter = SuspensionFilter::of_caller(user);
    let listed = store.list_outcomes(&filter, None, 100).await.unwrap();
    listed.into_iter().map(|decided| decided.id).collect()
}

#[tokio::test]
async fn a_flood_of_one_callers_outcomes_does_not_evict_another_callers_outcome_on_any_replica() {
    let test =
        "a_flood_of_one_callers_outcomes_does_not_evict_another_callers_outcome_on_any_replica";
    let Some((a, b)) = two_replicas(test, limits(3, 10, HOUR)).await else {
        return;
    };
    let bob = User::new("bob").with_tenant("globex");
    let acme = User::new("ann").with_tenant("acme");
    let globex = User::new("ann").with_tenant("globex");
    let bobs = decided_by("bobs", &bob, 0);
    a.keep_outcome(bobs.clone()).await.unwrap();
    a.keep_outcome(decided_by("acmes", &acme, 0)).await.unwrap();
    b.keep_outcome(decided_by("anns", &User::new("ann"), 0))
        .await
        .unwrap();

    for i in 0..30u64 {
        let store = if i % 2 == 0 { &a } else { &b };
        let id = format!("g{i:02}");
        store
            .keep_outcome(decided_by(&id, &globex, i))
            .await
            .unwrap();
    }

    assert_eq!(
        b.outcome("bobs").await.unwrap(),
        Some(bobs),
        "ann of globex's flood left bob's outcome alone"
    );
    assert_eq!(outcome_ids_of(&a, &acme).await, ["acmes"]);
    assert_eq!(outcome_ids_of(&b, &User::new("ann")).await, ["anns"]);
    assert_eq!(
        outcome_ids_of(&a, &globex).await,
        ["g27", "g28", "g29"],
        "she lost her own soonest to expire, down to max_per_user"
    );
}

#[tokio::test]
async fn past_the_total_cap_the_caller_holding_the_most_loses_their_oldest_on_any_replica() {
    let test = "past_the_total_cap_the_caller_holding_the_most_loses_their_oldest_on_any_replica";
    let Some((a, b)) = two_replicas(test, limits(100, 5, HOUR)).await else {
        return;
    };
    let erin = User::new("erin").with_tenant("globex");
    let bob = User::new("bob").with_tenant("acme");
    let erins = decided_by("erins", &erin, 0);
    a.keep_outcome(erins.clone()).await.unwrap();

    for i in 0..10u64 {
        let store = if i % 2 == 0 { &a } else { &b };
        store
            .keep_outcome(decided_by(&format!("b{i}"), &bob, 1 + i))
            .await
            .unwrap();
    }

    assert_eq!(
        b.outcome("erins").await.unwrap(),
        Some(erins),
        "bob's withdrawals left erin's outcome alone"
    );
    assert_eq!(
        outcome_ids_of(&a, &bob).await,
        ["b6", "b7", "b8", "b9"],
        "bob, who holds the most, lost his own soonest to expire"
    );
}

/// Who holds how many outcomes, as the store counts them (`:outcome_counts`), and whose
/// each outcome is (`:outcome_owners`).
async fn outcome_counts(url: &str, store: &RedisSuspensions) -> (Vec<(String, u64)>, Vec<String>) {
    let base = store.key_base();
    let mut connection = inspect(url).await;
    let counts: Vec<(String, u64)> = connection
        .zrange_withscores(format!("{base}:outcome_counts"), 0, -1)
        .await
        .unwrap();
    let mut owned: Vec<String> = connection
        .hkeys(format!("{base}:outcome_owners"))
        .await
        .unwrap();
    owned.sort();
    (counts, owned)
}

#[tokio::test]
async fn the_count_of_who_holds_outcomes_follows_expiry_and_removal_back_to_empty() {
    let test = "the_count_of_who_holds_outcomes_follows_expiry_and_removal_back_to_empty";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, limits(100, 10, HOUR)).await;
    // Decided so long ago that they expire `ms` from now.
    let expiring = |id: &str, user: &str, ms: u64| DecidedCall {
        decided_at: SystemTime::now() - HOUR + Duration::from_millis(ms),
        ..DecidedCall::new(id, &User::new(user), json!({"output": id}))
    };
    store
        .keep_outcome(expiring("a1", "ann", 300))
        .await
        .unwrap();
    store
        .keep_outcome(expiring("a2", "ann", 300))
        .await
        .unwrap();
    let running = DecidedCall::new("r", &User::new("bob"), json!({"status": "running"}));
    assert!(store.keep_running(running, "bobs").await.unwrap());
    // Kept again for the same id: still one.
    store
        .keep_outcome(expiring("a2", "ann", 300))
        .await
        .unwrap();
    assert_eq!(
        outcome_counts(&url, &store).await,
        (
            vec![("bob".to_owned(), 1), ("ann".to_owned(), 2)],
            vec!["a1".to_owned(), "a2".to_owned(), "r".to_owned()]
        )
    );

    tokio::time::sleep(Duration::from_millis(400)).await;
    store
        .keep_outcome(expiring("c1", "cid", 600))
        .await
        .unwrap();
    assert_eq!(
        outcome_counts(&url, &store).await,
        (
            vec![("bob".to_owned(), 1), ("cid".to_owned(), 1)],
            vec!["c1".to_owned(), "r".to_owned()]
        ),
        "ann's expired: she is no longer counted"
    );

    assert!(store.remove_running("r", "bobs").await.unwrap());
    assert_eq!(
        outcome_counts(&url, &store).await,
        (vec![("cid".to_owned(), 1)], vec!["c1".to_owned()]),
        "bob's record removed: he is no longer counted"
    );
    assert_every_key_expires(&url, &prefix).await;

    tokio::time::sleep(Duration::from_millis(700)).await;
    // Keeping one expired already only removes those that expired.
    let born_expired = DecidedCall {
        decided_at: SystemTime::now() - 2 * HOUR,
        ..DecidedCall::new("d1", &User::new("dee"), json!({"output": "d1"}))
    };
    store.keep_outcome(born_expired).await.unwrap();
    assert_eq!(
        outcome_counts(&url, &store).await,
        (vec![], vec![]),
        "gone with the last outcome"
    );
    let keys = keys_under(&url, &prefix).await;
    assert!(
        !keys.iter().any(|key| key.contains(":outcome")),
        "nothing of the outcomes is left: {keys:?}"
    );
}

/// What an earlier version's `keep_outcome` wrote: the row and the total index, no
/// per-caller index.
async fn keep_outcome_as_an_earlier_version(
    url: &str,
    store: &RedisSuspensions,
    decided: &DecidedCall,
) {
    let base = store.key_base();
    let until = decided.decided_at + HOUR;
    let ms = until
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut connection = inspect(url).await;
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("{base}:outcome:{}", decided.id))
        .arg(serde_json::to_vec(decided).unwrap())
        .arg("PX")
        .arg(HOUR.as_millis() as u64)
        .ignore()
        .cmd("ZADD")
        .arg(format!("{base}:outcomes"))
        .arg(ms)
        .arg(&decided.id)
        .ignore()
        .query_async(&mut connection)
        .await
        .unwrap();
}

/// What an earlier version's eviction past `max_total` does to the outcome `id`.
async fn evict_as_an_earlier_version(url: &str, store: &RedisSuspensions, id: &str) {
    let base = store.key_base();
    let mut connection = inspect(url).await;
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg(format!("{base}:outcomes"))
        .arg(id)
        .ignore()
        .cmd("DEL")
        .arg(format!("{base}:outcome:{id}"))
        .ignore()
        .query_async(&mut connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn during_a_rolling_upgrade_outcomes_of_either_version_are_read_and_one_gone_stops_counting()
{
    let test =
        "during_a_rolling_upgrade_outcomes_of_either_version_are_read_and_one_gone_stops_counting";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let new = replica(&url, &prefix, limits(3, 100, HOUR)).await;
    let ann = User::new("ann").with_tenant("acme");
    for i in 0..3u64 {
        new.keep_outcome(decided_by(&format!("a{i}"), &ann, i))
            .await
            .unwrap();
    }
    let by_earlier = decided_by("earlier", &ann, 5);

    keep_outcome_as_an_earlier_version(&url, &new, &by_earlier).await;
    evict_as_an_earlier_version(&url, &new, "a1").await;
    new.keep_outcome(decided_by("a3", &ann, 10)).await.unwrap();

    assert_eq!(
        new.outcome("earlier").await.unwrap(),
        Some(by_earlier),
        "read without the per-caller index"
    );
    assert_eq!(
        outcome_ids_of(&new, &ann).await,
        ["a0", "a2", "a3", "earlier"],
        "`a1`, gone, no longer counted: nothing of hers went for `a3`"
    );
    new.keep_outcome(decided_by("a4", &ann, 20)).await.unwrap();
    assert_eq!(
        outcome_ids_of(&new, &ann).await,
        ["a2", "a3", "a4", "earlier"],
        "at her cap again, her soonest to expire of those counted went"
    );
}

#[tokio::test]
async fn decided_calls_are_listed_across_replicas_in_id_order_filtered_and_paged() {
    let Some(url) =
        redis_or_skip("decided_calls_are_listed_across_replicas_in_id_order_filtered_and_paged")
            .await
    else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix, limits(5, 10, HOUR)).await;
    let b = replica(&url, &prefix, limits(5, 10, HOUR)).await;
    let outcome = |id: &str, user: &str, tool: &str, ago: Duration| DecidedCall {
        id: id.into(),
        user: user.into(),
        tenant: None,
        result: json!({"tool_name": tool, "status": "success"}),
        decided_at: SystemTime::now() - ago,
        suspended_at: None,
    };
    a.keep_outcome(outcome("d", "ann", "launch", Duration::ZERO))
        .await
        .unwrap();
    b.keep_outcome(outcome("b", "bob", "launch", Duration::ZERO))
        .await
        .unwrap();
    a.keep_outcome(outcome("c", "ann", "land", 30 * Duration::from_secs(60)))
        .await
        .unwrap();
    a.keep_outcome(outcome("a", "ann", "launch", Duration::ZERO))
        .await
        .unwrap();
    // Past expire_after: not kept, so not listed.
    a.keep_outcome(outcome("old", "ann", "launch", 2 * HOUR))
        .await
        .unwrap();

    let every = SuspensionFilter::default();
    let listed = |calls: Vec<DecidedCall>| calls.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(
        listed(b.list_outcomes(&every, None, 10).await.unwrap()),
        ["a", "b", "c", "d"]
    );
    // Pages, after the last id of the previous one.
    assert_eq!(
        listed(b.list_outcomes(&every, None, 2).await.unwrap()),
        ["a", "b"]
    );
    assert_eq!(
        listed(a.list_outcomes(&every, Some("b"), 2).await.unwrap()),
        ["c", "d"]
    );
    let anns = SuspensionFilter {
        user: Some("ann".into()),
        ..SuspensionFilter::default()
    };
    assert_eq!(
        listed(b.list_outcomes(&anns, None, 10).await.unwrap()),
        ["a", "c", "d"]
    );
    let recent_launches = SuspensionFilter {
        tool: Some("launch".into()),
        since: Some(SystemTime::now() - Duration::from_secs(600)),
        ..SuspensionFilter::default()
    };
    assert_eq!(
        listed(a.list_outcomes(&recent_launches, None, 10).await.unwrap()),
        ["a", "b", "d"]
    );
}

#[tokio::test]
async fn a_restart_of_every_replica_loses_nothing() {
    let Some(url) = redis_or_skip("a_restart_of_every_replica_loses_nothing").await else {
        return;
    };
    let prefix = namespace();
    let retry = approval("ann", 7, HOUR);
    let outcome = decided("done");
    {
        let before = replica(&url, &prefix, limits(10, 100, HOUR))
            .await
            .with_encryption_key(KEY.as_bytes())
            .unwrap();
        before.save(call("waits", "ann")).await.unwrap();
        before.keep_retry_approval(retry.clone()).await.unwrap();
        before.keep_outcome(outcome.clone()).await.unwrap();
    } // the store, its state and its connection are gone

    let after = replica(&url, &prefix, limits(10, 100, HOUR))
        .await
        .with_encryption_key(KEY.as_bytes())
        .unwrap();

    assert_eq!(
        ids(&after
            .list(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap()),
        ["waits"]
    );
    assert_eq!(after.take("waits").await.unwrap().unwrap().user.id, "ann");
    assert_eq!(
        after.use_retry_approval(&retry.binding.key()).await,
        Ok(Some(retry))
    );
    assert_eq!(after.outcome("done").await, Ok(Some(outcome)));
}

#[tokio::test]
async fn every_key_the_store_writes_has_an_expiry() {
    let Some(url) = redis_or_skip("every_key_the_store_writes_has_an_expiry").await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix, limits(3, 100, HOUR)).await;
    let b = replica(&url, &prefix, limits(3, 100, Duration::from_secs(5))).await;
    for i in 0..3 {
        a.save(call(&format!("a{i}"), "ann")).await.unwrap();
    }
    let mut short = call("short", "bob");
    short.expires_at = Some(SystemTime::now() + Duration::from_millis(200));
    b.save(short).await.unwrap();
    b.take("a0").await.unwrap();
    a.list(&SuspensionFilter::default(), None, 10)
        .await
        .unwrap();
    let retry = approval("ann", 1, HOUR);
    a.keep_retry_approval(retry.clone()).await.unwrap();
    a.keep_retry_approval(approval("ann", 2, HOUR))
        .await
        .unwrap();
    b.use_retry_approval(&retry.binding.key()).await.unwrap();
    // A caller without a tenant: the name of their index is text, read back as it is.
    a.keep_outcome(decided_by("a0", &User::new("ann"), 0))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The short call expires and is remembered as expired.
    assert!(b.get("short").await.is_err());
    a.save(call("a3", "bob")).await.unwrap();

    let keys = keys_under(&url, &prefix).await;
    let mut connection = inspect(&url).await;
    for kind in [
        ":calls",
        ":ids",
        ":user:ann",
        ":call:a1",
        "}:owners",
        "}:sizes",
        "}:bytes",
        ":expired",
        ":expired_owners",
        ":retries",
        ":retry_user:ann",
        ":retry_key:",
        ":retry:",
        ":outcomes",
        ":outcome:a0",
        ":outcome_user:ann",
        ":outcome_owners",
        ":outcome_counts",
    ] {
        assert!(
            keys.iter().any(|key| key.contains(kind)),
            "a `{kind}` key was written: {keys:?}"
        );
    }
    for key in keys {
        let pttl: i64 = connection.pttl(&key).await.unwrap();
        assert!(pttl > 0 || pttl == -2, "`{key}` has no expiry ({pttl})");
    }
}

#[tokio::test]
async fn with_a_key_nothing_of_a_call_is_readable_on_redis_and_another_key_gets_a_clear_error() {
    let Some(url) = redis_or_skip(
        "with_a_key_nothing_of_a_call_is_readable_on_redis_and_another_key_gets_a_clear_error",
    )
    .await
    else {
        return;
    };
    let prefix = namespace();
    let sealed = replica(&url, &prefix, limits(10, 100, HOUR))
        .await
        .with_encryption_key(KEY.as_bytes())
        .unwrap();
    let retry = approval("ann", 1, HOUR);
    sealed.save(call("secret", "ann")).await.unwrap();
    sealed.keep_retry_approval(retry.clone()).await.unwrap();
    sealed.keep_outcome(decided("secret")).await.unwrap();

    let mut connection = inspect(&url).await;
    let base = sealed.key_base();
    let row: Vec<u8> = connection
        .hget(format!("{base}:call:secret"), "value")
        .await
        .unwrap();
    let outcome: Vec<u8> = connection
        .get(format!("{base}:outcome:secret"))
        .await
        .unwrap();
    let mut stored = vec![row.clone(), outcome];
    for key in keys_under(&url, &prefix).await {
        if key.contains(":retry:") {
            stored.push(connection.hget(&key, "value").await.unwrap());
        }
    }
    assert_eq!(stored.len(), 3);
    for value in &stored {
        for clear in [
            &b"liftoff"[..],
            b"the-moon",
            b"launch-rocket",
            b"done secret",
            b"boss",
        ] {
            assert!(
                !value.windows(clear.len()).any(|w| w == clear),
                "`{}` is readable on Redis",
                String::from_utf8_lossy(clear)
            );
        }
    }

    let other = replica(&url, &prefix, limits(10, 100, HOUR))
        .await
        .with_encryption_key(OTHER_KEY.as_bytes())
        .unwrap();
    let plain = replica(&url, &prefix, limits(10, 100, HOUR)).await;
    for answer in [
        other.get("secret").await,
        other.take("secret").await,
        plain.take("secret").await,
    ] {
        let Err(SuspensionStoreError::Unavailable(message)) = answer else {
            panic!("{answer:?}")
        };
        assert!(message.contains("same encryption key"), "{message}");
    }
    assert!(matches!(
        other.use_retry_approval(&retry.binding.key()).await,
        Err(SuspensionStoreError::Unavailable(_))
    ));
    assert!(matches!(
        other.outcome("secret").await,
        Err(SuspensionStoreError::Unavailable(_))
    ));
    // A listing leaves out what the replica cannot read, and lists what it can.
    other.save(call("readable", "ann")).await.unwrap();
    assert_eq!(
        ids(&other
            .list(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap()),
        ["readable"]
    );
    assert_eq!(
        ids(&sealed
            .list(&SuspensionFilter::default(), None, 10)
            .await
            .unwrap()),
        ["secret"]
    );
    // A wrong key used nothing up: the right one still finds all of it.
    assert!(sealed.take("secret").await.unwrap().is_some());
    assert_eq!(
        sealed.use_retry_approval(&retry.binding.key()).await,
        Ok(Some(retry))
    );

    // A sealed value copied under another id does not open there.
    sealed.save(call("moved", "ann")).await.unwrap();
    let _: () = connection
        .hset(format!("{base}:call:moved"), "value", row)
        .await
        .unwrap();
    assert!(matches!(
        sealed.get("moved").await,
        Err(SuspensionStoreError::Unavailable(_))
    ));
}

/// A pipeline on a replica of its own whose every call of `wipe` waits for a person.
async fn pipeline_on(url: &str, prefix: &str) -> Pipeline {
    let store = replica(url, prefix, limits(10, 100, HOUR))
        .await
        .with_encryption_key(KEY.as_bytes())
        .unwrap();
    let wipe = JsonTool::new(
        "wipe",
        "Wipes a disk.",
        json!({"type": "object"}),
        |input, _| Box::pin(async move { Ok::<_, ToolError>(json!({ "wiped": input["disk"] })) }),
    );
    Pipeline::builder()
        .tool(wipe)
        .hook(hook_fn(Stage::WillCheckConsent, |ctx| {
            ctx.suspend("a person approves wipes").into()
        }))
        .suspension_store(Arc::new(store))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_call_parked_by_one_pipeline_is_decided_on_another_and_a_retry_runs_on_a_third() {
    let Some(url) = redis_or_skip(
        "a_call_parked_by_one_pipeline_is_decided_on_another_and_a_retry_runs_on_a_third",
    )
    .await
    else {
        return;
    };
    let prefix = namespace();
    let (a, b, c) = (
        pipeline_on(&url, &prefix).await,
        pipeline_on(&url, &prefix).await,
        pipeline_on(&url, &prefix).await,
    );
    let ann = || InvokeOptions::new().user(User::new("ann"));
    let park = |pipeline: &Pipeline, disk: u32| {
        let pipeline = pipeline.clone();
        async move {
            match pipeline.invoke("wipe", json!({"disk": disk}), ann()).await {
                Err(ToolError::Suspended { suspension_id, .. }) => suspension_id,
                other => panic!("{other:?}"),
            }
        }
    };

    let first = park(&a, 1).await;
    let listed = b
        .list_suspended(&SuspensionFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&listed), [first.as_str()]);
    assert_eq!(listed[0].input, json!({"disk": 1}));
    let approved = b.resume(&first, ResumeDecision::Approve, InvokeOptions::new());
    assert_eq!(approved.await.unwrap(), json!({"wiped": 1}));
    assert!(c.suspended(&first).await.unwrap().is_none(), "decided once");

    let second = park(&a, 2).await;
    b.approve_retry(&second, Some("boss".into())).await.unwrap();
    assert_eq!(
        c.invoke("wipe", json!({"disk": 2}), ann()).await.unwrap(),
        json!({"wiped": 2}),
        "the same call, on a third replica, runs on the approval"
    );
    park(&a, 2).await; // used up: the next one waits again
}

#[tokio::test]
async fn a_reload_changes_the_bounds_for_every_clone_from_the_next_save() {
    let Some(url) =
        redis_or_skip("a_reload_changes_the_bounds_for_every_clone_from_the_next_save").await
    else {
        return;
    };
    let prefix = namespace();
    let store = replica(&url, &prefix, limits(3, 100, HOUR)).await;
    let in_the_pipeline = store.clone();
    for i in 0..2 {
        in_the_pipeline
            .save(call(&format!("a{i}"), "ann"))
            .await
            .unwrap();
    }

    store.set_limits(limits(1, 100, Duration::from_secs(60)));

    assert_eq!(in_the_pipeline.limits().max_per_user, 1);
    assert!(matches!(
        in_the_pipeline.save(call("a2", "ann")).await,
        Err(SuspensionStoreError::UserFull { max: 1, .. })
    ));
    let kept_before = in_the_pipeline.get("a0").await.unwrap().unwrap();
    let wait = kept_before
        .expires_at
        .unwrap()
        .duration_since(SystemTime::now());
    assert!(
        wait.unwrap() > Duration::from_secs(3000),
        "calls already waiting keep their expiry"
    );
    in_the_pipeline.save(call("b0", "bob")).await.unwrap();
    let saved_after = in_the_pipeline.get("b0").await.unwrap().unwrap();
    let wait = saved_after
        .expires_at
        .unwrap()
        .duration_since(SystemTime::now());
    assert!(wait.unwrap() <= Duration::from_secs(60));
}

#[tokio::test]
async fn redis_away_answers_unavailable_within_the_deadline() {
    // Nothing listens on port 1: no Redis needed.
    let state = RedisState::connect_lazy(
        "redis://127.0.0.1:1",
        RedisConfig::builder()
            .deadline(Duration::from_millis(200))
            .build(),
    )
    .unwrap();
    let store = state.suspensions(SuspensionLimits::default());
    let started = std::time::Instant::now();

    let answers = [
        store.save(call("a", "ann")).await.err(),
        store.get("a").await.err(),
        store.take("a").await.err(),
        store
            .list(&SuspensionFilter::default(), None, 10)
            .await
            .err(),
        store.use_retry_approval("k").await.err(),
        store.outcome("a").await.err(),
    ];

    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    for answer in answers {
        let Some(SuspensionStoreError::Unavailable(message)) = answer else {
            panic!("{answer:?}")
        };
        assert!(message.contains("check that Redis runs"), "{message}");
    }
}

#[tokio::test]
async fn a_cut_or_hung_redis_answers_unavailable_within_the_deadline_and_loses_nothing() {
    let Some(url) = redis_or_skip(
        "a_cut_or_hung_redis_answers_unavailable_within_the_deadline_and_loses_nothing",
    )
    .await
    else {
        return;
    };
    let prefix = namespace();
    let proxy = Proxy::start(&url).await;
    let deadline = Duration::from_millis(150);
    let through_proxy = connect(
        &proxy.url(),
        config(&prefix).deadline(deadline).reconnect_backoff(
            Duration::from_millis(20),
            Duration::from_millis(200),
            6,
        ),
    )
    .await
    .suspensions(limits(10, 100, HOUR));
    let direct = replica(&url, &prefix, limits(10, 100, HOUR)).await;
    let waiting = call("before", "ann");
    through_proxy.save(waiting.clone()).await.unwrap();

    for (fault, inject) in [("cut", Proxy::cut as fn(&Proxy)), ("stall", Proxy::stall)] {
        inject(&proxy);
        for answer in [
            through_proxy.save(call(fault, "ann")).await.err(),
            through_proxy.take("before").await.err(),
            through_proxy
                .list(&SuspensionFilter::default(), None, 10)
                .await
                .err(),
        ] {
            let Some(SuspensionStoreError::Unavailable(message)) = answer else {
                panic!("{fault}: {answer:?}")
            };
            assert!(message.contains("check that Redis runs"), "{message}");
        }
        proxy.heal();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let started = std::time::Instant::now();
    proxy.stall();
    let stalled = through_proxy.get("before").await;
    let waited = started.elapsed();
    proxy.heal();
    assert!(matches!(stalled, Err(SuspensionStoreError::Unavailable(_))));
    assert!(waited < deadline + Duration::from_millis(250), "{waited:?}");
    // Nothing was lost: the take sent while Redis hung reached it once it answered, and
    // was undone (nobody received the call). The undo runs in the background and is
    // retried after a second, so it is waited for rather than expected at once.
    let mut before = direct.get("before").await;
    for _ in 0..80 {
        if matches!(before, Ok(Some(_))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        before = direct.get("before").await;
    }
    assert!(matches!(before, Ok(Some(_))), "{before:?}");
    // Calls refused while Redis was away were not kept.
    assert_eq!(direct.get("cut").await, Ok(None));
    // The save sent while Redis hung reached it once it answered, and was undone: its
    // caller was told it failed.
    let mut stalled_save = direct.get("stall").await;
    for _ in 0..80 {
        if stalled_save == Ok(None) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        stalled_save = direct.get("stall").await;
    }
    assert_eq!(stalled_save, Ok(None));
    // What the undone take and save held counts as before: only the call that waits again.
    assert_eq!(counted_bytes(&url, &direct).await, sizes(&[&waiting]));
    let mut back = None;
    for _ in 0..50 {
        back = through_proxy.take("before").await.ok();
        if back.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        back.flatten().is_some(),
        "the replica reads Redis again once it answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_calls_are_saved_listed_taken_capped_in_one_slot_and_outlive_a_restart() {
    let Some(cluster) = Cluster::start_or_skip(
        "on_a_cluster_calls_are_saved_listed_taken_capped_in_one_slot_and_outlive_a_restart",
    ) else {
        return;
    };
    let prefix = namespace();
    let on_cluster = || async {
        RedisState::connect(
            &cluster.url(),
            RedisConfig::builder()
                .key_prefix(&prefix)
                .deadline(Duration::from_secs(10))
                .build(),
        )
        .await
        .expect("the cluster is up")
        .suspensions(limits(3, 100, HOUR))
        .with_encryption_key(KEY.as_bytes())
        .unwrap()
    };
    let a = on_cluster().await;
    let b = on_cluster().await;

    let kept = alternately(&a, &b, 12, |i, store| async move {
        store.save(call(&format!("k{i:02}"), "ann")).await
    })
    .await
    .into_iter()
    .filter(Result::is_ok)
    .count();
    b.save(call("bob-1", "bob")).await.unwrap();
    let listed = b
        .list(&SuspensionFilter::default(), None, 10)
        .await
        .unwrap();
    let first = listed[0].id.clone();
    let taken = Arc::new(a.take(&first).await.unwrap());
    let retry = approval("ann", 1, HOUR);
    a.keep_retry_approval(retry.clone()).await.unwrap();
    a.keep_outcome(decided(&first)).await.unwrap();

    assert_eq!(kept, 3, "the per-user cap holds on a cluster");
    assert_eq!(listed.len(), 4);
    assert!(taken.is_some());
    assert_eq!(b.take(&first).await, Ok(None));
    assert_eq!(
        b.use_retry_approval(&retry.binding.key()).await,
        Ok(Some(retry))
    );
    assert!(b.outcome(&first).await.unwrap().is_some());
    // Both replicas stop; a third, started afresh, finds every waiting call and the outcome.
    drop((a, b));
    let c = on_cluster().await;
    let after_restart = c
        .list(&SuspensionFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(after_restart.len(), 3, "{after_restart:?}");
    assert!(c.outcome(&first).await.unwrap().is_some());
    let keys = cluster.keys_under(&prefix);
    let slots: std::collections::BTreeSet<u16> =
        keys.iter().map(|(key, _)| cluster.slot(key)).collect();
    assert_eq!(slots.len(), 1, "every key in one slot: {keys:?}");
    cluster.assert_every_key_expires(&prefix);
}

/// A running record of the call `id` of `user`, kept by the decision of `by`.
fn running_by(id: &str, user: &User, by: &str) -> DecidedCall {
    DecidedCall::new(id, user, json!({"status": "running", "decided_by": by}))
}

#[tokio::test]
async fn a_running_record_is_kept_only_where_nothing_is_and_removed_only_by_its_decision() {
    let test = "a_running_record_is_kept_only_where_nothing_is_and_removed_only_by_its_decision";
    let Some((a, b)) = two_replicas(test, limits(2, 10, HOUR)).await else {
        return;
    };
    let bob = User::new("bob").with_tenant("acme");
    let kept_by = |decided: Option<DecidedCall>| decided.map(|d| d.result["decided_by"].clone());

    // Two approvers at once, on two replicas: the first record stands.
    assert_eq!(
        a.keep_running(running_by("x", &bob, "alice"), "alices")
            .await,
        Ok(true)
    );
    assert_eq!(
        b.keep_running(running_by("x", &bob, "carol"), "carols")
            .await,
        Ok(false)
    );
    assert_eq!(
        b.remove_running("x", "carols").await,
        Ok(false),
        "not carol's"
    );
    assert_eq!(kept_by(b.outcome("x").await.unwrap()), Some(json!("alice")));

    // The outcome replaces it; a record written late never lands over the outcome, and
    // the token that kept the record does not remove the outcome.
    let outcome = DecidedCall::new("x", &bob, json!({"status": "error"}));
    b.keep_outcome(outcome.clone()).await.unwrap();
    assert_eq!(
        a.keep_running(running_by("x", &bob, "carol"), "carols")
            .await,
        Ok(false)
    );
    assert_eq!(a.remove_running("x", "alices").await, Ok(false));
    assert_eq!(b.outcome("x").await.unwrap(), Some(outcome));

    // A decision that failed before the take removes its own record, and its place.
    assert_eq!(
        a.keep_running(running_by("y", &bob, "alice"), "alices")
            .await,
        Ok(true)
    );
    assert_eq!(b.remove_running("y", "alices").await, Ok(true));
    assert_eq!(a.outcome("y").await, Ok(None));
    assert_eq!(outcome_ids_of(&a, &bob).await, ["x"]);
    // A record replaced by its outcome counts once: bob's cap of 2 holds both outcomes.
    assert_eq!(
        a.keep_running(running_by("z", &bob, "alice"), "alices")
            .await,
        Ok(true)
    );
    b.keep_outcome(decided_by("z", &bob, 0)).await.unwrap();
    assert_eq!(outcome_ids_of(&b, &bob).await, ["x", "z"]);
}

#[tokio::test]
async fn only_the_decision_that_takes_a_call_keeps_its_running_record_on_any_replica() {
    let test = "only_the_decision_that_takes_a_call_keeps_its_running_record_on_any_replica";
    let Some((a, b)) = two_replicas(test, limits(5, 50, HOUR)).await else {
        return;
    };
    let bob = User::new("bob").with_tenant("acme");
    let kept_by = |decided: Option<DecidedCall>| decided.map(|d| d.result["decided_by"].clone());
    a.save(call_by("x", &bob)).await.unwrap();

    // carol's record is there first (a decision that failed, or lost, left it); alice's
    // take on the other replica keeps hers in the call's place all the same.
    let carols = running_by("x", &bob, "carol");
    assert_eq!(a.keep_running(carols, "carols").await, Ok(true));
    let alices = running_by("x", &bob, "alice");
    let taken = b.take_running("x", alices, "alices").await.unwrap();
    assert_eq!(taken.map(|t| t.id).as_deref(), Some("x"));
    assert_eq!(kept_by(a.outcome("x").await.unwrap()), Some(json!("alice")));

    // carol, late, takes nothing and keeps nothing; only alice's token removes the record
    // (her call went back to wait, say).
    let late = a.take_running("x", running_by("x", &bob, "carol"), "carols");
    assert_eq!(late.await, Ok(None));
    assert_eq!(kept_by(b.outcome("x").await.unwrap()), Some(json!("alice")));
    assert_eq!(a.remove_running("x", "carols").await, Ok(false));
    assert_eq!(a.remove_running("x", "alices").await, Ok(true));
    assert_eq!(b.outcome("x").await, Ok(None));

    // An outcome kept for a waiting call is never replaced by a take's record.
    a.save(call_by("y", &bob)).await.unwrap();
    let outcome = DecidedCall::new("y", &bob, json!({"status": "error"}));
    a.keep_outcome(outcome.clone()).await.unwrap();
    let taken = b.take_running("y", running_by("y", &bob, "alice"), "alices");
    assert!(taken.await.unwrap().is_some());
    assert_eq!(a.outcome("y").await.unwrap(), Some(outcome));

    // Twenty approvers at once on two replicas: one takes the call, and the record is hers.
    a.save(call_by("z", &bob)).await.unwrap();
    let answers = alternately(&a, &b, 20, |i, store| {
        let bob = bob.clone();
        async move {
            let record = running_by("z", &bob, &format!("approver-{i}"));
            let taken = store.take_running("z", record, &format!("token-{i}")).await;
            (i, taken)
        }
    })
    .await;
    let winners: Vec<usize> = answers
        .iter()
        .filter(|(_, taken)| matches!(taken, Ok(Some(_))))
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    let winner = format!("approver-{}", winners[0]);
    assert_eq!(kept_by(b.outcome("z").await.unwrap()), Some(json!(winner)));
}

#[tokio::test]
async fn an_end_kept_over_running_replaces_a_running_record_or_nothing_but_never_an_outcome() {
    let test = "an_end_kept_over_running_replaces_a_running_record_or_nothing_but_never_an_outcome";
    let Some((a, b)) = two_replicas(test, limits(5, 10, HOUR)).await else {
        return;
    };
    let bob = User::new("bob");
    let ended = |id: &str, status: &str| DecidedCall::new(id, &bob, json!({"status": status}));

    // Bob withdraws his running call on one replica; its end, kept after on the other,
    // does not replace the withdrawal.
    assert_eq!(
        a.keep_running(running_by("x", &bob, "alice"), "alices")
            .await,
        Ok(true)
    );
    let withdrawn = ended("x", "withdrawn");
    assert_eq!(
        b.keep_outcome_over_running(withdrawn.clone()).await,
        Ok(true)
    );
    assert_eq!(
        a.keep_outcome_over_running(ended("x", "success")).await,
        Ok(false)
    );
    assert_eq!(a.outcome("x").await, Ok(Some(withdrawn)));

    // Not withdrawn: the end replaces the record, whichever decision kept it, and a
    // withdrawal after it is refused.
    assert_eq!(
        a.keep_running(running_by("y", &bob, "carol"), "carols")
            .await,
        Ok(true)
    );
    let success = ended("y", "success");
    assert_eq!(b.keep_outcome_over_running(success.clone()).await, Ok(true));
    assert_eq!(
        a.keep_outcome_over_running(ended("y", "withdrawn")).await,
        Ok(false)
    );
    assert_eq!(b.outcome("y").await, Ok(Some(success)));
    // Over nothing, it keeps; counted once per id.
    assert_eq!(
        a.keep_outcome_over_running(ended("z", "success")).await,
        Ok(true)
    );
    assert_eq!(outcome_ids_of(&b, &bob).await, ["x", "y", "z"]);
}

#[tokio::test]
async fn an_outcome_an_earlier_version_wrote_over_a_running_record_is_not_removed_by_its_token() {
    let test =
        "an_outcome_an_earlier_version_wrote_over_a_running_record_is_not_removed_by_its_token";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let store = replica(&url, &namespace(), limits(5, 10, HOUR)).await;
    let ann = User::new("ann");
    assert_eq!(
        store
            .keep_running(running_by("x", &ann, "alice"), "alices")
            .await,
        Ok(true)
    );
    // An earlier version keeps its outcome as a plain value over the row, and knows no
    // mark.
    let row = format!("{}:outcome:x", store.key_base());
    let outcome = DecidedCall::new("x", &ann, json!({"status": "success"}));
    let mut connection = inspect(&url).await;
    let _: () = redis::cmd("SET")
        .arg(&row)
        .arg(serde_json::to_vec(&outcome).unwrap())
        .arg("PX")
        .arg(3_600_000)
        .query_async(&mut connection)
        .await
        .unwrap();

    assert_eq!(store.remove_running("x", "alices").await, Ok(false));
    assert_eq!(store.outcome("x").await, Ok(Some(outcome)));
}
