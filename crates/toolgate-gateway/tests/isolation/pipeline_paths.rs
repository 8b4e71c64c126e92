//! Every path a caller takes goes through policy: argument completions count against the
//! limits of the prompt they complete, are audited and redacted; a reload that withdraws a
//! subscriber's access ends her subscription; and the tool that reports approval outcomes
//! is never served from the result cache.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    Gateway, client, eventually, key, mcp_2026, mcp_rpc, open_session, post, python,
    python_mcp_available, user_yaml,
};

/// The upstream of these tests (`tests/upstreams/paths.py`), writing what reaches it to
/// `events`.
fn paths_upstream(events: &Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/paths.py");
    format!(
        "upstreams:\n  - name: paths\n    command: {python}\n    args: [\"{script}\"]\n    env: {{ PATHS_EVENTS: \"{events}\" }}\n",
        python = python(),
        events = events.display(),
    )
}

/// The lines of the upstream's event file that are exactly `line`.
pub(crate) fn events_matching(events: &Path, line: &str) -> usize {
    std::fs::read_to_string(events)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == line)
        .count()
}

#[tokio::test]
async fn completions_of_a_prompt_count_against_its_rate_limit_are_audited_and_redacted() {
    if !python_mcp_available(
        "completions_of_a_prompt_count_against_its_rate_limit_are_audited_and_redacted",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        "{upstream}policies:\n  redaction: {{}}\n  rate_limits:\n    - {{ name: greet, rate: 3/minute, partition: user, tools: [prompt.greet] }}\n\
audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n\
users:\n{alice}",
        upstream = paths_upstream(&events),
        audit = audit.display(),
        alice = user_yaml("alice", &["analyst"]),
    );
    let gateway = Gateway::start(&config);
    let session = open_session(&gateway, "alice").await;

    let complete = json!({
        "ref": {"type": "ref/prompt", "name": "greet"},
        "argument": {"name": "name", "value": "ann"},
    });
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(
            mcp_rpc(
                &gateway,
                "alice",
                &session,
                "completion/complete",
                complete.clone(),
            )
            .await,
        );
    }
    for answer in &answers[..3] {
        assert_eq!(
            answer["completion"]["values"],
            json!(["[REDACTED:email]", "annabel"]),
            "output redaction applies to completions: {answer}"
        );
    }
    let refused = &answers[3];
    assert_eq!(
        refused["error"]["data"]["code"], "rate_limited",
        "the 4th completion within the minute is refused: {refused}"
    );
    assert_eq!(
        events_matching(&events, "complete greet"),
        3,
        "the refused completion never reached the upstream"
    );

    let records = std::fs::read_to_string(&audit).expect("the audit file");
    let audited: Vec<Value> = records
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|r| r["tool"] == "prompt.greet" && r["user_id"] == "alice")
        .collect();
    assert_eq!(
        audited.len(),
        4,
        "an audit record for each completion, the refused one included: {records}"
    );
}

/// A `users:` entry list and an authorization policy: alice may use everything, carol
/// the upstream's resources only while `carol_reads`.
fn subscription_config(events: &Path, carol_reads: bool) -> String {
    let carol = if carol_reads {
        "      - { effect: allow, users: [carol], tools: [resources.paths] }\n"
    } else {
        "      - { effect: allow, users: [carol], tools: [prompt.greet] }\n"
    };
    format!(
        "{upstream}policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, users: [alice] }}\n{carol}\
users:\n{alice}{carol_user}",
        upstream = paths_upstream(events),
        alice = user_yaml("alice", &["analyst"]),
        carol_user = user_yaml("carol", &["analyst"]),
    )
}

/// Reads the standalone SSE stream of MCP `session` (where a 2025-11-25 session's resource
/// updates arrive) as `user` into a buffer, until the test ends.
pub(crate) async fn watch_session(
    gateway: &Gateway,
    user: &str,
    session: &str,
) -> Arc<Mutex<String>> {
    let mut response = reqwest::Client::new()
        .get(gateway.url("/mcp"))
        .bearer_auth(key(user))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status(), 200, "the session's stream opens");
    let seen = Arc::new(Mutex::new(String::new()));
    let into = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok(Some(chunk)) = response.chunk().await {
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk));
        }
    });
    seen
}

pub(crate) fn updates_in(seen: &Mutex<String>) -> usize {
    seen.lock()
        .unwrap()
        .matches("notifications/resources/updated")
        .count()
}

/// Opens a session as `user`, watches its stream and subscribes it to the upstream's
/// watched resource; the session and what its stream receives.
async fn subscribe_watched(gateway: &Gateway, user: &str) -> (String, Arc<Mutex<String>>) {
    let session = open_session(gateway, user).await;
    let seen = watch_session(gateway, user, &session).await;
    let subscribed = mcp_rpc(
        gateway,
        user,
        &session,
        "resources/subscribe",
        json!({"uri": "paths://watched"}),
    )
    .await;
    assert!(subscribed.get("error").is_none(), "{user}: {subscribed}");
    (session, seen)
}

#[tokio::test]
async fn a_subscriber_whose_access_a_reload_withdraws_gets_no_more_updates_and_the_upstream_is_unsubscribed()
 {
    if !python_mcp_available(
        "a_subscriber_whose_access_a_reload_withdraws_gets_no_more_updates_and_the_upstream_is_unsubscribed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let gateway = Gateway::start(&subscription_config(&events, true));
    let (session, seen) = subscribe_watched(&gateway, "carol").await;
    let (_, alice_seen) = subscribe_watched(&gateway, "alice").await;
    // The upstream updates the resource every 200 ms while it is subscribed.
    eventually("both receive updates", Duration::from_secs(20), || async {
        updates_in(&seen) >= 2 && updates_in(&alice_seen) >= 2
    })
    .await;

    std::fs::write(&gateway.config, subscription_config(&events, false)).unwrap();
    gateway.reload(1).await;
    eventually(
        "the upstream is unsubscribed",
        Duration::from_secs(10),
        || async { events_matching(&events, "unsubscribe paths://watched") == 1 },
    )
    .await;
    let at_reload = updates_in(&seen);
    let alice_at_reload = updates_in(&alice_seen);
    // Ten update periods of the upstream, and more on a loaded machine.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        updates_in(&seen),
        at_reload,
        "no update reaches carol once she may not read the resource"
    );
    assert!(
        updates_in(&alice_seen) >= alice_at_reload + 2,
        "alice, who may still read it, keeps her subscription across the reload"
    );
    // Nor can she read it or subscribe again.
    let read = mcp_rpc(
        &gateway,
        "carol",
        &session,
        "resources/read",
        json!({"uri": "paths://watched"}),
    )
    .await;
    assert!(read["error"].is_object(), "{read}");
}

#[tokio::test]
async fn a_listen_stream_whose_access_a_reload_withdraws_ends_with_an_error_saying_so() {
    if !python_mcp_available(
        "a_listen_stream_whose_access_a_reload_withdraws_ends_with_an_error_saying_so",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let gateway = Gateway::start(&subscription_config(&events, true));
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/listen_client.py"
    );
    let mut client = std::process::Command::new(python())
        .args([
            script,
            &gateway.url("/mcp"),
            &key("carol"),
            "paths://watched",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the listen client");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = client.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(30));
    assert_eq!(
        first.as_deref(),
        Ok("updated"),
        "carol's stream gets updates"
    );

    std::fs::write(&gateway.config, subscription_config(&events, false)).unwrap();
    gateway.signal("HUP");
    let last = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the listen stream ends after the reload");
    let _ = client.kill();
    let _ = client.wait();
    let seen: Value = serde_json::from_str(&last).unwrap_or_else(|_| panic!("{last}"));
    assert_eq!(
        seen["end"]["data"]["code"], "access_withdrawn",
        "the stream ends with an error that says why: {seen}"
    );
    assert!(
        seen["end"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("withdrawn")),
        "{seen}"
    );
    eventually(
        "the upstream is unsubscribed",
        Duration::from_secs(10),
        || async { events_matching(&events, "unsubscribe paths://watched") >= 1 },
    )
    .await;
}

/// `sleep` waits for approval; read-only tools are cached for ten minutes.
fn approval_config() -> String {
    format!(
        "tools:\n  builtin: [sleep]\npolicies:\n  approval:\n    tools: [sleep]\n  cache:\n    ttl: 10m\n\
users:\n{alice}{bob}",
        alice = user_yaml("alice", &["admin"]),
        bob = user_yaml("bob", &["analyst"]),
    )
}

/// The JSON `toolgate.outcome` answered in MCP `session` for suspension `id`.
async fn outcome(gateway: &Gateway, session: &str, id: &str) -> Value {
    let params = json!({"name": "toolgate.outcome", "arguments": {"id": id}});
    let answer = mcp_rpc(gateway, "bob", session, "tools/call", params).await;
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    serde_json::from_str(text).unwrap_or_else(|_| panic!("an outcome: {answer}"))
}

#[tokio::test]
async fn the_outcome_of_an_approved_call_is_read_fresh_though_read_only_tools_are_cached() {
    let gateway = Gateway::start(&approval_config());
    let session = open_session(&gateway, "bob").await;

    // A 2025-11-25 caller asks toolgate.outcome.
    let params = json!({"name": "sleep", "arguments": {"ms": 1}});
    let waiting = mcp_rpc(&gateway, "bob", &session, "tools/call", params).await;
    let id = waiting["_meta"]["io.toolgate/error"]["suspensionId"]
        .as_str()
        .unwrap_or_else(|| panic!("the suspension id: {waiting}"))
        .to_owned();
    assert_eq!(outcome(&gateway, &session, &id).await["status"], "waiting");

    // A 2026-07-28 caller asks again with its request state.
    let call = json!({"name": "sleep", "arguments": {"ms": 1}});
    let (_, first) = mcp_2026(&gateway, "bob", "tools/call", Some("sleep"), call.clone()).await;
    let state = first["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("a request state: {first}"))
        .to_owned();
    let id_2026 = first["result"]["_meta"]["io.toolgate/suspension"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the suspension: {first}"))
        .to_owned();
    let mut retry = call;
    retry["requestState"] = json!(state);
    let (_, again) = mcp_2026(&gateway, "bob", "tools/call", Some("sleep"), retry.clone()).await;
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");

    for id in [&id, &id_2026] {
        let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
        let approved = post(
            &client(),
            &url,
            Some("alice"),
            &json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(approved.status, 200, "{}", approved.body);
    }

    let decided = outcome(&gateway, &session, &id).await;
    assert_eq!(
        decided["status"], "decided",
        "the outcome, not a cached `waiting`: {decided}"
    );
    assert_eq!(decided["result"]["output"]["slept_ms"], 1, "{decided}");
    let (_, done) = mcp_2026(&gateway, "bob", "tools/call", Some("sleep"), retry).await;
    assert_eq!(
        done["result"]["resultType"], "complete",
        "the approved call's result, not `input_required` again: {done}"
    );
}
