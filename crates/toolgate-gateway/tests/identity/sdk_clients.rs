//! The official MCP SDKs' OAuth support against the gateway's `/mcp`: a client that starts
//! without a token finds its way to one through the gateway's challenge and metadata (the
//! Python SDK's `ClientCredentialsOAuthProvider`, the TypeScript SDK's
//! `ClientCredentialsProvider`), then lists and calls a tool with it.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{Gateway, python, python_mcp_available};
use crate::provider::Provider;

/// A loopback port free now (the gateway's resource identifier has to name it before the
/// gateway starts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A gateway in front of `provider` whose resource identifiers are its real addresses: the
/// SDKs check that the metadata's `resource` is the endpoint they were given.
fn gateway(provider: &Provider) -> Gateway {
    let port = free_port();
    let yaml = format!(
        "tools:\n  builtin: [echo]\n\
         identity:\n  oauth:\n    issuer: {issuer}\n    resource: \"http://127.0.0.1:{port}\"\n    scopes_supported: [\"tools:call\", \"tools:read\"]\n\
         policies:\n  authorization:\n    default: allow\n",
        issuer = provider.issuer
    );
    Gateway::start_listening(&yaml, &format!("127.0.0.1:{port}"))
}

/// What a client printed, checked: it listed `echo`, called it, and got a token from the
/// provider to do so.
async fn assert_called_with_a_token(output: &Output, gateway: &Gateway, provider: &Provider) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client failed:\n{stderr}\ngateway:\n{}",
        gateway.stderr()
    );
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the client's JSON");
    assert_eq!(seen["tools"], serde_json::json!(["echo"]), "{seen}");
    assert_eq!(seen["is_error"], false, "{seen}");
    assert!(
        seen["echo"]
            .as_str()
            .unwrap_or_default()
            .contains("hello over oauth"),
        "{seen}"
    );
    assert!(provider.tokens_issued().await >= 1);
}

#[tokio::test]
async fn the_python_sdk_gets_a_token_through_the_challenge_and_metadata_and_calls_a_tool() {
    let test = "the_python_sdk_gets_a_token_through_the_challenge_and_metadata_and_calls_a_tool";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let gateway = gateway(&provider);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/oauth_client.py");
    let args = [gateway.url("/mcp"), provider.issuer.clone()];
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .arg(script)
            .args([args[0].as_str(), args[1].as_str(), "agent", "agent-secret"])
            .output()
            .expect("running the Python client")
    })
    .await
    .expect("the client ran");
    assert_called_with_a_token(&output, &gateway, &provider).await;
}

#[tokio::test]
async fn the_typescript_sdk_gets_a_token_through_the_challenge_and_metadata_and_calls_a_tool() {
    let Some(provider) = Provider::start(
        "the_typescript_sdk_gets_a_token_through_the_challenge_and_metadata_and_calls_a_tool",
    ) else {
        return;
    };
    let gateway = gateway(&provider);
    let url = gateway.url("/mcp");
    // The gateway and the provider are processes of their own: nothing else needs this
    // test's runtime while the client runs.
    let output = provider.node(
        "oauth_client.mjs",
        &[&url, &provider.issuer, "agent", "agent-secret"],
    );
    assert_called_with_a_token(&output, &gateway, &provider).await;
}
