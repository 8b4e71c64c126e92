//! Per-caller upstream credentials by token exchange (RFC 8693): the caller's access token
//! is traded at the identity provider for one whose audience is the upstream, so the
//! upstream sees the caller (as `sub`, with the gateway as the actor) and never the
//! caller's own token.
//!
//! Exchanged credentials are cached per caller token until shortly before they expire, in
//! a bounded cache. Each one is a secret: its `Debug` shows nothing of it.
//!
//! Not wired to upstreams yet: an upstream keeps one MCP session with one fixed
//! `Authorization` header (`credential_env`), and a per-call header needs a hook in
//! `toolgate-mcp`'s HTTP client transport. Until then this is the exchange and its cache,
//! tested against a real provider.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The RFC 8693 grant type.
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The type of the token traded in and asked for.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Where and how to exchange tokens for one upstream.
#[derive(Clone)]
pub struct ExchangeSettings {
    /// The provider's token endpoint (its discovery document's `token_endpoint`).
    pub token_endpoint: String,
    /// The gateway's client id at the provider.
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
    /// The upstream's resource identifier: the audience of the exchanged token.
    pub audience: String,
    /// The scope to ask for (the caller's when absent).
    pub scope: Option<String>,
    /// The deadline of one exchange.
    pub timeout: Duration,
    /// How long before its expiry a cached credential is exchanged again.
    pub refresh_before: Duration,
    /// The most credentials cached at once.
    pub max_entries: u64,
}

impl std::fmt::Debug for ExchangeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeSettings")
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// A credential for one upstream, on behalf of one caller.
pub struct UpstreamCredential {
    token: String,
    expires_at: Instant,
}

impl UpstreamCredential {
    /// The bearer token to send upstream.
    pub fn bearer(&self) -> &str {
        &self.token
    }

    /// When it stops being valid.
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }
}

impl std::fmt::Debug for UpstreamCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamCredential(..)")
    }
}

/// A token could not be exchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The provider did not answer in time or could not be reached.
    #[error("the identity provider could not be reached to exchange a token at {url}: {reason}")]
    Unreachable {
        /// The token endpoint.
        url: String,
        /// Why.
        reason: String,
    },
    /// The provider refused the exchange.
    #[error("the identity provider refused the token exchange: {error}{}; check that the gateway's client may use token exchange for this audience", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        /// The OAuth error code, e.g. `invalid_grant`.
        error: String,
        /// The provider's description.
        description: Option<String>,
    },
    /// The provider's answer is not a token response.
    #[error("the identity provider's token exchange answer is not usable: {0}")]
    Malformed(String),
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorResponse {
    error: String,
    error_description: Option<String>,
}

/// Exchanges callers' tokens for one upstream, with a bounded cache.
pub struct TokenExchange {
    settings: ExchangeSettings,
    client: reqwest::Client,
    cache: moka::sync::Cache<[u8; 32], Arc<UpstreamCredential>>,
}

impl std::fmt::Debug for TokenExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenExchange")
            .field("settings", &self.settings)
            .field("cached", &self.cache.entry_count())
            .finish()
    }
}

/// The longest a credential without `expires_in` is kept.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

impl TokenExchange {
    /// An exchange with an empty cache.
    ///
    /// # Errors
    ///
    /// When no HTTP client can be made.
    pub fn new(settings: ExchangeSettings) -> Result<Self, ExchangeError> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ExchangeError::Unreachable {
                url: settings.token_endpoint.clone(),
                reason: format!("no HTTP client could be made: {e}"),
            })?;
        let cache = moka::sync::Cache::builder()
            .max_capacity(settings.max_entries)
            .time_to_live(Duration::from_secs(24 * 3600))
            .build();
        Ok(TokenExchange {
            settings,
            client,
            cache,
        })
    }

    /// The credential for the caller whose access token is `subject_token`: cached, or
    /// exchanged now when there is none or it expires within `refresh_before`.
    ///
    /// # Errors
    ///
    /// [`ExchangeError`] when the provider cannot be reached or refuses.
    pub async fn credential(
        &self,
        subject_token: &str,
    ) -> Result<Arc<UpstreamCredential>, ExchangeError> {
        // Keyed by the caller's token, not only its subject: a token with fewer scopes
        // never gets a credential exchanged for one with more.
        let key: [u8; 32] = Sha256::digest(subject_token.as_bytes()).into();
        if let Some(cached) = self.cache.get(&key)
            && cached.expires_at > Instant::now() + self.settings.refresh_before
        {
            return Ok(cached);
        }
        let credential = Arc::new(self.exchange(subject_token).await?);
        self.cache.insert(key, Arc::clone(&credential));
        Ok(credential)
    }

    /// How many credentials are cached (for tests and metrics).
    pub fn cached(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }

    async fn exchange(&self, subject_token: &str) -> Result<UpstreamCredential, ExchangeError> {
        let settings = &self.settings;
        let unreachable = |reason: String| ExchangeError::Unreachable {
            url: settings.token_endpoint.clone(),
            reason,
        };
        let mut form = vec![
            ("grant_type", GRANT_TYPE),
            ("subject_token", subject_token),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("resource", settings.audience.as_str()),
        ];
        if let Some(scope) = &settings.scope {
            form.push(("scope", scope));
        }
        let started = Instant::now();
        let response = self
            .client
            .post(&settings.token_endpoint)
            .basic_auth(&settings.client_id, Some(&settings.client_secret))
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                unreachable(if e.is_timeout() {
                    "no answer in time".to_owned()
                } else {
                    "the connection was refused or failed".to_owned()
                })
            })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|_| unreachable("the answer was cut short".to_owned()))?;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorResponse>(&body) {
                Ok(e) => ExchangeError::Refused {
                    error: e.error,
                    description: e.error_description,
                },
                Err(_) => unreachable(format!("it answered {status}")),
            });
        }
        let answer: TokenResponse = serde_json::from_slice(&body)
            .map_err(|_| ExchangeError::Malformed("no `access_token` in it".to_owned()))?;
        let lifetime = answer
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok(UpstreamCredential {
            token: answer.access_token,
            // From when it was asked for: the provider's clock started before the answer.
            expires_at: started + lifetime,
        })
    }
}
