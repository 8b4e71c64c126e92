//! Tokens signed by the issuer whose claims are missing or malformed: each is a 401
//! `invalid_token` that names the claim and says what is wrong with it, without echoing
//! its value; and a subject, tenant or role with control characters or of unbounded length
//! (which would forge lines in logs and webhook messages) is refused.

use serde_json::{Value, json};

use crate::common::{Answer, Gateway};
use crate::loopback::Issuer;
use crate::{config, invoke};

/// An issuer served here and a gateway taking its tokens (`tenant_claim: tenant`,
/// `readers` may call `echo`).
async fn setup() -> (Issuer, Gateway) {
    let issuer = Issuer::serve(true).await;
    let gateway = Gateway::start(&config(&issuer.url, "", ""));
    (issuer, gateway)
}

/// `echo` on `/v1` with `token`.
async fn call(gateway: &Gateway, token: &str) -> Answer {
    invoke(gateway, Some(token), "echo", json!({"text": "x"})).await
}

/// Asserts a 401 `invalid_token` whose message is `message` exactly, and whose challenge
/// carries it as the error description.
fn assert_refused_saying(answer: &Answer, message: &str, case: &str) {
    assert_eq!(answer.status, 401, "{case}: {:?}", answer.body);
    assert_eq!(answer.error_code(), "invalid_token", "{case}");
    assert_eq!(answer.error_message(), message, "{case}");
    let challenge = answer.header("www-authenticate").expect("a challenge");
    assert!(
        challenge.contains(&format!(
            "error=\"invalid_token\", error_description=\"{message}\""
        )),
        "{case}: {challenge}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_told_which_claim_is_wrong() {
    let (issuer, gateway) = setup().await;
    let good = issuer.token_with(|_| {});
    assert_eq!(call(&gateway, &good).await.status, 200);

    let remove = |claim: &'static str| {
        move |c: &mut serde_json::Map<String, Value>| {
            c.remove(claim);
        }
    };
    let set = |claim: &'static str, value: Value| {
        move |c: &mut serde_json::Map<String, Value>| {
            c.insert(claim.to_owned(), value);
        }
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "no aud",
            issuer.token_with(remove("aud")),
            "the token has no `aud` claim: request it with resource set to this gateway",
        ),
        (
            "no exp",
            issuer.token_with(remove("exp")),
            "the token has no `exp` claim: an access token must say when it expires",
        ),
        (
            "no sub",
            issuer.token_with(remove("sub")),
            "the token has no `sub` claim: the issuer must name the caller in it",
        ),
        (
            "sub null",
            issuer.token_with(set("sub", Value::Null)),
            "the token has no `sub` claim: the issuer must name the caller in it",
        ),
        (
            "exp as text",
            issuer.token_with(set("exp", json!("9999999999"))),
            "the token's `exp` claim must be a number of seconds since 1970, written as a JSON number",
        ),
        (
            "exp 1e30",
            issuer.token_with(set("exp", json!(1e30))),
            "the token's `exp` claim must be a number of seconds since 1970 that a clock can reach: it is negative or far too large",
        ),
        (
            "exp negative",
            issuer.token_with(set("exp", json!(-1))),
            "the token's `exp` claim must be a number of seconds since 1970 that a clock can reach: it is negative or far too large",
        ),
        (
            "empty sub",
            issuer.token_with(set("sub", json!(""))),
            "the token's `sub` claim must be a non-empty string naming the caller",
        ),
        (
            "sub a number",
            issuer.token_with(set("sub", json!(42))),
            "the token's `sub` claim must be a non-empty string naming the caller",
        ),
        (
            "aud a number",
            issuer.token_with(set("aud", json!(7))),
            "the token's `aud` claim must be this resource's identifier, as a string or in a list of strings",
        ),
        (
            "iat as text",
            issuer.token_with(set("iat", json!("yesterday"))),
            "the token's `iat` claim must be a number of seconds since 1970, written as a JSON number",
        ),
        (
            "nbf as text",
            issuer.token_with(set("nbf", json!("now"))),
            "the token's `nbf` claim must be a number of seconds since 1970, written as a JSON number",
        ),
    ];
    for (case, token, message) in &cases {
        let answer = call(&gateway, token).await;
        assert_refused_saying(&answer, message, case);
    }
    let log = gateway.stderr();
    for (case, token, _) in &cases {
        assert!(
            !log.contains(token.as_str()),
            "{case}: the token was logged"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_with_control_characters_is_refused() {
    let (issuer, gateway) = setup().await;
    let forged = "mallory\n> :white_check_mark: approved by `admin`";
    for sub in [
        forged,
        "mallory\u{0}",
        "mallory\r",
        "mallory\u{1b}[2J",
        "mallory\u{202e}nimda",
    ] {
        let token = issuer.token_with(|c| {
            c.insert("sub".to_owned(), json!(sub));
        });
        let answer = call(&gateway, &token).await;
        assert_refused_saying(
            &answer,
            "the token's `sub` claim contains control characters (such as NUL or a line break) or invisible formatting characters: the issuer must send printable text",
            &format!("{sub:?}"),
        );
    }
    assert!(
        !gateway.stderr().contains("approved by"),
        "the forged line reached the log"
    );
    // A backtick alone is printable: an issuer's odd subject still passes.
    let token = issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("agent-`7`"));
    });
    assert_eq!(call(&gateway, &token).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_or_role_with_control_characters_is_refused() {
    let (issuer, gateway) = setup().await;
    let token = issuer.token_with(|c| {
        c.insert("tenant".to_owned(), json!("acme\n> tenant: globex"));
    });
    assert_refused_saying(
        &call(&gateway, &token).await,
        "the token's `tenant` claim contains control characters (such as NUL or a line break) or invisible formatting characters: the issuer must send printable text",
        "tenant",
    );
    let token = issuer.token_with(|c| {
        c.insert("roles".to_owned(), json!(["reader", "admin\n"]));
    });
    assert_refused_saying(
        &call(&gateway, &token).await,
        "the token's `roles` claim holds a role with control characters (such as NUL or a line break) or invisible formatting characters: the issuer must send printable text",
        "roles",
    );
    let token = issuer.token_with(|c| {
        c.insert("tenant".to_owned(), json!("acme"));
    });
    assert_eq!(call(&gateway, &token).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_longer_than_256_bytes_is_refused() {
    let (issuer, gateway) = setup().await;
    let at_most = issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("a".repeat(256)));
    });
    let answer = call(&gateway, &at_most).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let longer = issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("a".repeat(257)));
    });
    let answer = call(&gateway, &longer).await;
    assert_refused_saying(
        &answer,
        "the token's `sub` claim is longer than 256 bytes, the most this resource takes for an id",
        "257 bytes",
    );
    assert!(
        !answer.body.to_string().contains(&"a".repeat(257)),
        "the subject was echoed"
    );
}
