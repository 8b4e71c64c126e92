//! The issuer's signing keys: found through its discovery document, fetched with a
//! deadline, cached, and fetched again when a token names a key not yet known — at most
//! once per `refresh_interval`, so that a flood of made-up key ids cannot hammer the
//! issuer.
//!
//! Reading the cache is a pointer load: a token signed with a known key costs no await
//! and no network call. Only a miss waits for a fetch, and concurrent misses share one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde_json::Value;

use super::answer::{AnswerError, MAX_DOCUMENT_BYTES, read_bounded};
use crate::config::OAuthConfig;

/// The signing keys could not be had from the issuer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JwksError {
    /// The issuer did not answer in time, or refused the connection, or answered an error.
    #[error(
        "the identity provider could not be reached at {url}: {reason}; check that it is up and that `identity.oauth.issuer` is right"
    )]
    Unreachable {
        /// What was fetched.
        url: String,
        /// Why it failed.
        reason: String,
    },
    /// The issuer answered something that is not a discovery document or key set.
    #[error(
        "the identity provider's answer at {url} is not usable: {reason}; check `identity.oauth.issuer`"
    )]
    Malformed {
        /// What was fetched.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The keys were fetched too recently to fetch them again.
    #[error(
        "the identity provider's keys were fetched less than {0:?} ago; not fetching them again yet"
    )]
    TooSoon(Duration),
}

/// One public key of the issuer.
pub struct SigningKey {
    /// `kid`, when the key set gives one.
    pub kid: Option<String>,
    /// `alg`, when the key set pins the key to one algorithm.
    pub alg: Option<Algorithm>,
    /// The key.
    pub key: DecodingKey,
}

/// The keys of one fetch.
pub struct SigningKeys {
    keys: Vec<SigningKey>,
    fetched: Instant,
    /// The issuer's token endpoint, from the same discovery document.
    token_endpoint: Option<String>,
}

impl SigningKeys {
    /// Keys made by hand (for benchmarks and tests of the token check).
    pub fn new(keys: Vec<SigningKey>) -> Self {
        SigningKeys {
            keys,
            fetched: Instant::now(),
            token_endpoint: None,
        }
    }

    /// The issuer's token endpoint, when its discovery document names one (over `https`
    /// for an `https` issuer).
    pub fn token_endpoint(&self) -> Option<&str> {
        self.token_endpoint.as_deref()
    }

    /// The key a token's header names: by `kid`, or the only key when the token names
    /// none and the set holds one.
    pub fn find(&self, kid: Option<&str>) -> Option<&SigningKey> {
        match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// When the last fetch started, and why it failed if it did.
struct LastFetch {
    at: Instant,
    failure: Option<JwksError>,
}

/// The cache of the issuer's keys.
pub struct KeyStore {
    issuer: String,
    discovery_url: String,
    client: reqwest::Client,
    fetch_timeout: Duration,
    refresh_interval: Duration,
    max_age: Duration,
    /// Shared with the other stores of the same issuer in a [`KeyCache`].
    current: Arc<ArcSwapOption<SigningKeys>>,
    /// The last fetch; held across a fetch so that concurrent misses share it.
    last_fetch: tokio::sync::Mutex<Option<LastFetch>>,
    /// When the last fetch started, readable while a fetch runs (see
    /// [`next_fetch_in`](KeyStore::next_fetch_in)).
    last_fetch_at: std::sync::Mutex<Option<Instant>>,
}

/// The issuer's keys, kept for the process: the [`KeyStore`]s made
/// [`in_cache`](KeyStore::in_cache) for the same issuer and discovery document share one
/// set of keys. The store of a reloaded configuration thus starts with the keys the
/// previous one fetched, so that a reload while the issuer is down locks no token holder
/// out. A set of keys lives as long as a store uses it.
#[derive(Debug, Default)]
pub struct KeyCache {
    by_issuer: std::sync::Mutex<HashMap<(String, String), SharedKeys>>,
}

type SharedKeys = std::sync::Weak<ArcSwapOption<SigningKeys>>;

impl KeyCache {
    /// The keys of `issuer` found through `discovery_url`, shared with the live stores
    /// that have them.
    fn keys_for(&self, issuer: &str, discovery_url: &str) -> Arc<ArcSwapOption<SigningKeys>> {
        let mut by_issuer = self.by_issuer.lock().unwrap_or_else(|e| e.into_inner());
        by_issuer.retain(|_, keys| keys.strong_count() > 0);
        let key = (issuer.to_owned(), discovery_url.to_owned());
        if let Some(keys) = by_issuer.get(&key).and_then(std::sync::Weak::upgrade) {
            return keys;
        }
        let keys = Arc::default();
        by_issuer.insert(key, Arc::downgrade(&keys));
        keys
    }
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("issuer", &self.issuer)
            .field("keys", &self.current.load().as_ref().map_or(0, |k| k.len()))
            .finish()
    }
}

impl KeyStore {
    /// An empty cache for the issuer of `config`.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be made (no TLS roots on this machine).
    pub fn new(config: &OAuthConfig) -> Result<Self, JwksError> {
        Self::with_keys(config, Arc::default())
    }

    /// A cache for the issuer of `config` that shares its keys with every other store
    /// of `cache` for the same issuer and discovery document (see [`KeyCache`]).
    ///
    /// # Errors
    ///
    /// As [`KeyStore::new`].
    pub fn in_cache(config: &OAuthConfig, cache: &KeyCache) -> Result<Self, JwksError> {
        Self::with_keys(
            config,
            cache.keys_for(&config.issuer.0, &config.discovery_url()),
        )
    }

    fn with_keys(
        config: &OAuthConfig,
        current: Arc<ArcSwapOption<SigningKeys>>,
    ) -> Result<Self, JwksError> {
        let client = reqwest::Client::builder()
            .timeout(config.fetch_timeout)
            .connect_timeout(config.fetch_timeout)
            // Keys come from where the issuer says, not from wherever a redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| JwksError::Unreachable {
                url: config.discovery_url(),
                reason: format!("no HTTP client could be made: {e}"),
            })?;
        Ok(KeyStore {
            issuer: config.issuer.0.clone(),
            discovery_url: config.discovery_url(),
            client,
            fetch_timeout: config.fetch_timeout,
            refresh_interval: config.refresh_interval,
            max_age: config.keys_max_age,
            current,
            last_fetch: tokio::sync::Mutex::new(None),
            last_fetch_at: std::sync::Mutex::new(None),
        })
    }

    /// The issuer these keys are of.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The keys cached now, if any. Keys older than `keys_max_age` are still returned, and
    /// a fetch is started in the background (when the interval allows one).
    pub fn cached(self: &Arc<Self>) -> Option<Arc<SigningKeys>> {
        let keys = self.current.load_full()?;
        if keys.fetched.elapsed() > self.max_age
            && self.may_fetch_now()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let store = Arc::clone(self);
            let seen = Arc::clone(&keys);
            // A failure is logged by the fetch; the cached keys are kept.
            runtime.spawn(async move {
                let _ = store.refresh(Some(&seen)).await;
            });
        }
        Some(keys)
    }

    /// Whether no fetch runs now and the last one is older than the interval: a request
    /// that finds the keys old starts a background fetch only then, not one per request.
    fn may_fetch_now(&self) -> bool {
        self.last_fetch.try_lock().is_ok_and(|last| {
            last.as_ref()
                .is_none_or(|fetch| fetch.at.elapsed() >= self.refresh_interval)
        })
    }

    /// How long until the interval lets the issuer be asked for its keys again (zero when
    /// it may be asked now): what a caller refused for want of keys is told to wait
    /// (`Retry-After`), since a retry any sooner meets the same failure.
    pub fn next_fetch_in(&self) -> Duration {
        let at = *self.last_fetch_at.lock().unwrap_or_else(|e| e.into_inner());
        at.map_or(Duration::ZERO, |at| {
            self.refresh_interval.saturating_sub(at.elapsed())
        })
    }

    /// Puts keys in the cache (for benchmarks and tests of the token check).
    pub fn preload(&self, keys: SigningKeys) {
        self.current.store(Some(Arc::new(keys)));
    }

    /// Fetches the keys again, unless someone else did since `seen` was read (their keys
    /// are returned), or the last fetch started less than `refresh_interval` ago.
    ///
    /// # Errors
    ///
    /// Within the interval: why the last fetch failed, or [`JwksError::TooSoon`] if it did
    /// not; otherwise why this fetch failed.
    pub async fn refresh(
        &self,
        seen: Option<&Arc<SigningKeys>>,
    ) -> Result<Arc<SigningKeys>, JwksError> {
        let mut last = self.last_fetch.lock().await;
        let now = self.current.load_full();
        let changed = match (&now, seen) {
            (Some(now), Some(seen)) => !Arc::ptr_eq(now, seen),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if changed && let Some(now) = now {
            return Ok(now);
        }
        if let Some(fetch) = &*last
            && fetch.at.elapsed() < self.refresh_interval
        {
            // Within the interval the issuer is not asked again: a failure stands until
            // then.
            return Err(fetch
                .failure
                .clone()
                .unwrap_or(JwksError::TooSoon(self.refresh_interval)));
        }
        let at = Instant::now();
        // One bound over the discovery document and the key set together: a caller
        // waiting for keys waits `fetch_timeout` at most, not once per document.
        let fetched = tokio::time::timeout(self.fetch_timeout, self.fetch())
            .await
            .map_err(|_| JwksError::Unreachable {
                url: self.discovery_url.clone(),
                reason: format!(
                    "the discovery document and key set were not both fetched within {:?} (`fetch_timeout`)",
                    self.fetch_timeout
                ),
            })
            .and_then(|fetched| fetched);
        if let Err(e) = &fetched {
            // Once per attempt, so at most once per interval whatever callers send.
            tracing::warn!(error = %e, "the identity provider's signing keys could not be fetched");
        }
        *self.last_fetch_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
        *last = Some(LastFetch {
            at,
            failure: fetched.as_ref().err().cloned(),
        });
        let fetched = Arc::new(fetched?);
        self.current.store(Some(Arc::clone(&fetched)));
        tracing::info!(
            issuer = %self.issuer,
            keys = fetched.len(),
            "fetched the identity provider's signing keys"
        );
        Ok(fetched)
    }

    async fn fetch(&self) -> Result<SigningKeys, JwksError> {
        let discovery = self.get_json(&self.discovery_url).await?;
        let malformed = |reason: String| JwksError::Malformed {
            url: self.discovery_url.clone(),
            reason,
        };
        let issuer = discovery.get("issuer").and_then(Value::as_str);
        if issuer != Some(self.issuer.as_str()) {
            return Err(malformed(format!(
                "its `issuer` is {issuer:?}, not `{}`: the configured issuer must be exactly the one tokens carry",
                self.issuer
            )));
        }
        let jwks_uri = discovery
            .get("jwks_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("it has no `jwks_uri`".to_owned()))?;
        // Keys fetched over plain HTTP could be swapped on the way: an `https` issuer's
        // keys must come over `https` too.
        if self.issuer.starts_with("https://") && !jwks_uri.starts_with("https://") {
            return Err(malformed(format!(
                "its `jwks_uri` {jwks_uri} is not `https`, so the keys could be swapped on the way"
            )));
        }
        let set = self.get_json(jwks_uri).await?;
        let keys =
            set.get("keys")
                .and_then(Value::as_array)
                .ok_or_else(|| JwksError::Malformed {
                    url: jwks_uri.to_owned(),
                    reason: "it has no `keys` list".to_owned(),
                })?;
        // Keys the gateway cannot use (encryption keys, symmetric keys, unknown types) are
        // skipped, not fatal: an issuer may publish them beside its signing keys.
        let keys = keys.iter().filter_map(signing_key).collect();
        // Tokens and the gateway's client secret go to the token endpoint: for an
        // `https` issuer, only over `https`.
        let token_endpoint = discovery
            .get("token_endpoint")
            .and_then(Value::as_str)
            .filter(|url| !self.issuer.starts_with("https://") || url.starts_with("https://"))
            .map(str::to_owned);
        Ok(SigningKeys {
            token_endpoint,
            ..SigningKeys::new(keys)
        })
    }

    async fn get_json(&self, url: &str) -> Result<Value, JwksError> {
        let unreachable = |reason: String| JwksError::Unreachable {
            url: url.to_owned(),
            reason,
        };
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| unreachable(plain_reason(&e)))?;
        if !response.status().is_success() {
            return Err(unreachable(format!("it answered {}", response.status())));
        }
        let body =
            read_bounded(response, MAX_DOCUMENT_BYTES)
                .await
                .map_err(|error| match error {
                    AnswerError::CutShort(e) => unreachable(plain_reason(&e)),
                    too_large @ AnswerError::TooLarge(_) => JwksError::Malformed {
                        url: url.to_owned(),
                        reason: too_large.to_string(),
                    },
                })?;
        serde_json::from_slice(&body).map_err(|e| JwksError::Malformed {
            url: url.to_owned(),
            reason: format!("it is not JSON ({e})"),
        })
    }
}

/// The kind of failure of a request, without the URL (the error names it already).
fn plain_reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "no answer in time".to_owned()
    } else if error.is_connect() {
        "the connection was refused or failed".to_owned()
    } else {
        error.to_string()
    }
}

/// A public signing key of a JWKS entry, or `None` for a key the gateway does not use.
fn signing_key(entry: &Value) -> Option<SigningKey> {
    let jwk: Jwk = serde_json::from_value(entry.clone()).ok()?;
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return None;
    }
    // A symmetric key in a public key set is a mistake of the issuer; using it would let
    // anyone who read the set sign tokens.
    if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
        return None;
    }
    let alg = match jwk.common.key_algorithm {
        Some(alg) => Some(Algorithm::try_from(alg).ok()?),
        None => None,
    };
    if alg.is_some_and(|a| a.family() == AlgorithmFamily::Hmac) {
        return None;
    }
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(SigningKey {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth(issuer: &str) -> OAuthConfig {
        let config = crate::config::parse(&format!(
            "identity:\n  oauth:\n    issuer: {issuer}\n    resource: https://tools.example.com\n"
        ))
        .expect("the test config");
        config.identity.oauth.expect("oauth")
    }

    #[tokio::test]
    async fn stores_of_one_issuer_in_a_cache_share_their_keys_and_others_do_not() {
        let cache = KeyCache::default();
        let served = Arc::new(KeyStore::in_cache(&oauth("https://a.example.com"), &cache).unwrap());
        served.preload(SigningKeys::new(Vec::new()));

        let reloaded =
            Arc::new(KeyStore::in_cache(&oauth("https://a.example.com"), &cache).unwrap());
        let elsewhere =
            Arc::new(KeyStore::in_cache(&oauth("https://b.example.com"), &cache).unwrap());
        let outside = Arc::new(KeyStore::new(&oauth("https://a.example.com")).unwrap());
        assert!(
            reloaded.cached().is_some(),
            "the reloaded store starts with the keys"
        );
        assert!(
            elsewhere.cached().is_none(),
            "another issuer's store does not"
        );
        assert!(
            outside.cached().is_none(),
            "nor does a store outside the cache"
        );
    }

    #[tokio::test]
    async fn keys_no_store_uses_any_more_leave_the_cache() {
        let cache = KeyCache::default();
        let gone = KeyStore::in_cache(&oauth("https://a.example.com"), &cache).unwrap();
        gone.preload(SigningKeys::new(Vec::new()));
        drop(gone);

        let next = Arc::new(KeyStore::in_cache(&oauth("https://a.example.com"), &cache).unwrap());
        assert!(next.cached().is_none());
        assert_eq!(cache.by_issuer.lock().unwrap().len(), 1);
    }
}
