//! What telling the caller apart costs per request, in one run: an API key (SHA-256 and
//! constant-time comparisons) against an OAuth access token checked with a cached key
//! (RS256 and ES256: header, signature, `iss`/`aud`/`exp`/`nbf`, claims to a user). No
//! network: the issuer's keys are in the cache, as they are after the first request.
//!
//!     cargo bench -p toolgate-gateway --bench identity
//!
//! Results and the machine's load go into docs/performance.md.

use std::hint::black_box;
use std::time::{SystemTime, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, encode};
use serde_json::json;
use toolgate_gateway::auth::{ApiKeys, hash_key};
use toolgate_gateway::config::parse;
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
        "users:\n{users}identity:\n  oauth:\n    issuer: {ISSUER}\n    resource: {RESOURCE}\n    algorithms: [RS256, ES256]\n    tenant_claim: tenant\n    scope_roles: {{ \"tools:call\": [caller] }}\n"
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
    group.finish();
}

criterion_group!(benches, authenticate);
criterion_main!(benches);
