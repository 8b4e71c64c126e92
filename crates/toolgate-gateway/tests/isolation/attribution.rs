//! One upstream connection carries the calls of many callers. What the upstream sends toward
//! them reaches exactly the caller it belongs to — by its stream, or a progress token on
//! the connection it came on — or no one, counted in `toolgate_mcp_unattributed_total`:
//! never the caller who happens to be the only one in flight. Two users, bob and carol, on
//! sessions of their own (`tests/clients/two_users.py`), against `crosstalk`, a malicious
//! upstream on the Python SDK that sends carol's things on a channel naming no call.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Gateway, HttpUpstream, key, metric, python, python_mcp_available, user_yaml};

const CROSSTALK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/crosstalk.py");

/// What a Python client (`command`) of `gateway` printed: one JSON object. Fails the test,
/// with the client's and the gateway's output, when it fails or takes over 120 s.
pub async fn client_output(mut command: tokio::process::Command, gateway: &Gateway) -> Value {
    let run = command.kill_on_drop(true).output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finishes within 120 s")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{}\ngateway:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gateway.stderr()
    );
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

/// The value of the counter of unattributed messages of kind `kind`.
pub async fn unattributed(gateway: &Gateway, server: &str, kind: &str) -> f64 {
    let text = gateway.metrics().await;
    metric(
        &text,
        "toolgate_mcp_unattributed_total",
        &[("server", server), ("kind", kind)],
    )
}

/// How the gateway reaches `crosstalk`.
enum Transport {
    Stdio,
    Http,
}

/// The gateway importing `crosstalk` (at 2025-11-25, where server-to-client requests and
/// the standalone stream exist), with `consult` timed out after 1 s; bob and carol as
/// users.
/// The HTTP upstream, when there is one, lives as long as the gateway.
fn start(transport: Transport, record: &Path) -> (Gateway, Option<HttpUpstream>) {
    let record_env = record.display().to_string();
    let (upstream, http) = match transport {
        Transport::Stdio => (
            format!(
                "    command: {python}\n    args: [\"{CROSSTALK}\"]\n    env: {{ CROSSTALK_RECORD: \"{record_env}\" }}\n",
                python = python(),
            ),
            None,
        ),
        Transport::Http => {
            let http =
                HttpUpstream::start(CROSSTALK, &["--http"], &[("CROSSTALK_RECORD", &record_env)]);
            (format!("    url: {}\n", http.url), Some(http))
        }
    };
    let yaml = format!(
        "upstreams:\n  - name: crosstalk\n{upstream}    discover: false\n\
policies:\n  timeouts:\n    tools: {{ consult: 1s }}\n\
users:\n{bob}{carol}",
        bob = user_yaml("bob", &["user"]),
        carol = user_yaml("carol", &["user"]),
    );
    (Gateway::start(&yaml), http)
}

/// What bob and carol saw in `scenario` of `two_users.py`, about `tag`.
async fn two_users(gateway: &Gateway, scenario: &str, tag: &str) -> Value {
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/two_users.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(client)
        .arg(scenario)
        .arg(gateway.url("/mcp"))
        .arg(key("bob"))
        .arg(key("carol"))
        .arg(tag);
    client_output(command, gateway).await
}

fn mentions(seen: &Value, tag: &str) -> bool {
    seen.to_string().contains(tag)
}

async fn a_late_log_about_carols_call_never_reaches_bob(transport: Transport) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (gateway, _upstream) = start(transport, &dir.path().join("record"));
    let tag = "CAROL-PRIVATE-7731";
    let seen = two_users(&gateway, "late_log", tag).await;

    assert_eq!(
        seen["carol"]["results"][0],
        format!("tell: told {tag}"),
        "{seen}"
    );
    assert_eq!(seen["bob"]["results"][0], "hold: held 2.5s", "{seen}");
    assert!(
        !mentions(&seen["bob"], tag),
        "bob was sent what the upstream said about carol's call: {seen}"
    );
    assert!(
        unattributed(&gateway, "crosstalk", "log").await >= 1.0,
        "the log message naming no call is counted as dropped"
    );
}

#[tokio::test]
async fn a_late_log_about_carols_call_never_reaches_bob_over_stdio() {
    if !python_mcp_available("a_late_log_about_carols_call_never_reaches_bob_over_stdio") {
        return;
    }
    a_late_log_about_carols_call_never_reaches_bob(Transport::Stdio).await;
}

#[tokio::test]
async fn a_late_log_about_carols_call_never_reaches_bob_over_http() {
    if !python_mcp_available("a_late_log_about_carols_call_never_reaches_bob_over_http") {
        return;
    }
    a_late_log_about_carols_call_never_reaches_bob(Transport::Http).await;
}

async fn a_sampling_for_carols_timed_out_call_is_never_put_to_bob(transport: Transport) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let record = dir.path().join("record");
    let (gateway, _upstream) = start(transport, &record);
    let tag = "CAROL-DOC-5520";
    let seen = two_users(&gateway, "sampling", tag).await;

    let carols = seen["carol"]["results"][0].as_str().unwrap_or_default();
    assert!(
        carols.starts_with("consult: error") || carols.starts_with("consult: raised"),
        "carol's call timed out: {seen}"
    );
    assert_eq!(
        seen["bob"]["results"][0], "hold: held 3.5s",
        "bob's call was in flight when the upstream asked: {seen}"
    );
    assert!(
        seen["bob"]["sampling"]
            .as_array()
            .is_some_and(Vec::is_empty)
            && !mentions(&seen["bob"], tag),
        "bob was asked the sampling of carol's call: {seen}"
    );
    assert!(!mentions(&seen["carol"]["sampling"], "ANSWER"), "{seen}");
    let outcome = std::fs::read_to_string(&record).unwrap_or_default();
    assert!(
        outcome.contains("refused") && !outcome.contains("ANSWER"),
        "the upstream asked, and nobody's answer reached it as carol's: {outcome:?}"
    );
    assert!(
        unattributed(&gateway, "crosstalk", "sampling").await >= 1.0,
        "the refused request is counted"
    );
}

#[tokio::test]
async fn a_sampling_for_carols_timed_out_call_is_never_put_to_bob_over_stdio() {
    if !python_mcp_available("a_sampling_for_carols_timed_out_call_is_never_put_to_bob_over_stdio")
    {
        return;
    }
    a_sampling_for_carols_timed_out_call_is_never_put_to_bob(Transport::Stdio).await;
}

#[tokio::test]
async fn a_sampling_for_carols_timed_out_call_is_never_put_to_bob_over_http() {
    if !python_mcp_available("a_sampling_for_carols_timed_out_call_is_never_put_to_bob_over_http") {
        return;
    }
    a_sampling_for_carols_timed_out_call_is_never_put_to_bob(Transport::Http).await;
}

#[tokio::test]
async fn progress_parked_before_an_upstream_restart_never_reaches_bobs_calls() {
    if !python_mcp_available("progress_parked_before_an_upstream_restart_never_reaches_bobs_calls")
    {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (gateway, _upstream) = start(Transport::Stdio, &dir.path().join("record"));
    let tag = "CAROL-PRIVATE-0412";
    let seen = two_users(&gateway, "restart", tag).await;

    let carols = seen["carol"]["results"][0].as_str().unwrap_or_default();
    assert!(
        carols.starts_with("late_progress: progress token"),
        "carol's call asked for progress: {seen}"
    );
    let bobs = seen["bob"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // The first may meet the crashed connection before it is found dead; the rest
    // reach the restarted upstream, numbering progress tokens from 0 again.
    assert!(
        bobs.iter().filter(|r| *r == "quick: quick").count() >= 10,
        "bob's calls reached the restarted upstream: {seen}"
    );
    assert!(
        !mentions(&seen["bob"], tag),
        "bob was sent the progress of carol's call: {seen}"
    );
    assert!(
        unattributed(&gateway, "crosstalk", "progress").await >= 1.0,
        "progress for a call that has ended is counted as dropped"
    );
}
