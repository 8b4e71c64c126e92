//! An upstream cannot hand a caller a credential the gateway holds for someone else: a
//! stdio program that reads another upstream's credential from the gateway's environment
//! (not inherited, but readable under `/proc` by a program of the gateway's user), or an upstream called as each caller that remembers one caller's credential
//! for the next, gets it replaced in results and in the definitions it lists, as its own
//! credential always was — in hex too. `echoes_others.py` is that upstream, on the
//! official Python SDK.

use serde_json::json;

use crate::common::{
    Gateway, HttpUpstream, client, get, invoke, mcp_rpc, open_session, python,
    python_mcp_available, user_yaml,
};

const ECHOES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/upstreams/echoes_others.py"
);

/// The credential of the upstream `search`, which `evil` reads from the gateway.
const SEARCH_TOKEN: &str = "srch-T0ken-of-search-77";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_upstreams_credential_is_scrubbed_from_results_and_tool_lists() {
    let test = "another_upstreams_credential_is_scrubbed_from_results_and_tool_lists";
    if !python_mcp_available(test) {
        return;
    }
    let search = HttpUpstream::start(ECHOES, &["http"], &[]);
    let yaml = format!(
        "upstreams:\n  - name: search\n    url: {url}\n    credential_env: SEARCH_TOKEN\n    prefix: search_\n    discover: false\n  - name: evil\n    command: {python}\n    args: [\"{ECHOES}\"]\n    env: {{ LEAK_VAR: SEARCH_TOKEN }}\n    prefix: evil_\n    discover: false\n\
users:\n{alice}",
        url = search.url,
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    );
    let gateway = Gateway::start_with_env(&yaml, &[("SEARCH_TOKEN", SEARCH_TOKEN)]);

    let echoed = invoke(
        &gateway,
        "alice",
        "evil_getenv",
        json!({"name": "SEARCH_TOKEN"}),
    )
    .await;
    assert_eq!(echoed.status, 200, "{}", echoed.body);
    let hexed = invoke(
        &gateway,
        "alice",
        "evil_own_hex",
        json!({"name": "SEARCH_TOKEN"}),
    )
    .await;
    let listed = get(&client(), &gateway.url("/v1/tools"), Some("alice")).await;
    let session = open_session(&gateway, "alice").await;
    let mcp_listed = mcp_rpc(&gateway, "alice", &session, "tools/list", json!({})).await;
    let params = json!({"name": "evil_getenv", "arguments": {"name": "SEARCH_TOKEN"}});
    let mcp_called = mcp_rpc(&gateway, "alice", &session, "tools/call", params).await;

    let hex: String = SEARCH_TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    for (what, answer) in [
        ("a /v1 result", echoed.body.to_string()),
        ("a /v1 result in hex", hexed.body.to_string().to_lowercase()),
        ("the /v1 tool list", listed.body.to_string()),
        ("the /mcp tool list", mcp_listed.to_string()),
        ("an /mcp result", mcp_called.to_string()),
    ] {
        assert!(
            !answer.contains(SEARCH_TOKEN) && !answer.contains(&hex),
            "{what}: {answer}"
        );
    }
    assert!(
        echoed.body.to_string().contains("[REDACTED:secret]"),
        "{}",
        echoed.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_credential_is_scrubbed_from_what_the_upstream_hands_another_caller() {
    let test = "one_callers_credential_is_scrubbed_from_what_the_upstream_hands_another_caller";
    if !python_mcp_available(test) {
        return;
    }
    let crm = HttpUpstream::start(ECHOES, &["http"], &[]);
    let yaml = format!(
        "upstreams:\n  - name: crm\n    url: {url}\n    discover: false\n    as_caller: {{ credentials: {{ alice: \"${{ALICE_CRM}}\", bob: \"${{BOB_CRM}}\" }} }}\n\
users:\n{alice}{bob}",
        url = crm.url,
        alice = user_yaml("alice", &["admin"]),
        bob = user_yaml("bob", &["admin"]),
    );
    let credentials = [
        ("ALICE_CRM", "alice-crm-T0ken-123"),
        ("BOB_CRM", "bob-crm-T0ken-456"),
    ];
    let gateway = Gateway::start_with_env(&yaml, &credentials);
    for user in ["alice", "bob"] {
        let remembered = invoke(&gateway, user, "remember", json!({})).await;
        assert_eq!(remembered.status, 200, "{}", remembered.body);
    }
    let recalled = invoke(&gateway, "bob", "recall", json!({})).await;
    let text = recalled.body["output"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("seen="), "{}", recalled.body);
    assert!(
        !text.contains("alice-crm-T0ken-123"),
        "alice's credential reached bob: {text}"
    );
    assert_eq!(text.matches("[REDACTED:secret]").count(), 2, "{text}");
}
