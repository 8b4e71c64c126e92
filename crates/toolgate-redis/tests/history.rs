//! A history on a real Redis: entries kept through any replica are read through every other,
//! newest first, the bound holds however many replicas keep entries at once, and the list
//! expires.

mod common;

use std::time::Duration;

use common::{assert_every_key_expires, namespace, redis_or_skip, replica};
use futures::future::join_all;

const DAY: Duration = Duration::from_secs(24 * 3600);

#[tokio::test]
async fn entries_kept_through_two_replicas_are_read_newest_first_within_the_bound() {
    let test = "entries_kept_through_two_replicas_are_read_newest_first_within_the_bound";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix).await.history("decisions", 5, DAY);
    let b = replica(&url, &prefix).await.history("decisions", 5, DAY);
    a.record("one").await.unwrap();
    b.record("two").await.unwrap();
    assert_eq!(a.newest(10).await.unwrap(), ["two", "one"]);
    assert_eq!(b.newest(1).await.unwrap(), ["two"]);
    assert!(b.newest(0).await.unwrap().is_empty());

    // 40 entries at once from both replicas: five are kept, the last ones taken.
    let records = (0..40).map(|n| {
        let history = if n % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move { history.record(&format!("entry {n}")).await })
    });
    for recorded in join_all(records).await {
        recorded.unwrap().unwrap();
    }
    let kept = b.newest(100).await.unwrap();
    assert_eq!(kept.len(), 5, "{kept:?}");
    assert!(
        kept.iter().all(|entry| entry.starts_with("entry ")),
        "{kept:?}"
    );
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test]
async fn a_history_without_redis_says_so_within_its_deadline() {
    let test = "a_history_without_redis_says_so_within_its_deadline";
    let Some((proxy, state)) = common::behind_proxy(test).await else {
        return;
    };
    let history = state.history("decisions", 5, DAY);
    history.record("kept").await.unwrap();
    proxy.stall();
    let error = history.newest(5).await.unwrap_err();
    assert!(
        error.to_string().contains("try again once Redis answers"),
        "{error}"
    );
    assert!(history.record("lost").await.is_err());
}

#[tokio::test]
async fn with_a_key_entries_are_sealed_and_read_only_with_that_key() {
    let test = "with_a_key_entries_are_sealed_and_read_only_with_that_key";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let key = "8f3c1e0a9b7d5f2e4c6a8b0d1f3e5a7c9b2d4f6e8a0c1e3b5d7f9a2c4e6b8d0f";
    let state = replica(&url, &prefix).await;
    let sealed = state
        .history("decisions", 5, DAY)
        .with_encryption_key(key.as_bytes())
        .unwrap();
    let entry = r#"{"reason":"the customer asked"}"#;
    sealed.record(entry).await.unwrap();
    assert_eq!(sealed.newest(5).await.unwrap(), [entry]);

    let raw: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(format!("{prefix}:history:decisions"))
        .arg(0)
        .arg(-1)
        .query_async(&mut common::inspect(&url).await)
        .await
        .unwrap();
    assert_eq!(raw.len(), 1);
    assert!(!String::from_utf8_lossy(&raw[0]).contains("customer"));

    // Without the key the entry is left out, not shown as noise.
    let plain = state.history("decisions", 5, DAY);
    assert!(plain.newest(5).await.unwrap().is_empty());
    plain.record(r#"{"reason":"plain"}"#).await.unwrap();
    assert_eq!(
        sealed.newest(5).await.unwrap(),
        [entry],
        "the plain one is left out"
    );
}
