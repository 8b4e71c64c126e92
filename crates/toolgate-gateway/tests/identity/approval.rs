//! Calls to an upstream called as each caller that need a person's approval. A waiting call
//! keeps no token, and is resumed by the approver's request: with token exchange there is
//! nothing to exchange then, so such a call is refused at once instead of waiting, and one
//! parked all the same fails cleanly when approved; fixed per-user credentials need only
//! the user id, and reach the upstream when the approved call resumes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Answer, BIN, Gateway, client, key, post, python_mcp_available, user_yaml};
use crate::provider::Provider;
use crate::upstream::{HeadersUpstream, TOKEN_EXCHANGE, as_caller_config, sha256_hex};
use crate::{RESOURCE, invoke, mcp_call};

/// `yaml` with `whoami` waiting for approval.
fn with_approval(yaml: &str) -> String {
    yaml.replacen(
        "policies:\n",
        "policies:\n  approval: { tools: [whoami] }\n",
        1,
    )
}

/// Resumes suspension `id` as `approver` with `decision`; the call's one result.
async fn resume(gateway: &Gateway, approver: &str, id: &str, decision: Value) -> Value {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume?format=openai"));
    let answer = post(&client(), &url, Some(approver), &decision).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body["results"][0].clone()
}

/// The id of the suspension a 202 answered with.
fn suspension_id(answer: &Answer) -> String {
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    answer.body["suspension_id"]
        .as_str()
        .expect("a suspension id")
        .to_owned()
}

#[tokio::test]
async fn a_call_through_a_token_exchange_upstream_that_needs_approval_is_refused_instead_of_waiting()
 {
    let test = "a_call_through_a_token_exchange_upstream_that_needs_approval_is_refused_instead_of_waiting";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    let yaml = with_approval(&as_caller_config(
        &provider.issuer,
        &upstream.url,
        TOKEN_EXCHANGE,
    ));
    let gateway = Gateway::start(&yaml);
    // The operator is told which tools cannot be called: at start, and by `check`.
    gateway
        .wait_for_log("as_caller.credentials", 1, Duration::from_secs(10))
        .await;
    let log = gateway.stderr();
    assert!(log.contains("tools=whoami"), "{log}");
    let check = std::process::Command::new(BIN)
        .args(["check", "--config"])
        .arg(&gateway.config)
        .env_remove("RUST_LOG")
        .output()
        .expect("running toolgate check");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        stdout.contains("    refused instead of waiting for approval (a waiting call keeps no token to exchange): whoami\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("will_check_consent          caller_token_cannot_wait → consent"),
        "{stdout}"
    );

    let agent = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let answer = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
    assert_eq!(answer.status, 403, "{:?}", answer.body);
    assert_eq!(answer.error_code(), "upstream_credential_missing");
    let message = answer.error_message();
    for words in [
        "a call waiting for approval cannot be made as its caller through a token-exchange upstream (`headers`)",
        "exempt `whoami` from `policies.approval`",
        "fixed per-user credentials (`as_caller.credentials`)",
    ] {
        assert!(message.contains(words), "{message}");
    }

    // The same over MCP: an error result with the code, no suspension.
    let mcp_token = provider
        .token("agent", crate::MCP_RESOURCE, "tools:read tools:admin")
        .await;
    let (status, _, body) = mcp_call(&gateway, Some(&mcp_token), "whoami", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("upstream_credential_missing"), "{body}");
    assert!(!body.contains("suspension"), "{body}");

    // Nothing was exchanged, and the caller's token was not logged.
    assert_eq!(provider.exchanges().await, 0);
    let signature = agent.rsplit('.').next().expect("a JWT");
    assert!(!gateway.stderr().contains(signature));
}

#[tokio::test]
async fn a_call_parked_before_its_upstream_exchanged_tokens_fails_cleanly_when_approved() {
    let test = "a_call_parked_before_its_upstream_exchanged_tokens_fails_cleanly_when_approved";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    // First the upstream gets one credential for all, and `whoami` waits for approval.
    let shared = with_approval(&format!(
        "{}upstreams:\n  - {{ name: headers, url: \"{}\", credential_env: UPSTREAM_TOKEN }}\n",
        crate::config(&provider.issuer, "", ""),
        upstream.url
    ));
    let gateway =
        Gateway::start_with_env(&shared, &[("UPSTREAM_TOKEN", "static-upstream-credential")]);
    let agent = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let id = suspension_id(&invoke(&gateway, Some(&agent), "whoami", json!({})).await);

    // While it waits, a reload makes the upstream exchange each caller's token.
    std::fs::write(
        &gateway.config,
        with_approval(&as_caller_config(
            &provider.issuer,
            &upstream.url,
            TOKEN_EXCHANGE,
        )),
    )
    .unwrap();
    gateway.reload(1).await;

    // Approved, it cannot be made as agent: it fails with why, without reaching the
    // upstream or the provider.
    let result = resume(&gateway, "alice", &id, json!({"decision": "approve"})).await;
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(
        result["error"]["code"], "upstream_credential_missing",
        "{result}"
    );
    let message = result["error"]["message"].as_str().unwrap_or_default();
    for words in [
        "`whoami` waited for approval",
        "a call waiting for approval cannot be made as its caller through a token-exchange upstream (`headers`)",
        "its caller can then make the call again",
    ] {
        assert!(message.contains(words), "{message}");
    }
    assert!(result.get("output").is_none(), "{result}");
    assert_eq!(provider.exchanges().await, 0);

    // Its caller reads the same outcome.
    let outcome = Answer::read(
        client()
            .get(gateway.url(&format!("/v1/suspensions/{id}")))
            .bearer_auth(&agent)
            .send()
            .await
            .expect("the gateway answers"),
    )
    .await;
    assert_eq!(outcome.body["status"], "decided", "{}", outcome.body);
    assert_eq!(
        outcome.body["result"]["error"]["code"],
        "upstream_credential_missing"
    );
}

#[tokio::test]
async fn fixed_per_user_credentials_reach_the_upstream_when_an_approved_call_resumes() {
    let test = "fixed_per_user_credentials_reach_the_upstream_when_an_approved_call_resumes";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = HeadersUpstream::start();
    // alice (from `config`) approves; bob and carol call; only bob has a credential.
    let yaml = with_approval(
        &as_caller_config(
            "http://127.0.0.1:9",
            &upstream.url,
            "{ credentials: { bob: \"${BOB_UPSTREAM_TOKEN}\" } }",
        )
        .replacen(
            "users:\n",
            &format!(
                "users:\n{}{}",
                user_yaml("bob", &["admin"]),
                user_yaml("carol", &["admin"])
            ),
            1,
        ),
    );
    let gateway = Gateway::start_with_env(&yaml, &[("BOB_UPSTREAM_TOKEN", "bob-upstream-token")]);

    let id = suspension_id(&invoke(&gateway, Some(&key("bob")), "whoami", json!({})).await);
    let result = resume(&gateway, "alice", &id, json!({"decision": "approve"})).await;
    assert_eq!(result["status"], "success", "{result}");
    // The upstream got bob's credential (its digest says so), scrubbed on the way back.
    let said = result["output"].to_string();
    let digest = sha256_hex("Bearer bob-upstream-token");
    assert!(said.contains(&format!("sha256={digest}")), "{said}");
    assert!(!said.contains("bob-upstream-token"), "{said}");
    assert!(!gateway.stderr().contains("bob-upstream-token"));

    // carol has none: her approved call is refused before the upstream, as it would be
    // without the wait.
    let id = suspension_id(&invoke(&gateway, Some(&key("carol")), "whoami", json!({})).await);
    let result = resume(&gateway, "alice", &id, json!({"decision": "approve"})).await;
    assert_eq!(
        result["error"]["code"], "upstream_credential_missing",
        "{result}"
    );
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("user `carol` has no credential"),
        "{message}"
    );
}
