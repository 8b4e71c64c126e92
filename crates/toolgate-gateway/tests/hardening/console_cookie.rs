//! Served under a name other than loopback, the console's session cookie is
//! `__Host-toolgate_console` — `Secure`, `Path=/`, no `Domain` — and a session is read from
//! that cookie only: a page of a sibling subdomain, or one served over plain HTTP, can set
//! `toolgate_console` for this host and so plant a session of its choosing, never the
//! `__Host-` one.

use serde_json::json;

use crate::common::{Answer, Gateway, client, key, user_yaml};

const HOST: &str = "tools.example.com";

#[tokio::test]
async fn outside_loopback_the_session_lives_in_the_host_prefixed_cookie_only() {
    let gateway = Gateway::start(&format!(
        "console: {{}}\ntools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    ));
    let signed_in = Answer::read(
        client()
            .post(gateway.url("/console/session"))
            .header("host", HOST)
            .json(&json!({ "key": key("alice") }))
            .send()
            .await
            .expect("signing in"),
    )
    .await;
    assert_eq!(signed_in.status, 200, "{:?}", signed_in.body);
    let set = signed_in.header("set-cookie").expect("a cookie").to_owned();
    assert!(set.starts_with("__Host-toolgate_console="), "{set}");
    assert!(
        set.contains("; Path=/;") && set.ends_with("; Secure"),
        "{set}"
    );
    let session = set
        .strip_prefix("__Host-toolgate_console=")
        .and_then(|rest| rest.split(';').next())
        .expect("a session id");

    let with = |cookie: String| {
        let request = client()
            .get(gateway.url("/console/session"))
            .header("host", HOST)
            .header("cookie", cookie);
        async move { Answer::read(request.send().await.expect("an answer")).await }
    };
    let own = with(format!("__Host-toolgate_console={session}")).await;
    assert_eq!(own.status, 200, "{:?}", own.body);
    let planted = with(format!("toolgate_console={session}")).await;
    assert_eq!(planted.status, 401, "{:?}", planted.body);
    assert_eq!(planted.error_code(), "session_ended");
}
