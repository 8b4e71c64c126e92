//! A Redis that hangs under a running gateway whose pins, console sessions, decided history
//! and per-tool counts are on it: each route that needs it says so (503, with its own code)
//! within the state's deadline, the statistics fall back to this replica's own, a reload
//! keeps the running configuration (without the pins it cannot know which tools to hold
//! back), calls that do not need Redis go on, and everything comes back with Redis.

use std::future::Future;
use std::time::Duration;

use serde_json::json;

use crate::common::{
    Answer, Gateway, OwnRedis, client, console_sign_in, get, invoke, python, python_mcp_available,
    session_cookie, user_yaml, with_cookie,
};

/// `what`'s answer, which must come within 20 s: a hung Redis must not hang the caller.
async fn answered(what: &str, answer: impl Future<Output = Answer>) -> Answer {
    tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 20 s while Redis hangs"))
}

#[tokio::test]
async fn a_hung_redis_makes_each_route_that_needs_it_say_so_and_a_reload_keep_what_runs() {
    let test = "a_hung_redis_makes_each_route_that_needs_it_say_so";
    if !python_mcp_available(test) {
        return;
    }
    let Some(redis) = OwnRedis::start_or_skip(test) else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    let config = format!(
        "state:\n  url: {url}\n  deadline: 200ms\npins: {{ shared: true }}\nconsole: {{}}\n\
upstreams:\n  - name: shapes\n    command: {python}\n    args: [\"{script}\"]\n\
users:\n{alice}",
        url = redis.url,
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    );
    let gateway = Gateway::start(&config);
    let added = invoke(&gateway, "alice", "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let signed_in = console_sign_in(&gateway, "alice").await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    let session = session_cookie(&signed_in).expect("a session cookie");
    let pins_url = gateway.url("/v1/admin/pins");
    let listed = get(&client(), &pins_url, Some("alice")).await;
    assert!(listed.body["pins"].get("add").is_some(), "{}", listed.body);

    redis.hang();
    let pins = answered("the pins", get(&client(), &pins_url, Some("alice"))).await;
    assert_eq!(
        (pins.status, pins.error_code()),
        (503, "pins_unavailable"),
        "{}",
        pins.body
    );
    let again = answered("a sign-in", console_sign_in(&gateway, "alice")).await;
    assert_eq!(
        (again.status, again.error_code()),
        (503, "sessions_unavailable"),
        "{}",
        again.body
    );
    let show = gateway.url("/console/session");
    let shown = answered(
        "the session",
        with_cookie(reqwest::Method::GET, &show, &session, &[], None),
    )
    .await;
    assert_eq!(
        (shown.status, shown.error_code()),
        (503, "sessions_unavailable"),
        "{}",
        shown.body
    );
    assert!(
        !shown.headers.contains_key("set-cookie"),
        "a session that cannot be looked up is not ended"
    );
    let decisions_url = gateway.url("/v1/admin/decisions");
    let decisions = answered(
        "the decisions",
        get(&client(), &decisions_url, Some("alice")),
    )
    .await;
    assert_eq!(
        (decisions.status, decisions.error_code()),
        (503, "history_unavailable"),
        "{}",
        decisions.body
    );
    let stats_url = gateway.url("/v1/admin/stats");
    let stats = answered("the statistics", get(&client(), &stats_url, Some("alice"))).await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    assert_eq!(stats.body["counted_by"], "this replica", "{}", stats.body);
    assert_eq!(stats.body["tools"][0]["calls"], 1, "{}", stats.body);
    // A reload cannot check the tools against their pins: it is refused, and what runs
    // goes on serving, `add` included.
    gateway.signal("HUP");
    gateway
        .wait_for_log(
            "the new configuration was refused",
            1,
            Duration::from_secs(60),
        )
        .await;
    let added = answered(
        "a call",
        invoke(&gateway, "alice", "add", json!({"a": 2, "b": 3})),
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.body);

    redis.resume();
    let pins = get(&client(), &pins_url, Some("alice")).await;
    assert_eq!(pins.status, 200, "{}", pins.body);
    let stats = get(&client(), &stats_url, Some("alice")).await;
    assert_eq!(stats.body["counted_by"], "every replica", "{}", stats.body);
    // Counted at least once: an addition that timed out while Redis hung, and that Redis
    // ran once it went on, is counted again by the next one (docs/scaling.md).
    let calls = stats.body["tools"][0]["calls"].as_u64().unwrap_or(0);
    assert!(
        calls >= 2,
        "the call made while Redis hung is counted: {}",
        stats.body
    );
    let shown = with_cookie(reqwest::Method::GET, &show, &session, &[], None).await;
    assert_eq!(
        shown.status, 200,
        "the session outlived the outage: {}",
        shown.body
    );
    gateway.reload(1).await;
    let added = invoke(&gateway, "alice", "add", json!({"a": 3, "b": 4})).await;
    assert_eq!(added.status, 200, "{}", added.body);
}
