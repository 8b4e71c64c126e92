//! Checking one access token against cached keys: its size, its header (algorithm pinned,
//! key type matching), its signature, `iss`, `aud`, `exp` and `nbf` with a small clock
//! skew; then its claims as a toolgate [`User`].

use std::collections::BTreeMap;
use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use toolgate_core::User;

use super::jwks::SigningKeys;
use crate::config::OAuthConfig;

/// Why a token was refused. The messages are short and safe to send back in
/// `WWW-Authenticate: Bearer error_description="…"` (no quotes, nothing of the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Longer than `max_token_bytes`.
    #[error("the token is longer than {0} bytes")]
    TooLong(usize),
    /// Not three base64url parts with a JSON header.
    #[error("the token is not a well-formed JWT")]
    Malformed,
    /// Signed with an algorithm that is not configured (including `none` and HS256).
    #[error("the token is signed with an algorithm this resource does not accept")]
    AlgorithmNotAccepted,
    /// Its `kid` is not among the issuer's keys (after fetching them again if allowed).
    #[error("the token is signed with a key the issuer does not publish")]
    UnknownKey,
    /// The key it names is of another type than its algorithm, or pinned to another one.
    #[error("the token's algorithm does not match its key")]
    KeyMismatch,
    /// The signature is wrong.
    #[error("the token's signature is invalid")]
    BadSignature,
    /// `exp` has passed.
    #[error("the token has expired: get a new one")]
    Expired,
    /// `nbf` is still ahead.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `aud` is not this resource (RFC 8707).
    #[error(
        "the token was not issued for this resource: request it with resource set to this gateway"
    )]
    WrongAudience,
    /// `iss` is not the configured issuer.
    #[error("the token was issued by another issuer")]
    WrongIssuer,
    /// A required claim is missing or of the wrong type.
    #[error("the token lacks a required claim")]
    MissingClaim,
}

/// A token that passed every check.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The caller it stands for.
    pub user: Arc<User>,
    /// The scopes it grants.
    pub scopes: Vec<String>,
}

/// Checks tokens of one issuer for one resource.
pub struct TokenVerifier {
    max_bytes: usize,
    /// One validation per accepted algorithm: a key verifies only with its own family.
    validations: Vec<(Algorithm, Validation)>,
    roles_claim: String,
    tenant_claim: Option<String>,
    scope_roles: BTreeMap<String, Vec<String>>,
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field(
                "algorithms",
                &self.validations.iter().map(|(a, _)| a).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl TokenVerifier {
    /// The checks `config` asks for.
    pub fn new(config: &OAuthConfig) -> Self {
        let resource = config.resource_base();
        let audiences = [resource.to_owned(), format!("{resource}/mcp")];
        let validations = config
            .algorithms
            .iter()
            .map(|alg| {
                let mut validation = Validation::new(alg.0);
                validation.leeway = config.clock_skew.as_secs();
                validation.validate_nbf = true;
                validation.set_issuer(&[config.issuer.0.as_str()]);
                validation.set_audience(&audiences);
                validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                (alg.0, validation)
            })
            .collect();
        TokenVerifier {
            max_bytes: config.max_token_bytes.0,
            validations,
            roles_claim: config.roles_claim.clone(),
            tenant_claim: config.tenant_claim.clone(),
            scope_roles: config.scope_roles.clone(),
        }
    }

    /// Whether `credential` looks like a JWT (three dot-separated parts) rather than an
    /// API key.
    pub fn looks_like_jwt(credential: &str) -> bool {
        credential.bytes().filter(|b| *b == b'.').count() == 2
    }

    /// Checks `token` against `keys`.
    ///
    /// # Errors
    ///
    /// [`TokenError`] saying which check failed; [`TokenError::UnknownKey`] is the one a
    /// fetch of the keys may cure.
    pub fn verify(&self, token: &str, keys: &SigningKeys) -> Result<Verified, TokenError> {
        if token.len() > self.max_bytes {
            return Err(TokenError::TooLong(self.max_bytes));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
            // `none` and unknown names fail to parse as an algorithm.
            ErrorKind::Json(_) if token_names_an_algorithm(token) => {
                TokenError::AlgorithmNotAccepted
            }
            _ => TokenError::Malformed,
        })?;
        let validation = self
            .validations
            .iter()
            .find(|(alg, _)| *alg == header.alg)
            .map(|(_, v)| v)
            .ok_or(TokenError::AlgorithmNotAccepted)?;
        let key = keys
            .find(header.kid.as_deref())
            .ok_or(TokenError::UnknownKey)?;
        if key.key.family() != header.alg.family() || key.alg.is_some_and(|a| a != header.alg) {
            return Err(TokenError::KeyMismatch);
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, validation)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => TokenError::Expired,
                ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                ErrorKind::InvalidAudience => TokenError::WrongAudience,
                ErrorKind::InvalidIssuer => TokenError::WrongIssuer,
                ErrorKind::InvalidSignature => TokenError::BadSignature,
                ErrorKind::MissingRequiredClaim(_) | ErrorKind::InvalidClaimFormat(_) => {
                    TokenError::MissingClaim
                }
                ErrorKind::InvalidAlgorithm => TokenError::KeyMismatch,
                _ => TokenError::Malformed,
            })?;
        self.caller(data.claims)
    }

    /// The caller behind verified claims.
    fn caller(&self, claims: Map<String, Value>) -> Result<Verified, TokenError> {
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(TokenError::MissingClaim)?;
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(text)), _) => text.split_whitespace().map(str::to_owned).collect(),
            (_, Some(Value::Array(list))) => strings(list),
            (_, Some(Value::String(text))) => text.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let mut roles: Vec<String> = match claims.get(&self.roles_claim) {
            Some(Value::Array(list)) => strings(list),
            Some(Value::String(text)) => text.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        for scope in &scopes {
            if let Some(granted) = self.scope_roles.get(scope) {
                roles.extend(granted.iter().cloned());
            }
        }
        roles.sort();
        roles.dedup();
        let mut user = User::new(sub).with_roles(roles);
        if let Some(tenant) = self
            .tenant_claim
            .as_ref()
            .and_then(|claim| claims.get(claim))
            .and_then(Value::as_str)
        {
            user = user.with_tenant(tenant);
        }
        // Policies may look at how the caller came in and what the token granted.
        user.attributes
            .insert("auth".to_owned(), Value::String("oauth".to_owned()));
        user.attributes.insert(
            "scopes".to_owned(),
            Value::Array(scopes.iter().cloned().map(Value::String).collect()),
        );
        Ok(Verified {
            user: Arc::new(user),
            scopes,
        })
    }
}

fn strings(list: &[Value]) -> Vec<String> {
    list.iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Whether the token's header parses as JSON with an `alg` field (so a failure to read
/// the header is about the algorithm's name, e.g. `none`, not about its shape).
fn token_names_an_algorithm(token: &str) -> bool {
    use base64::Engine;
    let Some(header) = token.split('.').next() else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
        .is_some_and(|h| h.get("alg").is_some_and(Value::is_string))
}
