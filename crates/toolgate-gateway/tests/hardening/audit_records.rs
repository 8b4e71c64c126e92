//! The audit file holds only redacted values, fingerprinted under the deployment's key:
//! a call refused before its input was redacted is recorded redacted all the same, keys
//! included. Every record says which address the call came from.

use serde_json::{Value, json};
use toolgate_hooks::fingerprint::KeyedFingerprint;

use crate::common::{Gateway, client, invoke, key, mcp_2026, post_with, user_yaml};

const HASH_KEY: &str = "a-deployment-key-of-32-characters";

fn config(audit: &std::path::Path) -> String {
    format!(
        "tools:\n  builtin: [echo]\nusers:\n{alice}{mallory}\
policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, users: [alice] }}\n  redaction:\n    mode: block\n\
audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n  include_values: true\n  hash_key: {HASH_KEY}\n",
        alice = user_yaml("alice", &["analyst"]),
        mallory = user_yaml("mallory", &["analyst"]),
        audit = audit.display(),
    )
}

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the audit file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[tokio::test]
async fn a_call_refused_before_redaction_is_recorded_redacted_and_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gateway = Gateway::start(&config(&audit));
    let input = json!({
        "text": "mail ann@example.com, card 4111 1111 1111 1111",
        "bob@example.com": "a key that is personal data",
    });

    // Refused at `will_authorize`…
    let refused = invoke(&gateway, "mallory", "echo", input.clone()).await;
    assert_eq!(refused.error_code(), "forbidden", "{}", refused.body);
    // …and at the tool's own check (`echo` takes only `text`), both before redaction.
    let invalid = invoke(&gateway, "alice", "echo", input).await;
    assert_eq!(invalid.error_code(), "invalid_input", "{}", invalid.body);
    // Refused by the blocking redaction itself.
    let pii = json!({ "text": "mail ann@example.com, card 4111 1111 1111 1111" });
    let blocked = invoke(&gateway, "alice", "echo", pii).await;
    assert_eq!(blocked.error_code(), "sensitive_data", "{}", blocked.body);

    let records = records(&audit);
    assert_eq!(records.len(), 3, "{records:?}");
    let text = serde_json::to_string(&records).unwrap();
    for raw in ["ann@example.com", "bob@example.com", "4111"] {
        assert!(!text.contains(raw), "the audit file holds `{raw}`:\n{text}");
    }
    let redacted = json!({
        "text": "mail [REDACTED:email], card [REDACTED:card]",
        "[REDACTED:email]": "a key that is personal data",
    });
    assert_eq!(
        records[2]["input"],
        json!({ "text": "mail [REDACTED:email], card [REDACTED:card]" })
    );
    for record in &records[..2] {
        assert_eq!(record["input"], redacted, "{record}");
        assert_eq!(
            record["input_hash"],
            KeyedFingerprint::new(HASH_KEY).of(&redacted),
            "fingerprinted under the configured key: {record}"
        );
    }
}

#[tokio::test]
async fn every_route_records_the_address_a_call_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gateway = Gateway::start(&format!(
        "tools:\n  builtin: [echo]\nusers:\n{alice}\
audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n  hash_key: {HASH_KEY}\n",
        alice = user_yaml("alice", &["analyst"]),
        audit = audit.display(),
    ));
    // A client of its own address (any of 127.0.0.0/8 is this host's).
    let from_7 = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 7]))
        .build()
        .unwrap();
    let url = gateway.url("/v1/tools/echo/invoke");
    let text = json!({"text": "hi"});
    let direct = post_with(&from_7, &url, Some(&key("alice")), &text, &[]).await;
    assert_eq!(direct.status, 200, "{}", direct.body);
    // Through a proxy on this host (loopback is trusted by default): the client it names.
    let forwarded = [("x-forwarded-for", "203.0.113.9")];
    let proxied = post_with(&client(), &url, Some(&key("alice")), &text, &forwarded).await;
    assert_eq!(proxied.status, 200, "{}", proxied.body);
    // A batch: each of its calls.
    let batch = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"a\"}"}},
    ]});
    let forwarded = [("x-forwarded-for", "198.51.100.4")];
    let url = gateway.url("/v1/tool-calls?format=openai");
    let answer = post_with(&from_7, &url, Some(&key("alice")), &batch, &forwarded).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Over MCP.
    let (status, answer) = mcp_2026(
        &gateway,
        "alice",
        "tools/call",
        Some("echo"),
        json!({"name": "echo", "arguments": {"text": "b"}}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    let addresses: Vec<Value> = records(&audit)
        .iter()
        .map(|record| record["client_address"].clone())
        .collect();
    assert_eq!(
        addresses,
        [
            json!("127.0.0.7"),
            json!("203.0.113.9"),
            // 127.0.0.7 is a trusted proxy too (the default trusts all of loopback).
            json!("198.51.100.4"),
            json!("127.0.0.1")
        ]
    );
}
