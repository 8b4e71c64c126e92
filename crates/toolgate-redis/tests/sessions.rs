//! Sign-in sessions on a real Redis: found through every replica, ended on all at once,
//! bounded exactly in all and per user however many replicas open them together, and every
//! key expiring.

mod common;

use std::time::Duration;

use common::{assert_every_key_expires, keys_under, namespace, redis_or_skip, replica};
use futures::future::join_all;
use toolgate_redis::{FlowBounds, FlowStarted, RedisSessions, SessionBounds, SessionOpened};

const HOUR: Duration = Duration::from_secs(3600);

/// Two replicas' stores under a fresh prefix, and that prefix; `None` when the test is
/// skipped for want of Redis.
async fn two_replicas(test: &str) -> Option<(RedisSessions, RedisSessions, String, String)> {
    let url = redis_or_skip(test).await?;
    let prefix = namespace();
    let a = replica(&url, &prefix).await.sessions();
    let b = replica(&url, &prefix).await.sessions();
    Some((a, b, url, prefix))
}

/// At most `max_total` sign-ins waiting, from any source.
fn in_all(max_total: usize) -> FlowBounds<'static> {
    FlowBounds {
        max_total,
        source: None,
    }
}

fn bounds(max_total: usize, max_per_user: usize) -> SessionBounds {
    SessionBounds {
        max_total,
        max_per_user,
    }
}

/// A session id (the SHA-256 of a cookie's value, as the caller makes it): `n` spread over
/// its bytes.
fn id(n: u32) -> [u8; 32] {
    let mut id = [0u8; 32];
    for chunk in id.chunks_mut(4) {
        chunk.copy_from_slice(&n.to_be_bytes());
    }
    id
}

#[tokio::test]
async fn a_session_opened_on_one_replica_is_found_and_ended_on_another() {
    let test = "a_session_opened_on_one_replica_is_found_and_ended_on_another";
    let Some((a, b, url, prefix)) = two_replicas(test).await else {
        return;
    };
    let opened = a
        .open(&id(1), "alice", r#"{"who":"alice"}"#, HOUR, bounds(10, 2))
        .await
        .unwrap();
    assert_eq!(opened, SessionOpened::Opened { ended: 0 });
    assert_eq!(
        b.find(&id(1)).await.unwrap().as_deref(),
        Some(r#"{"who":"alice"}"#)
    );
    assert_eq!(b.find(&id(2)).await.unwrap(), None, "never opened");

    // The id never reaches Redis in any form but its hex, and every key expires.
    assert!(
        keys_under(&url, &prefix)
            .await
            .iter()
            .any(|key| key.ends_with(&format!(":session:{}", "00000001".repeat(8))))
    );
    assert_every_key_expires(&url, &prefix).await;

    assert!(b.close(&id(1)).await.unwrap(), "ended");
    assert_eq!(a.find(&id(1)).await.unwrap(), None);
    assert!(!a.close(&id(1)).await.unwrap(), "nothing left to end");
    let left = keys_under(&url, &prefix).await;
    assert!(
        left.iter().all(|key| !key.contains(":session:")),
        "{left:?}"
    );
}

#[tokio::test]
async fn a_session_ends_when_its_time_is_up_on_the_servers_clock() {
    let test = "a_session_ends_when_its_time_is_up_on_the_servers_clock";
    let Some((a, b, _, _)) = two_replicas(test).await else {
        return;
    };
    let ttl = Duration::from_millis(300);
    a.open(&id(1), "alice", "r", ttl, bounds(1, 1))
        .await
        .unwrap();
    assert!(b.find(&id(1)).await.unwrap().is_some());
    // The store holds one session in all: the next sign-in is refused until it ends.
    assert_eq!(
        b.open(&id(2), "bob", "r", HOUR, bounds(1, 1))
            .await
            .unwrap(),
        SessionOpened::Full
    );
    // Redis's own clock ends it; wait for that, with room for a loaded machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while b.find(&id(1)).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still live after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        b.open(&id(2), "bob", "r", HOUR, bounds(1, 1))
            .await
            .unwrap(),
        SessionOpened::Opened { ended: 0 },
        "the expired session freed its place"
    );
}

#[tokio::test]
async fn signing_in_past_the_bound_per_user_ends_that_users_oldest_sessions_only() {
    let test = "signing_in_past_the_bound_per_user_ends_that_users_oldest_sessions_only";
    let Some((a, b, _, _)) = two_replicas(test).await else {
        return;
    };
    b.open(&id(100), "bob", "bob", HOUR, bounds(10, 2))
        .await
        .unwrap();
    // Alice signs in four times, in turn on each replica, within a millisecond or so.
    let mut ended = Vec::new();
    for n in 1..=4 {
        let store = if n % 2 == 0 { &a } else { &b };
        match store
            .open(&id(n), "alice", "alice", HOUR, bounds(10, 2))
            .await
            .unwrap()
        {
            SessionOpened::Opened { ended: e } => ended.push(e),
            SessionOpened::Full => panic!("room for ten"),
        }
    }
    assert_eq!(ended, [0, 0, 1, 1]);
    for (n, live) in [(1, false), (2, false), (3, true), (4, true), (100, true)] {
        assert_eq!(a.find(&id(n)).await.unwrap().is_some(), live, "session {n}");
    }
}

#[tokio::test]
async fn concurrent_sign_ins_from_two_replicas_keep_both_bounds_exactly() {
    let test = "concurrent_sign_ins_from_two_replicas_keep_both_bounds_exactly";
    let Some((a, b, url, prefix)) = two_replicas(test).await else {
        return;
    };
    // 40 sign-ins at once: 20 by one user (bound 3), 20 by twenty others (5 places in all).
    let opens = (0..40u32).map(|n| {
        let store = if n % 2 == 0 { a.clone() } else { b.clone() };
        let user = if n < 20 {
            "mallory".to_owned()
        } else {
            format!("user{n}")
        };
        tokio::spawn(async move {
            let opened = store
                .open(&id(n), &user, "r", HOUR, bounds(5, 3))
                .await
                .unwrap();
            (n, opened)
        })
    });
    let answers: Vec<_> = join_all(opens)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let mut live = Vec::new();
    for n in 0..40 {
        if a.find(&id(n)).await.unwrap().is_some() {
            live.push(n);
        }
    }
    assert_eq!(live.len(), 5, "five places in all: {live:?} of {answers:?}");
    let mallorys = live.iter().filter(|n| **n < 20).count();
    assert!(mallorys <= 3, "at most three of one user: {live:?}");
    assert!(
        answers
            .iter()
            .any(|(_, opened)| *opened == SessionOpened::Full),
        "the sixth sign-in of another user is refused"
    );
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test]
async fn a_sign_in_waiting_for_its_callback_is_taken_once_on_any_replica() {
    let test = "a_sign_in_waiting_for_its_callback_is_taken_once_on_any_replica";
    let Some((a, b, url, prefix)) = two_replicas(test).await else {
        return;
    };
    let start = async |store: &RedisSessions, state: &str, ttl: Duration| {
        store
            .start_flow(state, &format!("verifier-{state}"), ttl, in_all(2))
            .await
            .unwrap()
    };
    assert_eq!(start(&a, "s1", HOUR).await, FlowStarted::Kept);
    assert_eq!(start(&a, "s2", HOUR).await, FlowStarted::Kept);
    assert_eq!(start(&b, "s3", HOUR).await, FlowStarted::Full, "two wait");
    assert_every_key_expires(&url, &prefix).await;

    // Both replicas race for the same callback: one gets the verifier.
    let (x, y) = tokio::join!(b.finish_flow("s1"), a.finish_flow("s1"));
    let mut taken = [x.unwrap(), y.unwrap()];
    taken.sort();
    assert_eq!(taken, [None, Some("verifier-s1".to_owned())]);
    assert_eq!(b.finish_flow("made-up").await.unwrap(), None);

    // A taken flow frees its place.
    assert_eq!(start(&b, "s3", HOUR).await, FlowStarted::Kept);
    // One whose time is up is gone.
    let moment = Duration::from_millis(1);
    assert_eq!(start(&a, "s4", moment).await, FlowStarted::Full, "two wait");
    assert_eq!(
        a.finish_flow("s2").await.unwrap().as_deref(),
        Some("verifier-s2")
    );
    assert_eq!(start(&a, "s4", moment).await, FlowStarted::Kept);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(b.finish_flow("s4").await.unwrap(), None, "expired");
}

#[tokio::test]
async fn one_source_is_held_to_its_allowance_of_waiting_sign_ins_on_every_replica() {
    let test = "one_source_is_held_to_its_allowance_of_waiting_sign_ins_on_every_replica";
    let Some((a, b, url, prefix)) = two_replicas(test).await else {
        return;
    };
    let from = |source: &'static str| FlowBounds {
        max_total: 10,
        source: Some((source, 3)),
    };
    // Three from one source, started on both replicas at once: all kept.
    let started = join_all((0..3).map(|n| {
        let store = if n % 2 == 0 { &a } else { &b };
        store.start_flow(["f0", "f1", "f2"][n], "v", HOUR, from("203.0.113.7"))
    }))
    .await;
    assert!(started.into_iter().all(|s| s.unwrap() == FlowStarted::Kept));
    assert_every_key_expires(&url, &prefix).await;
    // The fourth is refused on either, until the oldest would expire.
    for store in [&a, &b] {
        match store
            .start_flow("f3", "v", HOUR, from("203.0.113.7"))
            .await
            .unwrap()
        {
            FlowStarted::SourceFull { retry_after } => {
                assert!(
                    retry_after <= HOUR && retry_after > HOUR / 2,
                    "{retry_after:?}"
                );
            }
            other => panic!("a fourth from one source: {other:?}"),
        }
    }
    // Another source, and a sign-in counted in all only, are not held to it.
    let other = a.start_flow("g0", "v", HOUR, from("198.51.100.2"));
    assert_eq!(other.await.unwrap(), FlowStarted::Kept);
    let unknown = b.start_flow("g1", "v", HOUR, in_all(10));
    assert_eq!(unknown.await.unwrap(), FlowStarted::Kept);
    // One finished on the other replica gives the source its place back.
    assert_eq!(b.finish_flow("f0").await.unwrap().as_deref(), Some("v"));
    let again = a.start_flow("f3", "v", HOUR, from("203.0.113.7"));
    assert_eq!(again.await.unwrap(), FlowStarted::Kept);
    let over = b.start_flow("f4", "v", HOUR, from("203.0.113.7"));
    assert!(matches!(
        over.await.unwrap(),
        FlowStarted::SourceFull { .. }
    ));
    // A refusal in all keeps nothing for the source either.
    let full = FlowBounds {
        max_total: 5,
        source: Some(("192.0.2.1", 3)),
    };
    assert_eq!(
        a.start_flow("h0", "v", HOUR, full).await.unwrap(),
        FlowStarted::Full
    );
    let mut source_keys = keys_under(&url, &prefix).await;
    source_keys.retain(|key| key.contains("192.0.2.1"));
    assert!(source_keys.is_empty(), "{source_keys:?}");
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test]
async fn a_store_without_redis_says_so_within_its_deadline() {
    let test = "a_store_without_redis_says_so_within_its_deadline";
    let Some((proxy, state)) = common::behind_proxy(test).await else {
        return;
    };
    let sessions = state.sessions();
    assert!(sessions.find(&id(1)).await.unwrap().is_none());
    proxy.stall();
    let started = tokio::time::Instant::now();
    let error = sessions.find(&id(1)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        error.to_string().contains("try again once Redis answers"),
        "{error}"
    );
    assert!(
        sessions
            .open(&id(1), "alice", "r", HOUR, bounds(1, 1))
            .await
            .is_err()
    );
}

/// The key of the replicas that seal what they keep, and another one.
const KEY: &str = "8f3c1e0a9b7d5f2e4c6a8b0d1f3e5a7c9b2d4f6e8a0c1e3b5d7f9a2c4e6b8d0f";
const OTHER_KEY: &str = "0f3c1e0a9b7d5f2e4c6a8b0d1f3e5a7c9b2d4f6e8a0c1e3b5d7f9a2c4e6b8d00";

#[tokio::test]
async fn with_a_key_records_and_secrets_are_sealed_and_open_only_with_that_key() {
    let test = "with_a_key_records_and_secrets_are_sealed_and_open_only_with_that_key";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let store = async |key: Option<&str>| {
        let sessions = replica(&url, &prefix).await.sessions();
        match key {
            Some(key) => sessions.with_encryption_key(key.as_bytes()).unwrap(),
            None => sessions,
        }
    };
    let (a, b) = (store(Some(KEY)).await, store(Some(KEY)).await);
    assert!(a.is_encrypted());
    let record = r#"{"user":"carol","email":"carol@example.com"}"#;
    a.open(&id(1), "carol", record, HOUR, bounds(10, 2))
        .await
        .unwrap();
    let started = a.start_flow("s1", "the-verifier", HOUR, in_all(4)).await;
    assert_eq!(started.unwrap(), FlowStarted::Kept);
    assert_eq!(b.find(&id(1)).await.unwrap().as_deref(), Some(record));

    // What Redis holds says nothing of the record or the secret.
    let mut raw = common::inspect(&url).await;
    for key in keys_under(&url, &prefix).await {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "hash" => redis::cmd("HVALS").arg(&key).query_async(&mut raw).await,
            "string" => redis::cmd("GET")
                .arg(&key)
                .query_async::<Vec<u8>>(&mut raw)
                .await
                .map(|v| vec![v]),
            _ => Ok(Vec::new()),
        }
        .unwrap();
        for value in values {
            let text = String::from_utf8_lossy(&value);
            assert!(
                !text.contains("carol@") && !text.contains("the-verifier"),
                "`{key}` holds {text}"
            );
        }
    }

    // A replica without the key, or with another, finds no session and no secret.
    let without = store(None).await;
    let other = store(Some(OTHER_KEY)).await;
    assert_eq!(without.find(&id(1)).await.unwrap(), None);
    assert_eq!(other.find(&id(1)).await.unwrap(), None);
    assert_eq!(other.finish_flow("s1").await.unwrap(), None);
    // A record written without the key is not taken by a replica that requires it.
    without
        .open(&id(2), "dan", r#"{"user":"dan"}"#, HOUR, bounds(10, 2))
        .await
        .unwrap();
    assert_eq!(a.find(&id(2)).await.unwrap(), None);
}
