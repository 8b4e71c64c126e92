//! Calling an upstream as the caller: a credential per caller instead of one for all.
//!
//! An upstream configured with [`UpstreamConfig::credentials_per_caller`] receives, on
//! each call, the credential a [`CallerCredentials`] source gives for that invocation's
//! caller (a token obtained by exchange at the identity provider, or one from a static
//! map: [`StaticCallerCredentials`]). MCP servers bind sessions to whoever opened them,
//! so each credential gets a connection of its own: the calls of one caller share it,
//! and callers never share one. A credential that changes (a renewed token) opens a new
//! one. Connections are closed when idle, and bounded twice: one caller (a user id in its
//! tenant) holds at most [`PerCaller::max_sessions_per_caller`] (by default
//! [`MAX_CALLER_SESSIONS_PER_CALLER`]), past which *its own* least
//! recently used is closed — so a caller presenting many tokens never closes another
//! caller's connection, nor the upstream session bound to it — and all callers together
//! hold at most [`PerCaller::max_sessions`], past which moka's policy picks one to close.
//!
//! What stays on the upstream's own connection, with [`credential_env`]: discovering
//! its tools, prompts and resources at start-up, and completions. Tools, prompts and
//! resources are called, got and read as the caller.
//!
//! [`credential_env`]: UpstreamConfig::credential_env

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use moka::ops::compute::Op;
use sha2::{Digest, Sha256};
use toolgate_core::external::TypeMapKey;
use toolgate_core::secret::Secret;
use toolgate_core::{ToolError, ToolInvokeContext, User};

use super::UpstreamConfig;

/// The most per-caller connections kept to one upstream, by default.
pub const DEFAULT_MAX_CALLER_SESSIONS: u64 = 1_000;
/// How long a per-caller connection stays open without a call, by default.
pub const DEFAULT_CALLER_SESSION_IDLE: Duration = Duration::from_secs(300);

/// The access token the caller presented, for sources that trade it for an upstream's
/// credential. A host that authenticates callers with tokens provides it to each
/// invocation (`InvokeOptions::provide::<CallerAccessToken>`), or, for `/mcp`, puts it in
/// the HTTP request's extensions, where [`McpServer`](crate::McpServer) finds it. It
/// holds a [`Secret`]: it cannot be printed, and it is never sent upstream.
///
/// ```
/// use toolgate_core::InvokeOptions;
/// use toolgate_core::secret::Secret;
/// use toolgate_mcp::CallerAccessToken;
///
/// let token = CallerAccessToken::new(Secret::new("eyJ…"));
/// let options = InvokeOptions::new().provide::<CallerAccessToken>(token);
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct CallerAccessToken(Arc<Secret>);

impl CallerAccessToken {
    /// Wraps the caller's token.
    pub fn new(token: Secret) -> Self {
        CallerAccessToken(Arc::new(token))
    }

    /// The token.
    pub fn secret(&self) -> &Secret {
        &self.0
    }
}

impl std::fmt::Debug for CallerAccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerAccessToken(..)")
    }
}

impl TypeMapKey for CallerAccessToken {
    type Value = CallerAccessToken;
}

/// Where an upstream's per-caller credential comes from.
///
/// Implemented by the gateway's token exchange and by [`StaticCallerCredentials`]. A
/// source that cannot give the caller a credential answers with an error the caller
/// can act on (a 403 when the caller has none, a 503 when the provider is down); the
/// call then fails without reaching the upstream.
///
/// ```
/// use async_trait::async_trait;
/// use toolgate_core::secret::Secret;
/// use toolgate_core::{ToolError, ToolInvokeContext};
/// use toolgate_mcp::CallerCredentials;
///
/// /// Every caller's credential is read from a vault (here: made up from the id).
/// struct Vault;
///
/// #[async_trait]
/// impl CallerCredentials for Vault {
///     async fn credential(&self, ctx: &ToolInvokeContext) -> Result<Secret, ToolError> {
///         Ok(Secret::new(format!("vault-token-of-{}", ctx.user().id)))
///     }
///
///     fn describe(&self) -> String {
///         "a token from the vault".to_owned()
///     }
/// }
/// ```
#[async_trait]
pub trait CallerCredentials: Send + Sync + 'static {
    /// The credential the upstream receives for `ctx`'s caller, sent as
    /// `Authorization: Bearer …`.
    ///
    /// # Errors
    ///
    /// A [`ToolError`] for the caller: the call does not reach the upstream.
    async fn credential(&self, ctx: &ToolInvokeContext) -> Result<Secret, ToolError>;

    /// What the upstream receives, in a few words, for `toolgate check` and logs (never
    /// a credential).
    fn describe(&self) -> String;

    /// Whether the credential can be had only while the caller's own request is there:
    /// a source that trades the caller's access token ([`CallerAccessToken`]). Such a
    /// credential cannot be had for a call resumed after waiting for approval, which runs
    /// without the token (a waiting call never keeps one), so a host refuses those calls
    /// instead of parking them ([`MissingCredential::WouldWait`]).
    ///
    /// The default, `false`, is for a source that finds the credential from the caller
    /// alone (its user id and tenant), as [`StaticCallerCredentials`] does.
    fn needs_caller_token(&self) -> bool {
        false
    }
}

/// A fixed credential per caller — a user id, within a tenant or without one — e.g. from
/// a secret store at start-up.
///
/// [`new`](Self::new) gives the credentials of callers without a tenant, by user id;
/// [`tenant`](Self::tenant) adds those of the users of one tenant. A caller gets only the
/// entry of its own tenant: `ann` of tenant `globex` never gets the credential of `ann`
/// of tenant `acme`, nor that of `ann` without a tenant (and `ann` without a tenant never
/// gets one of a tenant's). A caller without an entry is refused with a 403
/// `upstream_credential_missing`, and the call never reaches the upstream.
///
/// ```
/// use toolgate_core::secret::Secret;
/// use toolgate_mcp::{StaticCallerCredentials, UpstreamConfig};
///
/// let credentials = StaticCallerCredentials::new([
///     ("ann", Secret::new("token-of-ann")),
///     ("bob", Secret::new("token-of-bob")),
/// ])
/// .tenant("acme", [("ann", Secret::new("token-of-ann-of-acme"))])
/// .tenant("globex", [("ann", Secret::new("token-of-ann-of-globex"))]);
/// assert_eq!(credentials.len(), 4);
/// let crm = UpstreamConfig::http("crm", "https://crm.example/mcp")
///     .credentials_per_caller(credentials);
/// # let _ = crm;
/// ```
///
/// Only the users of tenants:
///
/// ```
/// use toolgate_core::secret::Secret;
/// use toolgate_mcp::StaticCallerCredentials;
///
/// let credentials = StaticCallerCredentials::default()
///     .tenant("acme", [("ann", Secret::new("token-of-ann-of-acme"))]);
/// assert_eq!(credentials.len(), 1);
/// ```
#[derive(Default)]
pub struct StaticCallerCredentials {
    /// By tenant (`None`: callers without one), then by user id.
    by_tenant: HashMap<Option<String>, HashMap<String, Secret>>,
}

impl StaticCallerCredentials {
    /// The credentials of these users, by id: callers *without* a tenant. A caller with a
    /// tenant gets none of these; give theirs with [`tenant`](Self::tenant).
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = (S, Secret)>,
        S: Into<String>,
    {
        let mut credentials = StaticCallerCredentials::default();
        credentials.add(None, entries);
        credentials
    }

    /// The same credentials, and these of the users of `tenant`, by id: only callers of
    /// that tenant get them. Given twice for one tenant, the entries add up (a user given
    /// twice keeps the last).
    ///
    /// ```
    /// use toolgate_core::secret::Secret;
    /// use toolgate_mcp::StaticCallerCredentials;
    ///
    /// let credentials = StaticCallerCredentials::new([("ann", Secret::new("token-of-ann"))])
    ///     .tenant("acme", [("ann", Secret::new("token-of-ann-of-acme"))]);
    /// assert_eq!(credentials.len(), 2);
    /// ```
    #[must_use]
    pub fn tenant<I, S>(mut self, tenant: impl Into<String>, entries: I) -> Self
    where
        I: IntoIterator<Item = (S, Secret)>,
        S: Into<String>,
    {
        self.add(Some(tenant.into()), entries);
        self
    }

    fn add<I, S>(&mut self, tenant: Option<String>, entries: I)
    where
        I: IntoIterator<Item = (S, Secret)>,
        S: Into<String>,
    {
        self.by_tenant
            .entry(tenant)
            .or_default()
            .extend(entries.into_iter().map(|(k, v)| (k.into(), v)));
    }

    /// How many callers have a credential, in every tenant and without one.
    pub fn len(&self) -> usize {
        self.by_tenant.values().map(HashMap::len).sum()
    }

    /// Whether no caller has one.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The credential of `user`: the entry of its id in its own tenant (or without a
    /// tenant, for a caller without one), and no other.
    fn of(&self, user: &User) -> Result<&Secret, MissingCredential> {
        self.by_tenant
            .get(&user.tenant)
            .and_then(|users| users.get(&user.id))
            .ok_or_else(|| MissingCredential::NoEntry {
                user: user.id.clone(),
                tenant: user.tenant.clone(),
            })
    }
}

#[async_trait]
impl CallerCredentials for StaticCallerCredentials {
    async fn credential(&self, ctx: &ToolInvokeContext) -> Result<Secret, ToolError> {
        Ok(self.of(ctx.user())?.clone())
    }

    fn describe(&self) -> String {
        let count = |n: usize, what: &str| match n {
            1 => format!("1 {what}"),
            n => format!("{n} {what}s"),
        };
        let total = count(self.len(), "user");
        let tenants = self.by_tenant.keys().filter(|t| t.is_some()).count();
        if tenants == 0 {
            return format!("a fixed credential per user ({total})");
        }
        let without = self.by_tenant.get(&None).map_or(0, HashMap::len);
        format!(
            "a fixed credential per user ({total}: {} in {}, {without} without a tenant)",
            self.len() - without,
            count(tenants, "tenant"),
        )
    }
}

/// The machine code of a call refused because its caller has no credential for the
/// upstream.
pub const CREDENTIAL_MISSING: &str = "upstream_credential_missing";

/// The error of a caller for whom a source has no credential: a 403, since another
/// caller (or the same one with a token) could make the call. For a source of your own;
/// the built-in cases are [`MissingCredential`].
pub fn missing_credential(message: impl Into<String>) -> ToolError {
    ToolError::abort(message, CREDENTIAL_MISSING, 403)
}

/// Why a call to an upstream called as each caller has no credential. Each case is a 403
/// `upstream_credential_missing` ([`CREDENTIAL_MISSING`]) for the caller, and the call
/// never reaches the upstream.
///
/// ```
/// use toolgate_core::ToolError;
/// use toolgate_mcp::per_caller::MissingCredential;
///
/// let error = ToolError::from(MissingCredential::Waited {
///     tool: "crm_delete".to_owned(),
///     upstream: "crm".to_owned(),
/// });
/// assert_eq!(error.code(), "upstream_credential_missing");
/// assert_eq!(error.status(), 403);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MissingCredential {
    /// A fixed credential per caller, and none for this caller: none for its id in its
    /// own tenant (or without a tenant, for a caller without one).
    #[error("{}", no_entry(.user, .tenant.as_deref()))]
    NoEntry {
        /// The caller's user id.
        user: String,
        /// The caller's tenant, if it has one.
        tenant: Option<String>,
    },
    /// The source trades the caller's access token, and the caller presented none.
    #[error("{}", no_access_token(.user, .tenant.as_deref()))]
    NoAccessToken {
        /// The caller's user id.
        user: String,
        /// The caller's tenant, if it has one.
        tenant: Option<String>,
    },
    /// The call needs a person's approval, and the upstream's credential is the caller's
    /// token exchanged, which is not kept while a call waits: the call is refused at once
    /// rather than parked for an approval that could never let it run.
    #[error(
        "`{tool}` needs a person's approval, and a call waiting for approval cannot be made as its caller through a token-exchange upstream (`{upstream}`): the caller's access token is not kept while a call waits, so it could not be exchanged once the call is approved. The call was refused instead of waiting; ask an operator to exempt `{tool}` from `policies.approval`, or to give `{upstream}` fixed per-user credentials (`as_caller.credentials`) or per-tenant ones (`as_caller.tenant_credentials`)"
    )]
    WouldWait {
        /// The tool called.
        tool: String,
        /// The upstream it belongs to.
        upstream: String,
    },
    /// The call waited for approval and was approved, and the upstream's credential is
    /// the caller's token exchanged, which a waiting call does not keep: there is none
    /// to exchange now, and the call did not run.
    #[error(
        "`{tool}` waited for approval, and a call waiting for approval cannot be made as its caller through a token-exchange upstream (`{upstream}`): the caller's access token is not kept while a call waits, so there was none to exchange when it was approved, and the call did not run. For it to run, an operator must exempt `{tool}` from `policies.approval` or give `{upstream}` fixed per-user credentials (`as_caller.credentials`) or per-tenant ones (`as_caller.tenant_credentials`); its caller can then make the call again"
    )]
    Waited {
        /// The tool called.
        tool: String,
        /// The upstream it belongs to.
        upstream: String,
    },
}

/// The message of [`MissingCredential::NoEntry`].
fn no_entry(user: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!(
            "user `{user}` of tenant `{tenant}` has no credential for this upstream, which gives each caller a fixed credential of its own (an entry without a tenant, or of another tenant, is never used for a caller of a tenant): ask an operator to add one for user `{user}` of tenant `{tenant}` (in a gateway configuration, `as_caller.tenant_credentials.{tenant}.{user}`)"
        ),
        None => format!(
            "user `{user}` has no credential for this upstream, which gives each caller a fixed credential of its own: ask an operator to add one for user `{user}` (in a gateway configuration, `as_caller.credentials.{user}`)"
        ),
    }
}

/// The message of [`MissingCredential::NoAccessToken`].
fn no_access_token(user: &str, tenant: Option<&str>) -> String {
    let caller = match tenant {
        Some(tenant) => format!("user `{user}` of tenant `{tenant}`"),
        None => format!("user `{user}`"),
    };
    format!(
        "this upstream is called as the caller, with the caller's OAuth access token exchanged for one of its own; {caller} did not present an access token (an API key cannot be exchanged): call again with an access token from the identity provider"
    )
}

impl From<MissingCredential> for ToolError {
    fn from(missing: MissingCredential) -> Self {
        missing_credential(missing.to_string())
    }
}

/// A [`CallerCredentials`] source in a configuration, with how many connections it may
/// hold open and for how long.
///
/// ```
/// use std::num::NonZeroUsize;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use toolgate_core::secret::Secret;
/// use toolgate_mcp::{PerCaller, StaticCallerCredentials};
///
/// let credentials = StaticCallerCredentials::new([("ann", Secret::new("token-of-ann"))]);
/// let per_caller = PerCaller {
///     max_sessions: 500,
///     max_sessions_per_caller: NonZeroUsize::new(2).unwrap(),
///     idle: Duration::from_secs(60),
///     ..PerCaller::new(Arc::new(credentials))
/// };
/// ```
///
/// Two configurations are equal when they hold the same source (the same `Arc`) and the
/// same bounds.
#[derive(Clone)]
pub struct PerCaller {
    /// Where each caller's credential comes from.
    pub source: Arc<dyn CallerCredentials>,
    /// The most connections kept open at once, of all callers (default
    /// [`DEFAULT_MAX_CALLER_SESSIONS`]); past it one is closed (callers seen often keep
    /// theirs). One caller holds at most
    /// [`max_sessions_per_caller`](Self::max_sessions_per_caller) of them.
    pub max_sessions: u64,
    /// How long a connection stays open without a call (default
    /// [`DEFAULT_CALLER_SESSION_IDLE`]).
    pub idle: Duration,
    /// The most connections one caller (a user id in its tenant) holds at once (default
    /// [`MAX_CALLER_SESSIONS_PER_CALLER`]): past it the caller's own least recently used
    /// connection is closed, never another caller's. Raise it for callers that use many
    /// clients at once, each with a token of its own; lower it to hold fewer upstream
    /// sessions per caller.
    pub max_sessions_per_caller: NonZeroUsize,
}

impl PerCaller {
    /// `source`, with the default limits.
    pub fn new(source: Arc<dyn CallerCredentials>) -> Self {
        PerCaller {
            source,
            max_sessions: DEFAULT_MAX_CALLER_SESSIONS,
            idle: DEFAULT_CALLER_SESSION_IDLE,
            max_sessions_per_caller: DEFAULT_PER_CALLER,
        }
    }
}

impl PartialEq for PerCaller {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.source, &other.source)
            && self.max_sessions == other.max_sessions
            && self.idle == other.idle
            && self.max_sessions_per_caller == other.max_sessions_per_caller
    }
}

impl std::fmt::Debug for PerCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerCaller")
            .field("source", &self.source.describe())
            .field("max_sessions", &self.max_sessions)
            .field("idle", &self.idle)
            .field("max_sessions_per_caller", &self.max_sessions_per_caller)
            .finish()
    }
}

/// The most connections one caller (a user id in its tenant) holds to one upstream at
/// once, unless [`PerCaller::max_sessions_per_caller`] sets another bound (the gateway's
/// `as_caller.max_sessions_per_caller`). A caller rarely needs more than one, but a
/// renewed token opens a new connection while calls on the old one may still be running,
/// and a user may call from two clients, each with a token of its own: two clients, each
/// in the middle of a renewal, hold four. Past it the caller's own least recently used
/// connection is closed, never another caller's, so one caller presenting many tokens
/// cannot close the connections (and the upstream sessions) of others.
pub const MAX_CALLER_SESSIONS_PER_CALLER: usize = 4;

/// [`MAX_CALLER_SESSIONS_PER_CALLER`], checked not zero when the crate is built.
const DEFAULT_PER_CALLER: NonZeroUsize = NonZeroUsize::new(MAX_CALLER_SESSIONS_PER_CALLER)
    .expect("a caller holds at least one connection");

/// The per-caller connections of one upstream, keyed by caller and by the SHA-256 of the
/// credential (the credential itself is kept only inside its connection). Generic over
/// the connection, which the caller of [`CallerLinks::link`] makes, so that this module
/// does not name the connection type that holds it.
///
/// Two bounds: each caller holds at most [`PerCaller::max_sessions_per_caller`] (its least
/// recently used goes first), and all callers together at most `max_sessions` (moka's
/// policy chooses, the last resort once many callers each hold their few).
pub(crate) struct CallerLinks<L> {
    source: Arc<dyn CallerCredentials>,
    /// The upstream's configuration without the per-caller part.
    config: UpstreamConfig,
    links: moka::sync::Cache<LinkKey, Arc<L>>,
    /// Each caller's connections in `links`; an entry leaves with its connection (the
    /// eviction listener), so this holds no more than `links` does.
    by_caller: Arc<ByCaller<L>>,
}

/// A connection's key: whose it is, and the SHA-256 of its credential.
#[derive(Clone, PartialEq, Eq, Hash)]
struct LinkKey {
    caller: String,
    credential: [u8; 32],
}

/// One caller's connection, as `by_caller` knows it.
struct Held<L> {
    credential: [u8; 32],
    /// Which connection: a key made again after its connection closed is another one.
    link: Weak<L>,
}

impl<L> Held<L> {
    fn is(&self, credential: &[u8; 32], link: &Arc<L>) -> bool {
        self.credential == *credential && std::ptr::eq(self.link.as_ptr(), Arc::as_ptr(link))
    }
}

/// Each caller's connections, least recently used first, at most `max` each.
///
/// Never locked while `links` is called: moka calls the eviction listener, which locks
/// it, from inside its own operations.
struct ByCaller<L> {
    held: Mutex<HashMap<String, Vec<Held<L>>>>,
    max: usize,
}

impl<L> ByCaller<L> {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Held<L>>>> {
        // The listener must not panic; what the table holds stays consistent either way.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `link` as the caller's most recently used, and gives back those of its
    /// connections past the bound, to be closed.
    fn add(&self, key: &LinkKey, link: &Arc<L>) -> Vec<Held<L>> {
        let mut by_caller = self.lock();
        let held = by_caller.entry(key.caller.clone()).or_default();
        // One a concurrent call made for the same credential and that closed since.
        held.retain(|h| h.credential != key.credential);
        held.push(Held {
            credential: key.credential,
            link: Arc::downgrade(link),
        });
        let past = held.len().saturating_sub(self.max);
        held.drain(..past).collect()
    }

    /// Makes `link` the caller's most recently used. Whether the caller still holds it:
    /// not when it was closed past the bound since it was got.
    fn touch(&self, key: &LinkKey, link: &Arc<L>) -> bool {
        let mut by_caller = self.lock();
        let Some(held) = by_caller.get_mut(&key.caller) else {
            return false;
        };
        let Some(at) = held.iter().position(|h| h.is(&key.credential, link)) else {
            return false;
        };
        let used = held.remove(at);
        held.push(used);
        true
    }

    /// Forgets `link`, closed; a caller left without connections leaves the table.
    fn remove(&self, key: &LinkKey, link: &Arc<L>) {
        let mut by_caller = self.lock();
        if let Some(held) = by_caller.get_mut(&key.caller) {
            held.retain(|h| !h.is(&key.credential, link));
            if held.is_empty() {
                by_caller.remove(&key.caller);
            }
        }
    }

    /// How many callers hold a connection.
    #[cfg(test)]
    fn callers(&self) -> usize {
        self.lock().len()
    }
}

impl<L: Send + Sync + 'static> CallerLinks<L> {
    pub fn new(config: &UpstreamConfig, per_caller: &PerCaller) -> Self {
        let mut config = config.clone();
        config.per_caller = None;
        let by_caller = Arc::new(ByCaller {
            held: Mutex::default(),
            max: per_caller.max_sessions_per_caller.get(),
        });
        let listener = Arc::clone(&by_caller);
        CallerLinks {
            source: Arc::clone(&per_caller.source),
            config,
            links: moka::sync::Cache::builder()
                .max_capacity(per_caller.max_sessions.max(1))
                .time_to_idle(per_caller.idle)
                .eviction_listener(move |key: Arc<LinkKey>, link: Arc<L>, _| {
                    listener.remove(&key, &link);
                })
                .build(),
            by_caller,
        }
    }

    /// The connection of `ctx`'s caller; when it has none, `make` makes one (not yet
    /// connected) from the upstream's configuration and the caller's credential.
    pub async fn link(
        &self,
        ctx: &ToolInvokeContext,
        make: impl FnOnce(UpstreamConfig, Secret) -> L,
    ) -> Result<Arc<L>, ToolError> {
        let credential = self.source.credential(ctx).await?;
        let key = LinkKey {
            caller: ctx.user().caller_key().into_owned(),
            credential: Sha256::digest(credential.expose().as_bytes()).into(),
        };
        let mut past_bound = Vec::new();
        let link = self.links.get_with(key.clone(), || {
            let link = Arc::new(make(self.config.clone(), credential));
            // Recorded before the connection is in `links`, so the listener, which
            // runs once it has left, always finds it.
            past_bound = self.by_caller.add(&key, &link);
            link
        });
        for held in past_bound {
            let Some(link) = held.link.upgrade() else {
                continue;
            };
            let key = LinkKey {
                credential: held.credential,
                ..key.clone()
            };
            self.close(key, &link);
        }
        if !self.by_caller.touch(&key, &link) {
            // Closed past the bound by the caller's own calls at once: this call still
            // has it, and the next opens another.
            self.close(key, &link);
        }
        Ok(link)
    }

    /// Closes `link`, if it is still the one of `key` (not one made again since).
    fn close(&self, key: LinkKey, link: &Arc<L>) {
        self.links
            .entry(key)
            .and_compute_with(|current| match current {
                Some(current) if Arc::ptr_eq(current.value(), link) => Op::Remove,
                _ => Op::Nop,
            });
    }

    /// The per-caller connections held now.
    pub fn held_links(&self) -> Vec<Arc<L>> {
        self.links.iter().map(|(_, link)| link).collect()
    }

    /// How many per-caller connections are held (for tests and `toolgate check`).
    pub fn held(&self) -> u64 {
        self.links.run_pending_tasks();
        self.links.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ann and bob without a tenant, ann of `acme`.
    fn credentials() -> StaticCallerCredentials {
        StaticCallerCredentials::new([
            ("ann", Secret::new("token-of-ann")),
            ("bob", Secret::new("token-of-bob")),
        ])
        .tenant("acme", [("ann", Secret::new("token-of-ann-of-acme"))])
    }

    fn ann_of(tenant: &str) -> User {
        User::new("ann").with_tenant(tenant)
    }

    #[test]
    fn a_caller_without_an_access_token_is_named_with_their_tenant() {
        let of = |tenant: Option<&str>| {
            ToolError::from(MissingCredential::NoAccessToken {
                user: "ann".to_owned(),
                tenant: tenant.map(str::to_owned),
            })
            .to_string()
        };
        let message = of(Some("acme"));
        assert!(
            message.contains("user `ann` of tenant `acme` did not present an access token"),
            "{message}"
        );
        let message = of(None);
        assert!(
            message.contains("; user `ann` did not present an access token"),
            "{message}"
        );
    }

    #[test]
    fn a_caller_of_a_tenant_gets_the_entry_of_that_tenant() {
        let credentials = credentials();
        let got = credentials
            .of(&ann_of("acme"))
            .expect("ann of acme has one");
        assert_eq!(got.expose(), "token-of-ann-of-acme");
    }

    #[test]
    fn a_caller_of_another_tenant_is_refused_naming_the_tenant() {
        let credentials = credentials();
        // Neither acme's ann nor the ann without a tenant.
        let Err(missing) = credentials.of(&ann_of("globex")) else {
            panic!("ann of globex has none");
        };
        assert_eq!(
            missing,
            MissingCredential::NoEntry {
                user: "ann".to_owned(),
                tenant: Some("globex".to_owned()),
            }
        );
        let error = ToolError::from(missing);
        assert_eq!(error.code(), CREDENTIAL_MISSING);
        assert_eq!(error.status(), 403);
        let message = error.to_string();
        for words in [
            "user `ann` of tenant `globex` has no credential for this upstream",
            "`as_caller.tenant_credentials.globex.ann`",
        ] {
            assert!(message.contains(words), "{message}");
        }
        assert!(!message.contains("token-of"), "{message}");
        // bob has an entry without a tenant only.
        let bob = User::new("bob").with_tenant("acme");
        assert!(credentials.of(&bob).is_err());
    }

    #[test]
    fn a_caller_without_a_tenant_gets_the_entry_without_one_never_a_tenants() {
        let credentials = credentials();
        let got = credentials.of(&User::new("ann")).expect("ann has one");
        assert_eq!(got.expose(), "token-of-ann");

        let only_tenants = StaticCallerCredentials::default()
            .tenant("acme", [("ann", Secret::new("token-of-ann-of-acme"))]);
        let Err(missing) = only_tenants.of(&User::new("ann")) else {
            panic!("no entry without a tenant");
        };
        let message = missing.to_string();
        assert!(
            message.starts_with("user `ann` has no credential for this upstream"),
            "{message}"
        );
        assert!(message.contains("`as_caller.credentials.ann`"), "{message}");
    }

    #[test]
    fn len_counts_every_tenant_and_describe_holds_no_credential() {
        let credentials = credentials().tenant(
            "globex",
            [
                ("ann", Secret::new("token-of-ann-of-globex")),
                ("cy", Secret::new("token-of-cy-of-globex")),
            ],
        );
        assert_eq!(credentials.len(), 5);
        assert!(!credentials.is_empty());
        assert!(StaticCallerCredentials::default().is_empty());
        let described = credentials.describe();
        assert_eq!(
            described,
            "a fixed credential per user (5 users: 3 in 2 tenants, 2 without a tenant)"
        );
        assert_eq!(
            StaticCallerCredentials::new([("ann", Secret::new("t"))]).describe(),
            "a fixed credential per user (1 user)"
        );
    }

    /// A connection made by [`CallerLinks`], named by whose and which it is.
    struct FakeLink {
        /// The caller's user id.
        user: String,
        /// The credential it was made with.
        credential: String,
        /// Its place in the order connections were made: a connection made again gets a
        /// new one.
        serial: u64,
    }

    /// Each caller's credential is the one the test set last: a caller whose credential
    /// changes on every call presents a flood of distinct ones.
    #[derive(Default)]
    struct SetByTest(std::sync::Mutex<HashMap<String, String>>);

    impl SetByTest {
        fn set(&self, user: &str, credential: impl Into<String>) {
            self.0
                .lock()
                .unwrap()
                .insert(user.to_owned(), credential.into());
        }
    }

    #[async_trait]
    impl CallerCredentials for SetByTest {
        async fn credential(&self, ctx: &ToolInvokeContext) -> Result<Secret, ToolError> {
            let credentials = self.0.lock().unwrap();
            let credential = credentials.get(&ctx.user().id).expect("set by the test");
            Ok(Secret::new(credential.clone()))
        }

        fn describe(&self) -> String {
            "a credential set by the test".to_owned()
        }
    }

    /// The links of an upstream with `per_caller`'s limits, and a pipeline whose tool
    /// `link` answers with the serial of the caller's connection.
    struct Harness {
        source: Arc<SetByTest>,
        links: Arc<CallerLinks<FakeLink>>,
        pipeline: toolgate_core::Pipeline,
    }

    impl Harness {
        fn new(max_sessions: u64, idle: Duration) -> Self {
            Harness::with(|per_caller| PerCaller {
                max_sessions,
                idle,
                ..per_caller
            })
        }

        /// The links of an upstream with the default limits as `limits` changes them.
        fn with(limits: impl FnOnce(PerCaller) -> PerCaller) -> Self {
            let source = Arc::new(SetByTest::default());
            let per_caller = limits(PerCaller::new(
                Arc::clone(&source) as Arc<dyn CallerCredentials>
            ));
            let config = UpstreamConfig::http("crm", "https://crm.example/mcp");
            let links = Arc::new(CallerLinks::new(&config, &per_caller));
            let made = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let of_tool = Arc::clone(&links);
            let tool = toolgate_core::tool::tool_fn_with_context(
                "link",
                "The serial of the caller's connection.",
                move |_: (), ctx: &ToolInvokeContext| {
                    let links = Arc::clone(&of_tool);
                    let made = Arc::clone(&made);
                    Box::pin(async move {
                        let link = links
                            .link(ctx, |_, credential| FakeLink {
                                user: ctx.user().id.clone(),
                                credential: credential.expose().to_owned(),
                                serial: made.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                            })
                            .await?;
                        Ok::<_, ToolError>(link.serial)
                    })
                },
            );
            let pipeline = toolgate_core::Pipeline::builder()
                .tool(tool)
                .build()
                .expect("one tool");
            Harness {
                source,
                links,
                pipeline,
            }
        }

        /// The serial of `user`'s connection for `credential`, made now if it has none.
        async fn call(&self, user: User, credential: &str) -> u64 {
            self.source.set(&user.id, credential);
            let options = toolgate_core::InvokeOptions::new().user(user);
            let serial = self
                .pipeline
                .invoke("link", serde_json::Value::Null, options)
                .await
                .expect("the call gets a connection");
            serial.as_u64().expect("a serial")
        }

        /// The credentials of the connections `user` holds.
        fn held_by(&self, user: &str) -> Vec<String> {
            self.links.held();
            self.links
                .held_links()
                .iter()
                .filter(|link| link.user == user)
                .map(|link| link.credential.clone())
                .collect()
        }
    }

    #[tokio::test]
    async fn one_callers_flood_of_credentials_never_closes_another_callers_connection() {
        let harness = Harness::new(8, DEFAULT_CALLER_SESSION_IDLE);
        let ann = harness.call(User::new("ann"), "token-of-ann").await;
        // mallory presents 100 distinct tokens, each a few times: often enough to pass
        // an admission policy that keeps callers seen often.
        for token in 0..100 {
            for _ in 0..4 {
                harness
                    .call(User::new("mallory"), &format!("token-{token}-of-mallory"))
                    .await;
            }
            harness.links.held();
        }
        assert_eq!(
            harness.call(User::new("ann"), "token-of-ann").await,
            ann,
            "ann's connection is the one made before the flood, not made again"
        );
        assert_eq!(harness.held_by("ann"), ["token-of-ann"]);
        let mallorys = harness.held_by("mallory");
        assert!(
            mallorys.len() <= MAX_CALLER_SESSIONS_PER_CALLER,
            "mallory holds {} connections: {mallorys:?}",
            mallorys.len()
        );
        assert!(
            mallorys.contains(&"token-99-of-mallory".to_owned()),
            "the flooding caller keeps their newest: {mallorys:?}"
        );
    }

    #[tokio::test]
    async fn a_caller_past_the_bound_loses_their_own_least_recently_used_connection() {
        let harness = Harness::new(100, DEFAULT_CALLER_SESSION_IDLE);
        let bob = harness.call(User::new("bob"), "token-of-bob").await;
        let mut serials = Vec::new();
        for token in 0..MAX_CALLER_SESSIONS_PER_CALLER {
            serials.push(
                harness
                    .call(User::new("ann"), &format!("token-{token}"))
                    .await,
            );
        }
        // The first is used again, so the second is the least recently used.
        assert_eq!(harness.call(User::new("ann"), "token-0").await, serials[0]);
        harness.call(User::new("ann"), "token-new").await;

        let mut held = harness.held_by("ann");
        held.sort();
        let mut expected: Vec<String> = (0..MAX_CALLER_SESSIONS_PER_CALLER)
            .filter(|&token| token != 1)
            .map(|token| format!("token-{token}"))
            .chain(["token-new".to_owned()])
            .collect();
        expected.sort();
        assert_eq!(held, expected);
        assert_eq!(harness.call(User::new("ann"), "token-0").await, serials[0]);
        assert_ne!(
            harness.call(User::new("ann"), "token-1").await,
            serials[1],
            "the least recently used connection was closed, and is made again"
        );
        assert_eq!(harness.call(User::new("bob"), "token-of-bob").await, bob);
    }

    #[tokio::test]
    async fn a_caller_bound_to_two_connections_loses_their_least_recently_used_past_two() {
        let two = NonZeroUsize::new(2).unwrap();
        let harness = Harness::with(|per_caller| PerCaller {
            max_sessions_per_caller: two,
            ..per_caller
        });
        let bob = harness.call(User::new("bob"), "token-of-bob").await;
        let first = harness.call(User::new("ann"), "token-0").await;
        let second = harness.call(User::new("ann"), "token-1").await;
        // The first is used again, so the second is the least recently used.
        assert_eq!(harness.call(User::new("ann"), "token-0").await, first);
        harness.call(User::new("ann"), "token-2").await;

        let mut held = harness.held_by("ann");
        held.sort();
        assert_eq!(held, ["token-0", "token-2"], "two, the bound, and no more");
        assert_eq!(harness.call(User::new("ann"), "token-0").await, first);
        assert_ne!(
            harness.call(User::new("ann"), "token-1").await,
            second,
            "the least recently used connection was closed, and is made again"
        );
        assert_eq!(harness.call(User::new("bob"), "token-of-bob").await, bob);
    }

    #[tokio::test]
    async fn a_caller_leaves_the_table_with_their_last_connection() {
        let harness = Harness::new(3, Duration::from_millis(50));
        for user in 0..12 {
            let user = format!("user-{user}");
            harness
                .call(User::new(&user), &format!("token-of-{user}"))
                .await;
        }
        // Past `max_sessions`, callers' connections close, and with them their entries.
        assert!(harness.links.held() <= 3);
        let mut holding: Vec<String> = harness
            .links
            .held_links()
            .iter()
            .map(|link| link.user.clone())
            .collect();
        holding.sort();
        holding.dedup();
        assert_eq!(harness.links.by_caller.callers(), holding.len());

        // Closed as idle.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(harness.links.held(), 0);
        assert_eq!(harness.links.by_caller.callers(), 0);
    }
}
