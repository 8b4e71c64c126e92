//! An upstream called as each caller: every call carries its caller's credential, on a
//! connection of that caller's own; callers without one never reach the upstream; the
//! connections are bounded; a fixed credential is found again for a call resumed after
//! waiting for approval. Against the demo server over streamable HTTP, in a child
//! process, which takes the bearer token as the caller's id.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{HttpDemo, imported, within};
use serde_json::{Value, json};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::secret::Secret;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::{InvokeOptions, Pipeline, ToolError, User};
use toolgate_hooks::Consent;
use toolgate_hooks::secrets::SCRUBBED;
use toolgate_mcp::{
    McpError, PerCaller, StaticCallerCredentials, Upstream, UpstreamConfig, UpstreamTransport,
};

fn credentials(users: &[&str]) -> StaticCallerCredentials {
    StaticCallerCredentials::new(
        users
            .iter()
            .map(|user| (*user, Secret::new(format!("token-of-{user}")))),
    )
}

async fn invoke_as(pipeline: &Pipeline, user: &str, tool: &str) -> Result<Value, ToolError> {
    let options = InvokeOptions::new()
        .user(User::new(user))
        .timeout(Duration::from_secs(20));
    pipeline.invoke(tool, json!({}), options).await
}

/// The text of a tool's result (its first text content).
fn text_of(output: &Value) -> String {
    output["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {output}"))
        .to_owned()
}

#[tokio::test]
async fn each_caller_reaches_the_upstream_with_its_own_credential_on_its_own_connection() {
    let demo = HttpDemo::start("127.0.0.1:0", &[]).await;
    // At 2025-11-25 a connection is an MCP session, which the demo's `session` tool names.
    let config = UpstreamConfig::http("remote", demo.url.clone())
        .discover(false)
        .credentials_per_caller(credentials(&["ann", "bob"]));
    let (upstream, pipeline) = imported(config).await;

    // The demo answers `whoami` with the bearer token it was sent: ann's credential,
    // which comes back scrubbed like every credential toolgate holds.
    let said = invoke_as(&pipeline, "ann", "whoami")
        .await
        .expect("answered");
    assert_eq!(text_of(&said), SCRUBBED, "{said}");

    // One connection (one MCP session upstream) per caller, kept between calls.
    let ann_first = invoke_as(&pipeline, "ann", "session")
        .await
        .expect("answered");
    let ann_again = invoke_as(&pipeline, "ann", "session")
        .await
        .expect("answered");
    let bob = invoke_as(&pipeline, "bob", "session")
        .await
        .expect("answered");
    assert_eq!(text_of(&ann_first), text_of(&ann_again));
    assert_ne!(text_of(&ann_first), text_of(&bob));
    assert_eq!(upstream.caller_connections(), 2);

    // A caller without a credential is refused before the upstream.
    let refused = invoke_as(&pipeline, "carol", "whoami")
        .await
        .expect_err("carol has no credential");
    assert_eq!(refused.code(), "upstream_credential_missing", "{refused}");
    assert_eq!(refused.status(), 403);
    assert_eq!(upstream.caller_connections(), 2);
}

#[tokio::test]
async fn a_fixed_credential_reaches_the_upstream_when_an_approved_call_resumes() {
    let demo = HttpDemo::start("127.0.0.1:0", &[]).await;
    let config = UpstreamConfig::http("remote", demo.url.clone())
        .discover(false)
        .credentials_per_caller(credentials(&["ann"]));
    let upstream = within(30, "import", Upstream::connect(config))
        .await
        .expect("imported");
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder()
        .registry(tools)
        .hook(Consent::builder().tool("whoami").build())
        .build()
        .expect("built");

    let waiting = invoke_as(&pipeline, "ann", "whoami")
        .await
        .expect_err("the call waits for approval");
    let ToolError::Suspended { suspension_id, .. } = waiting else {
        panic!("expected a suspension, got {waiting}");
    };
    assert_eq!(upstream.caller_connections(), 0, "nothing reached it yet");

    // Resumed by someone else's request, with nothing of ann's but her user id: her
    // credential is found from it, and reaches the upstream on a connection of her own.
    let options = InvokeOptions::new().timeout(Duration::from_secs(20));
    let said = pipeline
        .resume(&suspension_id, ResumeDecision::Approve, options)
        .await
        .expect("answered");
    assert_eq!(text_of(&said), SCRUBBED, "{said}");
    assert_eq!(upstream.caller_connections(), 1);
}

#[tokio::test]
async fn a_flood_of_callers_holds_at_most_max_sessions_connections() {
    let demo = HttpDemo::start("127.0.0.1:0", &[]).await;
    let users: Vec<String> = (0..12).map(|i| format!("user{i}")).collect();
    let names: Vec<&str> = users.iter().map(String::as_str).collect();
    let mut per_caller = PerCaller::new(Arc::new(credentials(&names)));
    per_caller.max_sessions = 3;
    let config = UpstreamConfig::http("remote", demo.url.clone()).per_caller(per_caller);
    let (upstream, pipeline) = imported(config).await;
    for user in &names {
        let said = invoke_as(&pipeline, user, "whoami")
            .await
            .expect("answered");
        assert_eq!(text_of(&said), SCRUBBED, "{said}");
    }
    assert!(
        upstream.caller_connections() <= 3,
        "{} connections held",
        upstream.caller_connections()
    );
    // An evicted caller connects again on its next call.
    let again = invoke_as(&pipeline, "user0", "whoami")
        .await
        .expect("answered");
    assert_eq!(text_of(&again), SCRUBBED);
}

#[tokio::test]
async fn a_stdio_upstream_cannot_be_called_as_each_caller() {
    let config = UpstreamConfig::stdio("local", "toolgate-mcp-demo", ["stdio"])
        .credentials_per_caller(credentials(&["ann"]));
    assert!(matches!(config.transport, UpstreamTransport::Stdio { .. }));
    match Upstream::connect(config).await {
        Err(McpError::Config(message)) => {
            assert!(message.contains("HTTP"), "{message}")
        }
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("expected a configuration error"),
    }
}
