//! The issuer's keys: cached, fetched again for a new key at most once per interval, and
//! an issuer that is down never lets a request through.

use std::time::Duration;

use serde_json::json;

use crate::common::Gateway;
use crate::provider::Provider;
use crate::{RESOURCE, config, invoke};

#[tokio::test]
async fn a_cached_key_is_used_without_fetching_again() {
    let Some(provider) = Provider::start("a_cached_key_is_used_without_fetching_again") else {
        return;
    };
    let gateway = Gateway::start(&config(&provider.issuer, "", ""));
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    for _ in 0..5 {
        let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
    assert_eq!(
        provider.fetches().await,
        (1, 1),
        "one discovery, one key set"
    );
}

#[tokio::test]
async fn a_flood_of_unknown_key_ids_fetches_the_keys_at_most_once_per_interval() {
    let Some(provider) =
        Provider::start("a_flood_of_unknown_key_ids_fetches_the_keys_at_most_once_per_interval")
    else {
        return;
    };
    let gateway = Gateway::start(&config(&provider.issuer, "    refresh_interval: 10m\n", ""));
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    assert_eq!(
        invoke(&gateway, Some(&token), "echo", json!({"text": "x"}))
            .await
            .status,
        200
    );
    for i in 0..20 {
        let kid = format!("made-up-{i}");
        let forged = provider
            .sign(json!({"aud": RESOURCE}), "stranger", Some(&kid))
            .await;
        let answer = invoke(&gateway, Some(&forged), "echo", json!({"text": "x"})).await;
        assert_eq!(answer.status, 401, "{:?}", answer.body);
    }
    assert_eq!(
        provider.fetches().await,
        (1, 1),
        "the keys were fetched again within the interval"
    );
}

#[tokio::test]
async fn a_rotated_key_is_fetched_when_a_token_names_it() {
    let Some(provider) = Provider::start("a_rotated_key_is_fetched_when_a_token_names_it") else {
        return;
    };
    let gateway = Gateway::start(&config(
        &provider.issuer,
        "    refresh_interval: 200ms\n",
        "",
    ));
    let old = provider.token("agent", RESOURCE, "tools:read").await;
    assert_eq!(
        invoke(&gateway, Some(&old), "echo", json!({"text": "x"}))
            .await
            .status,
        200
    );
    // The issuer restarts with a new signing key, on the same address.
    let provider = provider.restart_with_key("key-2");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = provider.token("agent", RESOURCE, "tools:read").await;
    let answer = invoke(&gateway, Some(&new), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(provider.fetches().await, (1, 1));
}

#[tokio::test]
async fn an_unreachable_issuer_with_no_cached_key_is_a_503_and_lets_nobody_through() {
    let Some(provider) = Provider::start(
        "an_unreachable_issuer_with_no_cached_key_is_a_503_and_lets_nobody_through",
    ) else {
        return;
    };
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    let issuer = provider.issuer.clone();
    drop(provider);
    let gateway = Gateway::start(&config(&issuer, "    fetch_timeout: 2s\n", ""));
    for _ in 0..3 {
        let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
        assert_eq!(answer.status, 503, "{:?}", answer.body);
        assert_eq!(answer.error_code(), "identity_provider_unavailable");
        assert!(
            answer.error_message().contains("could not be reached"),
            "{}",
            answer.error_message()
        );
    }
    assert!(!gateway.stderr().contains(&token), "the token was logged");
}

#[tokio::test]
async fn cached_keys_keep_tokens_working_while_the_issuer_is_down() {
    let Some(provider) =
        Provider::start("cached_keys_keep_tokens_working_while_the_issuer_is_down")
    else {
        return;
    };
    let gateway = Gateway::start(&config(
        &provider.issuer,
        "    refresh_interval: 100ms\n    fetch_timeout: 2s\n",
        "",
    ));
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    let stranger = provider
        .sign(json!({"aud": RESOURCE}), "stranger", Some("stranger-9"))
        .await;
    assert_eq!(
        invoke(&gateway, Some(&token), "echo", json!({"text": "x"}))
            .await
            .status,
        200
    );
    drop(provider);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    // An unknown key while the issuer is down: refused, not let through, not a 503.
    let answer = invoke(&gateway, Some(&stranger), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 401, "{:?}", answer.body);
}

#[tokio::test]
async fn concurrent_first_tokens_share_one_fetch_of_the_keys() {
    let Some(provider) = Provider::start("concurrent_first_tokens_share_one_fetch_of_the_keys")
    else {
        return;
    };
    let gateway = Gateway::start(&config(&provider.issuer, "", ""));
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    let calls = (0..16).map(|_| invoke(&gateway, Some(&token), "echo", json!({"text": "x"})));
    for answer in futures::future::join_all(calls).await {
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
    assert_eq!(provider.fetches().await, (1, 1));
}

#[tokio::test]
async fn a_reload_while_the_issuer_is_down_keeps_the_cached_keys() {
    let Some(provider) = Provider::start("a_reload_while_the_issuer_is_down_keeps_the_cached_keys")
    else {
        return;
    };
    let yaml = config(&provider.issuer, "    fetch_timeout: 2s\n", "");
    let gateway = Gateway::start(&yaml);
    let token = provider.token("agent", RESOURCE, "tools:read").await;
    assert_eq!(
        invoke(&gateway, Some(&token), "echo", json!({"text": "x"}))
            .await
            .status,
        200
    );
    drop(provider);
    // A new configuration (one more tool), same issuer.
    std::fs::write(
        &gateway.config,
        yaml.replace("[echo, calculator]", "[echo, calculator, current_time]"),
    )
    .unwrap();
    gateway.reload(1).await;
    let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_says_when_the_issuers_keys_are_fetched_again() {
    // Down when the first token comes, so no keys are cached.
    let issuer = crate::loopback::Issuer::serve(false).await;
    let gateway = Gateway::start(&config(
        &issuer.url,
        "    refresh_interval: 8s\n    fetch_timeout: 2s\n",
        "",
    ));
    let token = issuer.sign(&issuer.claims());
    let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    let wait: u64 = answer
        .header("retry-after")
        .expect("a retry-after")
        .parse()
        .expect("whole seconds");
    assert!(
        (7..=8).contains(&wait),
        "the issuer is asked again 8 s after it was asked, not in {wait} s"
    );
    assert!(
        answer
            .error_message()
            .contains(&format!("again in {wait} s")),
        "{}",
        answer.error_message()
    );
    // Asked again within the interval: the same failure, and less time to wait.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(again.status, 503, "{:?}", again.body);
    let left: u64 = again.header("retry-after").unwrap().parse().unwrap();
    assert!(left < wait, "{left} s left of {wait} s");

    // The issuer comes back; a client that waits as told gets through at once.
    issuer.come_back();
    tokio::time::sleep(Duration::from_secs(left)).await;
    let answer = invoke(&gateway, Some(&token), "echo", json!({"text": "x"})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}
