//! Who is calling: an API key of `users:`, or an OAuth 2.1 access token — a JWT issued for
//! this gateway by the configured issuer, checked against the issuer's published keys
//! (the gateway acts as a resource server, as the MCP authorization spec asks).
//!
//! Each route (`/v1`, `/mcp`) accepts API keys, tokens, or both (`identity.routes`). A
//! credential with two dots is taken as a token; anything else as an API key. The token
//! check is synchronous while the issuer's keys are cached ([`Identity::authenticate`]);
//! only a token signed with a key not yet cached waits for a fetch
//! ([`Identity::authenticate_after_fetch`]).
//!
//! The caller's token stays here: it is never forwarded to an upstream, logged, or kept.

pub mod address;
pub(crate) mod answer;
pub mod exchange;
pub mod failures;
pub mod jwks;
pub mod metadata;
mod refusal;
pub mod scopes;
pub mod token;
pub mod waiting;

use std::sync::Arc;

use axum::response::Response;
use toolgate_core::User;

use crate::auth::ApiKeys;
use crate::config::{Config, CredentialKind, OAuthConfig};

pub use jwks::{JwksError, KeyCache, KeyStore, SigningKey, SigningKeys};
pub use refusal::Refusal;
pub use token::{TokenError, TokenVerifier, Verified};

/// The authenticated routes, each with its own choice of credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The HTTP API under `/v1`.
    V1,
    /// The MCP endpoint `/mcp`.
    Mcp,
}

impl Route {
    /// The route a request path belongs to.
    pub fn of_path(path: &str) -> Route {
        if path == "/mcp" || path.starts_with("/mcp/") {
            Route::Mcp
        } else {
            Route::V1
        }
    }

    /// Its name in the configuration (`identity.routes.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Route::V1 => "v1",
            Route::Mcp => "mcp",
        }
    }
}

/// The result of looking at a request's credential without waiting.
#[derive(Debug)]
pub enum Outcome {
    /// The caller, and the kind of credential it presented.
    Caller(Arc<User>, CredentialKind),
    /// Refused: answer with [`Identity::refusal`].
    Refused(Refusal),
    /// A token signed with a key not cached: call [`Identity::authenticate_after_fetch`].
    FetchKeys,
}

/// The OAuth side of [`Identity`].
struct OAuth {
    config: OAuthConfig,
    verifier: TokenVerifier,
    keys: Arc<KeyStore>,
}

/// How one configuration tells who is calling.
pub struct Identity {
    v1: Vec<CredentialKind>,
    mcp: Vec<CredentialKind>,
    oauth: Option<OAuth>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("v1", &self.v1)
            .field("mcp", &self.mcp)
            .field("oauth", &self.oauth.as_ref().map(|o| o.keys.issuer()))
            .finish()
    }
}

impl Identity {
    /// The identity part of `config` (the issuer is not contacted until a token comes).
    ///
    /// # Errors
    ///
    /// When no HTTP client can be made for fetching the issuer's keys.
    pub fn new(config: &Config) -> Result<Self, JwksError> {
        Self::with_keys(config, &KeyCache::default())
    }

    /// The identity part of `config`, its issuer's keys shared through `keys` with the
    /// other configurations of the process (see [`KeyCache`]).
    ///
    /// # Errors
    ///
    /// As [`Identity::new`].
    pub fn with_keys(config: &Config, keys: &KeyCache) -> Result<Self, JwksError> {
        let oauth = match &config.identity.oauth {
            Some(oauth) => Some(OAuth {
                verifier: TokenVerifier::new(oauth),
                keys: Arc::new(KeyStore::in_cache(oauth, keys)?),
                config: oauth.clone(),
            }),
            None => None,
        };
        Ok(Identity {
            v1: config.identity.v1(),
            mcp: config.identity.mcp(),
            oauth,
        })
    }

    /// The credentials `route` accepts.
    pub fn accepted(&self, route: Route) -> &[CredentialKind] {
        match route {
            Route::V1 => &self.v1,
            Route::Mcp => &self.mcp,
        }
    }

    /// The OAuth configuration, when tokens are accepted anywhere.
    pub fn oauth(&self) -> Option<&OAuthConfig> {
        self.oauth.as_ref().map(|o| &o.config)
    }

    /// The cache of the issuer's keys, when there is an issuer.
    pub fn key_store(&self) -> Option<&Arc<KeyStore>> {
        self.oauth.as_ref().map(|o| &o.keys)
    }

    pub(crate) fn accepts(&self, route: Route, kind: CredentialKind) -> bool {
        self.accepted(route).contains(&kind)
    }

    /// Who sends `authorization` (the header's value) on `route`, without waiting.
    pub fn authenticate(
        &self,
        route: Route,
        authorization: Option<&str>,
        keys: &ApiKeys,
    ) -> Outcome {
        let Some(credential) = authorization.and_then(bearer) else {
            return Outcome::Refused(Refusal::NoCredential);
        };
        let api_key = |refusal| {
            match self.accepts(route, CredentialKind::ApiKey) {
                true => keys.authenticate(credential),
                false => None,
            }
            .map_or(Outcome::Refused(refusal), |user| {
                Outcome::Caller(user, CredentialKind::ApiKey)
            })
        };
        let oauth = match &self.oauth {
            Some(oauth)
                if self.accepts(route, CredentialKind::Oauth)
                    && TokenVerifier::looks_like_jwt(credential) =>
            {
                oauth
            }
            _ => return api_key(Refusal::UnknownCredential),
        };
        let Some(cached) = oauth.keys.cached() else {
            return Outcome::FetchKeys;
        };
        match oauth.verifier.verify(credential, &cached) {
            Ok(verified) => self.admit(oauth, route, verified, keys),
            Err(TokenError::UnknownKey) => Outcome::FetchKeys,
            // An API key that happens to have two dots.
            Err(TokenError::Malformed) => api_key(Refusal::InvalidToken(TokenError::Malformed)),
            Err(e) => Outcome::Refused(Refusal::InvalidToken(e)),
        }
    }

    /// [`authenticate`](Self::authenticate) for a token whose key is not cached: fetches
    /// the issuer's keys (at most once per `refresh_interval`) and checks it again.
    ///
    /// # Errors
    ///
    /// The [`Refusal`] to answer with.
    pub async fn authenticate_after_fetch(
        &self,
        route: Route,
        authorization: Option<&str>,
        keys: &ApiKeys,
    ) -> Result<Arc<User>, Refusal> {
        let token = authorization
            .and_then(bearer)
            .ok_or(Refusal::NoCredential)?;
        let oauth = self.oauth.as_ref().ok_or(Refusal::UnknownCredential)?;
        let seen = oauth.keys.cached();
        let signing_keys = match oauth.keys.refresh(seen.as_ref()).await {
            Ok(signing_keys) => signing_keys,
            // Keys are cached but none is the token's, and the issuer was asked recently
            // or cannot be asked now: the token is refused, the issuer is not hammered.
            // (A failed fetch is logged where it happens, once per attempt.)
            Err(e) => match seen {
                Some(_) => return Err(Refusal::InvalidToken(TokenError::UnknownKey)),
                None => {
                    return Err(Refusal::IssuerUnavailable {
                        error: e,
                        retry_after: oauth.keys.next_fetch_in(),
                    });
                }
            },
        };
        let verified = oauth
            .verifier
            .verify(token, &signing_keys)
            .map_err(Refusal::InvalidToken)?;
        match self.admit(oauth, route, verified, keys) {
            Outcome::Caller(user, _) => Ok(user),
            Outcome::Refused(refusal) => Err(refusal),
            Outcome::FetchKeys => Err(Refusal::InvalidToken(TokenError::UnknownKey)),
        }
    }

    /// A verified token, held to the route it was issued for and the scopes `route`
    /// requires, and kept from taking over an API-key user's id unless the configuration
    /// says they are the same people.
    fn admit(&self, oauth: &OAuth, route: Route, verified: Verified, keys: &ApiKeys) -> Outcome {
        if !verified.audiences.includes(route) {
            return Outcome::Refused(Refusal::InvalidToken(TokenError::OtherRoute));
        }
        // By the id in any tenant, on purpose (docs/architecture.md, "Who a caller is"):
        // a subject the issuer lets someone choose, with a tenant claim it lets them
        // choose too, must not become an API-key user of any tenant.
        if !oauth.config.subjects_are_api_key_users && keys.has_id_in_any_tenant(&verified.user.id)
        {
            return Outcome::Refused(Refusal::InvalidToken(TokenError::SubjectIsApiKeyUser));
        }
        let required = required_scopes(&oauth.config, route);
        if required.iter().all(|s| verified.scopes.contains(s)) {
            Outcome::Caller(verified.user, CredentialKind::Oauth)
        } else {
            Outcome::Refused(Refusal::InsufficientScope)
        }
    }

    /// The answer to a refused request on `route`: 401, 403 or 503, as JSON, with the
    /// `WWW-Authenticate` challenge that tells an OAuth client where to get a token.
    pub fn refusal(&self, route: Route, refusal: &Refusal) -> Response {
        let oauth = self
            .oauth
            .as_ref()
            .filter(|_| self.accepts(route, CredentialKind::Oauth))
            .map(|o| &o.config);
        refusal.response(route, oauth, self.accepts(route, CredentialKind::ApiKey))
    }
}

/// The headers a request carries a credential in: `Authorization` (`/v1`, `/mcp`) and the
/// console session's token, `x-toolgate-csrf` (`/v1` with a session cookie, the console's
/// `/console/session`).
const CREDENTIAL_HEADERS: [&str; 2] = ["authorization", "x-toolgate-csrf"];

/// The refusal of a request that carries a credential header more than once: 400
/// `repeated_credential`, naming the header and not which of its values was right. Two
/// values are an ambiguity a proxy in front may resolve the other way (the gateway would
/// check one, the proxy log or forward the other), so neither is taken. Checked before any
/// credential is looked at, and not counted as a wrong one.
pub(crate) fn repeated_credential(
    headers: &axum::http::HeaderMap,
) -> Option<toolgate_http::HttpError> {
    let name = CREDENTIAL_HEADERS
        .into_iter()
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())?;
    let shown = if name == "authorization" {
        "Authorization"
    } else {
        name
    };
    Some(toolgate_http::HttpError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "repeated_credential",
        format!(
            "the request carries `{shown}` more than once: send one credential, in one `{shown}` header"
        ),
    ))
}

/// The credential of `Authorization: Bearer <credential>`.
pub(crate) fn bearer(header: &str) -> Option<&str> {
    let (scheme, credential) = header.trim().split_once(' ')?;
    let credential = credential.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !credential.is_empty()).then_some(credential)
}

/// The scopes `route` requires of a token.
fn required_scopes(config: &OAuthConfig, route: Route) -> &[String] {
    match route {
        Route::V1 => &config.required_scopes.v1,
        Route::Mcp => &config.required_scopes.mcp,
    }
}
