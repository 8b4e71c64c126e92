//! `identity:` — how callers prove who they are: API keys (`users:`), OAuth 2.1 access
//! tokens (JWTs from an issuer), or both, chosen per route.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde::de::Deserializer;

use super::{ConfigError, EnvString, values};

/// `identity:` — which credentials each route accepts, and the OAuth issuer if any.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// The OAuth 2.1 authorization server whose access tokens are accepted (none when
    /// absent: API keys only).
    #[serde(default)]
    pub oauth: Option<OAuthConfig>,
    /// Which credentials `/v1` and `/mcp` accept (default: API keys, and OAuth tokens when
    /// `oauth` is set).
    #[serde(default)]
    pub routes: RouteCredentials,
    /// How many wrong credentials one client address may present before its requests are
    /// refused unchecked for a while.
    #[serde(default)]
    pub failed_credentials: FailedCredentialsConfig,
}

/// `identity.failed_credentials:` — a limit on wrong credentials per client address
/// (see [`crate::identity::failures`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailedCredentialsConfig {
    /// The wrong credentials (API keys, tokens, console sign-ins) one address may present
    /// in a burst (default 30); `0` turns the limit off.
    pub max: u32,
    /// How long a whole burst takes to come back: one wrong credential every
    /// `per / max` (default `1m`).
    #[serde(with = "values::duration")]
    pub per: Duration,
    /// The most client addresses tracked at once (default 100,000).
    pub max_addresses: usize,
}

impl Default for FailedCredentialsConfig {
    fn default() -> Self {
        FailedCredentialsConfig {
            max: 30,
            per: Duration::from_secs(60),
            max_addresses: 100_000,
        }
    }
}

/// The credentials each route accepts.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteCredentials {
    /// What `/v1` accepts.
    #[serde(default)]
    pub v1: Option<Vec<CredentialKind>>,
    /// What `/mcp` accepts.
    #[serde(default)]
    pub mcp: Option<Vec<CredentialKind>>,
}

/// A kind of credential a caller can present as `Authorization: Bearer …`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// A key of `users:`, compared by its SHA-256.
    ApiKey,
    /// An access token (JWT) issued by `identity.oauth.issuer` for this gateway.
    Oauth,
}

impl CredentialKind {
    /// How `toolgate check` names it.
    pub fn name(self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "api_key",
            CredentialKind::Oauth => "oauth",
        }
    }
}

/// `identity.oauth:` — the gateway as an OAuth 2.1 resource server.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The issuer, exactly as tokens carry it in `iss` (e.g. `https://login.example.com`).
    /// Its signing keys are found through `<issuer>/.well-known/openid-configuration`.
    /// Must be `https`, except on a loopback address.
    pub issuer: EnvString,
    /// This gateway's public address (e.g. `https://tools.example.com`): the resource
    /// identifier (RFC 8707) tokens must be issued for. A token's `aud` must be it, or it
    /// followed by `/mcp`.
    pub resource: EnvString,
    /// The signature algorithms accepted (default `[RS256]`). Only asymmetric ones exist
    /// here: `none` and the HMAC algorithms are refused.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<JwtAlgorithm>,
    /// How far clocks may disagree when `exp` and `nbf` are checked (default `30s`, at
    /// most `5m`).
    #[serde(default = "default_clock_skew", with = "values::duration")]
    pub clock_skew: Duration,
    /// The deadline of one fetch of the issuer's keys, discovery document and key set
    /// together (default `5s`): a request that waits for keys waits this long at most.
    #[serde(default = "default_fetch_timeout", with = "values::duration")]
    pub fetch_timeout: Duration,
    /// The least time between two fetches of the keys (default `30s`): a token signed
    /// with a key not yet known makes the gateway fetch the keys again, at most this
    /// often, so that a flood of made-up key ids cannot hammer the issuer.
    #[serde(default = "default_refresh_interval", with = "values::duration")]
    pub refresh_interval: Duration,
    /// How long fetched keys are used before they are fetched again in the background,
    /// so that a key the issuer withdrew stops working (default `1h`).
    #[serde(default = "default_keys_max_age", with = "values::duration")]
    pub keys_max_age: Duration,
    /// The claim holding the caller's roles: a list of strings or one space-separated
    /// string (default `roles`; a missing claim means no roles from it).
    #[serde(default = "default_roles_claim")]
    pub roles_claim: String,
    /// The claim holding the caller's tenant, a non-empty string. A token without it (or
    /// with `null`) is a caller of no tenant; a token whose claim is another shape (a list,
    /// a number, an empty string) is refused, never read as "no tenant".
    #[serde(default)]
    pub tenant_claim: Option<String>,
    /// Roles granted by scopes (`scope` claim, space-separated, or `scp` list), e.g.
    /// `{ "tools:call": [caller] }`.
    #[serde(default)]
    pub scope_roles: BTreeMap<String, Vec<String>>,
    /// The scopes a token must carry on each route; a token without them is answered
    /// 403 `insufficient_scope`.
    #[serde(default)]
    pub required_scopes: RequiredScopes,
    /// The scopes advertised in the protected resource metadata, on every route (default:
    /// each route's `required_scopes`; a client that asks for every advertised scope is
    /// then never steered to one that grants roles).
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// The longest token accepted (default `8KiB`); longer ones are refused unread.
    #[serde(default = "default_max_token_bytes")]
    pub max_token_bytes: values::ByteSize,
    /// Whether a token whose `sub` is the id of a user in `users:` (an API-key user) is
    /// that user (default `false`: such a token is refused, whatever its tenant claim and
    /// the tenant of that user: the id is compared in every tenant). Per-user budgets, sessions
    /// and cached results follow the id, so a subject the issuer lets someone else choose
    /// must not take over an API-key user's; set this only when the issuer's subjects are
    /// the same people as those ids.
    #[serde(default)]
    pub subjects_are_api_key_users: bool,
    /// Whether a token must say in its header that it is an access token (`typ: at+jwt`,
    /// RFC 9068), so that no other JWT of the issuer's with this audience passes (default
    /// `false`: many issuers write `typ: JWT` on their access tokens; turn it on when
    /// yours writes `at+jwt`).
    #[serde(default)]
    pub require_access_token_type: bool,
}

/// The scopes an OAuth token needs, per route and per tool.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequiredScopes {
    /// For anything under `/v1`.
    #[serde(default)]
    pub v1: Vec<String>,
    /// For anything on `/mcp`.
    #[serde(default)]
    pub mcp: Vec<String>,
    /// For calling a tool, whichever the route (by tool name). A token without them is
    /// refused with `insufficient_scope` (403), and is not shown the tool in listings.
    /// Callers with API keys are not held to them: authorization rules govern those.
    #[serde(default)]
    pub tools: BTreeMap<String, Vec<String>>,
}

/// An asymmetric JWS algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JwtAlgorithm(pub jsonwebtoken::Algorithm);

impl<'de> Deserialize<'de> for JwtAlgorithm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use jsonwebtoken::Algorithm::*;
        values::parse_str(deserializer, |text| match text.trim() {
            "RS256" => Ok(JwtAlgorithm(RS256)),
            "RS384" => Ok(JwtAlgorithm(RS384)),
            "RS512" => Ok(JwtAlgorithm(RS512)),
            "PS256" => Ok(JwtAlgorithm(PS256)),
            "PS384" => Ok(JwtAlgorithm(PS384)),
            "PS512" => Ok(JwtAlgorithm(PS512)),
            "ES256" => Ok(JwtAlgorithm(ES256)),
            "ES384" => Ok(JwtAlgorithm(ES384)),
            "EdDSA" => Ok(JwtAlgorithm(EdDSA)),
            other @ ("none" | "HS256" | "HS384" | "HS512") => Err(format!(
                "`{other}` is not accepted: a resource server checks signatures with the issuer's public keys, so only asymmetric algorithms (RS256, PS256, ES256, EdDSA, …) can be used"
            )),
            other => Err(format!(
                "`{other}` is not a JWS algorithm this gateway knows: use RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA"
            )),
        })
    }
}

fn default_algorithms() -> Vec<JwtAlgorithm> {
    vec![JwtAlgorithm(jsonwebtoken::Algorithm::RS256)]
}
fn default_clock_skew() -> Duration {
    Duration::from_secs(30)
}
fn default_fetch_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_refresh_interval() -> Duration {
    Duration::from_secs(30)
}
fn default_keys_max_age() -> Duration {
    Duration::from_secs(3600)
}
fn default_roles_claim() -> String {
    "roles".to_owned()
}
fn default_max_token_bytes() -> values::ByteSize {
    values::ByteSize(8 * 1024)
}

/// The longest `clock_skew` accepted: more would keep expired tokens alive.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

impl IdentityConfig {
    /// What `/v1` accepts, defaults applied.
    pub fn v1(&self) -> Vec<CredentialKind> {
        self.resolved(self.routes.v1.as_deref())
    }

    /// What `/mcp` accepts, defaults applied.
    pub fn mcp(&self) -> Vec<CredentialKind> {
        self.resolved(self.routes.mcp.as_deref())
    }

    fn resolved(&self, chosen: Option<&[CredentialKind]>) -> Vec<CredentialKind> {
        match chosen {
            Some(kinds) => {
                let mut kinds = kinds.to_vec();
                kinds.sort();
                kinds.dedup();
                kinds
            }
            None if self.oauth.is_some() => vec![CredentialKind::ApiKey, CredentialKind::Oauth],
            None => vec![CredentialKind::ApiKey],
        }
    }

    /// Checks that need several fields at once.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        for (route, chosen) in [("v1", &self.routes.v1), ("mcp", &self.routes.mcp)] {
            let Some(kinds) = chosen else { continue };
            if kinds.is_empty() {
                return Err(ConfigError::invalid(
                    format!("identity.routes.{route}"),
                    "a route must accept at least one kind of credential: `[api_key]`, `[oauth]` or `[api_key, oauth]`",
                ));
            }
            if kinds.contains(&CredentialKind::Oauth) && self.oauth.is_none() {
                return Err(ConfigError::invalid(
                    format!("identity.routes.{route}"),
                    "the route accepts `oauth` but there is no `identity.oauth` section: add one with the `issuer` and this gateway's `resource` address",
                ));
            }
        }
        let Some(oauth) = &self.oauth else {
            return Ok(());
        };
        check_url("identity.oauth.issuer", &oauth.issuer.0, true)?;
        check_url("identity.oauth.resource", &oauth.resource.0, false)?;
        if oauth.algorithms.is_empty() {
            return Err(ConfigError::invalid(
                "identity.oauth.algorithms",
                "list at least one algorithm, e.g. `[RS256]`",
            ));
        }
        if oauth.clock_skew > MAX_CLOCK_SKEW {
            return Err(ConfigError::invalid(
                "identity.oauth.clock_skew",
                "at most `5m`: a larger skew keeps expired tokens working; fix the clocks (NTP) instead",
            ));
        }
        if oauth.fetch_timeout.is_zero() || oauth.refresh_interval.is_zero() {
            return Err(ConfigError::invalid(
                "identity.oauth",
                "`fetch_timeout` and `refresh_interval` must be longer than zero, e.g. `5s` and `30s`",
            ));
        }
        if oauth.max_token_bytes.0 < 512 {
            return Err(ConfigError::invalid(
                "identity.oauth.max_token_bytes",
                "at least `512B`: signed tokens are rarely shorter than a kilobyte",
            ));
        }
        Ok(())
    }
}

/// An absolute `http(s)` URL without query or fragment; `https` unless on loopback when
/// `secure` (keys fetched over plain HTTP could be swapped on the way).
fn check_url(field: &str, text: &str, secure: bool) -> Result<(), ConfigError> {
    let url = url::Url::parse(text).map_err(|e| {
        ConfigError::invalid(
            field,
            format!(
                "`{text}` is not an absolute URL ({e}): write e.g. `https://login.example.com`"
            ),
        )
    })?;
    if !matches!(url.scheme(), "https" | "http")
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(ConfigError::invalid(
            field,
            format!("`{text}` must be an `https://` URL without `?query` or `#fragment`"),
        ));
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name == "localhost",
        None => false,
    };
    if secure && url.scheme() == "http" && !loopback {
        return Err(ConfigError::invalid(
            field,
            format!(
                "`{text}` must use `https`: the signing keys fetched from it decide who may call (plain `http` is accepted only on a loopback address, for tests)"
            ),
        ));
    }
    Ok(())
}

impl OAuthConfig {
    /// The issuer without a trailing `/` doubled, as the discovery URL is formed from it.
    pub fn discovery_url(&self) -> String {
        format!(
            "{}/.well-known/openid-configuration",
            self.issuer.0.trim_end_matches('/')
        )
    }

    /// This gateway's resource identifier, without a trailing `/`.
    pub fn resource_base(&self) -> &str {
        self.resource.0.trim_end_matches('/')
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{CredentialKind, parse};

    fn oauth(extra: &str) -> String {
        format!(
            "identity:\n  oauth:\n    issuer: https://login.example.com\n    resource: https://tools.example.com\n{extra}"
        )
    }

    #[test]
    fn none_and_hmac_algorithms_are_refused_with_the_reason() {
        for alg in ["none", "HS256", "HS512"] {
            let error = parse(&oauth(&format!("    algorithms: [RS256, {alg}]\n"))).unwrap_err();
            assert_eq!(error.field(), "identity.oauth.algorithms[1]", "{alg}");
            assert!(
                error.to_string().contains("only asymmetric algorithms"),
                "{error}"
            );
        }
        let config = parse(&oauth("    algorithms: [ES256, EdDSA]\n")).unwrap();
        assert_eq!(config.identity.oauth.unwrap().algorithms.len(), 2);
    }

    #[test]
    fn a_plain_http_issuer_is_refused_unless_on_loopback() {
        let text = "identity:\n  oauth:\n    issuer: http://login.example.com\n    resource: https://tools.example.com\n";
        let error = parse(text).unwrap_err();
        assert_eq!(error.field(), "identity.oauth.issuer");
        assert!(error.to_string().contains("must use `https`"), "{error}");
        let loopback = text.replace("login.example.com", "127.0.0.1:9000");
        assert!(parse(&loopback).is_ok());
    }

    #[test]
    fn a_route_accepting_oauth_needs_an_issuer() {
        let error = parse("identity:\n  routes:\n    mcp: [oauth]\n").unwrap_err();
        assert_eq!(error.field(), "identity.routes.mcp");
        let error = parse("identity:\n  routes:\n    v1: []\n").unwrap_err();
        assert_eq!(error.field(), "identity.routes.v1");
    }

    #[test]
    fn routes_accept_api_keys_and_tokens_by_default_once_there_is_an_issuer() {
        let none = parse("").unwrap();
        assert_eq!(none.identity.mcp(), [CredentialKind::ApiKey]);
        let both = parse(&oauth("")).unwrap();
        assert_eq!(
            both.identity.v1(),
            [CredentialKind::ApiKey, CredentialKind::Oauth]
        );
        let only = parse(&(oauth("") + "  routes:\n    mcp: [oauth]\n")).unwrap();
        assert_eq!(only.identity.mcp(), [CredentialKind::Oauth]);
    }

    #[test]
    fn a_clock_skew_over_five_minutes_is_refused() {
        let error = parse(&oauth("    clock_skew: 10m\n")).unwrap_err();
        assert_eq!(error.field(), "identity.oauth.clock_skew");
    }
}

/// `upstreams[].as_caller:` — call an HTTP upstream as each caller, with a credential of
/// the caller's own, instead of the one `credential_env` names (which still serves to
/// discover the upstream's tools at start-up). Either `token_exchange`, or fixed
/// credentials: `credentials` (callers without a tenant, by user id) and/or
/// `tenant_credentials` (callers of a tenant, by tenant and then user id).
///
/// A caller gets only the fixed credential of its own tenant: `ann` of tenant `globex`
/// never gets the one of `ann` of `acme`, nor the one of `ann` under `credentials`, which
/// serves only callers without a tenant.
///
/// ```yaml
/// upstreams:
///   - name: crm
///     url: https://crm.example/mcp
///     credential_env: CRM_DISCOVERY_TOKEN
///     as_caller:
///       token_exchange:
///         audience: https://crm.example/mcp
///         client_id: toolgate
///         client_secret: ${TOOLGATE_CLIENT_SECRET}
///   - name: tickets
///     url: https://tickets.example/mcp
///     as_caller:
///       credentials:                   # callers without a tenant
///         ops: ${OPS_TICKETS_TOKEN}
///       tenant_credentials:            # callers of a tenant
///         acme:
///           ann: ${ACME_ANN_TICKETS_TOKEN}
///         globex:
///           ann: ${GLOBEX_ANN_TICKETS_TOKEN}
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AsCallerConfig {
    /// Trade the caller's access token at `identity.oauth.issuer` for one whose audience
    /// is the upstream (RFC 8693). Callers with an API key cannot call the upstream.
    pub token_exchange: Option<TokenExchangeConfig>,
    /// A fixed credential per user id of callers *without* a tenant
    /// (`ann: ${ANN_CRM_TOKEN}`); a caller without one cannot call the upstream. A caller
    /// with a tenant never gets one of these: see `tenant_credentials`.
    pub credentials: Option<BTreeMap<String, EnvString>>,
    /// A fixed credential per user id of the callers of each tenant
    /// (`acme: { ann: ${ACME_ANN_CRM_TOKEN} }`); only callers of that tenant get them.
    pub tenant_credentials: Option<BTreeMap<String, BTreeMap<String, EnvString>>>,
    /// The most connections to the upstream kept open, one per caller credential
    /// (default 1000; past it one is closed, callers seen often keeping theirs).
    pub max_sessions: Option<u64>,
    /// The most of those connections one caller (a user id in its tenant) holds at once
    /// (default 4: two clients, each renewing its token); past it the caller's own least
    /// recently used is closed, never another caller's.
    pub max_sessions_per_caller: Option<usize>,
    /// How long a caller's connection stays open without a call (default `5m`).
    #[serde(default, with = "values::opt_duration")]
    pub idle: Option<Duration>,
}

/// `as_caller.token_exchange:` — where and how callers' tokens are exchanged.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenExchangeConfig {
    /// The upstream's resource identifier: the audience of the tokens it receives. It is
    /// sent in the exchange request both as `resource` (RFC 8707) and as `audience`
    /// (RFC 8693), as issuers read one or the other.
    pub audience: EnvString,
    /// The gateway's client id at the provider.
    pub client_id: EnvString,
    /// Its secret (`${VAR}`; scrubbed from every log line and answer).
    pub client_secret: EnvString,
    /// The scope to ask for (default: the caller's).
    pub scope: Option<String>,
    /// The provider's token endpoint (default: the `token_endpoint` of the issuer's
    /// discovery document).
    pub token_endpoint: Option<EnvString>,
    /// The deadline of one exchange (default `5s`).
    #[serde(default, with = "values::opt_duration")]
    pub timeout: Option<Duration>,
    /// How long before its expiry an exchanged token is exchanged again (default `30s`).
    #[serde(default, with = "values::opt_duration")]
    pub refresh_before: Option<Duration>,
}

impl AsCallerConfig {
    /// The fixed credentials, if any: those of `credentials` for callers without a
    /// tenant, and those of `tenant_credentials` for the callers of each tenant.
    pub fn fixed_credentials(&self) -> impl Iterator<Item = (Option<&str>, &str, &EnvString)> {
        let untenanted = self.credentials.iter().flatten();
        let tenanted = self.tenant_credentials.iter().flatten();
        untenanted
            .map(|(user, credential)| (None, user.as_str(), credential))
            .chain(tenanted.flat_map(|(tenant, users)| {
                users.iter().map(move |(user, credential)| {
                    (Some(tenant.as_str()), user.as_str(), credential)
                })
            }))
    }

    /// Checks the section of upstream `index`; `oauth` is whether tokens are accepted.
    pub(crate) fn check(&self, index: usize, http: bool, oauth: bool) -> Result<(), ConfigError> {
        let field = |name: &str| format!("upstreams[{index}].as_caller{name}");
        if !http {
            return Err(ConfigError::invalid(
                field(""),
                "only an HTTP upstream (`url`) can be called as each caller: a stdio program would be one process per caller",
            ));
        }
        let fixed = self.credentials.is_some() || self.tenant_credentials.is_some();
        match (&self.token_exchange, fixed) {
            (Some(_), true) | (None, false) => {
                return Err(ConfigError::invalid(
                    field(""),
                    "set exactly one of `token_exchange` (trade the caller's token at the identity provider) or fixed credentials: `credentials` (per user id, for callers without a tenant) and/or `tenant_credentials` (per tenant and user id)",
                ));
            }
            (Some(exchange), false) => {
                if !oauth {
                    return Err(ConfigError::invalid(
                        field(".token_exchange"),
                        "token exchange trades the caller's OAuth access token: set `identity.oauth` so callers present one",
                    ));
                }
                for (name, value) in [
                    ("audience", &exchange.audience),
                    ("client_id", &exchange.client_id),
                    ("client_secret", &exchange.client_secret),
                ] {
                    if value.0.is_empty() {
                        return Err(ConfigError::invalid(
                            field(&format!(".token_exchange.{name}")),
                            "this may not be empty",
                        ));
                    }
                }
                if exchange.timeout == Some(Duration::ZERO) {
                    return Err(ConfigError::invalid(
                        field(".token_exchange.timeout"),
                        "a deadline must be longer than zero",
                    ));
                }
            }
            (None, true) => {
                let empty = self.fixed_credentials().find(|(_, _, v)| v.0.is_empty());
                if let Some((tenant, user, _)) = empty {
                    let path = match tenant {
                        Some(tenant) => format!(".tenant_credentials.{tenant}.{user}"),
                        None => format!(".credentials.{user}"),
                    };
                    return Err(ConfigError::invalid(
                        field(&path),
                        "the credential is empty: is its variable set?",
                    ));
                }
            }
        }
        if self.max_sessions == Some(0) {
            return Err(ConfigError::invalid(
                field(".max_sessions"),
                "at least one connection must be allowed",
            ));
        }
        if self.max_sessions_per_caller == Some(0) {
            return Err(ConfigError::invalid(
                field(".max_sessions_per_caller"),
                "must be at least 1, e.g. `4`: each caller needs a connection of their own to call the upstream",
            ));
        }
        if self.idle == Some(Duration::ZERO) {
            return Err(ConfigError::invalid(
                field(".idle"),
                "a connection must be allowed to stay open for longer than zero",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod as_caller_tests {
    use crate::config::parse;

    fn upstream(as_caller: &str) -> String {
        format!(
            "upstreams:\n  - {{ name: crm, url: \"http://127.0.0.1:9/mcp\", as_caller: {as_caller} }}\n"
        )
    }

    #[test]
    fn a_bound_per_caller_of_zero_connections_is_refused_saying_at_least_one() {
        let config = parse(&upstream(
            "{ credentials: { ann: t }, max_sessions_per_caller: 2 }",
        ))
        .expect("a bound of two");
        let as_caller = config.upstreams[0].as_caller.as_ref().expect("as_caller");
        assert_eq!(as_caller.max_sessions_per_caller, Some(2));

        let zero = parse(&upstream(
            "{ credentials: { ann: t }, max_sessions_per_caller: 0 }",
        ))
        .unwrap_err();
        assert_eq!(
            zero.field(),
            "upstreams[0].as_caller.max_sessions_per_caller"
        );
        assert!(zero.to_string().contains("must be at least 1"), "{zero}");
    }

    #[test]
    fn tenant_credentials_are_fixed_credentials_beside_or_instead_of_credentials() {
        let both = "{ credentials: { ops: t1 }, tenant_credentials: { acme: { ann: t2 }, globex: { ann: t3, bob: t4 } } }";
        let config = parse(&upstream(both)).expect("both kinds of fixed credentials");
        let as_caller = config.upstreams[0].as_caller.as_ref().expect("as_caller");
        let fixed: Vec<_> = as_caller
            .fixed_credentials()
            .map(|(tenant, user, credential)| (tenant, user, credential.0.as_str()))
            .collect();
        assert_eq!(
            fixed,
            [
                (None, "ops", "t1"),
                (Some("acme"), "ann", "t2"),
                (Some("globex"), "ann", "t3"),
                (Some("globex"), "bob", "t4"),
            ]
        );
        parse(&upstream("{ tenant_credentials: { acme: { ann: t } } }"))
            .expect("tenant credentials alone");
        // The held credentials, scrubbed from logs and audit records, include them.
        let held = crate::secrets::held(&config);
        for credential in ["t1", "t2", "t3", "t4"] {
            assert!(
                held.iter().any(|s| s.expose() == credential),
                "{credential} is not held"
            );
        }
    }

    #[test]
    fn credentials_for_callers_without_a_tenant_are_warned_of_where_callers_have_tenants() {
        let users = |tenant: &str| {
            format!(
                "users:\n  - {{ id: ops, key_sha256: \"{}\"{tenant} }}\n",
                "a".repeat(64)
            )
        };
        let fixed = upstream("{ credentials: { ops: t1 } }");
        let warned = |text: String| parse(&text).unwrap().warnings();
        assert!(warned(format!("{}{fixed}", users(""))).is_empty());
        let warnings = warned(format!("{}{fixed}", users(", tenant: acme")));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("`upstreams[0].as_caller.credentials` are the credentials of callers without a tenant")
                && warnings[0].contains("tenant_credentials"),
            "{}",
            warnings[0]
        );
        let tenanted = upstream("{ tenant_credentials: { acme: { ops: t1 } } }");
        assert!(warned(format!("{}{tenanted}", users(", tenant: acme"))).is_empty());
    }

    #[test]
    fn tenant_credentials_are_checked_like_credentials() {
        let oauth = "identity:\n  oauth: { issuer: \"https://id.example\", resource: \"https://tools.example\" }\n";
        let exchange =
            "token_exchange: { audience: \"https://crm\", client_id: gw, client_secret: s }";
        let cases = [
            (
                upstream(&format!(
                    "{{ {exchange}, tenant_credentials: {{ acme: {{ ann: t }} }} }}"
                )),
                "upstreams[0].as_caller",
                "exactly one",
            ),
            (
                upstream(&format!(
                    "{{ {exchange}, credentials: {{ ops: t }}, tenant_credentials: {{ acme: {{ ann: t }} }} }}"
                )),
                "upstreams[0].as_caller",
                "tenant_credentials",
            ),
            (
                upstream("{ tenant_credentials: { acme: { ann: \"\" } } }"),
                "upstreams[0].as_caller.tenant_credentials.acme.ann",
                "empty",
            ),
            (
                upstream(
                    "{ credentials: { ops: t }, tenant_credentials: { acme: { ann: t, bob: \"\" } } }",
                ),
                "upstreams[0].as_caller.tenant_credentials.acme.bob",
                "empty",
            ),
        ];
        for (text, field, words) in cases {
            let error = parse(&format!("{oauth}{text}")).unwrap_err();
            assert_eq!(error.field(), field, "{text}");
            assert!(error.to_string().contains(words), "{error}");
        }
    }
}
