//! A resource subscription lives no longer than the session that made it. A 2025-11-25
//! session that subscribed and then ended (`DELETE /mcp`, or its idle expiry) leaves
//! nothing behind: the gateway forgets its subscriptions, and the upstream is unsubscribed
//! from a resource nobody else watches — so that one key opening, subscribing and ending
//! session after session holds nothing at the gateway or the upstream past the sessions
//! it has open. A session ending never ends another caller's subscription.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::common::{
    Gateway, eventually, mcp, mcp_rpc, open_session, python, python_mcp_available, user_yaml,
};
use crate::pipeline_paths::{events_matching, updates_in, watch_session};

/// The gateway importing `tests/upstreams/paths.py` (which writes every subscribe and
/// unsubscribe it receives to `events`), alice and bob allowed everything.
fn start(events: &Path) -> Gateway {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/paths.py");
    Gateway::start(&format!(
        "upstreams:\n  - name: paths\n    command: {python}\n    args: [\"{script}\"]\n    env: {{ PATHS_EVENTS: \"{events}\" }}\n\
policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, users: [alice, bob] }}\n\
users:\n{alice}{bob}",
        python = python(),
        events = events.display(),
        alice = user_yaml("alice", &["analyst"]),
        bob = user_yaml("bob", &["analyst"]),
    ))
}

/// Subscribes `user`'s `session` to `uri`.
async fn subscribe(gateway: &Gateway, user: &str, session: &str, uri: &str) {
    let answer = mcp_rpc(
        gateway,
        user,
        session,
        "resources/subscribe",
        json!({ "uri": uri }),
    )
    .await;
    assert!(
        answer.get("error").is_none(),
        "{user} subscribes {uri}: {answer}"
    );
}

/// Ends `user`'s `session` with `DELETE /mcp`.
async fn end(gateway: &Gateway, user: &str, session: &str) {
    let (status, _, body) = mcp(gateway, Method::DELETE, user, Some(session), None).await;
    assert!((200..300).contains(&status), "({status}) {body}");
}

#[tokio::test]
async fn a_session_that_ends_leaves_no_subscription_behind_and_ends_no_one_elses() {
    if !python_mcp_available(
        "a_session_that_ends_leaves_no_subscription_behind_and_ends_no_one_elses",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let gateway = start(&events);

    // One key, session after session: open, subscribe to a resource of its own, end.
    let items = 5;
    for n in 0..items {
        let session = open_session(&gateway, "alice").await;
        subscribe(&gateway, "alice", &session, &format!("paths://item/{n}")).await;
        end(&gateway, "alice", &session).await;
    }
    eventually(
        "the upstream is unsubscribed from each resource whose only session ended",
        Duration::from_secs(10),
        || async {
            (0..items)
                .all(|n| events_matching(&events, &format!("unsubscribe paths://item/{n}")) == 1)
        },
    )
    .await;

    // Bob and alice watch the same resource; alice's session ending leaves bob's
    // subscription whole, and the upstream subscribed for him.
    let bobs = open_session(&gateway, "bob").await;
    let bob_seen = watch_session(&gateway, "bob", &bobs).await;
    subscribe(&gateway, "bob", &bobs, "paths://watched").await;
    let alices = open_session(&gateway, "alice").await;
    subscribe(&gateway, "alice", &alices, "paths://watched").await;
    end(&gateway, "alice", &alices).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        events_matching(&events, "unsubscribe paths://watched"),
        0,
        "alice's session ending unsubscribed the upstream from what bob watches:\n{}",
        gateway.stderr()
    );
    let before = updates_in(&bob_seen);
    eventually(
        "bob still receives updates",
        Duration::from_secs(10),
        || async { updates_in(&bob_seen) >= before + 2 },
    )
    .await;

    end(&gateway, "bob", &bobs).await;
    eventually(
        "the upstream is unsubscribed once the last session watching ended",
        Duration::from_secs(10),
        || async { events_matching(&events, "unsubscribe paths://watched") == 1 },
    )
    .await;
}

/// How many resources one session may be subscribed to on one upstream
/// (`MAX_SUBSCRIPTIONS` in `toolgate-mcp`).
const MAX_SUBSCRIPTIONS: usize = 256;

#[tokio::test]
async fn one_session_holds_a_bounded_number_of_subscriptions_and_another_callers_are_untouched() {
    if !python_mcp_available(
        "one_session_holds_a_bounded_number_of_subscriptions_and_another_callers_are_untouched",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let gateway = start(&events);

    // The upstream's template names resources without end: one session takes as many
    // as it may, and the next is refused in plain words, never sent upstream.
    let session = open_session(&gateway, "alice").await;
    for n in 0..MAX_SUBSCRIPTIONS {
        subscribe(&gateway, "alice", &session, &format!("paths://item/{n}")).await;
    }
    let past = format!("paths://item/{MAX_SUBSCRIPTIONS}");
    let refused = mcp_rpc(
        &gateway,
        "alice",
        &session,
        "resources/subscribe",
        json!({ "uri": past }),
    )
    .await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("subscribed to {MAX_SUBSCRIPTIONS} resources"))
            && message.contains("unsubscribe from one"),
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["code"], "too_many_subscriptions");
    assert_eq!(events_matching(&events, &format!("subscribe {past}")), 0);
    // Subscribing again to one it holds is no new subscription.
    subscribe(&gateway, "alice", &session, "paths://item/0").await;

    // Bob's session is not held back by alice's.
    let bobs = open_session(&gateway, "bob").await;
    subscribe(&gateway, "bob", &bobs, &past).await;

    // One unsubscription makes room for one more.
    let answer = mcp_rpc(
        &gateway,
        "alice",
        &session,
        "resources/unsubscribe",
        json!({ "uri": "paths://item/1" }),
    )
    .await;
    assert!(answer.get("error").is_none(), "{answer}");
    subscribe(&gateway, "alice", &session, "paths://item/watched-too").await;
}
