//! Signing in to the console through the issuer of `identity.oauth`: the authorization-code
//! flow with PKCE (RFC 7636, `S256`), the console being the client `console.oauth`.
//!
//! `GET /console/oauth/start` sends the browser to the issuer with a fresh `state` and code
//! challenge; the `state` also goes into a short-lived cookie (`SameSite=Lax`, so that it
//! comes back on the issuer's redirect, and scoped to `/console/oauth`). The issuer sends
//! the browser back to `GET /console/oauth/callback`, where the `state` must match the
//! cookie's and a flow this process started (once: it is taken out); the code is traded for
//! an access token with the verifier, the token is checked exactly as `/v1` checks one, and
//! its user gets a console session that ends when the token would.

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toolgate_http::HttpError as ApiError;

use super::guard;
use super::sessions::{FLOW_TTL, Principal, SessionError};
use crate::config::{ConsoleConfig, ConsoleOAuthConfig, CredentialKind, OAuthConfig};
use crate::gateway::Gateway;
use crate::identity::{Outcome, Route};

/// The cookie that carries a flow's `state` from its start to its callback.
pub const FLOW_COOKIE: &str = "toolgate_console_flow";

/// The path of the callback.
pub const CALLBACK: &str = "/console/oauth/callback";

/// The code challenge of a verifier: base64url (no padding) of its SHA-256.
pub fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The issuer's endpoints, from its discovery document.
#[derive(Deserialize)]
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

async fn endpoints(gateway: &Gateway) -> Result<Endpoints, ApiError> {
    let oauth = gateway
        .config
        .identity
        .oauth
        .as_ref()
        .ok_or_else(oauth_off)?;
    let issuer = oauth.issuer.0.trim_end_matches('/');
    let answer = http()
        .get(format!("{issuer}/.well-known/openid-configuration"))
        .timeout(oauth.fetch_timeout)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| issuer_trouble("its discovery document cannot be read", e))?;
    answer
        .json()
        .await
        .map_err(|e| issuer_trouble("its discovery document names no endpoints", e))
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

fn flow_cookie(state: &str, max_age_s: u64, secure: bool) -> String {
    format!(
        "{FLOW_COOKIE}={state}; Path=/console/oauth; HttpOnly; SameSite=Lax; Max-Age={max_age_s}{}",
        if secure { "; Secure" } else { "" }
    )
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

/// `GET /console/oauth/start`: to the issuer's authorization endpoint.
pub(super) async fn start(gateway: &Gateway, headers: &HeaderMap) -> Result<Response, ApiError> {
    let (_, client, oauth) = settings(gateway)?;
    let endpoints = endpoints(gateway).await?;
    let (state, verifier) = gateway
        .console_sessions
        .start_flow()
        .await
        .map_err(|e| match e {
            SessionError::Full => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_sign_ins",
                "as many sign-ins wait for the issuer as the console allows: try again in a few minutes",
            ),
            other => super::session_error(other),
        })?;
    let mut to = url::Url::parse(&endpoints.authorization_endpoint)
        .map_err(|e| issuer_trouble("its authorization endpoint is not a URL", e))?;
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
}

/// The issuer's answer to the code.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

fn refused(message: &str) -> ApiError {
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
    if let Some(error) = query.error {
        tracing::info!(target: "toolgate::console", error, "the issuer did not sign the person in");
        return Err(refused(
            "the issuer did not sign you in: start again from the console",
        ));
    }
    let (Some(code), Some(state)) = (query.code, query.state) else {
        return Err(refused(
            "the issuer's answer lacks `code` or `state`: start again from the console",
        ));
    };
    let cookie = guard::cookie(headers, FLOW_COOKIE);
    if cookie != Some(state.as_str()) {
        return Err(refused(
            "this sign-in was not started in this browser: start again from the console",
        ));
    }
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
    let endpoints = endpoints(gateway).await?;
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
    if !answer.status().is_success() {
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        tracing::warn!(target: "toolgate::console", %status, body = %body.chars().take(300).collect::<String>(), "the issuer refused the console's code");
        return Err(refused(
            "the issuer refused to trade the code for a token: start again from the console",
        ));
    }
    let token: TokenAnswer = answer
        .json()
        .await
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
    let within = token.expires_in.map(Duration::from_secs);
    let opened = gateway
        .console_sessions
        .open(Principal::Token(user.clone()), &user.id, console, within)
        .await
        .map_err(super::session_error)?;
    tracing::info!(target: "toolgate::console", user = %user.id, "console sign-in through the issuer");
    let secure = super::secure(headers);
    let ttl = within.map_or(console.session_ttl, |w| w.min(console.session_ttl));
    Ok(redirect(
        "/console",
        &[
            guard::set_cookie(&opened.id, ttl.as_secs(), secure),
            flow_cookie("", 0, secure),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_the_base64url_sha256_of_the_verifier() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
