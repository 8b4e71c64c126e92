//! Per-caller upstream credentials by token exchange at the real provider (RFC 8693),
//! cached per caller token until shortly before they expire.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use toolgate_gateway::identity::exchange::{ExchangeError, ExchangeSettings, TokenExchange};

use crate::RESOURCE;
use crate::provider::Provider;

const UPSTREAM: &str = "https://upstream.test/mcp";

fn exchange(provider: &Provider, refresh_before: Duration) -> TokenExchange {
    TokenExchange::new(ExchangeSettings {
        token_endpoint: format!("{}/token", provider.issuer),
        client_id: "gateway".to_owned(),
        client_secret: "gateway-secret".to_owned(),
        audience: UPSTREAM.to_owned(),
        scope: None,
        timeout: Duration::from_secs(5),
        refresh_before,
        max_entries: 100,
    })
    .expect("an exchange")
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("JSON")
}

#[tokio::test]
async fn a_callers_token_is_exchanged_for_one_for_the_upstream_and_cached_per_caller() {
    let Some(provider) = Provider::start(
        "a_callers_token_is_exchanged_for_one_for_the_upstream_and_cached_per_caller",
    ) else {
        return;
    };
    let exchange = exchange(&provider, Duration::from_secs(30));
    let agent = provider.token("agent", RESOURCE, "tools:read").await;
    let credential = exchange
        .credential(&agent)
        .await
        .expect("an exchanged token");
    assert_ne!(
        credential.bearer(),
        agent,
        "the caller's own token is never sent on"
    );
    let exchanged = claims(credential.bearer());
    assert_eq!(exchanged["aud"], UPSTREAM);
    assert_eq!(exchanged["sub"], "agent");
    assert_eq!(exchanged["act"]["sub"], "gateway");

    let again = exchange.credential(&agent).await.expect("the cached token");
    assert_eq!(again.bearer(), credential.bearer());
    assert_eq!(
        provider.exchanges().await,
        1,
        "the second call was served from the cache"
    );

    let admin = provider.token("admin", RESOURCE, "tools:read").await;
    let other = exchange
        .credential(&admin)
        .await
        .expect("another caller's token");
    assert_eq!(claims(other.bearer())["sub"], "admin");
    assert_eq!(provider.exchanges().await, 2);
    assert_eq!(exchange.cached(), 2);
    assert_eq!(format!("{other:?}"), "UpstreamCredential(..)");
}

#[tokio::test]
async fn a_credential_is_exchanged_again_shortly_before_it_expires() {
    let Some(provider) = Provider::start_with(
        "a_credential_is_exchanged_again_shortly_before_it_expires",
        &[("EXCHANGED_TTL", "3")],
    ) else {
        return;
    };
    let exchange = exchange(&provider, Duration::from_secs(2));
    let agent = provider.token("agent", RESOURCE, "tools:read").await;
    exchange
        .credential(&agent)
        .await
        .expect("an exchanged token");
    exchange.credential(&agent).await.expect("the cached token");
    assert_eq!(provider.exchanges().await, 1);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    exchange.credential(&agent).await.expect("a fresh token");
    assert_eq!(provider.exchanges().await, 2, "less than 2 s were left");
}

#[tokio::test]
async fn a_token_the_provider_did_not_issue_is_not_exchanged() {
    let Some(provider) = Provider::start("a_token_the_provider_did_not_issue_is_not_exchanged")
    else {
        return;
    };
    let exchange = exchange(&provider, Duration::from_secs(30));
    let forged = provider
        .sign(serde_json::json!({"aud": RESOURCE}), "stranger", None)
        .await;
    match exchange.credential(&forged).await {
        Err(ExchangeError::Refused { error, .. }) => assert_eq!(error, "invalid_grant"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(exchange.cached(), 0);
}
