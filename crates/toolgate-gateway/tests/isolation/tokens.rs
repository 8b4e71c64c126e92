//! Tokens the JWS and JWT specifications say a resource server must refuse, though they
//! are signed with the issuer's own key: a header naming critical extensions (`crit`,
//! RFC 7515 §4.1.11) or an unencoded payload (`b64: false`, RFC 7797), an `iss` that is
//! not one string (RFC 7519 §4.1.1), an `iat` ten years ahead. Each is refused 401
//! `invalid_token` on `/v1` and `/mcp`, saying why, while the same token without the flaw
//! passes on both.
//!
//! The issuer is served here on loopback — a discovery document and a key set holding the
//! public half of `benches/keys/rs256.pem` — and the tokens are signed with that key.

use axum::Json;
use axum::routing::get;
use jsonwebtoken::{Algorithm, Header};
use serde_json::{Value, json};

use crate::common::{Answer, Gateway, client, key_set, signing_key, unix_now as now, user_yaml};

/// The gateway's resource identifier in these tests.
const RESOURCE: &str = "https://tools.test";
const KID: &str = "loopback-1";

/// An issuer on a free loopback port: its discovery document and its key set. Stopped
/// with the test's runtime.
async fn serve_issuer() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let keys = key_set(KID);
    let discovery = json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/jwks"),
        "token_endpoint": format!("{issuer}/token"),
    });
    let router = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move || std::future::ready(Json(discovery.clone()))),
        )
        .route("/jwks", get(move || std::future::ready(Json(keys.clone()))));
    tokio::spawn(async move {
        axum::serve(listener, router)
            .await
            .expect("the issuer serves");
    });
    issuer
}

/// A gateway taking tokens of `issuer` for [`RESOURCE`]; `reader`s may call `echo`.
fn gateway(issuer: &str) -> Gateway {
    Gateway::start(&format!(
        "tools:\n  builtin: [echo]\nusers:\n{users}\
         identity:\n  oauth:\n    issuer: {issuer}\n    resource: {RESOURCE}\n    clock_skew: 30s\n\
         policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, roles: [reader] }}\n",
        users = user_yaml("alice", &["reader"]),
    ))
}

/// Claims the gateway takes from `issuer`, for `audience`.
fn claims(issuer: &str, audience: &str) -> Value {
    json!({
        "iss": issuer, "aud": audience, "sub": "agent-7", "roles": ["reader"],
        "iat": now(), "exp": now() + 300,
    })
}

/// `claims` signed with the issuer's key under `header` (its `kid` and `alg` set here).
fn sign(mut header: Header, claims: &Value) -> String {
    header.alg = Algorithm::RS256;
    header.kid = Some(KID.to_owned());
    jsonwebtoken::encode(&header, claims, &signing_key()).expect("a signed token")
}

/// `echo` on `/v1` with `token`.
async fn on_v1(gateway: &Gateway, token: &str) -> Answer {
    let response = client()
        .post(gateway.url("/v1/tools/echo/invoke"))
        .bearer_auth(token)
        .json(&json!({"text": "hi"}))
        .send()
        .await
        .expect("the gateway answers");
    Answer::read(response).await
}

/// A stateless MCP 2026-07-28 `tools/call` of `echo` with `token`.
async fn on_mcp(gateway: &Gateway, token: &str) -> Answer {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "echo", "arguments": {"text": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "isolation-tests", "version": "0"},
            },
        },
    });
    let response = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    Answer::read(response).await
}

/// Asserts that the token `make` builds for each route (given that route's audience) is
/// refused there with 401 `invalid_token` and a challenge saying `why`.
async fn assert_refused_on_both_routes(
    gateway: &Gateway,
    make: impl Fn(&str) -> String,
    why: &str,
) {
    for (route, answer) in [
        ("/v1", on_v1(gateway, &make(RESOURCE)).await),
        (
            "/mcp",
            on_mcp(gateway, &make(&format!("{RESOURCE}/mcp"))).await,
        ),
    ] {
        assert_eq!(answer.status, 401, "{route}: {why}: {:?}", answer.body);
        let challenge = answer.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.contains("error=\"invalid_token\"") && challenge.contains(why),
            "{route}: the challenge does not say {why:?}: {challenge}; body {:?}",
            answer.body
        );
    }
}

/// The same claims and header without the flaw pass on both routes: the refusals below
/// are about the flaw, not about the issuer, the key or the audience.
async fn assert_taken_on_both_routes(gateway: &Gateway, issuer: &str) {
    let v1 = on_v1(gateway, &sign(Header::default(), &claims(issuer, RESOURCE))).await;
    assert_eq!(v1.status, 200, "{:?}", v1.body);
    let mcp = on_mcp(
        gateway,
        &sign(
            Header::default(),
            &claims(issuer, &format!("{RESOURCE}/mcp")),
        ),
    )
    .await;
    assert_eq!(mcp.status, 200, "{:?}", mcp.body);
    assert!(
        mcp.body.to_string().contains("hi"),
        "the call went through: {:?}",
        mcp.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_whose_header_names_a_critical_extension_is_refused() {
    let issuer = serve_issuer().await;
    let gateway = gateway(&issuer);
    assert_taken_on_both_routes(&gateway, &issuer).await;
    let with_crit = |audience: &str| {
        let mut header = Header {
            crit: Some(vec!["urn:example:unknown".to_owned()]),
            ..Header::default()
        };
        header
            .extras
            .insert("urn:example:unknown", "must be understood");
        sign(header, &claims(&issuer, audience))
    };
    assert_refused_on_both_routes(&gateway, with_crit, "the token's header has crit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_whose_header_says_its_payload_is_unencoded_is_refused() {
    let issuer = serve_issuer().await;
    let gateway = gateway(&issuer);
    assert_taken_on_both_routes(&gateway, &issuer).await;
    let unencoded = |audience: &str| {
        let mut header = Header::default();
        header.extras.insert("b64", false);
        sign(header, &claims(&issuer, audience))
    };
    assert_refused_on_both_routes(
        &gateway,
        unencoded,
        "the token's header has b64 set to false",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_whose_issuer_is_a_list_is_refused() {
    let issuer = serve_issuer().await;
    let gateway = gateway(&issuer);
    assert_taken_on_both_routes(&gateway, &issuer).await;
    let listed = |audience: &str| {
        let mut claims = claims(&issuer, audience);
        claims["iss"] = json!([issuer]);
        sign(Header::default(), &claims)
    };
    assert_refused_on_both_routes(
        &gateway,
        listed,
        "the token's iss claim is not a single string",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_issued_ten_years_ahead_is_refused_past_the_clock_skew() {
    let issuer = serve_issuer().await;
    let gateway = gateway(&issuer);
    assert_taken_on_both_routes(&gateway, &issuer).await;
    let ten_years = 10 * 365 * 24 * 3600;
    let ahead = |audience: &str| {
        let mut claims = claims(&issuer, audience);
        claims["iat"] = json!(now() + ten_years);
        claims["exp"] = json!(now() + ten_years + 300);
        sign(Header::default(), &claims)
    };
    assert_refused_on_both_routes(&gateway, ahead, "the token's iat lies in the future").await;
    // Within the skew (30 s here) a clock a little ahead is taken.
    let a_little = |audience: &str| {
        let mut claims = claims(&issuer, audience);
        claims["iat"] = json!(now() + 10);
        sign(Header::default(), &claims)
    };
    let answer = on_v1(&gateway, &a_little(RESOURCE)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}
