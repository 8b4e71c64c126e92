//! A history on a real Redis: entries kept through any replica are read through every other,
//! newest first, the bound holds however many replicas keep entries at once, and the list
//! expires.

mod common;

use std::time::Duration;

use common::{assert_every_key_expires, config, connect, namespace, redis_or_skip};
use futures::future::join_all;

const DAY: Duration = Duration::from_secs(24 * 3600);

#[tokio::test]
async fn entries_kept_through_two_replicas_are_read_newest_first_within_the_bound() {
    let test = "entries_kept_through_two_replicas_are_read_newest_first_within_the_bound";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let replica = async || {
        connect(&url, config(&prefix).deadline(Duration::from_secs(5)))
            .await
            .history("decisions", 5, DAY)
    };
    let (a, b) = (replica().await, replica().await);
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
    if redis_or_skip(test).await.is_none() {
        return;
    }
    let proxy = common::Proxy::start(&common::redis_url()).await;
    let state = connect(
        &proxy.url(),
        config(&namespace()).deadline(Duration::from_millis(200)),
    )
    .await;
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
