//! Per-caller upstream credentials by token exchange (RFC 8693): the caller's access token
//! is traded at the identity provider for one whose audience is the upstream, so the
//! upstream sees the caller (as `sub`, with the gateway as the actor) and never the
//! caller's own token.
//!
//! Exchanged credentials are cached per caller token until shortly before they expire, in
//! a bounded cache, and concurrent first calls of one caller share one request to the
//! token endpoint. Each credential is a secret: its `Debug` shows nothing of it.
//! [`ExchangedCredentials`] is the exchange as an upstream's per-caller credential source
//! (`upstreams[].as_caller.token_exchange`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use toolgate_core::secret::Secret;
use toolgate_core::{ToolError, ToolInvokeContext};
use toolgate_mcp::per_caller::MissingCredential;
use toolgate_mcp::{CallerAccessToken, CallerCredentials};

use super::answer::{AnswerError, MAX_TOKEN_ANSWER_BYTES, read_bounded};
use super::jwks::KeyStore;

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

    /// When it stops being valid, or a day after it was asked for when the provider gave
    /// it a longer life (it is kept no longer).
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
#[derive(Clone, Debug, thiserror::Error)]
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
///
/// One request per caller token at a time: calls that need a credential the cache does
/// not hold while another call is already asking the provider for it wait for that
/// request and share its answer, a credential or an error. Only a credential is kept.
pub struct TokenExchange {
    settings: ExchangeSettings,
    client: reqwest::Client,
    cache: moka::future::Cache<[u8; 32], Arc<UpstreamCredential>>,
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
/// The longest any credential is kept, whatever its lifetime.
const MAX_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How much longer than its own deadline a call waits for the shared request. The
/// request's own deadline, the same instant for the call that made it, must decide: then
/// its answer ("no answer in time") reaches every call waiting on it, rather than the
/// call that made it giving up first and a waiting one asking again.
const SHARED_REQUEST_GRACE: Duration = Duration::from_millis(100);

/// A cached credential expires from the cache `refresh_before` before it expires itself,
/// so the call after that exchanges the caller's token again (once, for every call
/// waiting on it).
struct RefreshBefore(Duration);

impl moka::Expiry<[u8; 32], Arc<UpstreamCredential>> for RefreshBefore {
    fn expire_after_create(
        &self,
        _key: &[u8; 32],
        credential: &Arc<UpstreamCredential>,
        created_at: Instant,
    ) -> Option<Duration> {
        let usable = credential
            .expires_at
            .saturating_duration_since(created_at)
            .saturating_sub(self.0);
        Some(usable.min(MAX_KEPT))
    }
}

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
        let cache = moka::future::Cache::builder()
            .max_capacity(settings.max_entries)
            .expire_after(RefreshBefore(settings.refresh_before))
            .build();
        Ok(TokenExchange {
            settings,
            client,
            cache,
        })
    }

    /// The credential for the caller whose access token is `subject_token`: cached, or
    /// exchanged now when there is none or it expires within `refresh_before`. Calls
    /// with the same token while it is being exchanged wait for that one request and
    /// share its answer; each call waits at most the configured `timeout`.
    ///
    /// # Errors
    ///
    /// [`ExchangeError`] when the provider cannot be reached, does not answer within the
    /// timeout, or refuses. The error is not cached: the next call asks again.
    pub async fn credential(
        &self,
        subject_token: &str,
    ) -> Result<Arc<UpstreamCredential>, ExchangeError> {
        // Keyed by the caller's token, not only its subject: a token with fewer scopes
        // never gets a credential exchanged for one with more.
        let key: [u8; 32] = Sha256::digest(subject_token.as_bytes()).into();
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        // moka runs one `init` per key at a time and hands its result to every call
        // waiting on the key; an error is handed on and not inserted. The request ends by
        // the deadline of the call that made it, which came first, so before the deadline
        // of every call waiting on it. Should the call making it be cancelled, a waiting
        // one takes over with a request of its own; the outer bound still holds each call
        // to its own deadline.
        let shared = self.cache.try_get_with(key, async {
            self.exchange(subject_token, deadline).await.map(Arc::new)
        });
        match tokio::time::timeout_at(deadline + SHARED_REQUEST_GRACE, shared).await {
            Ok(Ok(credential)) => Ok(credential),
            Ok(Err(error)) => Err(ExchangeError::clone(&error)),
            Err(_) => Err(self.no_answer_in_time()),
        }
    }

    /// How many credentials are cached (for tests and metrics).
    pub async fn cached(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.entry_count()
    }

    fn no_answer_in_time(&self) -> ExchangeError {
        ExchangeError::Unreachable {
            url: self.settings.token_endpoint.clone(),
            reason: "no answer in time".to_owned(),
        }
    }

    /// One request to the token endpoint, answered by `deadline`.
    async fn exchange(
        &self,
        subject_token: &str,
        deadline: tokio::time::Instant,
    ) -> Result<UpstreamCredential, ExchangeError> {
        tokio::time::timeout_at(deadline, self.request(subject_token))
            .await
            .unwrap_or_else(|_| Err(self.no_answer_in_time()))
    }

    async fn request(&self, subject_token: &str) -> Result<UpstreamCredential, ExchangeError> {
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
            // RFC 8693 §2.1 has both: `resource` names the upstream by its address (RFC
            // 8707), `audience` by its logical name. Issuers read one or the other, and
            // the upstream's identifier is both, so both are sent.
            ("resource", settings.audience.as_str()),
            ("audience", settings.audience.as_str()),
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
        let body = read_bounded(response, MAX_TOKEN_ANSWER_BYTES)
            .await
            .map_err(|error| match error {
                AnswerError::CutShort(_) => unreachable(error.to_string()),
                AnswerError::TooLarge(_) => ExchangeError::Malformed(error.to_string()),
            })?;
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
        // No credential is kept past `MAX_KEPT` anyway; a longer lifetime (up to `u64::MAX`
        // seconds, as a provider may say) would only overflow the instant it ends at.
        let lifetime = answer
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs)
            .min(MAX_KEPT);
        Ok(UpstreamCredential {
            token: answer.access_token,
            // From when it was asked for: the provider's clock started before the answer.
            expires_at: started + lifetime,
        })
    }
}

/// An upstream's per-caller credential source: the caller's access token exchanged at
/// the identity provider ([`TokenExchange`]). The token endpoint is the configured one,
/// or the one the issuer's discovery document names (read when the caller's token was
/// checked, so known by the first call).
///
/// A caller who presented an API key, not a token, is refused with a 403
/// `upstream_credential_missing`, and so is a call resumed after waiting for approval
/// (it runs without the caller's token, which a waiting call never keeps); a provider
/// that refuses the exchange, with a 403 `upstream_credential_refused`; one that cannot
/// be reached, with a 503 `identity_provider_unavailable` (retry after a second).
pub struct ExchangedCredentials {
    /// The upstream's name, for the caller's errors.
    upstream: String,
    settings: ExchangeSettings,
    /// Where the discovery document's token endpoint is read when none is configured.
    keys: Option<Arc<KeyStore>>,
    exchange: OnceCell<TokenExchange>,
}

impl ExchangedCredentials {
    /// Exchanges with `settings` for the upstream named `upstream`; an empty
    /// `token_endpoint` is read from `keys`.
    pub fn new(
        upstream: impl Into<String>,
        settings: ExchangeSettings,
        keys: Option<Arc<KeyStore>>,
    ) -> Self {
        ExchangedCredentials {
            upstream: upstream.into(),
            settings,
            keys,
            exchange: OnceCell::new(),
        }
    }

    async fn exchange(&self) -> Result<&TokenExchange, ToolError> {
        self.exchange
            .get_or_try_init(|| async {
                let mut settings = self.settings.clone();
                if settings.token_endpoint.is_empty() {
                    settings.token_endpoint = self
                        .keys
                        .as_ref()
                        .and_then(|keys| keys.cached())
                        .and_then(|keys| keys.token_endpoint().map(str::to_owned))
                        .ok_or_else(|| {
                            ToolError::abort(
                                "the identity provider's discovery document names no token endpoint (over https): set `as_caller.token_exchange.token_endpoint`",
                                "identity_provider_unavailable",
                                503,
                            )
                        })?;
                }
                TokenExchange::new(settings).map_err(|e| exchange_error(&e))
            })
            .await
    }
}

/// A failed exchange, for the caller (the provider's words, no token).
fn exchange_error(error: &ExchangeError) -> ToolError {
    match error {
        ExchangeError::Refused { .. } => {
            ToolError::abort(format!("{error}"), "upstream_credential_refused", 403)
        }
        ExchangeError::Unreachable { .. } | ExchangeError::Malformed(_) => ToolError::RetryAfter {
            delay: Duration::from_secs(1),
            reason: error.to_string(),
            code: std::borrow::Cow::Borrowed("identity_provider_unavailable"),
            status: 503,
        },
    }
}

#[async_trait]
impl CallerCredentials for ExchangedCredentials {
    async fn credential(&self, ctx: &ToolInvokeContext) -> Result<Secret, ToolError> {
        let Some(token) = ctx.try_get::<CallerAccessToken>() else {
            // A resumed call is a new invocation, made by the approver's request: the
            // caller's token was never stored with the waiting call.
            let missing = if ctx.resumed().is_some() {
                MissingCredential::Waited {
                    tool: ctx.tool_name().to_owned(),
                    upstream: self.upstream.clone(),
                }
            } else {
                MissingCredential::NoAccessToken {
                    user: ctx.user().id.clone(),
                    tenant: ctx.user().tenant.clone(),
                }
            };
            return Err(missing.into());
        };
        let exchange = self.exchange().await?;
        let credential = exchange
            .credential(token.secret().expose())
            .await
            .map_err(|e| exchange_error(&e))?;
        Ok(Secret::new(credential.bearer()))
    }

    fn describe(&self) -> String {
        format!(
            "the caller's token exchanged for audience {}",
            self.settings.audience
        )
    }

    fn needs_caller_token(&self) -> bool {
        true
    }
}
