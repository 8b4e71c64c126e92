//! Large waiting calls do not make listings hold Redis: one caller parking many calls of
//! nearly a body limit each, a listing reads only what its page needs, in bounded replies,
//! and the light listing of a watcher reads no stored call at all. Large outcomes likewise.

mod common;

use std::time::{Duration, SystemTime};

use serde_json::{Map, json};
use toolgate_core::suspension::{
    DecidedCall, SuspendedInvocation, SuspensionFilter, SuspensionLimits, SuspensionStore,
};
use toolgate_core::{Stage, User};

use common::{inspect, namespace, redis_or_skip, remove_keys_under};

/// How many calls bob parks, and the size of each one's input (within a 1 MiB body limit).
const CALLS: usize = 40;
const INPUT_BYTES: usize = 900 * 1024;

/// A call of `user` waiting for approval, with an input of `bytes` bytes.
fn large_call(id: &str, user: &str, bytes: usize) -> SuspendedInvocation {
    SuspendedInvocation {
        id: id.into(),
        tool: "upload".into(),
        tool_version: "1".into(),
        session_id: None,
        request_id: format!("req-{id}"),
        user: User::new(user),
        input: json!({ "blob": "x".repeat(bytes) }),
        output: None,
        metadata: Map::new(),
        stage: Stage::WillRedactInput,
        reason: "needs approval".into(),
        payload: json!({"ask": "upload?"}),
        suspended_at: SystemTime::now(),
        expires_at: None,
        binding: None,
    }
}

/// The bytes Redis sent its clients while `op` ran, the least of three runs: Redis is
/// shared with other tests, whose traffic only adds to a run.
async fn bytes_sent_during<F, Fut>(url: &str, op: F) -> u64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut connection = inspect(url).await;
    let mut least = u64::MAX;
    for _ in 0..3 {
        let before = sent(&mut connection).await;
        op().await;
        let after = sent(&mut connection).await;
        least = least.min(after.saturating_sub(before));
    }
    least
}

/// Redis's `total_net_output_bytes`.
async fn sent(connection: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(connection)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
        .and_then(|bytes| bytes.trim().parse().ok())
        .expect("INFO stats gives total_net_output_bytes")
}

#[tokio::test]
async fn large_waiting_calls_are_listed_in_bounded_reads() {
    let test = "large_waiting_calls_are_listed_in_bounded_reads";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let limits = SuspensionLimits {
        max_per_user: 100,
        max_total: 1000,
        expire_after: Duration::from_secs(3600),
        // One caller's calls past the default byte bound: what is read is bounded, not
        // what is kept.
        max_bytes_per_user: usize::MAX,
        ..SuspensionLimits::default()
    };
    let store = common::replica(&url, &prefix).await.suspensions(limits);
    for n in 0..CALLS {
        let call = large_call(&format!("big-{n:02}"), "bob", INPUT_BYTES);
        store.save(call).await.unwrap();
    }

    // Every call is listed still, in id order, from wherever a page starts.
    let all = store
        .list(&SuspensionFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(all.len(), CALLS);
    assert!(all.windows(2).all(|pair| pair[0].id < pair[1].id));
    let next = store
        .list(&SuspensionFilter::default(), Some("big-05"), 3)
        .await
        .unwrap();
    let next: Vec<_> = next.iter().map(|call| call.id.as_str()).collect();
    assert_eq!(next, ["big-06", "big-07", "big-08"]);

    // A page of one reads about one call, not all 40 (36 MB): as an approver lists them,
    // and as bob lists his own.
    let bound = 4 * INPUT_BYTES as u64;
    let everyone = SuspensionFilter::default();
    let approver = bytes_sent_during(&url, || async {
        let page = store.list(&everyone, None, 1).await.unwrap();
        assert_eq!(page.len(), 1);
    })
    .await;
    assert!(
        approver < bound,
        "a page of one waiting call read {approver} bytes"
    );
    let bobs = SuspensionFilter::of_caller(&User::new("bob"));
    let own = bytes_sent_during(&url, || async {
        let page = store.list(&bobs, None, 1).await.unwrap();
        assert_eq!(page[0].id, "big-00");
    })
    .await;
    assert!(own < bound, "a page of one of bob's calls read {own} bytes");

    // The watcher's light listing: every id with its expiry, and no input read.
    let light = bytes_sent_during(&url, || async {
        let listed = store.list_expiries(None, 256).await.unwrap();
        assert_eq!(listed.len(), CALLS);
        assert!(listed.iter().all(|(_, at)| at.is_some()));
    })
    .await;
    assert!(
        light < 64 * 1024,
        "the ids and expiries of {CALLS} calls read {light} bytes"
    );
    eprintln!("bytes read: a page of one {approver}, bob's page of one {own}, light {light}");
    let last = store.list_expiries(Some("big-38"), 5).await.unwrap();
    let last: Vec<_> = last.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(last, ["big-39"]);

    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn a_page_of_decided_calls_reads_what_it_needs_not_every_outcome() {
    let test = "a_page_of_decided_calls_reads_what_it_needs_not_every_outcome";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let limits = SuspensionLimits {
        max_per_user: 100,
        max_total: 1000,
        expire_after: Duration::from_secs(3600),
        ..SuspensionLimits::default()
    };
    let store = common::replica(&url, &prefix).await.suspensions(limits);
    let outcome_bytes = 300 * 1024;
    for n in 0..60 {
        let result = json!({ "tool_name": "upload", "output": "x".repeat(outcome_bytes) });
        let outcome = DecidedCall::new(format!("done-{n:02}"), &User::new("bob"), result);
        store.keep_outcome(outcome).await.unwrap();
    }

    let everyone = SuspensionFilter::default();
    let read = bytes_sent_during(&url, || async {
        let page = store.list_outcomes(&everyone, None, 1).await.unwrap();
        assert_eq!(page[0].id, "done-00");
    })
    .await;
    eprintln!("bytes read: a page of one outcome {read}");
    // One outcome and the few spare ones read with it, not all 60 (18 MB).
    assert!(
        read < 12 * outcome_bytes as u64,
        "a page of one outcome read {read} bytes"
    );
    let all = store.list_outcomes(&everyone, None, 100).await.unwrap();
    assert_eq!(all.len(), 60);

    remove_keys_under(&url, &prefix).await;
}
