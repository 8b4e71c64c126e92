//! The caller's token stays at the gateway: an upstream receives its own configured
//! credential, never the token the caller presented.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::common::{
    BIN, Gateway, key, key_set, python, python_mcp_available, signing_key, unix_now, user_yaml,
};
use crate::provider::Provider;
use crate::{RESOURCE, config, invoke};

/// `tests/upstreams/headers.py`: an HTTP MCP server whose `whoami` tells the
/// `Authorization` header it was sent. Killed on drop.
pub struct HeadersUpstream {
    child: Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl HeadersUpstream {
    /// Starts one on a free port.
    pub fn start() -> HeadersUpstream {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/headers.py");
        let mut child = Command::new(python())
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting headers.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("headers.py prints its address");
        let url = line
            .trim()
            .strip_prefix("headers listening on ")
            .unwrap_or_else(|| panic!("unexpected output {line:?}"))
            .to_owned();
        HeadersUpstream { child, url }
    }
}

impl Drop for HeadersUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_upstream_gets_its_own_credential_never_the_callers_token() {
    let test = "an_upstream_gets_its_own_credential_never_the_callers_token";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    let yaml = format!(
        "{}upstreams:\n  - {{ name: headers, url: \"{}\", credential_env: UPSTREAM_TOKEN }}\n",
        config(&provider.issuer, "", ""),
        upstream.url
    );
    let gateway =
        Gateway::start_with_env(&yaml, &[("UPSTREAM_TOKEN", "static-upstream-credential")]);
    let token = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let answer = invoke(&gateway, Some(&token), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let said = answer.body["output"].to_string();
    // The upstream was sent the configured credential (which the gateway scrubs from
    // whatever comes back), and nothing of the caller's token.
    assert!(said.contains("authorization=Bearer [REDACTED"), "{said}");
    let signature = token.rsplit('.').next().expect("a JWT");
    assert!(!said.contains(signature), "{said}");
    assert!(
        !gateway.stderr().contains(signature),
        "the token was logged"
    );
}

#[tokio::test]
async fn check_says_what_an_upstream_receives() {
    let test = "check_says_what_an_upstream_receives";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = HeadersUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    let yaml = format!(
        "{}upstreams:\n  - {{ name: headers, url: \"{}\", credential_env: UPSTREAM_TOKEN }}\n",
        config("http://127.0.0.1:9", "", ""),
        upstream.url
    );
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env("UPSTREAM_TOKEN", "static-upstream-credential")
        .env_remove("RUST_LOG")
        .output()
        .expect("running toolgate check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "  upstream headers: a static bearer credential from $UPSTREAM_TOKEN, the same for every caller; a caller's own token is never forwarded\n"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("static-upstream-credential"), "{stdout}");
}

/// The `as_caller` section of an upstream whose calls exchange the caller's token at the
/// provider, as the client `gateway` with its right secret.
pub const TOKEN_EXCHANGE: &str = "{ token_exchange: { audience: \"https://upstream.test/mcp\", client_id: gateway, client_secret: gateway-secret } }";

/// The upstream of these tests, called as each caller with `as_caller` (YAML, one line).
pub fn as_caller_config(issuer: &str, upstream: &str, as_caller: &str) -> String {
    format!(
        "{}upstreams:\n  - {{ name: headers, url: \"{upstream}\", as_caller: {as_caller} }}\n",
        config(issuer, "", ""),
    )
}

/// What the upstream's `whoami` said, as text.
pub fn said(answer: &crate::common::Answer) -> String {
    answer.body["output"].to_string()
}

#[tokio::test]
async fn an_upstream_called_as_the_caller_gets_a_token_exchanged_for_that_caller() {
    let test = "an_upstream_called_as_the_caller_gets_a_token_exchanged_for_that_caller";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    // No token endpoint configured: the issuer's discovery document names it.
    let yaml = as_caller_config(
        &provider.issuer,
        &upstream.url,
        "{ token_exchange: { audience: \"https://upstream.test/mcp\", client_id: gateway, client_secret: \"${GATEWAY_SECRET}\" } }",
    );
    let gateway = Gateway::start_with_env(&yaml, &[("GATEWAY_SECRET", "gateway-secret")]);

    let agent = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let answer = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let said_to_agent = said(&answer);
    // A token issued for the upstream, for this caller, with the gateway as the actor;
    // the exchanged token itself is scrubbed from what comes back.
    assert!(
        said_to_agent.contains("sub=agent; aud=https://upstream.test/mcp; act=gateway"),
        "{said_to_agent}"
    );
    assert!(
        said_to_agent.contains("authorization=Bearer [REDACTED"),
        "{said_to_agent}"
    );
    let signature = agent.rsplit('.').next().expect("a JWT");
    assert!(!said_to_agent.contains(signature), "{said_to_agent}");

    // The same caller again: the exchanged token is remembered, the provider not asked.
    let again = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(provider.exchanges().await, 1);

    // Another caller gets its own, through /mcp too.
    let admin = provider.token("admin", RESOURCE, "tools:read").await;
    let answer = invoke(&gateway, Some(&admin), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(said(&answer).contains("sub=admin;"), "{}", said(&answer));
    assert_eq!(provider.exchanges().await, 2);
    let mcp_token = provider
        .token("agent", crate::MCP_RESOURCE, "tools:read tools:admin")
        .await;
    let (status, _, body) = crate::mcp_call(&gateway, Some(&mcp_token), "whoami", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("sub=agent; aud=https://upstream.test/mcp"),
        "{body}"
    );

    // An API-key caller has no token to exchange: refused before the upstream, with why.
    let answer = invoke(&gateway, Some(&key("alice")), "whoami", json!({})).await;
    assert_eq!(answer.status, 403, "{:?}", answer.body);
    assert_eq!(answer.body["error"]["code"], "upstream_credential_missing");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("user `alice` did not present an access token"),
        "{message}"
    );

    let log = gateway.stderr();
    for secret in [signature, "gateway-secret"] {
        assert!(!log.contains(secret), "a secret was logged: {log}");
    }
}

#[tokio::test]
async fn concurrent_first_calls_of_one_caller_share_one_exchange() {
    let test = "concurrent_first_calls_of_one_caller_share_one_exchange";
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

    // Eight first calls of one caller at once: one request to the token endpoint.
    let calls = (0..8).map(|_| invoke(&gateway, Some(&agent), "whoami", json!({})));
    for answer in futures::future::join_all(calls).await {
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        assert!(said(&answer).contains("sub=agent;"), "{}", said(&answer));
    }
    assert_eq!(provider.tokens_issued().await - before, 1);
    assert_eq!(provider.exchanges().await, 1);
}

#[tokio::test]
async fn an_exchange_the_provider_refuses_or_cannot_answer_fails_the_call_clearly() {
    let test = "an_exchange_the_provider_refuses_or_cannot_answer_fails_the_call_clearly";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    // The wrong client secret: the provider refuses every exchange.
    let yaml = as_caller_config(
        &provider.issuer,
        &upstream.url,
        "{ token_exchange: { audience: \"https://upstream.test/mcp\", client_id: gateway, client_secret: not-the-secret } }",
    );
    let gateway = Gateway::start(&yaml);
    let agent = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let answer = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
    assert_eq!(answer.status, 403, "{:?}", answer.body);
    assert_eq!(answer.body["error"]["code"], "upstream_credential_refused");
    drop(gateway);

    // A token endpoint where nothing listens: a 503 the caller may retry, not a hang.
    let yaml = as_caller_config(
        &provider.issuer,
        &upstream.url,
        "{ token_exchange: { audience: \"https://upstream.test/mcp\", client_id: gateway, client_secret: gateway-secret, token_endpoint: \"http://127.0.0.1:9/token\", timeout: 2s } }",
    );
    let gateway = Gateway::start(&yaml);
    let answer = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(
        answer.body["error"]["code"],
        "identity_provider_unavailable"
    );
}

#[tokio::test]
async fn an_upstream_called_with_fixed_per_user_credentials_gets_each_users_own() {
    let test = "an_upstream_called_with_fixed_per_user_credentials_gets_each_users_own";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = HeadersUpstream::start();
    // alice (from `config`) and bob; only bob has a credential for the upstream.
    let yaml = as_caller_config(
        "http://127.0.0.1:9",
        &upstream.url,
        "{ credentials: { bob: \"${BOB_UPSTREAM_TOKEN}\" }, max_sessions: 10, idle: 1m }",
    )
    .replacen(
        "users:\n",
        &format!("users:\n{}", user_yaml("bob", &["admin"])),
        1,
    );
    let gateway = Gateway::start_with_env(&yaml, &[("BOB_UPSTREAM_TOKEN", "bob-upstream-token")]);
    let answer = invoke(&gateway, Some(&key("bob")), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let said = said(&answer);
    // The upstream got bob's credential (its digest says so), scrubbed on the way back.
    let digest = sha256_hex("Bearer bob-upstream-token");
    assert!(said.contains(&format!("sha256={digest}")), "{said}");
    assert!(!said.contains("bob-upstream-token"), "{said}");
    assert!(said.contains("authorization=Bearer [REDACTED"), "{said}");
    assert!(!gateway.stderr().contains("bob-upstream-token"));

    // A user without an entry: refused before the upstream.
    let answer = invoke(&gateway, Some(&key("alice")), "whoami", json!({})).await;
    assert_eq!(answer.status, 403, "{:?}", answer.body);
    assert_eq!(answer.body["error"]["code"], "upstream_credential_missing");
}

/// The SHA-256 of `text`, in hex.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An issuer on a free loopback port — its discovery document, its key set (the public
/// half of [`signing_key`]) — whose token endpoint answers every exchange 200 with
/// `answer`; and a token of its own for `agent`, an admin, for [`RESOURCE`].
async fn issuer_exchanging_with(answer: String) -> (String, String) {
    use axum::routing::{get, post};
    const KID: &str = "loopback-exchange";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let issuer = format!("http://{}", listener.local_addr().expect("an address"));
    let discovery = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
    let keys = key_set(KID);
    let router = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move || std::future::ready(axum::Json(discovery.clone()))),
        )
        .route(
            "/jwks",
            get(move || std::future::ready(axum::Json(keys.clone()))),
        )
        .route(
            "/token",
            post(move || {
                let answer = answer.clone();
                async move { ([("content-type", "application/json")], answer) }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(KID.to_owned());
    let claims = json!({
        "iss": issuer, "aud": RESOURCE, "sub": "agent", "scope": "tools:admin",
        "iat": unix_now(), "exp": unix_now() + 300,
    });
    let token = jsonwebtoken::encode(&header, &claims, &signing_key()).expect("a token");
    (issuer, token)
}

/// A gateway whose upstream (a [`HeadersUpstream`]) is called with a token exchanged at an
/// issuer that answers every exchange with `answer`; and a token of that issuer's for the
/// caller.
async fn gateway_exchanging_with(answer: serde_json::Value) -> (Gateway, HeadersUpstream, String) {
    let (issuer, agent) = issuer_exchanging_with(answer.to_string()).await;
    let upstream = HeadersUpstream::start();
    let yaml = as_caller_config(
        &issuer,
        &upstream.url,
        &format!(
            "{{ token_exchange: {{ audience: \"https://upstream.test/mcp\", client_id: gateway, client_secret: gateway-secret, token_endpoint: \"{issuer}/token\", timeout: 5s }} }}"
        ),
    );
    (Gateway::start(&yaml), upstream, agent)
}

#[tokio::test]
async fn an_exchanged_credential_said_to_live_for_ever_is_used_and_the_gateway_goes_on() {
    let test = "an_exchanged_credential_said_to_live_for_ever_is_used_and_the_gateway_goes_on";
    if !python_mcp_available(test) {
        return;
    }
    let answer = json!({"access_token": "exchanged-for-ever", "expires_in": u64::MAX});
    let (gateway, _upstream, agent) = gateway_exchanging_with(answer).await;
    for _ in 0..2 {
        let answer = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        assert!(
            said(&answer).contains("authorization=Bearer [REDACTED"),
            "{}",
            said(&answer)
        );
    }
}

#[tokio::test]
async fn a_token_endpoint_answer_over_the_limit_fails_the_call_with_a_503_saying_so() {
    let test = "a_token_endpoint_answer_over_the_limit_fails_the_call_with_a_503_saying_so";
    if !python_mcp_available(test) {
        return;
    }
    let answer = json!({"access_token": "t".repeat(4 * 1024 * 1024), "expires_in": 60});
    let (gateway, _upstream, agent) = gateway_exchanging_with(answer).await;
    let answer = invoke(&gateway, Some(&agent), "whoami", json!({})).await;
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(
        answer.body["error"]["code"], "identity_provider_unavailable",
        "{:?}",
        answer.body
    );
    let message = answer.error_message();
    assert!(message.contains("larger than 65536 bytes"), "{message}");
}
