//! Signing in to the console through the issuer of `identity.oauth`: the authorization-code
//! flow with PKCE (RFC 7636, `S256`), the console being the client `console.oauth`.
//!
//! `GET /console/oauth/start` sends the browser to the issuer with a fresh `state` and code
//! challenge; the `state` also goes into a short-lived cookie (`SameSite=Lax`, so that it
//! comes back on the issuer's redirect; named `__Host-` off loopback, so that no other page
//! can plant one: see [`SECURE_FLOW_COOKIE`]). The issuer sends
//! the browser back to `GET /console/oauth/callback`, where the `state` must match the
//! cookie's and a flow this process started (once: it is taken out); the code is traded for
//! an access token with the verifier, the token is checked exactly as `/v1` checks one, and
//! its user gets a console session that ends when the token would: at its `exp`, sooner
//! when the issuer's `expires_in` says so, and never after `console.session_ttl`.
//!
//! A start is held to the places for waiting sign-ins (in all, and per client address: see
//! [`super::sessions`]) before anything is fetched. The issuer's endpoints come from its
//! discovery document, read once and kept as its signing keys are
//! (`identity.oauth.keys_max_age`), and asked for again no more often than
//! `identity.oauth.refresh_interval`: a flood of starts costs the issuer nothing.
//!
//! Both are navigations of a browser: a refusal is a page in words to a browser, JSON to
//! anything else (see [`super::sign_in_failed`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use toolgate_http::HttpError as ApiError;

use super::guard;
use super::sessions::{FLOW_TTL, Principal, SessionError};
use crate::config::{ConsoleConfig, ConsoleOAuthConfig, CredentialKind, OAuthConfig};
use crate::gateway::Gateway;
use crate::identity::answer::{MAX_DOCUMENT_BYTES, MAX_TOKEN_ANSWER_BYTES, read_bounded};
use crate::identity::{Outcome, Route};

/// The cookie that carries a flow's `state` from its start to its callback, on a loopback
/// host over plain HTTP.
pub const FLOW_COOKIE: &str = "toolgate_console_flow";

/// The flow cookie everywhere else. As with the session cookie
/// ([`guard::SECURE_COOKIE`]), a browser takes a cookie of this name only with `Secure`,
/// `Path=/` and no `Domain`: a page of a sibling subdomain, or one served over plain HTTP,
/// cannot plant the `state` of a sign-in it started, so that the issuer's answer to it
/// signs this browser in as the planter (login forgery).
pub const SECURE_FLOW_COOKIE: &str = "__Host-toolgate_console_flow";

/// The flow cookie's name: [`SECURE_FLOW_COOKIE`] when it is sent `Secure`.
pub fn flow_cookie_name(secure: bool) -> &'static str {
    if secure {
        SECURE_FLOW_COOKIE
    } else {
        FLOW_COOKIE
    }
}

/// The path of the callback.
pub const CALLBACK: &str = "/console/oauth/callback";

/// The code challenge of a verifier: base64url (no padding) of its SHA-256.
pub fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The issuer's endpoints, from its discovery document.
#[derive(Debug, Deserialize)]
struct Endpoints {
    authorization_endpoint: String,
    token_endpoint: String,
}

fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default()
    })
}

fn issuer_trouble(what: &str, error: impl std::fmt::Display) -> ApiError {
    tracing::warn!(target: "toolgate::console", %error, "console sign-in through the issuer failed: {what}");
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "issuer_unavailable",
        format!(
            "signing in through the issuer failed ({what}): try again, or sign in with an API key"
        ),
    )
}

/// The endpoints of each issuer's discovery document as last read, for the process (a
/// reload keeps them), by discovery URL.
#[derive(Default)]
struct Discovered {
    by_url: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Discovery>>>>,
}

/// What is known of one discovery document: the endpoints last read, and the last read.
#[derive(Default)]
struct Discovery {
    endpoints: Option<(Arc<Endpoints>, Instant)>,
    /// When the document was last asked for, and why that failed if it did.
    last_read: Option<(Instant, Option<String>)>,
}

/// The most discovery documents remembered: the issuer served, and a few before reloads.
const MAX_DISCOVERED: usize = 8;

fn discovered() -> &'static Discovered {
    static DISCOVERED: OnceLock<Discovered> = OnceLock::new();
    DISCOVERED.get_or_init(Discovered::default)
}

/// The issuer's endpoints: as read before while younger than `keys_max_age`; otherwise
/// read again, unless the last read is less than `refresh_interval` ago (its endpoints, or
/// its failure, stand until then). Endpoints read before stay in use while the document
/// cannot be read. Concurrent callers share one read.
async fn endpoints(oauth: &OAuthConfig) -> Result<Arc<Endpoints>, ApiError> {
    let url = oauth.discovery_url();
    let discovery = {
        let mut by_url = discovered()
            .by_url
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if by_url.len() >= MAX_DISCOVERED && !by_url.contains_key(&url) {
            by_url.clear();
        }
        Arc::clone(by_url.entry(url.clone()).or_default())
    };
    let mut discovery = discovery.lock().await;
    let now = Instant::now();
    let fresh = |at: Instant| now.saturating_duration_since(at) < oauth.keys_max_age;
    if let Some((endpoints, at)) = &discovery.endpoints
        && fresh(*at)
    {
        return Ok(Arc::clone(endpoints));
    }
    let stale = discovery.endpoints.as_ref().map(|(e, _)| Arc::clone(e));
    if let Some((at, failure)) = &discovery.last_read
        && now.saturating_duration_since(*at) < oauth.refresh_interval
    {
        return match (stale, failure) {
            (Some(endpoints), _) => Ok(endpoints),
            (None, failure) => Err(unreadable(failure.as_deref().unwrap_or("not read yet"))),
        };
    }
    let read = read_endpoints(oauth, &url).await;
    discovery.last_read = Some((now, read.as_ref().err().cloned()));
    match (read, stale) {
        (Ok(endpoints), _) => {
            let endpoints = Arc::new(endpoints);
            discovery.endpoints = Some((Arc::clone(&endpoints), now));
            Ok(endpoints)
        }
        (Err(reason), Some(endpoints)) => {
            tracing::warn!(target: "toolgate::console", %reason, "the issuer's discovery document cannot be read again: the endpoints read before stay in use");
            Ok(endpoints)
        }
        (Err(reason), None) => Err(unreadable(&reason)),
    }
}

fn unreadable(reason: &str) -> ApiError {
    issuer_trouble("its discovery document cannot be read", reason)
}

/// One read of the discovery document at `url`: its endpoints, or why not.
async fn read_endpoints(oauth: &OAuthConfig, url: &str) -> Result<Endpoints, String> {
    let answer = http()
        .get(url)
        .timeout(oauth.fetch_timeout)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| e.to_string())?;
    let body = read_bounded(answer, MAX_DOCUMENT_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("it names no endpoints ({e})"))
}

fn oauth_off() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "oauth_off",
        "this console signs in with API keys only (no `console.oauth` in the gateway's configuration)",
    )
}

/// Where the issuer sends the browser back: this host, `https` unless on loopback.
fn redirect_uri(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if guard::is_loopback_host(host) {
        "http"
    } else {
        "https"
    };
    format!("{scheme}://{host}{CALLBACK}")
}

/// What a sign-in through the issuer needs from the configuration: the console, its client
/// at the issuer (`console.oauth`) and the gateway's `identity.oauth`.
fn settings(
    gateway: &Gateway,
) -> Result<(&ConsoleConfig, &ConsoleOAuthConfig, &OAuthConfig), ApiError> {
    let config = &gateway.config;
    let console = config.console.as_ref().ok_or_else(super::console_off)?;
    let client = console.oauth.as_ref().ok_or_else(oauth_off)?;
    let oauth = config.identity.oauth.as_ref().ok_or_else(oauth_off)?;
    Ok((console, client, oauth))
}

/// The `Set-Cookie` value of a flow's `state`: `HttpOnly`, `SameSite=Lax` (it must come
/// back on the issuer's redirect); on loopback scoped to `/console/oauth`, elsewhere
/// `Secure` with the `__Host-` name, which asks for `Path=/`.
fn flow_cookie(state: &str, max_age_s: u64, secure: bool) -> String {
    let (name, path, secure) = if secure {
        (SECURE_FLOW_COOKIE, "/", "; Secure")
    } else {
        (FLOW_COOKIE, "/console/oauth", "")
    };
    format!("{name}={state}; Path={path}; HttpOnly; SameSite=Lax; Max-Age={max_age_s}{secure}")
}

fn redirect(to: &str, cookies: &[String]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(to) {
        headers.insert(header::LOCATION, location);
    }
    for cookie in cookies {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            headers.append(header::SET_COOKIE, value);
        }
    }
    response
}

/// `GET /console/oauth/start`: to the issuer's authorization endpoint. The sign-in takes
/// its place among the waiting ones (in all, and its client address's) before the issuer
/// is asked anything; it gives it back when the issuer's endpoints cannot be had.
pub(super) async fn start(
    gateway: &Gateway,
    headers: &HeaderMap,
    peer: Option<&ConnectInfo<SocketAddr>>,
) -> Result<Response, ApiError> {
    let (_, client, oauth) = settings(gateway)?;
    // A sign-in starts from the console's link, or from an address typed or bookmarked
    // (`none`). Another site's page may not start them in its visitors' browsers: each
    // would hold one of the few places of the visitor's address until it expires, and so
    // keep every person behind that address from signing in.
    let site = headers
        .get("sec-fetch-site")
        .map(|v| v.to_str().unwrap_or(""));
    if site.is_some_and(|site| site != "same-origin" && site != "none") {
        return Err(super::forged(&guard::Forgery::CrossSite));
    }
    let sessions = &gateway.console_sessions;
    let (state, verifier) = sessions
        .start_flow(gateway.client_address(peer, headers))
        .await
        .map_err(|e| match e {
            SessionError::Full => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_sign_ins",
                "as many sign-ins wait for the issuer as the console allows: try again in a few minutes",
            ),
            other => super::session_error(other),
        })?;
    let to = endpoints(oauth).await.and_then(|endpoints| {
        url::Url::parse(&endpoints.authorization_endpoint)
            .map_err(|e| issuer_trouble("its authorization endpoint is not a URL", e))
    });
    let mut to = match to {
        Ok(to) => to,
        Err(e) => {
            // Whether Redis took it back or not, it expires.
            let _ = sessions.finish_flow(&state).await;
            return Err(e);
        }
    };
    to.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &client.client_id)
        .append_pair("redirect_uri", &redirect_uri(headers))
        .append_pair("scope", &client.scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("code_challenge", &challenge(&verifier))
        .append_pair("code_challenge_method", "S256")
        .append_pair("resource", &oauth.resource.0);
    let cookie = flow_cookie(&state, FLOW_TTL.as_secs(), super::secure(headers));
    Ok(redirect(to.as_str(), &[cookie]))
}

/// The query of the callback.
#[derive(Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The issuer's answer to the code.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

pub(super) fn refused(message: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "sign_in_refused",
        message.to_owned(),
    )
}

/// `GET /console/oauth/callback`: trades the code for a token and opens a session.
pub(super) async fn callback(
    gateway: &Gateway,
    headers: &HeaderMap,
    query: Callback,
) -> Result<Response, ApiError> {
    let (console, client, oauth) = settings(gateway)?;
    // Anyone can write this address and send a person to it: nothing in it is acted on, or
    // shown, before its `state` is found to be a sign-in this browser started.
    let cookie = guard::cookie(headers, flow_cookie_name(super::secure(headers)));
    let state = query.state.filter(|state| cookie == Some(state.as_str()));
    let Some(state) = state else {
        return Err(refused(
            "this sign-in was not started in this browser: start again from the console",
        ));
    };
    // Every `state` this gateway hands out is 32 hex digits: anything else names no sign-in,
    // and is not looked up.
    let ours = state.len() == 32 && state.bytes().all(|b| b.is_ascii_hexdigit());
    let verifier = if ours {
        gateway.console_sessions.finish_flow(&state).await
    } else {
        Ok(None)
    };
    let verifier = verifier.map_err(super::session_error)?.ok_or_else(|| {
        refused("this sign-in has expired or was used already: start again from the console")
    })?;
    if let Some(error) = query.error {
        // The issuer's words, for the sign-in it was asked for: quoted, held to what
        // RFC 6749 allows in them and to a length (see `sign_in_failed`).
        let said = super::sign_in_failed::issuer_said(&error, query.error_description.as_deref());
        tracing::info!(target: "toolgate::console", issuer_said = %said, "the issuer did not sign the person in");
        return Err(refused(&format!(
            "the issuer did not sign you in (it said {said}): start again from the console"
        )));
    }
    let Some(code) = query.code else {
        return Err(refused(
            "the issuer's answer lacks `code`: start again from the console",
        ));
    };
    let endpoints = endpoints(oauth).await?;
    let redirect_to = redirect_uri(headers);
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect_to.as_str()),
        ("code_verifier", verifier.as_str()),
        ("resource", oauth.resource.0.as_str()),
    ];
    // A confidential client authenticates with HTTP Basic; a public one names itself.
    if client.client_secret.is_none() {
        form.push(("client_id", client.client_id.as_str()));
    }
    let mut request = http()
        .post(&endpoints.token_endpoint)
        .timeout(oauth.fetch_timeout)
        .form(&form);
    if let Some(secret) = &client.client_secret {
        request = request.basic_auth(&client.client_id, Some(&secret.0));
    }
    let answer = request
        .send()
        .await
        .map_err(|e| issuer_trouble("its token endpoint cannot be reached", e))?;
    let status = answer.status();
    let body = read_bounded(answer, MAX_TOKEN_ANSWER_BYTES)
        .await
        .map_err(|e| issuer_trouble("its token answer cannot be read", e))?;
    if !status.is_success() {
        let body = String::from_utf8_lossy(&body);
        tracing::warn!(target: "toolgate::console", %status, body = %body.chars().take(300).collect::<String>(), "the issuer refused the console's code");
        return Err(refused(
            "the issuer refused to trade the code for a token: start again from the console",
        ));
    }
    let token: TokenAnswer = serde_json::from_slice(&body)
        .map_err(|e| issuer_trouble("its token answer carries no access token", e))?;
    let bearer = format!("Bearer {}", token.access_token);
    let user = match gateway.identity.authenticate(Route::V1, Some(&bearer), &gateway.keys) {
        Outcome::Caller(user, CredentialKind::Oauth) => Ok(user),
        Outcome::Caller(..) => Err(None),
        Outcome::FetchKeys => gateway
            .identity
            .authenticate_after_fetch(Route::V1, Some(&bearer), &gateway.keys)
            .await
            .map_err(Some),
        Outcome::Refused(refusal) => Err(Some(refusal)),
    }
    .map_err(|refusal| {
        tracing::warn!(target: "toolgate::console", ?refusal, "the issuer's token is not one /v1 accepts");
        refused("the issuer's token is not one this gateway accepts on /v1: ask its operator")
    })?;
    // The token was checked (its signature, and `exp` within the clock skew): the session
    // ends at its `exp`, or sooner when the issuer's `expires_in` says so.
    let within = expires_at(&token.access_token)
        .and_then(|exp| lifetime(exp, token.expires_in, SystemTime::now()))
        .ok_or_else(|| {
            tracing::warn!(target: "toolgate::console", user = %user.id, "the issuer's token has expired already");
            refused("the issuer's token has expired already: start again from the console")
        })?;
    let opened = gateway
        .console_sessions
        .open(Principal::Token(user.clone()), &user, console, Some(within))
        .await
        .map_err(super::session_error)?;
    let ttl = within.min(console.session_ttl);
    tracing::info!(target: "toolgate::console", user = %user.id, ends_in_s = ttl.as_secs(), "console sign-in through the issuer");
    let secure = super::secure(headers);
    Ok(redirect(
        "/console",
        &[
            guard::set_cookie(&opened.id, whole_seconds(ttl), secure),
            flow_cookie("", 0, secure),
        ],
    ))
}

/// `span` in seconds, rounded up (a cookie's `Max-Age`).
fn whole_seconds(span: Duration) -> u64 {
    u64::try_from(span.as_millis().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// The `exp` of an access token the gateway has accepted (so its signature and `exp` were
/// checked), read as the check reads it: a NumericDate, whole seconds.
fn expires_at(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&claims).ok()?;
    let exp = claims.get("exp")?;
    exp.as_u64().or_else(|| exp.as_f64().map(|f| f as u64))
}

/// How long a session opened at `now` with a token that expires at `exp` (seconds since
/// the Unix epoch) may last: until `exp`, and no longer than `expires_in` seconds when the
/// issuer gave it. `None` when that is no time at all.
fn lifetime(exp: u64, expires_in: Option<u64>, now: SystemTime) -> Option<Duration> {
    // An `exp` past what the clock can count is as good as never.
    let until_exp = UNIX_EPOCH
        .checked_add(Duration::from_secs(exp))
        .map_or(Some(Duration::MAX), |at| at.duration_since(now).ok())?;
    let within = expires_in.map_or(until_exp, |s| until_exp.min(Duration::from_secs(s)));
    (!within.is_zero()).then_some(within)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_through_the_issuer_ends_at_the_tokens_exp_or_sooner_when_expires_in_says_so() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let secs = Duration::from_secs;
        // No `expires_in` (it is optional): the token's `exp`.
        assert_eq!(lifetime(1_000_010, None, now), Some(secs(10)));
        // Whichever is sooner.
        assert_eq!(lifetime(1_000_010, Some(5), now), Some(secs(5)));
        assert_eq!(lifetime(1_000_010, Some(3600), now), Some(secs(10)));
        // A fraction of a second counts.
        let later = now + Duration::from_millis(9_500);
        assert_eq!(
            lifetime(1_000_010, None, later),
            Some(Duration::from_millis(500))
        );
        // An expired token (taken within the clock skew), or one given no time: none.
        assert_eq!(lifetime(1_000_010, None, now + secs(10)), None);
        assert_eq!(lifetime(999_990, None, now), None);
        assert_eq!(lifetime(1_000_010, Some(0), now), None);
        // An `exp` beyond the clock's reach is the session's own bound then.
        assert_eq!(lifetime(u64::MAX, None, now), Some(Duration::MAX));
    }

    #[test]
    fn the_exp_of_a_token_is_read_as_the_token_check_reads_it() {
        let token = |claims: &str| {
            let b64 = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
            format!("{}.{}.sig", b64(r#"{"alg":"RS256"}"#), b64(claims))
        };
        assert_eq!(
            expires_at(&token(r#"{"exp": 1700000000}"#)),
            Some(1_700_000_000)
        );
        assert_eq!(
            expires_at(&token(r#"{"exp": 1700000000.9}"#)),
            Some(1_700_000_000)
        );
        assert_eq!(expires_at(&token(r#"{"sub": "carol"}"#)), None);
        assert_eq!(expires_at(&token(r#"{"exp": "tomorrow"}"#)), None);
        assert_eq!(expires_at("opaque"), None);
    }

    #[test]
    fn the_challenge_is_the_base64url_sha256_of_the_verifier() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
