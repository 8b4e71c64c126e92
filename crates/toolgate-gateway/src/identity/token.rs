//! Checking one access token against cached keys: its size, its header (algorithm pinned,
//! no critical extensions, key type matching), its signature, `exp` and `nbf` with a small
//! clock skew, `iss`, `aud`, `iat` not ahead of the clock past the skew; then its claims as
//! a toolgate [`User`].

use std::collections::BTreeMap;
use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use toolgate_core::User;
use toolgate_core::error::hides_text;

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
    /// `iss` is not one string (RFC 7519 §4.1.1): a list, even of the configured issuer
    /// alone, is not an issuer.
    #[error(
        "the token's iss claim is not a single string: the issuer must write its identifier as one string"
    )]
    IssuerNotAString,
    /// `iat` is further ahead of the gateway's clock than the clock skew allows: the
    /// token claims to be issued in the future.
    #[error(
        "the token's iat lies in the future beyond the allowed clock skew: check the identity provider's clock"
    )]
    IssuedInTheFuture,
    /// The header lists extensions that must be understood (`crit`, RFC 7515 §4.1.11):
    /// this resource understands none, so it must refuse the token.
    #[error(
        "the token's header has crit, naming extensions this resource does not understand: send a JWT without critical extensions"
    )]
    CriticalExtension,
    /// The header says the payload is not base64url-encoded (`b64: false`, RFC 7797):
    /// an access token's claims always are.
    #[error(
        "the token's header has b64 set to false (an unencoded payload): send a JWT with an encoded payload"
    )]
    UnencodedPayload,
    /// A claim every token must carry (`exp`, `iss`, `aud`, `sub`) is absent (or `null`).
    #[error("{}", no_claim_message(.0))]
    NoClaim(&'static str),
    /// A claim is present but not as it must be: of the wrong type, out of range, empty,
    /// too long, or (for the claims that become the caller's id, tenant and roles) holding
    /// control characters. The message names the claim and the rule, never its value.
    #[error("the token's `{claim}` claim {rule}")]
    BadClaim {
        /// The claim's name (`exp`, `sub`, or the configured `tenant_claim` or
        /// `roles_claim`).
        claim: String,
        /// What is wrong with it, in words that follow the claim's name.
        rule: &'static str,
    },
    /// Its `sub` is the id of an API-key user, and the configuration does not say the two
    /// are the same (`subjects_are_api_key_users`).
    #[error(
        "the token's subject is the id of a user who signs in with an API key: the operator must allow that with subjects_are_api_key_users"
    )]
    SubjectIsApiKeyUser,
    /// The header's `typ` is not `at+jwt`, and the configuration asks for it
    /// (`require_access_token_type`).
    #[error(
        "the token is not an access token (its header's typ is not at+jwt): send an access token, not an ID token or another JWT"
    )]
    NotAnAccessToken,
    /// `aud` names the gateway's other resource: a token for `/v1` sent to `/mcp`, or the
    /// other way round.
    #[error(
        "the token was issued for the gateway's other endpoint: request one with resource set to this endpoint's (its protected resource metadata names it)"
    )]
    OtherRoute,
}

/// Whether a header's `typ` says "access token" (RFC 9068: `at+jwt`, with or without the
/// `application/` prefix, in any case).
fn is_access_token_type(typ: &str) -> bool {
    let typ = typ.strip_prefix("application/").unwrap_or(typ);
    typ.eq_ignore_ascii_case("at+jwt")
}

/// A token that passed every check.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The caller it stands for.
    pub user: Arc<User>,
    /// The scopes it grants.
    pub scopes: Vec<String>,
    /// Its `exp`, in seconds since the Unix epoch.
    pub expires_at: u64,
    /// Which of the gateway's two resource identifiers its `aud` names.
    pub audiences: Audiences,
}

/// Which of the gateway's resource identifiers a token is for: the gateway itself
/// (`resource`, for `/v1`) and its MCP endpoint (`resource` + `/mcp`). A token is taken
/// only on the route it was issued for (RFC 8707): one for `/v1` is not one for `/mcp`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audiences {
    /// `aud` names `resource`.
    pub v1: bool,
    /// `aud` names `resource/mcp`.
    pub mcp: bool,
}

impl Audiences {
    /// Whether the token is for `route`.
    pub fn includes(self, route: super::Route) -> bool {
        match route {
            super::Route::V1 => self.v1,
            super::Route::Mcp => self.mcp,
        }
    }
}

/// A token that passed every check, remembered with the key set it was checked against.
#[derive(Clone)]
struct Seen {
    verified: Verified,
    keys: Arc<SigningKeys>,
}

/// How much the tokens seen before may hold, token text included.
const SEEN_BYTES: u64 = 16 * 1024 * 1024;
/// How long a token seen before is taken without a new check (never past its `exp`).
const SEEN_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Checks tokens of one issuer for one resource.
///
/// A token that passed is remembered (bounded to 16 MiB, for a minute at most, never past
/// its `exp` plus the clock skew, and only while the issuer's key set is the one it was
/// checked against): an agent sending the same token on every call pays the signature
/// check once, not per call.
pub struct TokenVerifier {
    seen: moka::sync::Cache<String, Seen>,
    leeway: u64,
    max_bytes: usize,
    /// One validation per accepted algorithm: a key verifies only with its own family.
    validations: Vec<(Algorithm, Validation)>,
    /// The resource identifiers of `/v1` and `/mcp`.
    resources: [String; 2],
    /// Whether the header's `typ` must be `at+jwt`.
    require_at_typ: bool,
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
                validation.set_audience(audiences.as_slice());
                validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                (alg.0, validation)
            })
            .collect();
        TokenVerifier {
            seen: moka::sync::Cache::builder()
                .max_capacity(SEEN_BYTES)
                .weigher(|token: &String, seen: &Seen| {
                    let claims: usize = seen.verified.scopes.iter().map(String::len).sum();
                    u32::try_from(token.len() + claims + 512).unwrap_or(u32::MAX)
                })
                .time_to_live(SEEN_FOR)
                .build(),
            leeway: config.clock_skew.as_secs(),
            max_bytes: config.max_token_bytes.0,
            validations,
            resources: audiences,
            require_at_typ: config.require_access_token_type,
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

    /// Checks `token` against `keys`, or takes it as checked when it passed before against
    /// the same key set and has not expired since.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub fn verify(&self, token: &str, keys: &Arc<SigningKeys>) -> Result<Verified, TokenError> {
        if let Some(seen) = self.seen.get(token)
            && Arc::ptr_eq(&seen.keys, keys)
            && now_secs() < seen.verified.expires_at.saturating_add(self.leeway)
        {
            return Ok(seen.verified);
        }
        let verified = self.check(token, keys)?;
        self.seen.insert(
            token.to_owned(),
            Seen {
                verified: verified.clone(),
                keys: Arc::clone(keys),
            },
        );
        Ok(verified)
    }

    /// Checks `token` against `keys`, every check every time (what [`verify`](Self::verify)
    /// does for a token it has not seen).
    ///
    /// # Errors
    ///
    /// [`TokenError`] saying which check failed; [`TokenError::UnknownKey`] is the one a
    /// fetch of the keys may cure.
    pub fn check(&self, token: &str, keys: &SigningKeys) -> Result<Verified, TokenError> {
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
        // RFC 7515 §4.1.11: a recipient that does not understand every extension named in
        // `crit` must refuse the JWS. This one understands none, so any `crit` is refused;
        // `b64` (RFC 7797) changes what is signed, so it is refused unless it says the
        // default.
        if header.crit.is_some() {
            return Err(TokenError::CriticalExtension);
        }
        if header
            .extras
            .inner()
            .get("b64")
            .is_some_and(|b64| b64 != &Value::Bool(true))
        {
            return Err(TokenError::UnencodedPayload);
        }
        if self.require_at_typ && !header.typ.as_deref().is_some_and(is_access_token_type) {
            return Err(TokenError::NotAnAccessToken);
        }
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
                // Reported after the signature check (the header read already), so the
                // claims are the issuer's and may be looked at to say what is wrong: a
                // claim it cannot read it calls missing, and one of a shape it does not
                // expect at all (`sub` as a list) fails the reading of the claims.
                ErrorKind::MissingRequiredClaim(_)
                | ErrorKind::InvalidClaimFormat(_)
                | ErrorKind::Json(_) => payload(token)
                    .and_then(|claims| claim_problem(&claims))
                    .unwrap_or(TokenError::Malformed),
                ErrorKind::InvalidAlgorithm => TokenError::KeyMismatch,
                _ => TokenError::Malformed,
            })?;
        self.caller(data.claims)
    }

    /// The caller behind verified claims.
    fn caller(&self, claims: Map<String, Value>) -> Result<Verified, TokenError> {
        // The signature check took `iss` as a string or as a list holding the issuer;
        // RFC 7519 §4.1.1 has it a string, and only that is taken.
        if !claims.get("iss").is_some_and(Value::is_string) {
            return Err(TokenError::IssuerNotAString);
        }
        // A token issued in the future comes from a clock gone wrong or was made to
        // outlive its issuer's rotation: refused past the skew, like `nbf`. `iat` is
        // optional (RFC 7519 §4.1.6); present, it must be a NumericDate.
        match claims.get("iat") {
            None => {}
            Some(iat) => {
                let iat = iat
                    .as_f64()
                    .ok_or_else(|| bad_claim("iat", date_rule(iat)))?;
                if iat > now_secs().saturating_add(self.leeway) as f64 {
                    return Err(TokenError::IssuedInTheFuture);
                }
            }
        }
        // A NumericDate may have a fraction; the whole seconds are enough here.
        let expires_at = match claims.get("exp") {
            None | Some(Value::Null) => return Err(TokenError::NoClaim("exp")),
            Some(exp) => exp
                .as_u64()
                .or_else(|| {
                    exp.as_f64()
                        .filter(|f| f.is_finite() && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .ok_or_else(|| bad_claim("exp", date_rule(exp)))?,
        };
        // The subject becomes the caller's id, which reasons, logs, audit records and
        // webhook messages quote: printable, bounded text only.
        let sub = match claims.get("sub") {
            None | Some(Value::Null) => return Err(TokenError::NoClaim("sub")),
            Some(Value::String(sub)) if !sub.trim().is_empty() => sub.as_str(),
            Some(_) => return Err(bad_claim("sub", SUB_NOT_A_STRING)),
        };
        if let Some(rule) = id_rule(sub) {
            return Err(bad_claim("sub", rule));
        }
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(text)), _) => text.split_whitespace().map(str::to_owned).collect(),
            (_, Some(Value::Array(list))) => strings(list),
            (_, Some(Value::String(text))) => text.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let roles: Vec<String> = match claims.get(&self.roles_claim) {
            Some(Value::Array(list)) => strings(list),
            Some(Value::String(text)) => text.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        if let Some(rule) = roles.iter().find_map(|role| id_rule(role)) {
            let rule = match rule {
                ID_TOO_LONG => ROLE_TOO_LONG,
                _ => ROLE_NOT_PRINTABLE,
            };
            return Err(bad_claim(&self.roles_claim, rule));
        }
        let mut user = User::new(sub).with_roles(roles);
        // The tenant is part of who the caller is: a claim that is there but says no
        // tenant plainly is refused, never read as "no tenant".
        if let Some(claim) = &self.tenant_claim {
            match claims.get(claim) {
                None | Some(Value::Null) => {}
                Some(Value::String(tenant)) if !tenant.trim().is_empty() => {
                    if let Some(rule) = id_rule(tenant) {
                        return Err(bad_claim(claim, rule));
                    }
                    user = user.with_tenant(tenant.as_str());
                }
                Some(_) => return Err(bad_claim(claim, TENANT_NOT_A_STRING)),
            }
        }
        with_token_scopes(&mut user, &scopes, &self.scope_roles);
        let names = |resource: &str| match claims.get("aud") {
            Some(Value::String(aud)) => aud == resource,
            Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(resource)),
            _ => false,
        };
        let audiences = Audiences {
            v1: names(&self.resources[0]),
            mcp: names(&self.resources[1]),
        };
        Ok(Verified {
            user: Arc::new(user),
            scopes,
            expires_at,
            audiences,
        })
    }
}

/// Makes `user` the caller of a token that granted `scopes`: the roles `scope_roles` gives
/// those scopes are added to theirs, and policies see how they came in (tag `auth`:
/// `oauth`) and the scopes (tag `scopes`). Serving and `toolgate policy test` both make a
/// token's caller with it, so the two cannot disagree.
pub(crate) fn with_token_scopes(
    user: &mut User,
    scopes: &[String],
    scope_roles: &BTreeMap<String, Vec<String>>,
) {
    for scope in scopes {
        if let Some(granted) = scope_roles.get(scope) {
            user.roles.extend(granted.iter().cloned());
        }
    }
    user.roles.sort();
    user.roles.dedup();
    user.attributes
        .insert("auth".to_owned(), Value::String("oauth".to_owned()));
    user.attributes.insert(
        "scopes".to_owned(),
        Value::Array(scopes.iter().cloned().map(Value::String).collect()),
    );
}

/// The longest caller id (`sub`), tenant or role a token may carry, in bytes. Ids are
/// quoted in reasons, logs, audit records and webhook messages, and key per-user state;
/// issuers' subjects (UUIDs, `auth0|…`, e-mail addresses) are far shorter.
pub const MAX_ID_BYTES: usize = 256;

/// The rule a `sub` that is not a non-empty string breaks.
const SUB_NOT_A_STRING: &str = "must be a non-empty string naming the caller";
/// The rule a tenant claim of another shape breaks.
const TENANT_NOT_A_STRING: &str = "must be a non-empty string naming the caller's tenant, or be left out for a caller of no tenant";
/// The rule an id longer than [`MAX_ID_BYTES`] breaks.
const ID_TOO_LONG: &str = "is longer than 256 bytes, the most this resource takes for an id";
/// The rule an id with control or invisible formatting characters breaks.
const ID_NOT_PRINTABLE: &str = "contains control characters (such as NUL or a line break) or invisible formatting characters: the issuer must send printable text";
/// [`ID_TOO_LONG`] for one role of a list.
const ROLE_TOO_LONG: &str =
    "holds a role longer than 256 bytes, the most this resource takes for a role";
/// [`ID_NOT_PRINTABLE`] for one role of a list.
const ROLE_NOT_PRINTABLE: &str = "holds a role with control characters (such as NUL or a line break) or invisible formatting characters: the issuer must send printable text";
/// The rule a date claim that is not a number breaks.
const NOT_A_DATE: &str = "must be a number of seconds since 1970, written as a JSON number";
/// The rule a date claim that is a number no clock reaches breaks.
const DATE_OUT_OF_RANGE: &str = "must be a number of seconds since 1970 that a clock can reach: it is negative or far too large";
/// The rule an `aud` of another shape breaks.
const AUD_NOT_STRINGS: &str =
    "must be this resource's identifier, as a string or in a list of strings";

/// The message of [`TokenError::NoClaim`].
fn no_claim_message(claim: &str) -> String {
    let why = match claim {
        "exp" => "an access token must say when it expires",
        "sub" => "the issuer must name the caller in it",
        "aud" => "request it with resource set to this gateway",
        "iss" => "the issuer must name itself in it",
        _ => "the issuer must include it",
    };
    format!("the token has no `{claim}` claim: {why}")
}

fn bad_claim(claim: &str, rule: &'static str) -> TokenError {
    TokenError::BadClaim {
        claim: claim.to_owned(),
        rule,
    }
}

/// What is wrong with a date claim (`exp`, `nbf`, `iat`) that could not be read.
fn date_rule(value: &Value) -> &'static str {
    if value.is_number() {
        DATE_OUT_OF_RANGE
    } else {
        NOT_A_DATE
    }
}

/// The first registered claim of `claims` that is absent (or `null`) though required, or
/// present in a shape it cannot have, as the refusal that says so; in the order the
/// signature check looks at them.
fn claim_problem(claims: &Map<String, Value>) -> Option<TokenError> {
    ["exp", "iss", "aud", "sub", "nbf"]
        .into_iter()
        .find_map(|claim| match claims.get(claim).filter(|v| !v.is_null()) {
            None if claim == "nbf" => None,
            None => Some(TokenError::NoClaim(claim)),
            Some(value) => match claim {
                "iss" => (!is_strings(value)).then_some(TokenError::IssuerNotAString),
                "aud" => (!is_strings(value)).then(|| bad_claim(claim, AUD_NOT_STRINGS)),
                "sub" => value
                    .as_str()
                    .is_none_or(|sub| sub.trim().is_empty())
                    .then(|| bad_claim(claim, SUB_NOT_A_STRING)),
                _ => (!is_numeric_date(value)).then(|| bad_claim(claim, date_rule(value))),
            },
        })
}

/// A string, or a list of strings.
fn is_strings(value: &Value) -> bool {
    match value {
        Value::String(_) => true,
        Value::Array(list) => list.iter().all(Value::is_string),
        _ => false,
    }
}

/// A number of seconds since 1970 that fits the clock (what the signature check reads).
fn is_numeric_date(value: &Value) -> bool {
    value.as_u64().is_some()
        || value
            .as_f64()
            .is_some_and(|f| f.is_finite() && f >= 0.0 && f < u64::MAX as f64)
}

/// What is wrong with `id` (a subject, tenant or role) as an id: too long, or holding
/// characters that could forge or hide text where it is quoted.
fn id_rule(id: &str) -> Option<&'static str> {
    if id.len() > MAX_ID_BYTES {
        Some(ID_TOO_LONG)
    } else if id.chars().any(hides_text) {
        Some(ID_NOT_PRINTABLE)
    } else {
        None
    }
}

/// The claims of `token`, unverified: read only to say what is wrong with them after the
/// signature check passed.
fn payload(token: &str) -> Option<Map<String, Value>> {
    use base64::Engine;
    let part = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Seconds since the Unix epoch.
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, EncodingKey, Header};
    use serde_json::json;

    use super::*;
    use crate::identity::SigningKey;

    const ISSUER: &str = "https://login.example.com";
    const RESOURCE: &str = "https://tools.example.com";

    fn pem(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/benches/keys/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("a test key")
    }

    fn verifier() -> TokenVerifier {
        let config = crate::config::parse(&format!(
            "identity:\n  oauth:\n    issuer: {ISSUER}\n    resource: {RESOURCE}\n"
        ))
        .expect("the test config");
        TokenVerifier::new(config.identity.oauth.as_ref().expect("oauth"))
    }

    fn rsa_keys() -> Arc<SigningKeys> {
        Arc::new(SigningKeys::new(vec![SigningKey {
            kid: Some("rsa-1".to_owned()),
            alg: Some(Algorithm::RS256),
            key: DecodingKey::from_rsa_pem(&pem("rs256.pub.pem")).unwrap(),
        }]))
    }

    fn token() -> String {
        token_with(|_| {})
    }

    /// A good token's claims with `change` applied, signed with the test key.
    fn token_with(change: impl FnOnce(&mut Map<String, Value>)) -> String {
        let mut claims = serde_json::json!({
            "iss": ISSUER, "aud": RESOURCE, "sub": "agent-7",
            "exp": now_secs() + 3600, "scope": "tools:call",
        });
        change(claims.as_object_mut().unwrap());
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("rsa-1".to_owned());
        jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_rsa_pem(&pem("rs256.pem")).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_token_seen_before_is_taken_again_only_against_the_key_set_it_was_checked_with() {
        let verifier = verifier();
        let keys = rsa_keys();
        let token = token();
        let first = verifier.verify(&token, &keys).expect("a good token");
        let again = verifier.verify(&token, &keys).expect("seen before");
        assert_eq!(first.user.id, again.user.id);
        assert_eq!(again.scopes, vec!["tools:call".to_owned()]);

        // The issuer's key set changed and no longer has the key: checked again, refused.
        let rotated = Arc::new(SigningKeys::new(Vec::new()));
        assert_eq!(
            verifier.verify(&token, &rotated).unwrap_err(),
            TokenError::UnknownKey
        );
    }

    #[test]
    fn a_token_seen_before_is_not_taken_past_its_expiry_and_the_clock_skew() {
        let verifier = verifier();
        let keys = rsa_keys();
        // Not a token at all: only a remembered check could let it through.
        let remembered = |expires_at: u64| Seen {
            verified: Verified {
                user: Arc::new(User::new("agent-7")),
                scopes: Vec::new(),
                expires_at,
                audiences: Audiences::default(),
            },
            keys: Arc::clone(&keys),
        };
        verifier
            .seen
            .insert("a.b.c".to_owned(), remembered(now_secs() + 60));
        assert!(
            verifier.verify("a.b.c", &keys).is_ok(),
            "a remembered token within its lifetime is taken (the test can see the cache)"
        );
        let past = now_secs() - verifier.leeway - 1;
        verifier.seen.insert("a.b.c".to_owned(), remembered(past));
        assert_eq!(
            verifier.verify("a.b.c", &keys).unwrap_err(),
            TokenError::Malformed,
            "expired beyond the skew: checked again, and it is not a token"
        );
    }

    /// Why the token `change` makes of a good one is refused.
    fn refusal(change: impl FnOnce(&mut Map<String, Value>)) -> String {
        verifier()
            .check(&token_with(change), &rsa_keys())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_refused_token_is_told_which_claim_is_wrong() {
        let set = |claim: &'static str, value: Value| {
            move |c: &mut Map<String, Value>| {
                c.insert(claim.to_owned(), value);
            }
        };
        assert_eq!(
            refusal(|c| {
                c.remove("aud");
            }),
            "the token has no `aud` claim: request it with resource set to this gateway"
        );
        assert_eq!(
            refusal(|c| {
                c.remove("exp");
            }),
            "the token has no `exp` claim: an access token must say when it expires"
        );
        assert_eq!(
            refusal(|c| {
                c.remove("iss");
            }),
            "the token has no `iss` claim: the issuer must name itself in it"
        );
        assert_eq!(
            refusal(set("sub", Value::Null)),
            "the token has no `sub` claim: the issuer must name the caller in it"
        );
        assert_eq!(
            refusal(set("exp", serde_json::json!("2100-01-01"))),
            "the token's `exp` claim must be a number of seconds since 1970, written as a JSON number"
        );
        assert_eq!(
            refusal(set("exp", serde_json::json!(1e30))),
            "the token's `exp` claim must be a number of seconds since 1970 that a clock can reach: it is negative or far too large"
        );
        assert_eq!(
            refusal(set("sub", serde_json::json!(["a"]))),
            "the token's `sub` claim must be a non-empty string naming the caller"
        );
        assert_eq!(
            refusal(set("sub", serde_json::json!("   "))),
            "the token's `sub` claim must be a non-empty string naming the caller"
        );
        assert_eq!(
            refusal(set("exp", serde_json::json!({"at": 1}))),
            "the token's `exp` claim must be a number of seconds since 1970, written as a JSON number"
        );
        assert_eq!(
            refusal(set("aud", serde_json::json!({"resource": RESOURCE}))),
            "the token's `aud` claim must be this resource's identifier, as a string or in a list of strings"
        );
        assert_eq!(
            refusal(set("iss", serde_json::json!(7))),
            TokenError::IssuerNotAString.to_string()
        );
    }

    #[test]
    fn a_tenant_claim_that_is_not_a_tenant_is_refused_never_read_as_no_tenant() {
        let config = crate::config::parse(&format!(
            "identity:\n  oauth:\n    issuer: {ISSUER}\n    resource: {RESOURCE}\n    tenant_claim: org\n"
        ))
        .expect("the test config");
        let verifier = TokenVerifier::new(config.identity.oauth.as_ref().expect("oauth"));
        let keys = rsa_keys();
        let with_org = |org: Option<Value>| {
            verifier.check(
                &token_with(|c| {
                    if let Some(org) = org {
                        c.insert("org".to_owned(), org);
                    }
                }),
                &keys,
            )
        };
        let tenant = |org| with_org(org).map(|v| v.user.tenant.clone());
        assert_eq!(tenant(Some(json!("acme"))), Ok(Some("acme".to_owned())));
        // Left out or null: a caller of no tenant.
        assert_eq!(tenant(None), Ok(None));
        assert_eq!(tenant(Some(Value::Null)), Ok(None));
        // A list of organizations, a number, an empty name: which tenant is meant is not
        // said, and a caller of no tenant would be another caller.
        for org in [
            json!(["acme"]),
            json!(42),
            json!(""),
            json!("  "),
            json!({"id": "acme"}),
        ] {
            let refused = with_org(Some(org.clone())).map(|_| ()).unwrap_err();
            assert_eq!(refused, bad_claim("org", TENANT_NOT_A_STRING), "{org}");
            assert_eq!(
                refused.to_string(),
                "the token's `org` claim must be a non-empty string naming the caller's tenant, or be left out for a caller of no tenant"
            );
        }
        assert_eq!(
            with_org(Some(json!("ac\nme"))).map(|_| ()).unwrap_err(),
            bad_claim("org", ID_NOT_PRINTABLE)
        );
    }

    #[test]
    fn ids_from_a_token_are_printable_and_at_most_256_bytes() {
        assert_eq!(MAX_ID_BYTES, 256);
        assert!(ID_TOO_LONG.contains(&MAX_ID_BYTES.to_string()));
        assert!(ROLE_TOO_LONG.contains(&MAX_ID_BYTES.to_string()));
        for sub in [
            "a\nb",
            "a\u{0}",
            "a\u{7f}",
            "a\u{2028}b",
            "\u{202e}a",
            "a\u{200b}",
        ] {
            let why = refusal(|c| {
                c.insert("sub".to_owned(), Value::String(sub.to_owned()));
            });
            assert!(
                why.contains("`sub` claim contains control characters"),
                "{sub:?}: {why}"
            );
            assert!(!why.contains(sub), "the value is not echoed");
        }
        let verifier = verifier();
        let keys = rsa_keys();
        let sub = |sub: String| {
            token_with(|c| {
                c.insert("sub".to_owned(), Value::String(sub));
            })
        };
        // 256 bytes of two-byte characters pass; one byte more does not.
        assert!(verifier.check(&sub("é".repeat(128)), &keys).is_ok());
        assert_eq!(
            verifier
                .check(&sub(format!("{}a", "é".repeat(128))), &keys)
                .unwrap_err(),
            bad_claim("sub", ID_TOO_LONG)
        );
        // Roles from the roles claim, as a list or as one string.
        assert_eq!(
            refusal(|c| {
                c.insert(
                    "roles".to_owned(),
                    serde_json::json!(["reader", "ad\u{0}min"]),
                );
            }),
            "the token's `roles` claim holds a role with control characters (such as NUL or a line break) or invisible formatting characters: the issuer must send printable text"
        );
        assert_eq!(
            verifier
                .check(
                    &token_with(|c| {
                        c.insert("roles".to_owned(), Value::String("x".repeat(257)));
                    }),
                    &keys
                )
                .unwrap_err(),
            bad_claim("roles", ROLE_TOO_LONG)
        );
    }
}
