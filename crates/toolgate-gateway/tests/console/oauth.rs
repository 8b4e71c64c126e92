//! Signing in to the console through the issuer, against an issuer served here on loopback
//! (a discovery document, a key set holding the public half of `benches/keys/rs256.pem`,
//! and a token endpoint that answers any code with a short-lived RS256 access token and
//! no `expires_in`, which RFC 6749 makes optional) and counting how often its discovery
//! document is read:
//!
//! - a session opened with such a token ends at the token's `exp`, not `session_ttl` later;
//! - one client address has a few sign-ins waiting at once and is then refused 429 with
//!   `Retry-After`, while other addresses still sign in (in this process and on Redis);
//! - a flood of starts reads the discovery document once, and starts refused for want of
//!   places, or while the issuer cannot be read, ask it nothing more.
//! - off loopback, a `state` planted in a cookie another page could set signs no one in;
//! - a page of another site cannot start sign-ins in its visitors' browsers (in Chromium).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use jsonwebtoken::{Algorithm, Header};
use serde_json::json;

use crate::common::{
    Answer, Gateway, key_set, random_u32, redis_or_skip, session_cookie, signing_key,
    unix_now as now, user_yaml, with_cookie,
};

/// The gateway's resource identifier in these tests.
const RESOURCE: &str = "https://tools.test";
const KID: &str = "console-loopback-1";
/// How many sign-ins one address may have waiting (`console::sessions::MAX_FLOWS_PER_ADDRESS`).
const PER_ADDRESS: usize = 16;
/// How many sign-ins may wait in all (`console::sessions::MAX_FLOWS`).
const IN_ALL: usize = 1024;

/// An issuer on a free loopback port, stopped with the test's runtime.
struct Issuer {
    url: String,
    /// How often its discovery document was asked for.
    discovery_reads: Arc<AtomicU64>,
    /// Whether its discovery document answers 503.
    down: Arc<AtomicBool>,
    /// The `exp` of the last token it issued.
    last_exp: Arc<AtomicU64>,
    /// Whether its token endpoint pads each token answer out to 4 MiB.
    oversized: Arc<AtomicBool>,
}

impl Issuer {
    /// Serves one whose access tokens live `token_s` seconds, with no `expires_in`.
    async fn serve(token_s: u64) -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let keys = key_set(KID);
        let discovery = json!({
            "issuer": url,
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "jwks_uri": format!("{url}/jwks"),
        });
        let issuer = Issuer {
            url: url.clone(),
            discovery_reads: Arc::default(),
            down: Arc::default(),
            last_exp: Arc::default(),
            oversized: Arc::default(),
        };
        let (reads, down, last_exp, oversized) = (
            issuer.discovery_reads.clone(),
            issuer.down.clone(),
            issuer.last_exp.clone(),
            issuer.oversized.clone(),
        );
        let router = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(move || {
                    reads.fetch_add(1, Ordering::SeqCst);
                    let answer = if down.load(Ordering::SeqCst) {
                        StatusCode::SERVICE_UNAVAILABLE.into_response()
                    } else {
                        Json(discovery.clone()).into_response()
                    };
                    std::future::ready(answer)
                }),
            )
            .route("/jwks", get(move || std::future::ready(Json(keys.clone()))))
            .route(
                "/token",
                post(move || {
                    // Any code is good here: what is tested is what the gateway does with
                    // the token.
                    let exp = now() + token_s;
                    last_exp.store(exp, Ordering::SeqCst);
                    let claims = json!({
                        "iss": url, "aud": RESOURCE, "sub": "carol", "roles": ["admin"],
                        "iat": now(), "exp": exp,
                    });
                    let mut header = Header::new(Algorithm::RS256);
                    header.kid = Some(KID.to_owned());
                    let token = jsonwebtoken::encode(&header, &claims, &signing_key())
                        .expect("a signed token");
                    let mut answer = json!({"access_token": token, "token_type": "Bearer"});
                    if oversized.load(Ordering::SeqCst) {
                        answer["padding"] = json!("x".repeat(4 << 20));
                    }
                    std::future::ready(Json(answer))
                }),
            );
        tokio::spawn(async move {
            axum::serve(listener, router)
                .await
                .expect("the issuer serves");
        });
        issuer
    }

    fn discovery_reads(&self) -> u64 {
        self.discovery_reads.load(Ordering::SeqCst)
    }
}

/// A gateway whose console signs people in through `issuer`, behind a proxy on loopback
/// (so that each test names its clients in `X-Forwarded-For`); `more` goes under
/// `identity.oauth`, `state` at the top.
fn config(issuer: &Issuer, more: &str, state: &str) -> String {
    format!(
        "{state}server:\n  trusted_proxies: [127.0.0.1]\n\
console:\n  oauth:\n    client_id: console\n    client_secret: console-secret\n\
tools:\n  builtin: [echo]\nusers:\n{bob}\
identity:\n  oauth:\n    issuer: {issuer}\n    resource: {RESOURCE}\n{more}",
        bob = user_yaml("bob", &["analyst"]),
        issuer = issuer.url,
    )
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// `GET /console/oauth/start` from the client `from`.
async fn start(gateway: &Gateway, from: &str) -> Answer {
    let started = no_redirects()
        .get(gateway.url("/console/oauth/start"))
        .header("x-forwarded-for", from)
        .send()
        .await
        .expect("an answer");
    Answer::read(started).await
}

/// The `state` of a started sign-in, from its flow cookie.
fn state_of(started: &Answer) -> String {
    let cookie = started.header("set-cookie").expect("the flow cookie");
    cookie
        .strip_prefix("toolgate_console_flow=")
        .and_then(|rest| rest.split(';').next())
        .expect("the flow cookie")
        .to_owned()
}

/// The issuer's redirect back to the gateway, with a code, for the sign-in `state`.
async fn call_back(gateway: &Gateway, state: &str) -> Answer {
    let answer = no_redirects()
        .get(gateway.url(&format!("/console/oauth/callback?code=any&state={state}")))
        .header("cookie", format!("toolgate_console_flow={state}"))
        .send()
        .await
        .expect("an answer");
    Answer::read(answer).await
}

/// Starts from `from` until one is refused: how many got through, and the refusal.
async fn start_until_refused(gateway: &Gateway, from: &str, most: usize) -> (usize, Answer) {
    for started in 0..most {
        let answer = start(gateway, from).await;
        if answer.status != 303 {
            return (started, answer);
        }
    }
    panic!("{most} sign-ins from {from} were all started");
}

/// The session cookie's `Max-Age`.
fn max_age(signed_in: &Answer) -> u64 {
    let cookie = signed_in.header("set-cookie").expect("the session cookie");
    cookie
        .split(';')
        .find_map(|part| part.trim().strip_prefix("Max-Age="))
        .and_then(|age| age.parse().ok())
        .unwrap_or_else(|| panic!("no Max-Age in {cookie}"))
}

#[tokio::test]
async fn a_session_opened_through_the_issuer_ends_when_its_token_expires_though_no_expires_in_says_when()
 {
    let issuer = Issuer::serve(3).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));
    let started = start(&gateway, "203.0.113.7").await;
    assert_eq!(started.status, 303, "{}", started.body);
    let signed_in = call_back(&gateway, &state_of(&started)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    let session = session_cookie(&signed_in).expect("a session cookie");
    assert!(
        max_age(&signed_in) <= 3,
        "{:?}",
        signed_in.header("set-cookie")
    );

    let url = gateway.url("/console/session");
    let me = with_cookie(reqwest::Method::GET, &url, &session, &[], None).await;
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(me.body["user"], "carol", "{}", me.body);
    assert_eq!(me.body["approver"], true, "{}", me.body);

    // Past the token's `exp` (whole seconds), the session is over with it.
    let exp = UNIX_EPOCH + Duration::from_secs(issuer.last_exp.load(Ordering::SeqCst));
    let until = exp.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::sleep(until + Duration::from_millis(300)).await;
    let me = with_cookie(reqwest::Method::GET, &url, &session, &[], None).await;
    assert_eq!(
        (me.status, me.error_code()),
        (401, "session_ended"),
        "{}",
        me.body
    );
}

#[tokio::test]
async fn one_address_has_a_few_sign_ins_waiting_then_429_with_retry_after_and_others_still_sign_in()
{
    let issuer = Issuer::serve(300).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));
    let (started, refused) = start_until_refused(&gateway, "203.0.113.7", IN_ALL).await;
    assert_eq!(started, PER_ADDRESS);
    assert_eq!(
        (refused.status, refused.error_code()),
        (429, "too_many_sign_ins_from_address"),
        "{}",
        refused.body
    );
    let retry_after: u64 = refused
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .expect("Retry-After");
    assert!(
        (590..=600).contains(&retry_after),
        "the oldest waits ten minutes: {retry_after}"
    );
    assert!(
        refused.error_message().contains("sign-ins waiting"),
        "{}",
        refused.body
    );

    // Other addresses sign in: IPv4, and two IPv6 blocks.
    for other in ["198.51.100.2", "2001:db8:1:2::1", "2001:db8:1:3::1"] {
        let started = start(&gateway, other).await;
        assert_eq!(started.status, 303, "{other}: {}", started.body);
    }
    // A sign-in finished gives its address a place back.
    let first = start(&gateway, "192.0.2.44").await;
    for _ in 1..PER_ADDRESS {
        assert_eq!(start(&gateway, "192.0.2.44").await.status, 303);
    }
    assert_eq!(start(&gateway, "192.0.2.44").await.status, 429);
    let signed_in = call_back(&gateway, &state_of(&first)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    assert_eq!(start(&gateway, "192.0.2.44").await.status, 303);
}

#[tokio::test]
async fn a_flood_of_sign_ins_reads_the_issuers_discovery_document_once() {
    let issuer = Issuer::serve(300).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));
    for i in 0..40 {
        let started = start(&gateway, &format!("198.51.100.{i}")).await;
        assert_eq!(started.status, 303, "{}", started.body);
    }
    let started = start(&gateway, "203.0.113.7").await;
    assert_eq!(issuer.discovery_reads(), 1);
    // The callback takes the token endpoint from the same read; checking the token reads
    // the document once more, for the signing keys (the key store's own, kept as long).
    let signed_in = call_back(&gateway, &state_of(&started)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    for i in 0..10 {
        let started = start(&gateway, &format!("192.0.2.{i}")).await;
        let signed_in = call_back(&gateway, &state_of(&started)).await;
        assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    }
    assert_eq!(issuer.discovery_reads(), 2);
}

/// Many addresses fill the places of waiting sign-ins: the ones refused then, 503, are
/// refused before the gateway asks the issuer anything, even once the endpoints it read
/// are old enough to be read again.
async fn sign_ins_refused_for_want_of_places_ask_the_issuer_nothing(state: &str) {
    let issuer = Issuer::serve(300).await;
    let more = "    keys_max_age: 1s\n    refresh_interval: 1s\n";
    let gateway = Gateway::start(&config(&issuer, more, state));
    for i in 0..IN_ALL {
        let from = format!("10.{}.{}.1", i / PER_ADDRESS / 256, i / PER_ADDRESS % 256);
        let started = start(&gateway, &from).await;
        assert_eq!(started.status, 303, "sign-in {i}: {}", started.body);
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reads = issuer.discovery_reads();
    for i in 0..20 {
        let refused = start(&gateway, &format!("198.51.100.{i}")).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (503, "too_many_sign_ins"),
            "{}",
            refused.body
        );
    }
    assert_eq!(issuer.discovery_reads(), reads);
}

#[tokio::test]
async fn sign_ins_refused_for_want_of_places_ask_the_issuer_nothing_in_this_process() {
    sign_ins_refused_for_want_of_places_ask_the_issuer_nothing("").await;
}

#[tokio::test]
async fn sign_ins_refused_for_want_of_places_ask_the_issuer_nothing_on_redis() {
    let test = "sign_ins_refused_for_want_of_places_ask_the_issuer_nothing_on_redis";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    let prefix = format!("tgflood{}x{:x}", std::process::id(), random_u32());
    // A deadline a loaded machine keeps, so that only the bounds refuse.
    let state = format!("state:\n  url: {redis}\n  key_prefix: {prefix}\n  deadline: 2s\n");
    sign_ins_refused_for_want_of_places_ask_the_issuer_nothing(&state).await;
}

/// With `state` on Redis the places are shared by every replica, and so is one address's
/// allowance of them: started through one replica, its sign-ins count on every other, and
/// one finished on another replica gives its place back on all.
#[tokio::test]
async fn with_state_on_redis_one_address_is_held_to_its_allowance_across_every_replica() {
    let test = "with_state_on_redis_one_address_is_held_to_its_allowance_across_every_replica";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    let issuer = Issuer::serve(300).await;
    let prefix = format!("tgflows{}x{:x}", std::process::id(), random_u32());
    // A deadline a loaded machine keeps, so that only the bounds refuse.
    let state = format!("state:\n  url: {redis}\n  key_prefix: {prefix}\n  deadline: 2s\n");
    let (a, b) = (
        Gateway::start(&config(&issuer, "", &state)),
        Gateway::start(&config(&issuer, "", &state)),
    );
    // Half through each replica.
    let mut first = None;
    for n in 0..PER_ADDRESS {
        let replica = if n % 2 == 0 { &a } else { &b };
        let started = start(replica, "203.0.113.7").await;
        assert_eq!(started.status, 303, "sign-in {n}: {}", started.body);
        first.get_or_insert_with(|| state_of(&started));
    }
    for replica in [&a, &b] {
        let refused = start(replica, "203.0.113.7").await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (429, "too_many_sign_ins_from_address"),
            "{}",
            refused.body
        );
        let retry_after: u64 = refused
            .header("retry-after")
            .and_then(|s| s.parse().ok())
            .expect("Retry-After");
        assert!((590..=600).contains(&retry_after), "{retry_after}");
    }
    let other = start(&a, "198.51.100.2").await;
    assert_eq!(other.status, 303, "{}", other.body);
    // Finished on the other replica, as a load balancer may send the issuer's redirect:
    // the address has a place again, on either replica.
    let signed_in = call_back(&b, &state_of(&other)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    let signed_in = call_back(&b, &first.expect("a first sign-in")).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    assert_eq!(start(&a, "203.0.113.7").await.status, 303);
    assert_eq!(start(&b, "203.0.113.7").await.status, 429);
}

#[tokio::test]
async fn while_the_issuer_cannot_be_read_sign_ins_fail_keep_no_place_and_ask_it_once_per_interval()
{
    let issuer = Issuer::serve(300).await;
    issuer.down.store(true, Ordering::SeqCst);
    let more = "    refresh_interval: 2s\n";
    let gateway = Gateway::start(&config(&issuer, more, ""));
    for _ in 0..PER_ADDRESS + 4 {
        let failed = start(&gateway, "203.0.113.7").await;
        assert_eq!(
            (failed.status, failed.error_code()),
            (502, "issuer_unavailable"),
            "{}",
            failed.body
        );
    }
    assert_eq!(issuer.discovery_reads(), 1);
    // Back, and asked again once the interval has passed: the address has its places.
    issuer.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (started, refused) = start_until_refused(&gateway, "203.0.113.7", IN_ALL).await;
    assert_eq!(started, PER_ADDRESS, "{}", refused.body);
    assert_eq!(issuer.discovery_reads(), 2);
}

#[tokio::test]
async fn a_token_answer_over_the_limit_fails_the_sign_in_unread_and_the_next_one_signs_in() {
    let issuer = Issuer::serve(300).await;
    issuer.oversized.store(true, Ordering::SeqCst);
    let gateway = Gateway::start(&config(&issuer, "", ""));
    let started = start(&gateway, "203.0.113.7").await;
    assert_eq!(started.status, 303, "{}", started.body);
    let failed = call_back(&gateway, &state_of(&started)).await;
    assert_eq!(
        (failed.status, failed.error_code()),
        (502, "issuer_unavailable"),
        "{}",
        failed.body
    );
    assert!(
        failed
            .error_message()
            .contains("token answer cannot be read"),
        "{}",
        failed.body
    );

    issuer.oversized.store(false, Ordering::SeqCst);
    let started = start(&gateway, "203.0.113.7").await;
    let signed_in = call_back(&gateway, &state_of(&started)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
}

/// `GET` `path` of `gateway` as sent to the host `host` (not loopback: served securely),
/// with `cookie`.
async fn get_on_host(gateway: &Gateway, host: &str, path: &str, cookie: Option<&str>) -> Answer {
    let mut request = no_redirects()
        .get(gateway.url(path))
        .header("host", host)
        .header("x-forwarded-for", "203.0.113.7");
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    Answer::read(request.send().await.expect("an answer")).await
}

#[tokio::test]
async fn off_loopback_a_sign_in_state_planted_by_another_page_signs_no_one_in() {
    // Login forgery: someone starts a sign-in of their own, stops at the issuer's answer,
    // plants its `state` in a victim's browser (a sibling subdomain, or a plain-HTTP page,
    // may set `toolgate_console_flow` for this host) and sends the victim to that answer.
    // The victim would then work in the console as the planter.
    let issuer = Issuer::serve(300).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));
    let host = "console.gateway.test";
    let started = get_on_host(&gateway, host, "/console/oauth/start", None).await;
    assert_eq!(started.status, 303, "{}", started.body);
    let set = started.header("set-cookie").expect("the flow cookie");
    assert!(
        set.starts_with("__Host-toolgate_console_flow=") && set.contains("; Path=/;"),
        "{set}"
    );
    assert!(
        set.ends_with("; Secure") && !set.contains("Domain"),
        "{set}"
    );
    let state = set
        .strip_prefix("__Host-toolgate_console_flow=")
        .and_then(|rest| rest.split(';').next())
        .expect("the state")
        .to_owned();
    let answer = format!("/console/oauth/callback?code=planters&state={state}");

    let planted = format!("toolgate_console_flow={state}");
    let forged = get_on_host(&gateway, host, &answer, Some(&planted)).await;
    assert_eq!(
        (forged.status, forged.error_code()),
        (401, "sign_in_refused"),
        "{}",
        forged.body
    );
    assert_eq!(
        forged.header("set-cookie"),
        None,
        "no session: {}",
        forged.body
    );

    // The browser that started it, which holds the cookie only this host could set,
    // signs in.
    let own = format!("__Host-toolgate_console_flow={state}");
    let signed_in = get_on_host(&gateway, host, &answer, Some(&own)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    let session = signed_in.header("set-cookie").expect("the session cookie");
    assert!(session.starts_with("__Host-toolgate_console="), "{session}");
}

#[tokio::test]
async fn a_page_of_another_site_cannot_use_up_the_sign_ins_of_its_visitors_address() {
    if !crate::browser::available("a_page_of_another_site_cannot_use_up_the_sign_ins") {
        return;
    }
    // A page anyone may publish, with more images pointing at the start of a sign-in than
    // one address may have waiting: each would hold a place of the visitor's address (and
    // of everyone behind it) for ten minutes, renewed while the page stays open.
    let issuer = Issuer::serve(300).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));
    let start_url = gateway.url("/console/oauth/start");
    let images: String = (0..PER_ADDRESS + 4)
        .map(|i| format!("<img src=\"{start_url}?n={i}\">"))
        .collect();
    // Served from `localhost`: another site than `127.0.0.1`, on this machine.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let page_url = format!(
        "http://localhost:{}/",
        listener.local_addr().unwrap().port()
    );
    let router = axum::Router::new().route(
        "/",
        get(move || std::future::ready(axum::response::Html(images.clone()))),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    let browser = crate::browser::Browser::start(800, 600).await;
    browser.go(&page_url).await;
    let deadline = std::time::Instant::now() + crate::browser::WAIT;
    let loaded = "return [...document.images].every((image) => image.complete)";
    while browser.run(loaded, json!([])).await != json!(true) {
        assert!(
            std::time::Instant::now() < deadline,
            "the images never loaded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.quit().await;

    // The visitor, from that address, still signs in.
    let started = start(&gateway, "127.0.0.1").await;
    assert_eq!(started.status, 303, "{}", started.body);
    let signed_in = call_back(&gateway, &state_of(&started)).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    let (started, refused) = start_until_refused(&gateway, "127.0.0.1", IN_ALL).await;
    assert_eq!(started, PER_ADDRESS, "{}", refused.body);
}

/// `GET` `path` as a browser's navigation asks for it (`Accept` naming `text/html`),
/// carrying the `cookie` the browser holds, if any.
async fn navigate(gateway: &Gateway, path: &str, cookie: Option<&str>) -> (u16, String, String) {
    let mut request = no_redirects()
        .get(gateway.url(path))
        .header(
            "accept",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        )
        .header("x-forwarded-for", "203.0.113.9");
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let answer = request.send().await.expect("an answer");
    let status = answer.status().as_u16();
    let kind = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, kind, answer.text().await.expect("a body"))
}

/// The callback's path with the issuer's `error`, its `error_description`, and `state`.
fn refused_callback(description: &str, state: Option<&str>) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("error", "access_denied")
        .append_pair("error_description", description);
    if let Some(state) = state {
        query.append_pair("state", state);
    }
    format!("/console/oauth/callback?{}", query.finish())
}

#[tokio::test]
async fn a_refused_sign_in_is_told_to_a_browser_in_words_with_the_issuers_error_escaped() {
    let issuer = Issuer::serve(300).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));

    // Anyone can write the callback's address and send a person to it: words of their own,
    // in the gateway's origin, would pass for the gateway's. Without a sign-in this browser
    // started, none of them is shown.
    let spoof = "Your session expired. Call +1 555 0100 or visit https://evil.example";
    let planted = "0123456789abcdef0123456789abcdef";
    let flow = format!("toolgate_console_flow={planted}");
    for (path, cookie) in [
        (refused_callback(spoof, None), None),
        (refused_callback(spoof, Some(planted)), None),
        (refused_callback(spoof, None), Some(flow.as_str())),
    ] {
        let (status, kind, page) = navigate(&gateway, &path, cookie).await;
        assert_eq!((status, kind.as_str()), (401, "text/html; charset=utf-8"));
        assert!(
            page.contains("This sign-in was not started in this browser"),
            "{path}: {page}"
        );
        for quoted in ["evil.example", "session expired", "access_denied"] {
            assert!(!page.contains(quoted), "{path} shows {quoted:?}: {page}");
        }
    }
    // The flow cookie and its `state` alike, but no sign-in waits under it: nothing shown.
    let (status, _, page) = navigate(
        &gateway,
        &refused_callback(spoof, Some(planted)),
        Some(&flow),
    )
    .await;
    assert_eq!(status, 401, "{page}");
    assert!(page.contains("This sign-in has expired"), "{page}");
    assert!(!page.contains("evil.example"), "{page}");

    // A sign-in this browser started, which the issuer refused: its words are quoted.
    let started = start(&gateway, "203.0.113.9").await;
    assert_eq!(started.status, 303, "{}", started.body);
    let state = state_of(&started);
    let flow = format!("toolgate_console_flow={state}");
    let description = format!(
        "<img src=x onerror=alert(1)> call \u{202E}evil.example{}",
        "x".repeat(5_000)
    );
    let path = refused_callback(&description, Some(&state));
    // A page, and still the refusal it is.
    let (status, kind, page) = navigate(&gateway, &path, Some(&flow)).await;
    assert_eq!((status, kind.as_str()), (401, "text/html; charset=utf-8"));
    assert!(
        page.contains("The issuer did not sign you in (it said `access_denied`, &quot;&lt;img src=x onerror=alert(1)&gt; call \\u{202e}evil.example"),
        "{page}"
    );
    assert!(!page.contains("<img"), "{page}");
    assert!(
        page.contains("<a class=\"button\" href=\"/console\">"),
        "{page}"
    );
    assert!(page.len() < 2_000, "the issuer's words are cut: {page}");
    // That sign-in is over: the same address again quotes nothing.
    let (status, _, page) = navigate(&gateway, &path, Some(&flow)).await;
    assert_eq!(status, 401, "{page}");
    assert!(page.contains("This sign-in has expired"), "{page}");
    assert!(!page.contains("evil.example"), "{page}");

    // A sign-in this browser did not start, in words too.
    let stranger = "/console/oauth/callback?code=x&state=0123456789abcdef0123456789abcdef";
    let (status, _, page) = navigate(&gateway, stranger, None).await;
    assert_eq!(status, 401, "{page}");
    assert!(
        page.contains("This sign-in was not started in this browser"),
        "{page}"
    );

    // A script, which names no page among what it accepts, still gets the typed error.
    let answer = no_redirects()
        .get(gateway.url(&refused_callback(spoof, None)))
        .send()
        .await
        .expect("an answer");
    let refused = Answer::read(answer).await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (401, "sign_in_refused"),
        "{}",
        refused.body
    );
    assert!(
        !refused.body.to_string().contains("evil.example"),
        "{}",
        refused.body
    );

    // One the issuer cannot serve: a gateway that has not read its discovery document yet
    // fails a start while it is down, with a page.
    let down = Issuer::serve(300).await;
    down.down.store(true, Ordering::SeqCst);
    let gateway = Gateway::start(&config(&down, "", ""));
    let (status, kind, page) = navigate(&gateway, "/console/oauth/start", None).await;
    assert_eq!((status, kind.as_str()), (502, "text/html; charset=utf-8"));
    assert!(
        page.contains("Signing in through the issuer failed"),
        "{page}"
    );
    assert!(page.contains("<code>issuer_unavailable</code>"), "{page}");
}

#[tokio::test]
async fn a_person_refused_by_the_issuer_reads_why_in_chromium_and_finds_the_way_back() {
    if !crate::browser::available("a_person_refused_by_the_issuer_reads_why_in_chromium") {
        return;
    }
    let issuer = Issuer::serve(300).await;
    let gateway = Gateway::start(&config(&issuer, "", ""));
    let browser = crate::browser::Browser::start(1024, 768).await;
    let description = "<img src=x onerror=\"document.title='owned'\">The user said no";

    // A link someone crafted, with no sign-in started: none of its words is shown.
    browser
        .go(&gateway.url(&refused_callback(description, None)))
        .await;
    let said = browser
        .wait_text("#status", "not started in this browser")
        .await;
    assert!(!said.contains("The user said no"), "{said}");

    // The person starts a sign-in; the issuer (here, its address) sends them back refused.
    browser.go(&gateway.url("/console/oauth/start")).await;
    let authorize = url::Url::parse(&browser.url().await).expect("the issuer's address");
    assert!(authorize.as_str().starts_with(&issuer.url), "{authorize}");
    let state = (authorize.query_pairs())
        .find_map(|(name, value)| (name == "state").then(|| value.into_owned()))
        .expect("a state");
    browser
        .go(&gateway.url(&refused_callback(description, Some(&state))))
        .await;
    let said = browser.wait_text("#status", "did not sign you in").await;
    assert!(
        said.contains("`access_denied`")
            && said.contains("\"<img src=x onerror=\"document.title='owned'\">The user said no\""),
        "{said}"
    );
    let injected = browser
        .run(
            "return document.images.length + document.scripts.length",
            json!([]),
        )
        .await;
    assert_eq!(injected, json!(0));
    browser.click("a[href='/console']").await;
    browser.find("#oauth-sign-in a").await;
    assert!(browser.url().await.ends_with("/console"));
    browser.quit().await;
}
