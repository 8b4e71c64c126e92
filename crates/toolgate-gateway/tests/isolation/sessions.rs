//! MCP sessions are capped per principal: one key's flood of `initialize` is refused past
//! its cap, costs the gateway no memory past it, and never closes another user's session.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    Gateway, client, eventually, key, mcp, metric, open_session, rpc_answer, user_yaml,
};

/// The default `server.mcp_sessions.per_user`.
const DEFAULT_PER_USER: usize = 32;

fn config(sessions: &str) -> String {
    format!(
        "server:\n  mcp_sessions: {{{sessions}}}\ntools:\n  builtin: [echo, sleep]\nusers:\n{}{}{}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["admin"]),
        user_yaml("carol", &["admin"])
    )
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "flood", "version": "0"}}
    })
}

fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
}

/// Sends `count` `initialize` requests as `user` over `connections` connections at once;
/// how many were answered with each status.
async fn flood(
    gateway: &Gateway,
    user: &str,
    count: usize,
    connections: usize,
) -> Vec<(u16, usize)> {
    let http = client();
    let url = gateway.url("/mcp");
    let body = initialize().to_string();
    let per_task = count.div_ceil(connections);
    let mut tasks = Vec::new();
    for task in 0..connections {
        let (http, url, body, api_key) = (http.clone(), url.clone(), body.clone(), key(user));
        let sends = per_task.min(count.saturating_sub(task * per_task));
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::with_capacity(sends);
            for _ in 0..sends {
                let response = http
                    .post(&url)
                    .bearer_auth(&api_key)
                    .header("accept", "application/json, text/event-stream")
                    .header("content-type", "application/json")
                    .header("mcp-protocol-version", "2025-06-18")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("the gateway answers");
                statuses.push(response.status().as_u16());
                // Read the answer in full, so that the connection can carry the next one.
                let _ = response.bytes().await;
            }
            statuses
        }));
    }
    let mut counts: Vec<(u16, usize)> = Vec::new();
    for task in tasks {
        for status in task.await.expect("a flood task") {
            match counts.iter_mut().find(|(s, _)| *s == status) {
                Some((_, n)) => *n += 1,
                None => counts.push((status, 1)),
            }
        }
    }
    counts.sort_unstable();
    counts
}

fn answered(counts: &[(u16, usize)], status: u16) -> usize {
    counts
        .iter()
        .find(|(s, _)| *s == status)
        .map_or(0, |(_, n)| *n)
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

async fn lists_tools(gateway: &Gateway, user: &str, session: &str) -> (u16, String) {
    let (status, _, text) = mcp(
        gateway,
        Method::POST,
        user,
        Some(session),
        Some(tools_list()),
    )
    .await;
    (status, text)
}

#[tokio::test]
async fn a_flood_of_initialize_is_refused_past_the_cap_and_another_users_session_still_answers() {
    // Defaults only: the cap holds without anyone configuring it.
    let gateway = Gateway::start(&format!(
        "tools:\n  builtin: [echo]\nusers:\n{}{}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["admin"])
    ));
    let alice = open_session(&gateway, "alice").await;

    let counts = flood(&gateway, "bob", DEFAULT_PER_USER + 100, 8).await;
    assert_eq!(
        answered(&counts, 200),
        DEFAULT_PER_USER,
        "bob opens exactly his cap: {counts:?}"
    );
    assert_eq!(
        answered(&counts, 429),
        100,
        "and is refused past it: {counts:?}"
    );

    let (status, _, text) = mcp(&gateway, Method::POST, "bob", None, Some(initialize())).await;
    assert_eq!(status, 429, "{text}");
    let refusal: Value = serde_json::from_str(&text).expect("a JSON answer");
    assert_eq!(refusal["jsonrpc"], "2.0", "{refusal}");
    assert_eq!(
        refusal["error"]["data"]["code"], "too_many_sessions",
        "{refusal}"
    );
    let message = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&DEFAULT_PER_USER.to_string()), "{message}");
    assert!(message.contains("DELETE /mcp"), "{message}");

    let metrics = gateway.metrics().await;
    let refused = metric(
        &metrics,
        "toolgate_mcp_sessions_refused_total",
        &[("reason", "per_user")],
    );
    assert_eq!(refused, 101.0, "{metrics}");
    let open = metric(&metrics, "toolgate_mcp_sessions", &[]);
    assert_eq!(
        open,
        (DEFAULT_PER_USER + 1) as f64,
        "bob's and alice's: {metrics}"
    );

    // Alice's session sat idle through the flood.
    let (status, text) = lists_tools(&gateway, "alice", &alice).await;
    assert_eq!(
        status, 200,
        "alice's session was closed by bob's flood: {text}"
    );
    assert!(text.contains("echo"), "{text}");
    // And alice may still open more of her own.
    open_session(&gateway, "alice").await;
}

#[tokio::test]
async fn past_the_total_cap_a_newcomer_is_refused_and_nobody_is_evicted() {
    let gateway = Gateway::start(&config("per_user: 2, max: 3"));
    let held = [
        ("alice", open_session(&gateway, "alice").await),
        ("alice", open_session(&gateway, "alice").await),
        ("bob", open_session(&gateway, "bob").await),
    ];
    let (status, _, text) = mcp(&gateway, Method::POST, "carol", None, Some(initialize())).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("mcp_sessions_full"), "{text}");
    for (user, session) in &held {
        let (status, text) = lists_tools(&gateway, user, session).await;
        assert_eq!(status, 200, "{user}'s session was evicted: {text}");
    }
}

#[tokio::test]
async fn the_gateways_memory_stays_flat_under_a_flood_of_initialize_past_the_cap() {
    // Defaults only, as the flood would meet them.
    let gateway = Gateway::start(&format!(
        "tools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("bob", &["admin"])
    ));
    const N: usize = 200;
    let started = Instant::now();
    let first = flood(&gateway, "bob", DEFAULT_PER_USER + N, 8).await;
    // Closing a refused session runs on its own task: let the last ones finish.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_n = rss_kib(gateway.pid());

    let second = flood(&gateway, "bob", 10 * N, 8).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_11n = rss_kib(gateway.pid());
    let grown = after_11n.saturating_sub(after_n);
    println!(
        "RSS after {N} initialize past the cap: {after_n} KiB; after {} more: {after_11n} KiB (+{grown} KiB) in {:?}",
        10 * N,
        started.elapsed()
    );
    // A session kept costs ~125 KiB: 2,000 of them would be ~245 MiB. Allocator slack is
    // allowed for; growth with the count is not.
    assert!(
        grown < 24 * 1024,
        "RSS grew by {grown} KiB over {} initialize requests past the cap",
        10 * N
    );
    assert_eq!(answered(&first, 200), DEFAULT_PER_USER, "{first:?}");
    assert_eq!(answered(&second, 429), 10 * N, "{second:?}");
}

#[tokio::test]
async fn an_idle_session_expires_and_frees_its_slot() {
    let gateway = Gateway::start(&config("per_user: 2, idle_timeout: 1s"));
    let first = open_session(&gateway, "alice").await;
    open_session(&gateway, "alice").await;
    let (status, _, text) = mcp(&gateway, Method::POST, "alice", None, Some(initialize())).await;
    assert_eq!(status, 429, "alice holds her cap: {text}");

    let third = std::sync::Mutex::new(None);
    eventually(
        "an idle session frees its slot",
        Duration::from_secs(20),
        || async {
            let (status, issued, _) =
                mcp(&gateway, Method::POST, "alice", None, Some(initialize())).await;
            if status == 200 {
                *third.lock().unwrap() = issued;
            }
            status == 200
        },
    )
    .await;
    assert!(third.lock().unwrap().is_some(), "the new session has an id");
    let (status, text) = lists_tools(&gateway, "alice", &first).await;
    assert_eq!(status, 404, "an expired session is unknown: {text}");
    assert!(text.contains("unknown_session"), "{text}");
}

#[tokio::test]
async fn a_session_streaming_an_answer_longer_than_the_idle_time_does_not_expire() {
    let gateway = Gateway::start(&config("per_user: 1, idle_timeout: 1s"));
    let session = open_session(&gateway, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "sleep", "arguments": {"ms": 2500}}});
    let (status, _, text) = mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{text}");
    let answer = rpc_answer(&text);
    assert!(answer.get("result").is_some(), "the call was cut: {answer}");
    let (status, text) = lists_tools(&gateway, "alice", &session).await;
    assert_eq!(
        status, 200,
        "the session expired while it was answering: {text}"
    );
}

#[tokio::test]
async fn a_reload_applies_new_caps_to_the_sessions_it_keeps() {
    let gateway = Gateway::start(&config("per_user: 1"));
    let kept = open_session(&gateway, "alice").await;
    let (status, _, text) = mcp(&gateway, Method::POST, "alice", None, Some(initialize())).await;
    assert_eq!(status, 429, "{text}");

    std::fs::write(&gateway.config, config("per_user: 2")).unwrap();
    gateway.reload(1).await;

    open_session(&gateway, "alice").await;
    let (status, text) = lists_tools(&gateway, "alice", &kept).await;
    assert_eq!(status, 200, "the session outlives the reload: {text}");
    let (status, _, text) = mcp(&gateway, Method::POST, "alice", None, Some(initialize())).await;
    assert_eq!(status, 429, "the new cap holds: {text}");
}
