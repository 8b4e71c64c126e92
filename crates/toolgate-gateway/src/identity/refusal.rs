//! Why a request is refused, and the answer that says so: JSON like every other error of
//! the gateway, with the `WWW-Authenticate` challenge of RFC 6750 that points an OAuth
//! client to the metadata (RFC 9728) and the scopes to ask for.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use toolgate_http::HttpError as ApiError;

use super::scopes::INSUFFICIENT_SCOPE;
use super::{JwksError, Route, TokenError, metadata, required_scopes};
use crate::config::OAuthConfig;

/// Why a request is refused.
#[derive(Debug)]
pub enum Refusal {
    /// No `Authorization: Bearer …` at all: 401.
    NoCredential,
    /// Neither a known API key nor a token this route accepts: 401.
    UnknownCredential,
    /// A token that failed a check: 401 `invalid_token`.
    InvalidToken(TokenError),
    /// A good token without the scopes the route needs: 403 `insufficient_scope`.
    InsufficientScope,
    /// The issuer's keys could not be had and none are cached: 503, with `Retry-After`.
    IssuerUnavailable {
        /// Why the keys could not be had.
        error: JwksError,
        /// How long until the issuer may be asked again (`refresh_interval` after the
        /// last fetch): a retry sooner meets the same failure.
        retry_after: Duration,
    },
}

impl Refusal {
    /// Whether the request presented a credential that is wrong (an unknown API key, a
    /// token that failed a check), which `identity.failed_credentials` counts; not a
    /// missing one, a good one short of a scope, or one that could not be checked.
    pub fn is_wrong_credential(&self) -> bool {
        matches!(self, Refusal::UnknownCredential | Refusal::InvalidToken(_))
    }

    /// The answer on `route`; `oauth` when the route accepts tokens, `api_keys` whether it
    /// accepts keys.
    pub(super) fn response(
        &self,
        route: Route,
        oauth: Option<&OAuthConfig>,
        api_keys: bool,
    ) -> Response {
        let challenge = |error: Option<(&str, &str)>| match oauth {
            Some(config) => {
                metadata::challenge(config, route, &challenge_scopes(config, route), error)
            }
            None => match error {
                Some((code, _)) => format!("Bearer realm=\"toolgate\", error=\"{code}\""),
                None => "Bearer realm=\"toolgate\"".to_owned(),
            },
        };
        let unauthenticated = || match oauth {
            Some(config) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                format!(
                    "send an access token from {} for {} as `Authorization: Bearer <token>`{}",
                    config.issuer.0,
                    metadata::resource(config, route),
                    if api_keys { ", or a valid API key" } else { "" }
                ),
            ),
            None => unauthenticated_without_oauth(),
        };
        let (error, challenge) = match (self, oauth) {
            (Refusal::NoCredential, _) => (unauthenticated(), Some(challenge(None))),
            (Refusal::UnknownCredential, _) => (
                unauthenticated(),
                Some(challenge(Some((
                    "invalid_token",
                    "the credential is not a known API key or an accepted token",
                )))),
            ),
            (Refusal::InvalidToken(e), _) => {
                let message = e.to_string();
                let value = challenge(Some(("invalid_token", &message)));
                (
                    ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", message),
                    Some(value),
                )
            }
            (Refusal::InsufficientScope, Some(config)) => {
                let required = required_scopes(config, route);
                (
                    ApiError::new(
                        StatusCode::FORBIDDEN,
                        INSUFFICIENT_SCOPE,
                        format!(
                            "the token lacks a scope this route requires: ask the issuer for `{}`",
                            required.join(" ")
                        ),
                    ),
                    Some(metadata::insufficient_scope(config, route, required)),
                )
            }
            // Scopes are only required of tokens; without OAuth there are none to lack.
            (Refusal::InsufficientScope, None) => (unauthenticated(), Some(challenge(None))),
            (Refusal::IssuerUnavailable { error, retry_after }, _) => (
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "identity_provider_unavailable",
                    format!(
                        "tokens cannot be checked now: {error}; the gateway asks the identity provider for its keys again in {} s",
                        whole_seconds(*retry_after)
                    ),
                ),
                None,
            ),
        };
        let mut response = error.into_response();
        let headers = response.headers_mut();
        if let Some(value) = challenge.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(header::WWW_AUTHENTICATE, value);
        }
        if let Refusal::IssuerUnavailable { retry_after, .. } = self {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(whole_seconds(*retry_after)),
            );
        }
        response
    }
}

/// The scopes a 401 tells the client to ask for: exactly those the route requires, none
/// when it requires none. MCP clients ask for what the challenge names, so naming more
/// (a scope of `scope_roles`, say) would have every client ask for it.
fn challenge_scopes(config: &OAuthConfig, route: Route) -> Vec<String> {
    required_scopes(config, route).to_vec()
}

/// `wait` in whole seconds for `Retry-After`, rounded up and at least 1: a client that
/// waits that long finds the interval over.
fn whole_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// 401 where no issuer is configured: no valid API key.
fn unauthenticated_without_oauth() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "send a valid API key as `Authorization: Bearer <key>`",
    )
}
