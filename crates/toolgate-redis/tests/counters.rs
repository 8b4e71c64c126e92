//! Per-tool counts shared on a real Redis: what each replica adds is summed for all, a
//! flood of tool names is bounded, a reset starts them over for every replica, every key
//! expires, and a stalled Redis says so within the deadline.

mod common;

use std::time::Duration;

use common::{
    assert_every_key_expires, inspect, namespace, redis_or_skip, remove_keys_under, replica,
};
use futures::future::join_all;
use redis::AsyncCommands;

const KEEP: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn what_each_replica_adds_is_summed_for_every_replica() {
    let test = "what_each_replica_adds_is_summed_for_every_replica";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix).await.counters(100, KEEP);
    let b = replica(&url, &prefix).await.counters(100, KEEP);
    assert_eq!(a.read().await.unwrap().since_ms, None);
    let odd = "a\"quoted\\name\nwith ümlaut/{slot}";

    a.add(&[("search", &[("calls", 3), ("errors", 1)][..])])
        .await
        .unwrap();
    // Many additions at once from both replicas: none is lost.
    let adds = (0..20).map(|n| {
        let replica = if n % 2 == 0 { &a } else { &b };
        async move {
            replica
                .add(&[
                    ("search", &[("calls", 1)][..]),
                    (odd, &[("calls", 2), ("b3", 5)][..]),
                ])
                .await
        }
    });
    for added in join_all(adds).await {
        added.unwrap();
    }

    let all = b.read().await.unwrap();
    assert_eq!(all.tools["search"]["calls"], 23);
    assert_eq!(all.tools["search"]["errors"], 1);
    assert_eq!(all.tools[odd]["calls"], 40);
    assert_eq!(all.tools[odd]["b3"], 100);
    assert_eq!(all, a.read().await.unwrap());
    let since = all.since_ms.expect("the first addition's time");
    assert!(since > 1_700_000_000_000, "{since}");
    // Later additions leave the start where it was.
    a.add(&[("search", &[("calls", 1)][..])]).await.unwrap();
    assert_eq!(a.read().await.unwrap().since_ms, Some(since));
    assert_every_key_expires(&url, &prefix).await;
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn a_reset_starts_the_counts_over_and_every_replica_learns_of_it_at_its_next_addition() {
    let test = "a_reset_starts_the_counts_over_and_every_replica_learns_of_it_at_its_next_addition";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    // Room for two tools: the reset must free the places the old ones held.
    let a = replica(&url, &prefix).await.counters(2, KEEP);
    let b = replica(&url, &prefix).await.counters(2, KEEP);
    assert_eq!(b.add(&[]).await.unwrap(), None, "nothing was ever added");
    let first = a
        .add(&[("old1", &[("calls", 3)][..]), ("old2", &[("calls", 1)][..])])
        .await
        .unwrap()
        .expect("a start once counts were added");
    assert_eq!(
        b.add(&[]).await.unwrap(),
        Some(first),
        "an empty addition adds nothing"
    );
    tokio::time::sleep(Duration::from_millis(5)).await;

    let started = a.reset().await.unwrap();
    assert!(started > first, "{started} after {first}");
    let all = b.read().await.unwrap();
    assert_eq!(
        (all.since_ms, all.tools.len()),
        (Some(started), 0),
        "{all:?}"
    );
    // The other replica's next addition answers the new start: it learns of the reset.
    assert_eq!(
        b.add(&[("new", &[("calls", 1)][..])]).await.unwrap(),
        Some(started)
    );
    a.add(&[("newer", &[("calls", 2)][..])]).await.unwrap();
    let all = a.read().await.unwrap();
    let tools: Vec<(&str, u64)> = all
        .tools
        .iter()
        .map(|(tool, fields)| (tool.as_str(), fields["calls"]))
        .collect();
    assert_eq!(tools, [("new", 1), ("newer", 2)], "not under `other`");
    assert_every_key_expires(&url, &prefix).await;
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn a_reset_within_the_millisecond_the_counts_started_still_moves_the_start() {
    let test = "a_reset_within_the_millisecond_the_counts_started_still_moves_the_start";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix).await.counters(2, KEEP);
    let mut last = a
        .add(&[("echo", &[("calls", 1)][..])])
        .await
        .unwrap()
        .expect("a start once counts were added");
    // Loopback Redis answers in well under a millisecond: without the rule, most of
    // these resets would land in the millisecond before them, and nobody would learn
    // of them.
    for _ in 0..20 {
        let started = a.reset().await.unwrap();
        assert!(started > last, "{started} after {last}");
        last = started;
    }
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn tools_past_the_bound_are_counted_as_other() {
    let test = "tools_past_the_bound_are_counted_as_other";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let counters = replica(&url, &prefix).await.counters(3, KEEP);
    let names: Vec<String> = (0..10).map(|n| format!("t{n}")).collect();
    let batch: Vec<(&str, &[(&str, u64)])> = names
        .iter()
        .map(|n| (n.as_str(), &[("calls", 1)][..]))
        .collect();
    counters.add(&batch).await.unwrap();
    counters.add(&[("t0", &[("calls", 1)][..])]).await.unwrap();
    let all = counters.read().await.unwrap();
    let tools: Vec<&str> = all.tools.keys().map(String::as_str).collect();
    assert_eq!(tools, ["other", "t0", "t1", "t2"]);
    assert_eq!(all.tools["other"]["calls"], 7);
    assert_eq!(all.tools["t0"]["calls"], 2);
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn counters_without_redis_say_so_within_their_deadline() {
    let test = "counters_without_redis_say_so_within_their_deadline";
    let Some((proxy, state)) = common::behind_proxy(test).await else {
        return;
    };
    let counters = state.counters(10, KEEP);
    counters
        .add(&[("search", &[("calls", 1)][..])])
        .await
        .unwrap();
    proxy.stall();
    let error = counters
        .add(&[("search", &[("calls", 1)][..])])
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("try again once Redis answers"),
        "{error}"
    );
    assert!(counters.read().await.is_err());
}

/// A count no replica could have written (another writer's text, a count at the largest
/// number Redis keeps, a key of another type) must not fail the addition half way: the
/// tools added before it would stay added, and the replica, told the addition failed,
/// would add them again at its next flush, and again at every one after.
#[tokio::test]
async fn an_unreadable_count_neither_fails_an_addition_nor_counts_the_other_tools_twice() {
    let test = "an_unreadable_count_neither_fails_an_addition_nor_counts_the_other_tools_twice";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let counters = replica(&url, &prefix).await.counters(100, KEEP);
    let base = format!("{prefix}:{{{prefix}:counters}}");
    let mut redis = inspect(&url).await;
    let _: () = redis
        .hset(format!("{base}:tool:text"), "calls", "not a count")
        .await
        .unwrap();
    let _: () = redis
        .hset(format!("{base}:tool:full"), "calls", i64::MAX)
        .await
        .unwrap();
    let _: () = redis
        .set(format!("{base}:tool:string"), "not a hash")
        .await
        .unwrap();

    let batch = [
        ("a", &[("calls", 1)][..]),
        ("full", &[("calls", 5), ("errors", 1)][..]),
        ("string", &[("calls", 3)][..]),
        ("text", &[("calls", 2)][..]),
        ("z", &[("calls", 1)][..]),
    ];
    counters.add(&batch).await.expect("the addition is made");
    counters.add(&[("a", &[("calls", 1)][..])]).await.unwrap();

    let all = counters.read().await.unwrap();
    assert_eq!(all.tools["a"]["calls"], 2, "added once each time");
    assert_eq!(all.tools["z"]["calls"], 1);
    // The count that cannot grow stays at the largest; the others start over.
    assert_eq!(all.tools["full"]["calls"], i64::MAX as u64);
    assert_eq!(all.tools["full"]["errors"], 1);
    assert_eq!(all.tools["string"]["calls"], 3);
    assert_eq!(all.tools["text"]["calls"], 2);
    assert_every_key_expires(&url, &prefix).await;
    remove_keys_under(&url, &prefix).await;
}
