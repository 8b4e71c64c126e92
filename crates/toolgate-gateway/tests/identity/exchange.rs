//! Per-caller upstream credentials by token exchange at the real provider (RFC 8693),
//! cached per caller token until shortly before they expire; concurrent first calls of
//! one caller share one request to the token endpoint, a failure is shared by the calls
//! waiting on it and never kept, and a provider that never answers costs each call at
//! most the timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use toolgate_gateway::identity::exchange::{
    ExchangeError, ExchangeSettings, TokenExchange, UpstreamCredential,
};

use crate::RESOURCE;
use crate::provider::Provider;

const UPSTREAM: &str = "https://upstream.test/mcp";

/// The gateway's client at `token_endpoint`, exchanging for [`UPSTREAM`].
fn settings(token_endpoint: &str, timeout: Duration) -> ExchangeSettings {
    ExchangeSettings {
        token_endpoint: token_endpoint.to_owned(),
        client_id: "gateway".to_owned(),
        client_secret: "gateway-secret".to_owned(),
        audience: UPSTREAM.to_owned(),
        scope: None,
        timeout,
        refresh_before: Duration::from_secs(30),
        max_entries: 100,
    }
}

fn exchange(provider: &Provider, refresh_before: Duration) -> TokenExchange {
    TokenExchange::new(ExchangeSettings {
        refresh_before,
        ..settings(
            &format!("{}/token", provider.issuer),
            Duration::from_secs(5),
        )
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
    assert_eq!(exchange.cached().await, 2);
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
    assert_eq!(exchange.cached().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_calls_of_one_caller_share_one_request_to_the_token_endpoint() {
    let Some(provider) = Provider::start(
        "concurrent_first_calls_of_one_caller_share_one_request_to_the_token_endpoint",
    ) else {
        return;
    };
    let exchange = Arc::new(exchange(&provider, Duration::from_secs(30)));
    let agent = provider.token("agent", RESOURCE, "tools:read").await;
    let admin = provider.token("admin", RESOURCE, "tools:read").await;
    let before = provider.tokens_issued().await;

    // Sixteen first calls at once, half of them agent's and half admin's.
    let calls = (0..16).map(|i| {
        let exchange = Arc::clone(&exchange);
        let token = if i % 2 == 0 {
            agent.clone()
        } else {
            admin.clone()
        };
        tokio::spawn(async move { exchange.credential(&token).await })
    });
    let credentials: Vec<_> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.expect("no panic").expect("an exchanged token"))
        .collect();

    // One request per caller token, shared by all of that caller's calls.
    assert_eq!(provider.tokens_issued().await - before, 2);
    assert_eq!(provider.exchanges().await, 2);
    for (i, credential) in credentials.iter().enumerate() {
        let twin = &credentials[i % 2];
        assert_eq!(credential.bearer(), twin.bearer(), "call {i}");
    }
    assert_ne!(credentials[0].bearer(), credentials[1].bearer());
    assert_eq!(claims(credentials[1].bearer())["sub"], "admin");
}

#[tokio::test]
async fn a_refused_exchange_is_not_remembered() {
    let Some(provider) = Provider::start("a_refused_exchange_is_not_remembered") else {
        return;
    };
    let exchange = TokenExchange::new(ExchangeSettings {
        client_secret: "not-the-secret".to_owned(),
        ..settings(
            &format!("{}/token", provider.issuer),
            Duration::from_secs(5),
        )
    })
    .expect("an exchange");
    let agent = provider.token("agent", RESOURCE, "tools:read").await;
    let before = provider.tokens_issued().await;
    for attempt in 1..=2 {
        match exchange.credential(&agent).await {
            Err(ExchangeError::Refused { error, .. }) => assert_eq!(error, "invalid_client"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Each call asks again: a refusal is never served from the cache.
        assert_eq!(provider.tokens_issued().await - before, attempt);
    }
    assert_eq!(exchange.cached().await, 0);
}

/// A token endpoint of the test's own on loopback: it counts the requests it gets, and
/// answers each, after `delay`, with a refusal (`invalid_client`); with no `delay` it
/// never answers.
async fn slow_token_endpoint(delay: Option<Duration>) -> (String, Arc<AtomicU64>) {
    let requests = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&requests);
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move || {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                match delay {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => std::future::pending().await,
                }
                (
                    axum::http::StatusCode::UNAUTHORIZED,
                    axum::Json(
                        json!({"error": "invalid_client", "error_description": "no such client"}),
                    ),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!(
        "http://{}/token",
        listener.local_addr().expect("an address")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, requests)
}

/// `count` calls at once with one caller token; each call's result and how long it took.
async fn at_once(
    exchange: &Arc<TokenExchange>,
    token: &str,
    count: usize,
) -> Vec<(Result<Arc<UpstreamCredential>, ExchangeError>, Duration)> {
    let calls = (0..count).map(|_| {
        let exchange = Arc::clone(exchange);
        let token = token.to_owned();
        tokio::spawn(async move {
            let started = Instant::now();
            let result = exchange.credential(&token).await;
            (result, started.elapsed())
        })
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.expect("no panic"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_waiting_on_a_refused_exchange_share_its_refusal_and_do_not_keep_it() {
    let (url, requests) = slow_token_endpoint(Some(Duration::from_millis(400))).await;
    let exchange =
        Arc::new(TokenExchange::new(settings(&url, Duration::from_secs(5))).expect("an exchange"));
    let results = at_once(&exchange, "a.caller.token", 8).await;
    for (result, _) in &results {
        match result {
            Err(ExchangeError::Refused { error, .. }) => assert_eq!(error, "invalid_client"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        1,
        "one request for all eight"
    );
    assert_eq!(exchange.cached().await, 0);

    // The next call asks again.
    assert!(exchange.credential("a.caller.token").await.is_err());
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_waiting_on_a_provider_that_never_answers_give_up_at_the_timeout() {
    let (url, requests) = slow_token_endpoint(None).await;
    let timeout = Duration::from_secs(1);
    let exchange = Arc::new(TokenExchange::new(settings(&url, timeout)).expect("an exchange"));
    let started = Instant::now();
    let results = at_once(&exchange, "a.caller.token", 8).await;
    // They waited for the timeout, not less…
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    for (result, took) in &results {
        match result {
            Err(ExchangeError::Unreachable { reason, .. }) => {
                assert_eq!(reason, "no answer in time")
            }
            other => panic!("expected no answer in time, got {other:?}"),
        }
        // …and none much longer (a little scheduling), whoever made the request.
        assert!(*took < timeout + Duration::from_millis(900), "{took:?}");
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        1,
        "one request for all eight"
    );
    assert_eq!(exchange.cached().await, 0);
}

/// A token endpoint of the test's own on loopback that answers every request 200 with
/// `status` and `body`.
async fn token_endpoint_answering(status: u16, body: String) -> String {
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move || {
            let body = body.clone();
            async move {
                (
                    axum::http::StatusCode::from_u16(status).expect("a status"),
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!(
        "http://{}/token",
        listener.local_addr().expect("an address")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_credential_said_to_live_for_ever_is_kept_no_longer_than_a_day() {
    for lifetime in [u64::MAX, i64::MAX as u64, 10_u64.pow(12)] {
        let url = token_endpoint_answering(
            200,
            json!({"access_token": "exchanged", "expires_in": lifetime}).to_string(),
        )
        .await;
        let exchange = Arc::new(
            TokenExchange::new(settings(&url, Duration::from_secs(5))).expect("an exchange"),
        );
        let results = at_once(&exchange, "a.caller.token", 1).await;
        let credential = results[0].0.as_ref().expect("a credential");
        assert_eq!(credential.bearer(), "exchanged");
        let kept = credential.expires_at() - Instant::now();
        assert!(
            kept <= Duration::from_secs(24 * 3600),
            "`expires_in: {lifetime}` is kept for {kept:?}"
        );
    }
}

#[tokio::test]
async fn a_token_endpoint_answer_over_the_limit_is_refused_unread() {
    let long = "t".repeat(8 * 1024 * 1024);
    for (status, body) in [
        (200, json!({"access_token": long, "expires_in": 60})),
        (
            400,
            json!({"error": "invalid_grant", "error_description": long}),
        ),
    ] {
        let url = token_endpoint_answering(status, body.to_string()).await;
        let exchange = Arc::new(
            TokenExchange::new(settings(&url, Duration::from_secs(5))).expect("an exchange"),
        );
        let results = at_once(&exchange, "a.caller.token", 1).await;
        match &results[0].0 {
            Err(error @ ExchangeError::Malformed(reason)) => {
                assert!(reason.contains("larger than"), "{error}");
                assert!(error.to_string().len() < 300, "{error}");
            }
            other => panic!("expected the answer refused as too large, got {other:?}"),
        }
        assert_eq!(exchange.cached().await, 0);
    }
}
