//! A batch (`POST /v1/tool-calls`) carries the caller's token to each of its calls, as a
//! single call does: its calls through a token-exchange upstream run as the caller, and
//! share one exchange.

use serde_json::{Value, json};

use crate::RESOURCE;
use crate::common::{Answer, Gateway, client, key, post_with, python_mcp_available};
use crate::provider::Provider;
use crate::upstream::{HeadersUpstream, TOKEN_EXCHANGE, as_caller_config};

/// An OpenAI assistant message calling each of `calls` (id, tool, arguments).
fn assistant_message(calls: &[(&str, &str, Value)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, tool, arguments)| {
            json!({
                "id": id,
                "type": "function",
                "function": {"name": tool, "arguments": arguments.to_string()}
            })
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
}

/// Sends `message` as a batch with `Authorization: Bearer <credential>`.
async fn batch(gateway: &Gateway, credential: &str, message: &Value) -> Answer {
    let url = gateway.url("/v1/tool-calls?format=openai");
    post_with(&client(), &url, Some(credential), message, &[]).await
}

#[tokio::test]
async fn a_batch_through_a_token_exchange_upstream_runs_every_call_as_its_caller() {
    let test = "a_batch_through_a_token_exchange_upstream_runs_every_call_as_its_caller";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    let yaml = as_caller_config(&provider.issuer, &upstream.url, TOKEN_EXCHANGE);
    let gateway = Gateway::start(&yaml);
    let agent = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let before = provider.tokens_issued().await;

    // Six first calls of one caller in one batch, which runs them at once: each reaches
    // the upstream with a token exchanged for the caller, and they share one exchange.
    let ids: Vec<String> = (0..6).map(|i| format!("call_{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids
        .iter()
        .map(|id| (id.as_str(), "whoami", json!({})))
        .collect();
    let answer = batch(&gateway, &agent, &assistant_message(&calls)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let results = answer.body["results"].as_array().expect("results");
    assert_eq!(results.len(), ids.len(), "{}", answer.body);
    let signature = agent.rsplit('.').next().expect("a JWT");
    for (id, result) in ids.iter().zip(results) {
        assert_eq!(result["call_id"], id.as_str(), "{result}");
        assert_eq!(result["status"], "success", "{result}");
        let said = result["output"].to_string();
        assert!(
            said.contains("sub=agent; aud=https://upstream.test/mcp; act=gateway"),
            "{said}"
        );
        assert!(said.contains("authorization=Bearer [REDACTED"), "{said}");
        assert!(!said.contains(signature), "{said}");
    }
    assert_eq!(provider.tokens_issued().await - before, 1);
    assert_eq!(provider.exchanges().await, 1);

    // An API-key caller has no token to exchange: that call's result says so, and the
    // batch's other call runs.
    let message = assistant_message(&[
        ("call_whoami", "whoami", json!({})),
        ("call_echo", "echo", json!({"text": "still here"})),
    ]);
    let answer = batch(&gateway, &key("alice"), &message).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let refused = &answer.body["results"][0];
    assert_eq!(refused["status"], "error", "{refused}");
    assert_eq!(
        refused["error"]["code"], "upstream_credential_missing",
        "{refused}"
    );
    let echoed = &answer.body["results"][1];
    assert_eq!(echoed["status"], "success", "{echoed}");
    assert_eq!(
        provider.exchanges().await,
        1,
        "nothing was exchanged for alice"
    );

    let log = gateway.stderr();
    for secret in [signature, "gateway-secret"] {
        assert!(!log.contains(secret), "a secret was logged: {log}");
    }
}
