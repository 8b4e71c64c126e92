//! A credential header sent more than once — two `Authorization` headers, or two console
//! session tokens in `x-toolgate-csrf` — is refused 400 `repeated_credential` before either
//! value is looked at, on `/v1`, `/mcp` and the console's session: a proxy in front may read
//! the other one, so the gateway takes neither. The answer is the same whichever value is
//! the right one and whichever comes first, and a refusal is not a wrong credential.

use serde_json::json;

use crate::common::{Answer, Gateway, client, key, user_yaml};

fn config() -> String {
    format!(
        "console: {{}}\ntools:\n  builtin: [echo]\nusers:\n{}\
identity:\n  failed_credentials: {{ max: 1, per: 1h }}\n",
        user_yaml("alice", &["admin"]),
    )
}

fn assert_repeated(answer: &Answer, header: &str, what: &str) {
    assert_eq!(
        (answer.status, answer.error_code()),
        (400, "repeated_credential"),
        "{what}: {}",
        answer.body
    );
    assert_eq!(
        answer.error_message(),
        format!(
            "the request carries `{header}` more than once: send one credential, in one `{header}` header"
        ),
        "{what}"
    );
}

/// Alice signed in to the console: the answer, with her session's cookie and token.
async fn sign_in(gateway: &Gateway) -> Answer {
    let signed_in = Answer::read(
        client()
            .post(gateway.url("/console/session"))
            .json(&json!({ "key": key("alice") }))
            .send()
            .await
            .expect("signing in"),
    )
    .await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    signed_in
}

#[tokio::test]
async fn two_authorization_headers_are_refused_whichever_comes_first() {
    let gateway = Gateway::start(&config());
    let good = format!("Bearer {}", key("alice"));
    let orders = [
        ("the right key first", [good.as_str(), "Bearer wrong"]),
        ("the right key last", ["Bearer wrong", good.as_str()]),
        ("the right key twice", [good.as_str(), good.as_str()]),
        ("two wrong keys", ["Bearer wrong", "Bearer other"]),
    ];
    let mut bodies = Vec::new();
    for (what, [first, second]) in orders {
        // `/v1`, with a body that is not read: the connection is closed after the answer.
        let invoke = client()
            .post(gateway.url("/v1/tools/echo/invoke"))
            .header("authorization", first)
            .header("authorization", second)
            .json(&json!({"text": "hi"}));
        let answer = Answer::read(invoke.send().await.expect("an answer")).await;
        assert_repeated(&answer, "Authorization", &format!("/v1 invoke, {what}"));
        assert_eq!(answer.header("connection"), Some("close"), "{what}");
        bodies.push(answer.body);

        let list = client()
            .get(gateway.url("/v1/tools"))
            .header("authorization", first)
            .header("authorization", second);
        let answer = Answer::read(list.send().await.expect("an answer")).await;
        assert_repeated(&answer, "Authorization", &format!("/v1 list, {what}"));
        bodies.push(answer.body);

        let mcp = client()
            .post(gateway.url("/mcp"))
            .header("authorization", first)
            .header("authorization", second)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        let answer = Answer::read(mcp.send().await.expect("an answer")).await;
        assert_repeated(&answer, "Authorization", &format!("/mcp, {what}"));
        bodies.push(answer.body);
    }
    // Nothing tells the right value from the wrong one.
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");

    // None of those counted as a wrong credential (one is allowed): the key alone works,
    // and a wrong one is still the first.
    let alone = client()
        .get(gateway.url("/v1/tools"))
        .bearer_auth(key("alice"));
    let answer = Answer::read(alone.send().await.expect("an answer")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let wrong = client().get(gateway.url("/v1/tools")).bearer_auth("wrong");
    let answer = Answer::read(wrong.send().await.expect("an answer")).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
}

#[tokio::test]
async fn two_console_session_tokens_are_refused_on_v1_and_the_console() {
    let gateway = Gateway::start(&config());
    let signed_in = sign_in(&gateway).await;
    let session = crate::common::session_cookie(&signed_in).expect("a session cookie");
    let cookie = format!("toolgate_console={session}");
    let token = signed_in.body["csrf_token"]
        .as_str()
        .expect("a token")
        .to_owned();
    let with_tokens = |method: reqwest::Method, path: &str, tokens: [&str; 2]| {
        let mut request = client()
            .request(method, gateway.url(path))
            .header("cookie", &cookie)
            .header("origin", &gateway.base);
        for token in tokens {
            request = request.header("x-toolgate-csrf", token);
        }
        async move { Answer::read(request.send().await.expect("an answer")).await }
    };
    for tokens in [[token.as_str(), "0000"], ["0000", token.as_str()]] {
        let answer = with_tokens(reqwest::Method::DELETE, "/v1/admin/stats", tokens).await;
        assert_repeated(&answer, "x-toolgate-csrf", &format!("/v1 {tokens:?}"));
        let answer = with_tokens(reqwest::Method::DELETE, "/console/session", tokens).await;
        assert_repeated(&answer, "x-toolgate-csrf", &format!("sign-out {tokens:?}"));
    }
    // The session is still open, and one token works.
    let answer = with_tokens(reqwest::Method::DELETE, "/console/session", [&token, ""]).await;
    assert_repeated(&answer, "x-toolgate-csrf", "a second, empty token");
    let once = client()
        .delete(gateway.url("/console/session"))
        .header("cookie", &cookie)
        .header("origin", &gateway.base)
        .header("x-toolgate-csrf", &token);
    let answer = Answer::read(once.send().await.expect("an answer")).await;
    assert_eq!(answer.status, 204, "{}", answer.body);
}

#[tokio::test]
async fn two_console_session_cookies_are_refused_whichever_comes_first() {
    let gateway = Gateway::start(&config());
    let session = || async {
        crate::common::session_cookie(&sign_in(&gateway).await).expect("a session cookie")
    };
    let (first, second) = (session().await, session().await);
    let one_header = format!("toolgate_console={first}; toolgate_console={second}");
    for (what, cookies) in [
        ("in one header", vec![one_header.clone()]),
        (
            "in two headers",
            vec![
                format!("toolgate_console={second}"),
                format!("toolgate_console={first}"),
            ],
        ),
        (
            "a planted one first",
            vec![format!(
                "toolgate_console=planted; toolgate_console={first}"
            )],
        ),
    ] {
        for path in ["/v1/tools", "/console/session"] {
            let mut request = client().get(gateway.url(path));
            for cookie in &cookies {
                request = request.header("cookie", cookie);
            }
            let answer = Answer::read(request.send().await.expect("an answer")).await;
            assert_eq!(
                (answer.status, answer.error_code()),
                (400, "repeated_credential"),
                "{what} on {path}: {}",
                answer.body
            );
            assert!(
                answer
                    .error_message()
                    .contains("session cookie `toolgate_console` more than once"),
                "{}",
                answer.error_message()
            );
        }
    }
    // Either cookie alone is a session.
    for session in [&first, &second] {
        let answer = Answer::read(
            client()
                .get(gateway.url("/v1/tools"))
                .header("cookie", format!("toolgate_console={session}"))
                .send()
                .await
                .expect("an answer"),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
}
