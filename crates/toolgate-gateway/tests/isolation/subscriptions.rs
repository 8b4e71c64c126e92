//! A resource subscription lives no longer than the session that made it. A 2025-11-25
//! session that subscribed and then ended (`DELETE /mcp`, or its idle expiry) leaves
//! nothing behind: the gateway forgets its subscriptions, and the upstream is unsubscribed
//! from a resource nobody else watches — so that one key opening, subscribing and ending
//! session after session holds nothing at the gateway or the upstream past the sessions
//! it has open. A session ending never ends another caller's subscription.
//!
//! What one caller may hold is bounded, and refused past the bound before the upstream is
//! asked anything: subscriptions per session (or per 2026-07-28 listen request), and
//! listen requests open at once per user.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::common::{
    Gateway, eventually, key, mcp, mcp_rpc, open_session, python, python_mcp_available, rpc_answer,
    user_yaml,
};
use crate::pipeline_paths::{events_matching, updates_in, watch_session};

/// The gateway importing `tests/upstreams/paths.py` (which writes every subscribe and
/// unsubscribe it receives to `events`), alice and bob allowed everything.
fn start(events: &Path) -> Gateway {
    start_with(events, "")
}

/// [`start`], with `more` added to the configuration.
fn start_with(events: &Path, more: &str) -> Gateway {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/paths.py");
    Gateway::start(&format!(
        "upstreams:\n  - name: paths\n    command: {python}\n    args: [\"{script}\"]\n    env: {{ PATHS_EVENTS: \"{events}\" }}\n\
policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, users: [alice, bob] }}\n\
users:\n{alice}{bob}{more}",
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
    // Refused before the upstream is asked anything: each attempt would otherwise cost it
    // a list and a read.
    let lists = events_matching(&events, "list");
    for _ in 0..3 {
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
    }
    assert_eq!(events_matching(&events, &format!("subscribe {past}")), 0);
    assert_eq!(
        events_matching(&events, &format!("read {past}")),
        0,
        "the upstream was asked to read a resource a session at its cap may not subscribe to"
    );
    assert_eq!(
        events_matching(&events, "list"),
        lists,
        "the upstream was asked to list its resources for a refused subscription"
    );
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

/// How many `subscriptions/listen` requests one user may have open at once by default.
const MAX_LISTENS_PER_USER: usize = toolgate_mcp::DEFAULT_LISTENS_PER_USER;

/// An open 2026-07-28 `subscriptions/listen` request: what its stream received so far.
/// Dropped, the request's connection is closed.
struct Listening {
    seen: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Sends `user`'s `subscriptions/listen` request for `uri`; the request once its stream
/// relays an update, or the error it was answered with.
async fn listen(gateway: &Gateway, user: &str, uri: &str) -> Result<Listening, serde_json::Value> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "toolgate-tests", "version": "0"},
            },
            "notifications": { "resourceSubscriptions": [uri] },
        },
    });
    let mut response = reqwest::Client::new()
        .post(gateway.url("/mcp"))
        .bearer_auth(key(user))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    let seen = Arc::new(Mutex::new(String::new()));
    let into = Arc::clone(&seen);
    let (ended_tx, ended) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        while let Ok(Some(chunk)) = response.chunk().await {
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk));
        }
        let _ = ended_tx.send(());
    });
    let listening = Listening { seen, reader };
    let updated = || {
        listening
            .seen
            .lock()
            .unwrap()
            .contains("notifications/resources/updated")
    };
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        let mut ended = ended;
        while !updated() {
            tokio::select! {
                _ = &mut ended => break,
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    })
    .await;
    assert!(
        answered.is_ok(),
        "the listen request neither relayed an update nor ended"
    );
    if updated() {
        return Ok(listening);
    }
    // The stream's answer: the message with the request's id (an acknowledgement may
    // come before it).
    let text = listening.seen.lock().unwrap().clone();
    let answer = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some());
    Err(answer.unwrap_or_else(|| rpc_answer(&text)))
}

#[tokio::test]
async fn a_user_may_hold_a_bounded_number_of_listen_requests_and_one_ending_makes_room() {
    if !python_mcp_available(
        "a_user_may_hold_a_bounded_number_of_listen_requests_and_one_ending_makes_room",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let gateway = start(&events);

    let mut open = Vec::new();
    for _ in 0..MAX_LISTENS_PER_USER {
        let listening = listen(&gateway, "alice", "paths://watched").await;
        open.push(listening.unwrap_or_else(|e| panic!("within the bound: {e}")));
    }
    let Err(refused) = listen(&gateway, "alice", "paths://watched").await else {
        panic!("a listen request past the bound was accepted");
    };
    assert_eq!(
        refused["error"]["data"]["code"], "too_many_listens",
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["status"], 429, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{MAX_LISTENS_PER_USER} open already"))
            && message.contains("end one you no longer need"),
        "{refused}"
    );

    // Bob is not held back by alice.
    listen(&gateway, "bob", "paths://watched")
        .await
        .unwrap_or_else(|e| panic!("bob listens: {e}"));

    // A client that goes away ends its request, and with it its place.
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match listen(&gateway, "alice", "paths://watched").await {
            Ok(_) => break,
            Err(refused) if tokio::time::Instant::now() < deadline => {
                assert_eq!(
                    refused["error"]["data"]["code"], "too_many_listens",
                    "{refused}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(refused) => panic!("alice's ended request still counts: {refused}"),
        }
    }
}

#[tokio::test]
async fn a_configured_bound_of_two_listens_per_user_refuses_the_third() {
    if !python_mcp_available("a_configured_bound_of_two_listens_per_user_refuses_the_third") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let gateway = start_with(
        &events,
        "server:\n  mcp_sessions:\n    listens_per_user: 2\n",
    );

    let mut open = Vec::new();
    for _ in 0..2 {
        let listening = listen(&gateway, "alice", "paths://watched").await;
        open.push(listening.unwrap_or_else(|e| panic!("within the bound: {e}")));
    }
    let Err(refused) = listen(&gateway, "alice", "paths://watched").await else {
        panic!("a third listen request was accepted under a bound of two");
    };
    assert_eq!(
        refused["error"]["data"]["code"], "too_many_listens",
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("you have 2 open already"), "{refused}");
    listen(&gateway, "bob", "paths://watched")
        .await
        .unwrap_or_else(|e| panic!("bob listens: {e}"));
}
