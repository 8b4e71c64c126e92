//! The upstream's own credential never reaches a caller through what the upstream sends
//! during a call: every frame is scrubbed at one place, so progress messages, log data and
//! the parameters of sampling and elicitation requests arrive with it replaced, as results
//! and errors always did. `echoes_token`, a malicious upstream on the Python SDK, puts the
//! credential the gateway gives it into each, on the call's own stream.
//!
//! Nor does the start of it reach a caller or the log when an upstream prints it in an
//! error, as servers do to help debugging: `prints_token_start` answers 401 with the first
//! half of the Bearer token in its body, which goes into the log line of the failure.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use crate::attribution::client_output;
use crate::common::{Gateway, HttpUpstream, invoke, key, python, python_mcp_available, user_yaml};

/// The credential: distinctive, with characters that JSON and URL encoding change.
const TOKEN: &str = "up-s3cret/relay+77";

#[tokio::test]
async fn the_upstreams_credential_is_scrubbed_from_progress_logs_sampling_and_elicitation() {
    if !python_mcp_available(
        "the_upstreams_credential_is_scrubbed_from_progress_logs_sampling_and_elicitation",
    ) {
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/upstreams/echoes_token.py"
    );
    let upstream = HttpUpstream::start(script, &[], &[("UP_TOKEN", TOKEN)]);
    let yaml = format!(
        "upstreams:\n  - name: echoes\n    url: {url}\n    credential_env: UP_TOKEN\n    discover: false\n\
users:\n{bob}",
        url = upstream.url,
        bob = user_yaml("bob", &["user"]),
    );
    let gateway = Gateway::start_with_env(&yaml, &[("UP_TOKEN", TOKEN)]);
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/leak_client.py");
    let mut command = tokio::process::Command::new(python());
    command.arg(client).arg(gateway.url("/mcp")).arg(key("bob"));
    let seen = client_output(command, &gateway).await;

    let text = seen.to_string();
    for form in [TOKEN.to_owned(), STANDARD.encode(TOKEN)] {
        assert!(
            !text.contains(&form),
            "the caller was sent the upstream's credential ({form}): {seen}"
        );
    }
    // Each kind reached the caller, scrubbed.
    assert_eq!(seen["results"]["progress_leak"], "reported", "{seen}");
    assert!(
        seen["progress"][0]
            .as_str()
            .is_some_and(|m| m.contains("[REDACTED:secret]")),
        "{seen}"
    );
    let sampled = seen["sampling"][0]["messages"][0]["content"]["text"].as_str();
    assert_eq!(sampled, Some("summarize with [REDACTED:secret]"), "{seen}");
    assert_eq!(seen["results"]["sampling_leak"], "sampled: ok", "{seen}");
    let elicited = seen["elicitation"][0]["message"].as_str();
    assert_eq!(
        elicited,
        Some("enter the code for [REDACTED:secret]"),
        "{seen}"
    );
    assert_eq!(
        seen["results"]["elicitation_leak"], "elicited: decline",
        "{seen}"
    );
    // The log message came on the call's own stream: relayed, scrubbed.
    assert_eq!(seen["results"]["log_leak"], "logged", "{seen}");
    assert_eq!(seen["logs"][0]["token"], "[REDACTED:secret]", "{seen}");
    assert_eq!(
        seen["logs"][0]["said"], "auth with [REDACTED:secret]",
        "{seen}"
    );
}

/// A credential of 24 characters, of which `prints_token_start` prints the first 12.
const PRINTED_TOKEN: &str = "upsecretZq8vN3kLp2Xw7RtY";

#[tokio::test]
async fn the_half_of_its_credential_an_upstream_prints_in_a_401_reaches_neither_log_nor_caller() {
    let test =
        "the_half_of_its_credential_an_upstream_prints_in_a_401_reaches_neither_log_nor_caller";
    if !python_mcp_available(test) {
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/upstreams/prints_token_start.py"
    );
    let upstream = HttpUpstream::start(script, &[], &[]);
    let yaml = format!(
        "upstreams:\n  - {{ name: web, url: \"{url}\", prefix: web_, credential_env: UP_TOKEN }}\n\
users:\n{alice}",
        url = upstream.url,
        alice = user_yaml("alice", &["admin"]),
    );
    let gateway = Gateway::start_with_env(&yaml, &[("UP_TOKEN", PRINTED_TOKEN)]);
    let expired = invoke(&gateway, "alice", "web_expire", json!({})).await;
    assert_eq!(expired.status, 200, "{:?}", expired.body);

    let refused = invoke(&gateway, "alice", "web_ping", json!({})).await;
    assert_eq!(refused.status, 502, "{:?}", refused.body);
    let printed = &PRINTED_TOKEN[..PRINTED_TOKEN.len() / 2];
    assert!(
        !refused.body.to_string().contains(printed),
        "the caller was sent the start of the upstream's credential: {:?}",
        refused.body
    );
    gateway
        .wait_for_log(
            "the MCP server failed a request",
            1,
            Duration::from_secs(30),
        )
        .await;
    let log = gateway.stderr();
    assert!(
        !log.to_lowercase().contains(&printed.to_lowercase()),
        "the log holds the start of the upstream's credential:\n{log}"
    );
    // The upstream's body is still there to read, without it.
    assert!(
        log.contains("HTTP 401 Unauthorized: invalid token [REDACTED:secret]..."),
        "{log}"
    );
}
