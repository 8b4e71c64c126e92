//! Pinned tool definitions on a real Redis: a tool pinned, changed or accepted through one
//! replica is so for every replica, two replicas checking one tool at once pin it and record
//! its change once, a forgotten pin is gone for every replica, and a stalled Redis says so
//! within the deadline.

mod common;

use common::{namespace, redis_or_skip, remove_keys_under, replica};
use futures::future::join_all;
use serde_json::Value;
use toolgate_redis::PinCheck;

fn events(history: &[String]) -> Vec<(String, String, String)> {
    history
        .iter()
        .map(|entry| {
            let entry: Value = serde_json::from_str(entry).expect("a history entry is JSON");
            assert!(
                entry["at_ms"].as_u64().unwrap() > 1_700_000_000_000,
                "{entry}"
            );
            let text = |field: &str| entry[field].as_str().unwrap().to_owned();
            (text("tool"), text("event"), text("fingerprint"))
        })
        .collect()
}

#[tokio::test]
async fn a_pin_change_and_acceptance_through_one_replica_hold_for_another() {
    let test = "a_pin_change_and_acceptance_through_one_replica_hold_for_another";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix).await.pins();
    let b = replica(&url, &prefix).await.pins();

    assert_eq!(
        a.check("search", "sha256:aa", r#"{"d":"Searches."}"#)
            .await
            .unwrap(),
        PinCheck::Pinned
    );
    assert_eq!(
        b.check("search", "sha256:aa", r#"{"d":"Searches."}"#)
            .await
            .unwrap(),
        PinCheck::Same
    );
    // The upstream changes the tool: B sees it first, A finds the change waiting.
    let changed = b
        .check("search", "sha256:bb", r#"{"d":"Mails."}"#)
        .await
        .unwrap();
    assert_eq!(changed, PinCheck::Changed);
    assert!(!changed.serves());
    assert_eq!(
        a.check("search", "sha256:bb", r#"{"d":"Mails."}"#)
            .await
            .unwrap(),
        PinCheck::StillChanged
    );
    let stored = a.read().await.unwrap();
    assert_eq!(stored.pinned["search"].fingerprint, "sha256:aa");
    assert_eq!(stored.pinned["search"].definition, r#"{"d":"Searches."}"#);
    assert_eq!(stored.pending["search"].fingerprint, "sha256:bb");
    assert_eq!(stored.pending["search"].definition, r#"{"d":"Mails."}"#);

    // Accepted through A: B serves the new definition, and nothing waits any more.
    assert_eq!(
        a.accept("search").await.unwrap().as_deref(),
        Some("sha256:bb")
    );
    assert_eq!(b.accept("search").await.unwrap(), None, "accepted once");
    assert_eq!(
        b.check("search", "sha256:bb", r#"{"d":"Mails."}"#)
            .await
            .unwrap(),
        PinCheck::Same
    );
    let stored = b.read().await.unwrap();
    assert_eq!(stored.pinned["search"].definition, r#"{"d":"Mails."}"#);
    assert!(stored.pending.is_empty());
    assert_eq!(a.accept("never-seen").await.unwrap(), None);

    // A change that goes back to the pin before anyone accepts it is withdrawn.
    a.check("search", "sha256:cc", "{}").await.unwrap();
    assert_eq!(
        b.check("search", "sha256:bb", r#"{"d":"Mails."}"#)
            .await
            .unwrap(),
        PinCheck::Withdrawn
    );
    assert!(a.read().await.unwrap().pending.is_empty());

    let history = events(&b.history(10).await.unwrap());
    let expected = [
        ("search", "changed", "sha256:cc"),
        ("search", "accepted", "sha256:bb"),
        ("search", "changed", "sha256:bb"),
        ("search", "pinned", "sha256:aa"),
    ]
    .map(|(t, e, f)| (t.to_owned(), e.to_owned(), f.to_owned()));
    assert_eq!(history, expected, "newest first, each once");
    assert_eq!(b.history(1).await.unwrap().len(), 1);
    assert!(b.history(0).await.unwrap().is_empty());

    // Pins never expire; every key is under the store's base.
    let mut keys = remove_keys_under(&url, &prefix).await;
    keys.sort();
    let base = format!("{prefix}:{{{prefix}:pins}}");
    let expected = ["history", "pinned", "pinned_forms"].map(|k| format!("{base}:{k}"));
    assert_eq!(
        keys, expected,
        "the hashes of changes waiting are gone once empty"
    );
}

#[tokio::test]
async fn two_replicas_checking_at_once_pin_a_tool_once_and_record_its_change_once() {
    let test = "two_replicas_checking_at_once_pin_a_tool_once_and_record_its_change_once";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix).await.pins();
    let b = replica(&url, &prefix).await.pins();
    // Each replica is offered its own first definition, 20 times at once.
    let first = (0..40).map(|n| {
        let (pins, fingerprint) = if n % 2 == 0 {
            (a.clone(), "sha256:from-a")
        } else {
            (b.clone(), "sha256:from-b")
        };
        tokio::spawn(async move { pins.check("fetch", fingerprint, "{}").await })
    });
    let found: Vec<PinCheck> = join_all(first)
        .await
        .into_iter()
        .map(|checked| checked.unwrap().unwrap())
        .collect();
    let pinned = found.iter().filter(|c| **c == PinCheck::Pinned).count();
    assert_eq!(pinned, 1, "{found:?}");
    let winner = a.read().await.unwrap().pinned["fetch"].fingerprint.clone();
    // Every check of the other definition found it a change; one recorded it.
    let changed = found.iter().filter(|c| **c == PinCheck::Changed).count();
    let still = found
        .iter()
        .filter(|c| **c == PinCheck::StillChanged)
        .count();
    let same = found.iter().filter(|c| **c == PinCheck::Same).count();
    assert_eq!(
        (changed, still + changed, same + pinned),
        (1, 20, 20),
        "{found:?}"
    );
    let history = events(&a.history(100).await.unwrap());
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[1].1, "pinned");
    assert_eq!(history[1].2, winner);
    assert_eq!(history[0].1, "changed");
    assert_ne!(history[0].2, winner);
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn tool_names_that_need_escaping_are_kept_as_they_are() {
    let test = "tool_names_that_need_escaping_are_kept_as_they_are";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let pins = replica(&url, &prefix).await.pins();
    let name = "a\"quoted\\name\nwith ümlaut/{slot}";
    pins.check(name, "sha256:\"", "[]").await.unwrap();
    assert_eq!(
        pins.read().await.unwrap().pinned[name].fingerprint,
        "sha256:\""
    );
    let history = events(&pins.history(5).await.unwrap());
    assert_eq!(
        history,
        [(name.to_owned(), "pinned".to_owned(), "sha256:\"".to_owned())]
    );
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn pins_without_redis_say_so_within_their_deadline() {
    let test = "pins_without_redis_say_so_within_their_deadline";
    let Some((proxy, state)) = common::behind_proxy(test).await else {
        return;
    };
    let pins = state.pins();
    pins.check("search", "sha256:aa", "{}").await.unwrap();
    proxy.stall();
    let error = pins.check("search", "sha256:aa", "{}").await.unwrap_err();
    assert!(
        error.to_string().contains("try again once Redis answers"),
        "{error}"
    );
    assert!(pins.accept("search").await.is_err());
    assert!(pins.read().await.is_err());
    assert!(pins.history(5).await.is_err());
    assert!(pins.forget("search").await.is_err());
}

#[tokio::test]
async fn an_import_pins_what_is_unknown_and_leaves_a_change_waiting_in_place() {
    let test = "an_import_pins_what_is_unknown_and_leaves_a_change_waiting_in_place";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let pins = replica(&url, &prefix).await.pins();
    pins.check("search", "sha256:aa", "{}").await.unwrap();
    pins.check("search", "sha256:bb", "{}").await.unwrap();
    // A pin file that pinned `search` alike: the change a replica saw still waits.
    let imported = pins.import("search", "sha256:aa", "{}").await.unwrap();
    assert_eq!(imported, PinCheck::Same);
    assert_eq!(
        pins.read().await.unwrap().pending["search"].fingerprint,
        "sha256:bb"
    );
    // A pin file whose own change of `search` waited: the one a replica saw stays.
    assert_eq!(
        pins.import("search", "sha256:cc", "{}").await.unwrap(),
        PinCheck::StillChanged
    );
    assert_eq!(
        pins.read().await.unwrap().pending["search"].fingerprint,
        "sha256:bb"
    );
    // One that pinned it otherwise: held back for an approver. An unknown tool: pinned.
    assert_eq!(
        pins.import("fetch", "sha256:ff", "{}").await.unwrap(),
        PinCheck::Pinned
    );
    assert_eq!(
        pins.import("fetch", "sha256:00", "{}").await.unwrap(),
        PinCheck::Changed
    );
    remove_keys_under(&url, &prefix).await;
}

#[tokio::test]
async fn a_forgotten_pin_is_gone_for_every_replica_and_pinned_afresh_when_offered_again() {
    let test = "a_forgotten_pin_is_gone_for_every_replica_and_pinned_afresh_when_offered_again";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let a = replica(&url, &prefix).await.pins();
    let b = replica(&url, &prefix).await.pins();
    a.check("search", "sha256:aa", r#"{"d":"Searches."}"#)
        .await
        .unwrap();
    a.check("search", "sha256:bb", r#"{"d":"Mails."}"#)
        .await
        .unwrap();
    a.check("fetch", "sha256:ff", "{}").await.unwrap();

    assert_eq!(
        b.forget("search").await.unwrap().as_deref(),
        Some("sha256:aa")
    );
    assert_eq!(b.forget("search").await.unwrap(), None, "forgotten once");
    assert_eq!(b.forget("never-seen").await.unwrap(), None);
    let left = a.read().await.unwrap();
    assert_eq!(left.pinned.keys().collect::<Vec<_>>(), ["fetch"]);
    assert!(
        left.pending.is_empty(),
        "the change waiting went with the pin"
    );
    assert_eq!(
        events(&a.history(1).await.unwrap()),
        [(
            "search".to_owned(),
            "forgotten".to_owned(),
            "sha256:aa".to_owned()
        )]
    );
    // Offered again, the tool is trusted on first use, as the definition offered now.
    assert_eq!(
        a.check("search", "sha256:bb", r#"{"d":"Mails."}"#)
            .await
            .unwrap(),
        PinCheck::Pinned
    );
    assert_eq!(
        b.read().await.unwrap().pinned["search"].definition,
        r#"{"d":"Mails."}"#
    );
    remove_keys_under(&url, &prefix).await;
}
