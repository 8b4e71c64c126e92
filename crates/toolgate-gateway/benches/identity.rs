//! What telling the caller apart costs per request, in one run: an API key (SHA-256 and
//! constant-time comparisons) against an OAuth access token checked with a cached key
//! (RS256 and ES256: header, signature, `iss`/`aud`/`exp`/`nbf`, claims to a user). No
//! network: the issuer's keys are in the cache, as they are after the first request. And
//! what the limit on wrong credentials per client address adds to each of them.
//!
//!     cargo bench -p toolgate-gateway --bench identity
//!
//! Results and the machine's load go into docs/performance.md.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, encode};
use serde_json::json;
use toolgate_gateway::auth::{ApiKeys, hash_key};
use toolgate_gateway::config::parse;
use toolgate_gateway::identity::address::client_address;
use toolgate_gateway::identity::failures::{CredentialLimit, FailedCredentials};
use toolgate_gateway::identity::{
    Identity, Outcome, Route, SigningKey, SigningKeys, TokenVerifier,
};

const ISSUER: &str = "https://login.example.com";
const RESOURCE: &str = "https://tools.example.com";

fn token(alg: Algorithm, kid: &str, key: &EncodingKey) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "iss": ISSUER, "aud": format!("{RESOURCE}/mcp"), "sub": "agent-7",
        "iat": now, "exp": now + 3600, "scope": "tools:read tools:call",
        "roles": ["reader"], "tenant": "acme", "client_id": "agent-7",
    });
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    encode(&header, &claims, key).expect("a signed token")
}

fn authenticate(c: &mut Criterion) {
    // Ten users, as a small deployment has; the key presented is the last one's.
    let users: String = (0..10)
        .map(|i| {
            format!(
                "  - {{ id: user{i}, key_sha256: \"{}\", roles: [reader] }}\n",
                hash_key(&format!("tg_bench_key_{i}"))
            )
        })
        .collect();
    let config = parse(&format!(
        "users:\n{users}identity:\n  oauth:\n    issuer: {ISSUER}\n    resource: {RESOURCE}\n    algorithms: [RS256, ES256]\n    tenant_claim: tenant\n    scope_roles: {{ \"tools:call\": [caller] }}\n  failed_credentials: {{ max: 30, per: 1d }}\n"
    ))
    .expect("the bench config");
    let keys = ApiKeys::new(&config.users);
    let identity = Identity::new(&config).expect("an identity");
    let pem = |name: &str| {
        std::fs::read(format!(
            "{}/benches/keys/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("a bench key")
    };
    identity
        .key_store()
        .expect("an issuer")
        .preload(SigningKeys::new(vec![
            SigningKey {
                kid: Some("rsa-1".to_owned()),
                alg: Some(Algorithm::RS256),
                key: DecodingKey::from_rsa_pem(&pem("rs256.pub.pem")).unwrap(),
            },
            SigningKey {
                kid: Some("ec-1".to_owned()),
                alg: Some(Algorithm::ES256),
                key: DecodingKey::from_ec_pem(&pem("es256.pub.pem")).unwrap(),
            },
        ]));
    let rs256 = token(
        Algorithm::RS256,
        "rsa-1",
        &EncodingKey::from_rsa_pem(&pem("rs256.pem")).unwrap(),
    );
    let es256 = token(
        Algorithm::ES256,
        "ec-1",
        &EncodingKey::from_ec_pem(&pem("es256.pem")).unwrap(),
    );

    let mut group = c.benchmark_group("authenticate");
    let cases = [
        ("api_key", "Bearer tg_bench_key_9".to_owned()),
        ("jwt_rs256_seen_before", format!("Bearer {rs256}")),
        ("jwt_es256_seen_before", format!("Bearer {es256}")),
    ];
    for (name, header) in &cases {
        // Every case must admit its caller, or the bench measures a refusal.
        assert!(
            matches!(
                identity.authenticate(Route::Mcp, Some(header), &keys),
                Outcome::Caller(..)
            ),
            "{name} is not admitted"
        );
        group.bench_function(*name, |b| {
            b.iter(|| identity.authenticate(Route::Mcp, black_box(Some(header.as_str())), &keys))
        });
    }
    // The same tokens checked in full every time — a token the gateway has not seen before
    // (the rows above take a token seen before from the verifier's memory).
    let verifier = TokenVerifier::new(config.identity.oauth.as_ref().expect("oauth"));
    let cached = identity
        .key_store()
        .expect("an issuer")
        .cached()
        .expect("preloaded keys");
    for (name, token) in [
        ("jwt_rs256_first_sight", &rs256),
        ("jwt_es256_first_sight", &es256),
    ] {
        assert!(
            verifier.check(token, &cached).is_ok(),
            "{name} is not admitted"
        );
        group.bench_function(name, |b| {
            b.iter(|| verifier.check(black_box(token), &cached))
        });
    }
    // What the limit on wrong credentials adds to every request that carries one: the
    // client's address (the connection's peer, or, the peer being a trusted proxy, the
    // address `X-Forwarded-For` names) and a look-up in the table of failing addresses —
    // empty, and holding 10,000 addresses, as under a spread-out attack (`per: 1d` keeps
    // them owing for the whole run; swept once whole again, they would leave the table).
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000)));
    let direct = HeaderMap::new();
    let mut forwarded = HeaderMap::new();
    forwarded.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
    let trusted = &config.server.trusted_proxies;
    let quiet = CredentialLimit::new(Arc::default(), None, &config);
    let attacked = CredentialLimit::new(Arc::new(FailedCredentials::new()), None, &config);
    futures::executor::block_on(async {
        for i in 0..10_000u32 {
            let mut from = HeaderMap::new();
            let address = Ipv4Addr::from(0x0a00_0000 + i).to_string();
            from.insert("x-forwarded-for", address.parse().unwrap());
            attacked
                .failed(client_address(Some(&peer), &from, trusted))
                .await;
        }
    });
    for (name, limit, headers) in [
        ("failed_credentials_none_tracked", &quiet, &direct),
        (
            "failed_credentials_10k_tracked_forwarded",
            &attacked,
            &forwarded,
        ),
    ] {
        let client = || client_address(Some(black_box(&peer)), black_box(headers), trusted);
        assert!(limit.refusal(client).is_none());
        group.bench_function(name, |b| b.iter(|| limit.refusal(client)));
    }
    group.finish();
}

criterion_group!(benches, authenticate);
criterion_main!(benches);
