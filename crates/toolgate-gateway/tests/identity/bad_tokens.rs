//! Every kind of bad token is a 401 `invalid_token` with a challenge that says why: never
//! a 500, never a pass.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::common::{Answer, Gateway, unix_now as now};
use crate::provider::Provider;
use crate::{RESOURCE, config, invoke};

/// A provider and a gateway accepting RS256 and ES256 tokens with a 30 s clock skew.
fn setup(test: &str) -> Option<(Provider, Gateway)> {
    let provider = Provider::start(test)?;
    let gateway = Gateway::start(&config(
        &provider.issuer,
        "    algorithms: [RS256, ES256]\n",
        "",
    ));
    Some((provider, gateway))
}

/// A token with this header and these claims and a signature of junk.
fn forge(header: Value, claims: Value) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.{}",
        part(&header),
        part(&claims),
        URL_SAFE_NO_PAD.encode(b"junk")
    )
}

/// Claims the gateway would accept, from `issuer`.
fn good_claims(issuer: &str) -> Value {
    json!({"iss": issuer, "aud": RESOURCE, "sub": "mallory", "iat": now(), "exp": now() + 300})
}

/// Asserts that `token` is refused with 401 `invalid_token` and a challenge whose
/// description contains `why`, and that the token is nowhere in the gateway's log.
async fn assert_refused(gateway: &Gateway, token: &str, why: &str) {
    let answer: Answer = invoke(gateway, Some(token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 401, "{why}: {:?}", answer.body);
    assert_eq!(
        answer.error_code(),
        "invalid_token",
        "{why}: {:?}",
        answer.body
    );
    assert!(answer.error_message().contains(why), "{:?}", answer.body);
    let challenge = answer.header("www-authenticate").expect("a challenge");
    assert!(
        challenge.starts_with(
            "Bearer resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource\""
        ),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!(
            "error=\"invalid_token\", error_description=\"{why}"
        )),
        "{challenge}"
    );
    assert!(!gateway.stderr().contains(token), "the token was logged");
}

#[tokio::test]
async fn an_expired_provider_token_is_refused() {
    let test = "an_expired_provider_token_is_refused";
    let Some(provider) = Provider::start_with(test, &[("TOKEN_TTL", "1")]) else {
        return;
    };
    let gateway = Gateway::start(&config(&provider.issuer, "    clock_skew: 0s\n", ""));
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_refused(&gateway, &token, "the token has expired").await;
}

#[tokio::test]
async fn a_token_expired_within_the_clock_skew_still_passes_and_beyond_it_does_not() {
    let Some((provider, gateway)) =
        setup("a_token_expired_within_the_clock_skew_still_passes_and_beyond_it_does_not")
    else {
        return;
    };
    let lately = provider
        .sign(
            json!({"aud": RESOURCE, "roles": ["reader"], "exp": now() - 10}),
            "provider",
            None,
        )
        .await;
    let answer = invoke(&gateway, Some(&lately), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let long_ago = provider
        .sign(
            json!({"aud": RESOURCE, "exp": now() - 120}),
            "provider",
            None,
        )
        .await;
    assert_refused(&gateway, &long_ago, "the token has expired").await;
}

#[tokio::test]
async fn a_token_not_valid_yet_is_refused() {
    let Some((provider, gateway)) = setup("a_token_not_valid_yet_is_refused") else {
        return;
    };
    let token = provider
        .sign(
            json!({"aud": RESOURCE, "nbf": now() + 600}),
            "provider",
            None,
        )
        .await;
    assert_refused(&gateway, &token, "the token is not valid yet").await;
}

#[tokio::test]
async fn a_provider_token_for_another_resource_is_refused() {
    let Some((provider, gateway)) = setup("a_provider_token_for_another_resource_is_refused")
    else {
        return;
    };
    let token = provider
        .token("agent", "https://other.test", "tools:read")
        .await;
    assert_refused(
        &gateway,
        &token,
        "the token was not issued for this resource",
    )
    .await;
}

#[tokio::test]
async fn a_token_from_another_issuer_is_refused() {
    let Some((provider, gateway)) = setup("a_token_from_another_issuer_is_refused") else {
        return;
    };
    let token = provider
        .sign(
            json!({"aud": RESOURCE, "iss": "https://evil.test"}),
            "provider",
            None,
        )
        .await;
    assert_refused(&gateway, &token, "the token was issued by another issuer").await;
}

#[tokio::test]
async fn an_unsigned_alg_none_token_is_refused() {
    let Some((provider, gateway)) = setup("an_unsigned_alg_none_token_is_refused") else {
        return;
    };
    let claims = good_claims(&provider.issuer);
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let token = format!(
        "{}.{}.",
        part(&json!({"alg": "none", "kid": "key-1"})),
        part(&claims)
    );
    assert_refused(
        &gateway,
        &token,
        "the token is signed with an algorithm this resource does not accept",
    )
    .await;
}

#[tokio::test]
async fn an_hs256_token_keyed_with_the_public_key_is_refused() {
    let Some((provider, gateway)) = setup("an_hs256_token_keyed_with_the_public_key_is_refused")
    else {
        return;
    };
    let token = provider
        .sign(
            json!({"aud": RESOURCE, "roles": ["admin"]}),
            "hmac-public",
            None,
        )
        .await;
    assert_refused(
        &gateway,
        &token,
        "the token is signed with an algorithm this resource does not accept",
    )
    .await;
}

#[tokio::test]
async fn a_token_whose_algorithm_does_not_match_its_key_is_refused() {
    let Some((provider, gateway)) =
        setup("a_token_whose_algorithm_does_not_match_its_key_is_refused")
    else {
        return;
    };
    // ES256 is accepted, but key-1 is an RSA key.
    let token = forge(
        json!({"alg": "ES256", "kid": "key-1"}),
        good_claims(&provider.issuer),
    );
    assert_refused(
        &gateway,
        &token,
        "the token's algorithm does not match its key",
    )
    .await;
}

#[tokio::test]
async fn a_token_signed_with_a_key_the_issuer_does_not_publish_is_refused() {
    let Some((provider, gateway)) =
        setup("a_token_signed_with_a_key_the_issuer_does_not_publish_is_refused")
    else {
        return;
    };
    let token = provider
        .sign(json!({"aud": RESOURCE}), "stranger", Some("stranger-1"))
        .await;
    assert_refused(
        &gateway,
        &token,
        "the token is signed with a key the issuer does not publish",
    )
    .await;
    // A stranger's key under the issuer's own key id fails on the signature.
    let token = provider
        .sign(json!({"aud": RESOURCE}), "stranger", Some("key-1"))
        .await;
    assert_refused(&gateway, &token, "the token's signature is invalid").await;
}

#[tokio::test]
async fn a_token_without_a_subject_is_refused() {
    let Some((provider, gateway)) = setup("a_token_without_a_subject_is_refused") else {
        return;
    };
    let token = provider
        .sign(json!({"aud": RESOURCE, "sub": null}), "provider", None)
        .await;
    assert_refused(&gateway, &token, "the token has no `sub` claim").await;
}

#[tokio::test]
async fn garbage_and_oversized_tokens_are_refused_unread() {
    let Some((_provider, gateway)) = setup("garbage_and_oversized_tokens_are_refused_unread")
    else {
        return;
    };
    assert_refused(&gateway, "not.a.jwt", "the token is not a well-formed JWT").await;
    assert_refused(&gateway, "%%.$$.!!", "the token is not a well-formed JWT").await;
    let oversized = format!(
        "{}.{}.{}",
        "a".repeat(3000),
        "b".repeat(3000),
        "c".repeat(3000)
    );
    assert_refused(&gateway, &oversized, "the token is longer than 8192 bytes").await;
    // Not a JWT and not a key either.
    let answer = invoke(
        &gateway,
        Some("tg_no_such_key"),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(answer.status, 401);
    let challenge = answer.header("www-authenticate").expect("a challenge");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
}

#[tokio::test]
async fn a_token_whose_subject_is_an_api_key_user_is_refused_unless_the_config_links_them() {
    let test = "a_token_whose_subject_is_an_api_key_user_is_refused_unless_the_config_links_them";
    let Some((provider, gateway)) = setup(test) else {
        return;
    };
    // `alice` signs in with an API key in this configuration; a token the issuer made out
    // to a subject `alice` must not take over her budgets, sessions and cached results.
    let token = provider
        .sign(
            json!({"aud": RESOURCE, "sub": "alice", "roles": ["reader"]}),
            "provider",
            None,
        )
        .await;
    assert_refused(
        &gateway,
        &token,
        "the token's subject is the id of a user who signs in with an API key",
    )
    .await;

    let linked = Gateway::start(&config(
        &provider.issuer,
        "    subjects_are_api_key_users: true\n",
        "",
    ));
    let answer = invoke(&linked, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

#[tokio::test]
async fn with_the_access_token_type_required_only_at_jwt_tokens_pass() {
    let test = "with_the_access_token_type_required_only_at_jwt_tokens_pass";
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let gateway = Gateway::start(&config(
        &provider.issuer,
        "    require_access_token_type: true\n",
        "",
    ));
    // The provider's access tokens say `typ: at+jwt` (RFC 9068).
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    // A JWT of the same issuer, for this audience, signed with its key, without the type:
    // what an ID token or another kind of JWT would look like.
    let other = provider
        .sign(
            json!({"aud": RESOURCE, "roles": ["reader"]}),
            "provider",
            None,
        )
        .await;
    assert_refused(&gateway, &other, "the token is not an access token").await;
}
