//! Guessing credentials: a client address that presents too many wrong API keys or tokens
//! (or made-up console session cookies) is refused, unchecked, before its next credential
//! is looked at — the right key too, on `/v1`, `/mcp` and the console's sign-in — while other addresses, and requests
//! without a credential, go on. Behind a trusted proxy the client is the address the
//! proxy names, and a client cannot name another.

use std::net::{IpAddr, Ipv4Addr};

use serde_json::json;

use crate::common::{Answer, Gateway, check, key, user_yaml};

/// Three wrong credentials in a burst, one more every 20 minutes.
fn config(server: &str) -> String {
    format!(
        "console: {{}}\ntools:\n  builtin: [echo]\nusers:\n{}\
identity:\n  failed_credentials: {{ max: 3, per: 1h }}\n{server}",
        user_yaml("alice", &["admin"]),
    )
}

/// A client whose requests come from `source` (any address of `127.0.0.0/8` is this
/// host's).
fn from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::from(source)))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

async fn echo(
    gateway: &Gateway,
    client: &reqwest::Client,
    credential: Option<&str>,
    forwarded_for: Option<&str>,
) -> Answer {
    let mut request = client
        .post(gateway.url("/v1/tools/echo/invoke"))
        .json(&json!({"text": "hi"}));
    if let Some(credential) = credential {
        request = request.bearer_auth(credential);
    }
    if let Some(forwarded_for) = forwarded_for {
        request = request.header("x-forwarded-for", forwarded_for);
    }
    Answer::read(request.send().await.expect("sending the request")).await
}

fn assert_refused_unchecked(answer: &Answer, what: &str) {
    assert_eq!(
        (answer.status, answer.error_code()),
        (429, "too_many_failed_credentials"),
        "{what}: {}",
        answer.body
    );
    // The first of the three comes back 20 minutes after it was spent.
    let wait: u64 = answer
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no Retry-After in {:?}", answer.headers));
    assert!(
        (1_100..=1_200).contains(&wait),
        "{what}: Retry-After {wait}"
    );
    // The body says the same wait, in milliseconds, as every other 429 of the gateway.
    let ms = answer.body["error"]["retry_after_ms"].as_u64();
    assert_eq!(
        ms.map(|ms| ms.div_ceil(1000)),
        Some(wait),
        "{what}: {}",
        answer.body
    );
}

#[tokio::test]
async fn an_address_that_guesses_keys_is_refused_unchecked_and_other_addresses_go_on() {
    let gateway = Gateway::start(&config(""));
    let guesser = from([127, 0, 0, 1]);
    let alice = key("alice");
    for guess in ["tg_guess_1", "tg_guess_2", "not.a.token"] {
        let answer = echo(&gateway, &guesser, Some(guess), None).await;
        assert_eq!(answer.status, 401, "{guess}: {}", answer.body);
    }
    // Past the allowance even the right key is refused without being looked at: the
    // answer must not tell a right guess from a wrong one.
    let answer = echo(&gateway, &guesser, Some(&alice), None).await;
    assert_refused_unchecked(&answer, "the right key, on /v1");
    assert!(
        answer.error_message().contains("wait"),
        "{}",
        answer.error_message()
    );
    let mcp = guesser
        .post(gateway.url("/mcp"))
        .bearer_auth(&alice)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("POST /mcp");
    assert_refused_unchecked(&Answer::read(mcp).await, "the right key, on /mcp");
    let sign_in = guesser
        .post(gateway.url("/console/session"))
        .json(&json!({"key": alice}))
        .send()
        .await
        .expect("POST /console/session");
    assert_refused_unchecked(&Answer::read(sign_in).await, "the console's sign-in");
    // A request without a credential guesses nothing: it gets its challenge as before.
    let answer = echo(&gateway, &guesser, None, None).await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (401, "unauthenticated")
    );
    // Another address is not held to the guesser's count.
    let answer = echo(&gateway, &from([127, 0, 0, 2]), Some(&alice), None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // A reload does not hand the guesser a fresh allowance.
    gateway.reload(1).await;
    let answer = echo(&gateway, &guesser, Some(&alice), None).await;
    assert_refused_unchecked(&answer, "after a reload");
    let metrics = gateway.metrics().await;
    assert_eq!(
        crate::common::metric(
            &metrics,
            "toolgate_http_failed_credentials_refused_total",
            &[]
        ),
        4.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn wrong_sign_ins_at_the_console_count_against_the_address() {
    let gateway = Gateway::start(&config(""));
    let client = from([127, 0, 0, 3]);
    for guess in ["tg_guess_1", "tg_guess_2", "tg_guess_3"] {
        let answer = Answer::read(
            client
                .post(gateway.url("/console/session"))
                .json(&json!({"key": guess}))
                .send()
                .await
                .expect("POST /console/session"),
        )
        .await;
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
    let answer = echo(&gateway, &client, Some(&key("alice")), None).await;
    assert_refused_unchecked(&answer, "/v1 after wrong sign-ins");
}

/// A made-up console session cookie is a wrong credential too: a flood of them is held to
/// the same allowance as made-up keys (each costs a look-up, on Redis with replicas), and
/// past it the cookie is not looked up at all.
#[tokio::test]
async fn made_up_session_cookies_count_against_the_address_and_are_then_not_looked_up() {
    let gateway = Gateway::start(&config(""));
    let client = from([127, 0, 0, 6]);
    let with_cookie = |path: &str, cookie: String| {
        client
            .get(gateway.url(path))
            .header("cookie", format!("toolgate_console={cookie}"))
            .send()
    };
    for n in 0..3 {
        let path = if n == 0 {
            "/console/session"
        } else {
            "/v1/tools"
        };
        let made_up = format!("{n:064x}");
        let answer = Answer::read(with_cookie(path, made_up).await.expect(path)).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (401, "session_ended"),
            "{}",
            answer.body
        );
        let removed = answer
            .headers
            .get("set-cookie")
            .map(|v| v.to_str().unwrap());
        assert!(
            removed.is_some_and(|c| c.starts_with("toolgate_console=;") && c.contains("Max-Age=0")),
            "the refusal removes the cookie: {removed:?}"
        );
    }
    let answer = Answer::read(with_cookie("/v1/tools", "f".repeat(64)).await.unwrap()).await;
    assert_refused_unchecked(&answer, "a fourth made-up cookie");
    let answer = echo(&gateway, &client, Some(&key("alice")), None).await;
    assert_refused_unchecked(&answer, "/v1 after made-up cookies");
    // Another address goes on.
    let other = echo(&gateway, &from([127, 0, 0, 7]), Some(&key("alice")), None).await;
    assert_eq!(other.status, 200, "{}", other.body);
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_it_names_has_its_own_allowance() {
    // The default trusts this host's loopback addresses, as a proxy on the same host.
    let gateway = Gateway::start(&config(""));
    let proxy = from([127, 0, 0, 1]);
    let alice = key("alice");
    for _ in 0..3 {
        let answer = echo(&gateway, &proxy, Some("tg_guess"), Some("203.0.113.9")).await;
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
    let answer = echo(&gateway, &proxy, Some(&alice), Some("203.0.113.9")).await;
    assert_refused_unchecked(&answer, "the guesser behind the proxy");
    // Writing another address in front of the one the proxy appended changes nothing.
    let answer = echo(
        &gateway,
        &proxy,
        Some(&alice),
        Some("198.51.100.1, 203.0.113.9"),
    )
    .await;
    assert_refused_unchecked(&answer, "the guesser naming another address");
    // Other clients of the same proxy, and the proxy's own requests, go on.
    let answer = echo(&gateway, &proxy, Some(&alice), Some("203.0.113.10")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = echo(&gateway, &proxy, Some(&alice), None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

#[tokio::test]
async fn an_untrusted_peer_cannot_take_a_fresh_allowance_by_naming_addresses() {
    let gateway = Gateway::start(&config("server:\n  trusted_proxies: []\n"));
    let client = from([127, 0, 0, 4]);
    for i in 0..3 {
        let forwarded = format!("203.0.113.{i}");
        let answer = echo(&gateway, &client, Some("tg_guess"), Some(&forwarded)).await;
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
    let answer = echo(&gateway, &client, Some(&key("alice")), Some("203.0.113.99")).await;
    assert_refused_unchecked(&answer, "an untrusted peer naming a new address");
}

#[tokio::test]
async fn a_limit_of_zero_is_off_and_bad_settings_are_refused_with_the_field() {
    let off = config("").replace("{ max: 3, per: 1h }", "{ max: 0 }");
    let gateway = Gateway::start(&off);
    let client = from([127, 0, 0, 5]);
    for _ in 0..10 {
        let answer = echo(&gateway, &client, Some("tg_guess"), None).await;
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
    let answer = echo(&gateway, &client, Some(&key("alice")), None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // `toolgate check` says so, and says how clients are told apart.
    let (_, stdout, _) = check(&off);
    assert!(
        stdout.contains("wrong credentials: not limited"),
        "{stdout}"
    );
    let (_, stdout, _) = check(&config(
        "server:\n  trusted_proxies: [10.1.2.3, \"fd00::/8\"]\n",
    ));
    assert!(
        stdout.contains(
            "wrong credentials: 3 per client address in a burst, then one every 20m; the client is the connection's peer, or, from 10.1.2.3, fd00::/8, the address X-Forwarded-For names"
        ),
        "{stdout}"
    );
    // With `state` on Redis (which check does not contact) the replicas count together.
    let (_, stdout, _) = check(&config("state:\n  url: redis://127.0.0.1:1\n"));
    assert!(
        stdout.contains(
            "then one every 20m, counted together by every replica on the state's Redis; the client is"
        ),
        "{stdout}"
    );

    for (setting, field, words) in [
        (
            "{ max: 3, per: 0s }",
            "identity.failed_credentials.per",
            "longer than zero",
        ),
        (
            "{ max: 3, max_addresses: 0 }",
            "identity.failed_credentials.max_addresses",
            "at least 1",
        ),
    ] {
        let (status, _, stderr) = check(&config("").replace("{ max: 3, per: 1h }", setting));
        assert!(!status.success(), "{setting} was accepted");
        assert!(
            stderr.contains(field) && stderr.contains(words),
            "{setting}: {stderr}"
        );
    }
    let (status, _, stderr) = check(&config("server:\n  trusted_proxies: [\"10.0.0.0/33\"]\n"));
    assert!(!status.success());
    assert!(
        stderr.contains("`10.0.0.0/33` is not an IP address or network"),
        "{stderr}"
    );
}
