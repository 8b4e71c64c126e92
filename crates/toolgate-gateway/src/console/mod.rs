//! The operator console at `/console` (on when `console:` is configured): one HTML page,
//! one script and one style sheet, embedded in the binary, that call the same `/v1` JSON
//! endpoints as any client, as the same user (see `docs/console.md`).
//!
//! | route | what |
//! |---|---|
//! | `GET /console` | the page |
//! | `GET /console/app.js`, `GET /console/app.css` | its script and style |
//! | `POST /console/session` | sign in: `{"key": "<API key>"}` → a session cookie and its token |
//! | `GET /console/session` | who the session is, and its token |
//! | `DELETE /console/session` | sign out |
//! | `GET /console/sign-in` | the ways to sign in this console offers |
//! | `GET /console/oauth/start`, `GET /console/oauth/callback` | sign in through the issuer (see [`oauth`]) |
//!
//! A request to `/v1` without `Authorization` but with the session cookie is the session's
//! user ([`session_user`]); one that changes something must also come from the console's
//! own origin and carry the session's token in `x-toolgate-csrf`, or it is refused with 403.

pub mod counters;
pub mod guard;
pub mod history;
pub mod oauth;
pub mod sessions;
pub mod sign_in_failed;
#[cfg(test)]
mod test_redis;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use toolgate_core::User;

use crate::auth::key_digest;
use crate::config::CredentialKind;
use crate::gateway::Gateway;
use crate::http::app_state::AppState;
use crate::identity::Route;
use guard::Forgery;
use sessions::{Live, Principal, SessionError};
use toolgate_http::HttpError as ApiError;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The Content-Security-Policy of the console's page: its own script and style only, no
/// inline code, no frames, requests to this origin only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The headers every console answer carries.
fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn console_off() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "console_off",
        "this gateway serves no console (no `console:` in its configuration)",
    )
}

fn asset(state: &AppState, content_type: &'static str, body: &'static str) -> Response {
    if state.current.load().config.console.is_none() {
        return secured(console_off().into_response());
    }
    secured(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// `GET /console`: the page.
pub async fn page(State(state): State<Arc<AppState>>) -> Response {
    asset(&state, "text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /console/app.js`.
pub async fn script(State(state): State<Arc<AppState>>) -> Response {
    asset(&state, "text/javascript; charset=utf-8", APP_JS)
}

/// `GET /console/app.css`.
pub async fn style(State(state): State<Arc<AppState>>) -> Response {
    asset(&state, "text/css; charset=utf-8", APP_CSS)
}

fn forged(forgery: &Forgery) -> ApiError {
    let code = match forgery {
        Forgery::CrossSite => "cross_site",
        Forgery::BadToken => "csrf_token",
    };
    ApiError::new(StatusCode::FORBIDDEN, code, forgery.to_string())
}

fn session_ended() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "session_ended",
        "your console session has ended: sign in again",
    )
}

/// The refusal of a request that carries the session cookie more than once: 400
/// `repeated_credential`, as for a credential header sent twice. Neither is taken: another
/// page of the host may have set one, and the order is its to choose.
fn repeated_session_cookie(secure: bool) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "repeated_credential",
        format!(
            "the request carries the console's session cookie `{}` more than once (a page of another port or site of this host may have set one): remove this site's cookies in the browser and sign in again",
            guard::cookie_name(secure)
        ),
    )
}

/// The answer to a cookie that names no live session: 401 `session_ended`, with the cookie
/// removed, so that the browser sends it no more. A stale cookie (a session that expired,
/// was signed out elsewhere, or ended with a restart) then counts once against its
/// client's allowance of wrong credentials, not at every page load.
fn ended_session(headers: &HeaderMap) -> Response {
    removing_cookie(session_ended().into_response(), headers)
}

/// `response`, with the session cookie removed from the browser.
fn removing_cookie(mut response: Response, headers: &HeaderMap) -> Response {
    if let Ok(value) = HeaderValue::from_str(&guard::set_cookie("", 0, secure(headers))) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Whether the cookie may be sent without `Secure`: only to a loopback host.
fn secure(headers: &HeaderMap) -> bool {
    !headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(guard::is_loopback_host)
}

fn who(gateway: &Gateway, user: &User, csrf: &str) -> serde_json::Value {
    let mut who = json!({
        "user": user.id,
        "roles": user.roles,
        "approver": gateway.may_approve(user),
        // With four eyes, the page offers no approval of the user's own calls: the
        // gateway would refuse it (`policies.approval.four_eyes`).
        "four_eyes": gateway.four_eyes(),
        "csrf_token": csrf,
    });
    // A user id is unique only within its tenant: `ann` of `acme` is told apart from `ann`
    // of `globex`. There only when the user has one, as in the suspensions' JSON.
    if let Some(tenant) = &user.tenant {
        who["tenant"] = json!(tenant);
    }
    who
}

/// The body of a sign-in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    key: String,
}

/// The most bytes a sign-in's body may have (`POST /console/session`, `{"key": …}`):
/// anyone may send one, so it is held to what a key needs, not to `server.body_limit`.
pub const SIGN_IN_BODY_LIMIT: usize = 16 * 1024;

/// `POST /console/session`: exchanges an API key for a session. The key is checked as
/// `/v1` checks it (a route that takes OAuth tokens only takes no key here either); the
/// answer sets the cookie and gives the page the session's token.
pub async fn sign_in(
    State(state): State<Arc<AppState>>,
    peer: Extensions,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    secured(
        match open_session(&state, peer.get(), &headers, body).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        },
    )
}

async fn open_session(
    state: &AppState,
    peer: Option<&ConnectInfo<SocketAddr>>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let gateway = state.current.load_full();
    let Some(limits) = &gateway.config.console else {
        return Err(console_off());
    };
    // Signing someone in from another site is refused too (login forgery).
    guard::same_origin(headers).map_err(|e| forged(&e))?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "json_required",
            "send the key as JSON, `{\"key\": \"...\"}`, with `Content-Type: application/json`",
        ));
    }
    let bad = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_sign_in",
            "the body must be `{\"key\": \"<your API key>\"}`",
        )
    };
    // A body that is too large or too slow is told so, as on every route.
    let body = crate::http::body::whole_body(body)?;
    let SignIn { key } = serde_json::from_slice(&body).map_err(|_| bad())?;
    // Held to the same allowance of wrong credentials as `/v1` and `/mcp`.
    let limit = &gateway.credential_limit;
    let client = || gateway.client_address(peer, headers);
    if let Some(response) = limit.refusal(client) {
        return Ok(response);
    }
    let user = gateway
        .identity
        .accepts(Route::V1, CredentialKind::ApiKey)
        .then(|| gateway.keys.authenticate(key.trim()))
        .flatten();
    let Some(user) = user else {
        limit.failed(client()).await;
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "that API key is not one this gateway knows: check it and sign in again",
        ));
    };
    let opened = gateway
        .console_sessions
        .open(Principal::Key(key_digest(key.trim())), &user, limits, None)
        .await
        .map_err(session_error)?;
    tracing::info!(target: "toolgate::console", user = %user.id, "console sign-in");
    let cookie = guard::set_cookie(&opened.id, limits.session_ttl.as_secs(), secure(headers));
    let mut response = Json(who(&gateway, &user, &opened.csrf)).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

fn session_error(e: SessionError) -> ApiError {
    match e {
        SessionError::Full => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_sessions",
            e.to_string(),
        ),
        SessionError::Random => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no_session", e.to_string())
        }
        SessionError::Unavailable => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sessions_unavailable",
            e.to_string(),
        ),
        SessionError::FlowsFromAddress(wait) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_sign_ins_from_address",
            e.to_string(),
        )
        .retry_after(wait),
    }
}

/// The live session and its user, for a request with the session cookie from `peer`.
///
/// A cookie that names no live session is a wrong credential, as a wrong API key is: it
/// counts against its client's allowance (`identity.failed_credentials`), and a client past
/// it is refused before its cookie is looked up. So made-up cookies cost a flood what
/// made-up keys do, whether the sessions are in memory or on Redis. The answer removes
/// the cookie, so an honest browser's stale cookie counts once.
async fn current(
    gateway: &Gateway,
    headers: &HeaderMap,
    peer: Option<&ConnectInfo<SocketAddr>>,
) -> Result<(String, Live, Arc<User>), Response> {
    if gateway.config.console.is_none() {
        return Err(console_off().into_response());
    }
    // The session's token sent twice: refused before the session is looked up.
    if let Some(refusal) = crate::identity::repeated_credential(headers) {
        return Err(refusal.into_response());
    }
    let secure = secure(headers);
    if guard::session_cookie_repeated(headers, secure) {
        return Err(repeated_session_cookie(secure).into_response());
    }
    let Some(id) = guard::session_cookie(headers, secure) else {
        return Err(session_ended().into_response());
    };
    let limit = &gateway.credential_limit;
    let client = || gateway.client_address(peer, headers);
    if let Some(refused) = limit.refusal(client) {
        return Err(refused);
    }
    let found = gateway.console_sessions.find(id).await;
    let live = match found {
        Ok(Some(live)) => live,
        Ok(None) => {
            limit.failed(client()).await;
            return Err(ended_session(headers));
        }
        Err(e) => return Err(session_error(e).into_response()),
    };
    // A key taken out of `users`, or a route that no longer takes what the session was
    // opened with, ends it.
    let user = match &live.principal {
        Principal::Key(hash) => gateway
            .identity
            .accepts(Route::V1, CredentialKind::ApiKey)
            .then(|| gateway.keys.by_hash(hash))
            .flatten(),
        Principal::Token(user) => gateway
            .identity
            .accepts(Route::V1, CredentialKind::Oauth)
            .then(|| user.clone()),
    };
    let Some(user) = user else {
        let ended = gateway.console_sessions.close(id).await;
        return Err(ended.map_or_else(
            |e| session_error(e).into_response(),
            |()| ended_session(headers),
        ));
    };
    Ok((id.to_owned(), live, user))
}

/// `GET /console/session`: who is signed in, and the session's token (a reloaded page
/// reads it here; another site's page cannot read the answer).
pub async fn show(
    State(state): State<Arc<AppState>>,
    peer: Extensions,
    headers: HeaderMap,
) -> Response {
    let gateway = state.current.load_full();
    secured(match current(&gateway, &headers, peer.get()).await {
        Ok((_, live, user)) => Json(who(&gateway, &user, &live.csrf)).into_response(),
        Err(refused) => refused,
    })
}

/// `DELETE /console/session`: signs out (from the console's own page, with its token).
pub async fn sign_out(
    State(state): State<Arc<AppState>>,
    peer: Extensions,
    headers: HeaderMap,
) -> Response {
    let gateway = state.current.load_full();
    let ended = async {
        let (id, live, user) = current(&gateway, &headers, peer.get()).await?;
        check_change(&headers, &live).map_err(|e| forged(&e).into_response())?;
        gateway
            .console_sessions
            .close(&id)
            .await
            .map_err(|e| session_error(e).into_response())?;
        tracing::info!(target: "toolgate::console", user = %user.id, "console sign-out");
        Ok::<_, Response>(())
    }
    .await;
    secured(match ended {
        Ok(()) => removing_cookie(StatusCode::NO_CONTENT.into_response(), &headers),
        Err(e) => e.into_response(),
    })
}

/// A state change with a session: from this origin, with the session's token.
fn check_change(headers: &HeaderMap, live: &Live) -> Result<(), Forgery> {
    guard::same_origin(headers)?;
    let presented = headers
        .get(guard::CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if sessions::token_matches(live, presented) {
        Ok(())
    } else {
        Err(Forgery::BadToken)
    }
}

/// Whether a `/v1` request is one of a console session: the console is on, and the
/// request has the session cookie and no `Authorization` header (a credential of its own
/// wins over the cookie).
pub(crate) fn comes_with_session(gateway: &Gateway, headers: &HeaderMap) -> bool {
    gateway.config.console.is_some()
        && !headers.contains_key(header::AUTHORIZATION)
        && guard::session_cookie(headers, secure(headers)).is_some()
}

/// The caller of a `/v1` request that [comes with a session](comes_with_session): the
/// session's user, or the refusal of an ended session, of a forged state change, or of a
/// client past its allowance of wrong credentials.
pub(crate) async fn session_user(
    gateway: &Gateway,
    method: &axum::http::Method,
    headers: &HeaderMap,
    peer: Option<&ConnectInfo<SocketAddr>>,
) -> Result<Arc<User>, Response> {
    let (_, live, user) = current(gateway, headers, peer).await?;
    if guard::changes_state(method)
        && let Err(forgery) = check_change(headers, &live)
    {
        tracing::warn!(target: "toolgate::console", user = %user.id, %forgery, "console request refused");
        return Err(forged(&forgery).into_response());
    }
    Ok(user)
}

/// `GET /console/sign-in`: the ways to sign in this console offers.
pub async fn sign_in_options(State(state): State<Arc<AppState>>) -> Response {
    let gateway = state.current.load_full();
    secured(match &gateway.config.console {
        None => console_off().into_response(),
        Some(console) => Json(json!({
            "api_key": gateway.identity.accepts(Route::V1, CredentialKind::ApiKey),
            "oauth": console.oauth.is_some(),
        }))
        .into_response(),
    })
}

/// `GET /console/oauth/start`: sign in through the issuer (see [`oauth`]). A refusal is a
/// page to a browser, JSON to anything else (see [`sign_in_failed`]).
pub async fn oauth_start(
    State(state): State<Arc<AppState>>,
    peer: Extensions,
    headers: HeaderMap,
) -> Response {
    let gateway = state.current.load_full();
    secured(match oauth::start(&gateway, &headers, peer.get()).await {
        Ok(response) => response,
        Err(e) => sign_in_failed::refusal(&headers, e),
    })
}

/// `GET /console/oauth/callback`: where the issuer sends the browser back. A refusal is a
/// page to a browser, JSON to anything else (see [`sign_in_failed`]).
pub async fn oauth_callback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<oauth::Callback>, QueryRejection>,
) -> Response {
    let gateway = state.current.load_full();
    let signed_in = match query {
        Ok(Query(query)) => oauth::callback(&gateway, &headers, query).await,
        Err(_) => Err(oauth::refused(
            "the issuer's answer cannot be read (a field is given twice, or is not text): start again from the console",
        )),
    };
    secured(match signed_in {
        Ok(response) => response,
        Err(e) => sign_in_failed::refusal(&headers, e),
    })
}
