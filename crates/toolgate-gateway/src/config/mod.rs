//! The gateway's configuration file: one YAML document (see `docs/gateway.md`).
//!
//! Every struct refuses unknown fields, so a misspelt policy key stops the gateway rather
//! than being silently ignored. Values that may carry secrets (key hashes, URLs, upstream
//! environment) accept `${VAR}` and `${VAR:-default}` references to the environment.

mod env;
mod identity;
mod load;
mod origin;
pub(crate) mod paths;
mod policies;
mod telemetry;
mod upstream;
mod values;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use toolgate_core::User;

pub use env::expand_env;
pub use identity::{
    AsCallerConfig, CredentialKind, FailedCredentialsConfig, IdentityConfig, JwtAlgorithm,
    OAuthConfig, RequiredScopes, RouteCredentials, TokenExchangeConfig,
};
pub use load::{ConfigError, load_file, parse, reload_file};
pub(crate) use load::{Located, in_plain_words as yaml_in_plain_words, name_fault, strip_location};
pub use origin::WebOrigin;
pub(crate) use paths::io_in_words;
pub(crate) use policies::describe_budgets;
pub use policies::{
    ApprovalPolicy, AuthorizationPolicy, BudgetPartition, BudgetPolicy, CachePolicy, CedarPolicy,
    ConcurrencyPolicy, CostSpec, MAX_UNITS, OnBackendErrorName, OutputLimitPolicy, PartitionName,
    Policies, RateLimitPolicy, RedactionModeName, RedactionPattern, RedactionPolicy, RetryPolicy,
    RuleEntry, TimeoutPolicy, WebhookConfig, WebhookEventName, WebhookFormatName,
};
pub use telemetry::{LogsConfig, OtlpConfig, OtlpProtocol, TelemetryConfig};
pub use upstream::UpstreamEntry;
pub use values::{
    ByteSize, ClusterNodeList, EnvPath, EnvString, KeyHash, RateSpec, RedisTlsFiles, StateConfig,
    StateUrl, TrustedProxy,
};

/// The whole configuration file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where and how the gateway listens.
    #[serde(default)]
    pub server: ServerConfig,
    /// Where shared policy state lives: `memory` (the default), a `redis://` URL or a Redis
    /// Cluster (`redis+cluster://…`, or the `cluster:` list), alone or with Redis options.
    #[serde(default, deserialize_with = "StateConfig::deserialize_any")]
    pub state: StateConfig,
    /// Built-in tools and per-tool labels.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// Remote MCP servers whose tools the gateway imports.
    #[serde(default)]
    pub upstreams: Vec<UpstreamEntry>,
    /// Who may call, with which key and roles.
    #[serde(default)]
    pub users: Vec<UserEntry>,
    /// How callers prove who they are: API keys, OAuth access tokens, or both, per route.
    #[serde(default)]
    pub identity: IdentityConfig,
    /// The policies every call runs through.
    #[serde(default)]
    pub policies: Policies,
    /// Where audit records go (none when absent).
    #[serde(default)]
    pub audit: Option<AuditConfig>,
    /// Usage statistics kept in a JSON file (none when absent).
    #[serde(default)]
    pub stats: Option<StatsConfig>,
    /// Log format and level.
    #[serde(default)]
    pub logging: LoggingConfig,
    /// Pinning of imported tool definitions (off when absent).
    #[serde(default)]
    pub pins: Option<PinsConfig>,
    /// OpenTelemetry trace export (off when absent).
    #[serde(default)]
    pub telemetry: Option<TelemetryConfig>,
    /// The operator console at `/console` (off when absent).
    #[serde(default)]
    pub console: Option<ConsoleConfig>,
    /// The configuration generation approvals are bound to: the digest of the `policies:`
    /// section as written (its canonical JSON form), so that replicas with the same
    /// policies agree and a change of users, upstreams or server settings does not void
    /// the calls waiting for approval. Set by [`parse`]; not a field of the file.
    #[serde(skip)]
    pub generation: String,
}

/// `pins:` — where the fingerprints of imported tool definitions are kept (docs/gateway.md,
/// `upstreams`: a tool whose definition changed is held back until an approver accepts it).
///
/// Either `path` (a file of this gateway's own) or `shared: true` (on Redis, with the
/// policies' `state`, where every replica shares them): one of the two.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinsConfig {
    /// The pin file (`${VAR}` references are expanded); made when missing.
    #[serde(default)]
    pub path: Option<EnvPath>,
    /// Keep the pins on Redis with the policies' state (`state.url`), shared by every
    /// replica: a tool pinned, changed or accepted through one is so for all.
    #[serde(default)]
    pub shared: bool,
}

/// The default of `server.max_header_bytes`: 64 KiB, far more than ordinary requests carry
/// (a few KiB, with cookies and tokens) and within what proxies in front of the gateway
/// commonly pass.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;

/// The bounds of `server.max_header_bytes`: at least 1 KiB, at most 256 KiB.
pub const MAX_HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=256 * 1024;

/// `server:` — listening address, limits and shutdown.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The address to listen on (default `127.0.0.1:8080`; `--listen` overrides it).
    pub listen: SocketAddr,
    /// The largest request body accepted (default `1MiB`); larger bodies get 413.
    pub body_limit: ByteSize,
    /// The most bytes of headers a request may carry (default `64KiB`, from `1KiB` to
    /// `256KiB`; read at start), counted as each field's name and value plus 4 bytes; a
    /// request with more is answered 431 `headers_too_large`.
    pub max_header_bytes: ByteSize,
    /// The deadline of every call (default `30s`); a client may ask for less with the
    /// `x-toolgate-timeout-ms` header, never more.
    #[serde(with = "values::duration")]
    pub request_timeout: Duration,
    /// How long in-flight calls may take to finish after SIGTERM (default `10s`).
    #[serde(with = "values::duration")]
    pub shutdown_grace: Duration,
    /// Whether the MCP streamable HTTP endpoint is mounted at `/mcp` (default true).
    pub mcp: bool,
    /// How many calls of one `/v1/tool-calls` batch run at once (default 8).
    pub batch_concurrency: usize,
    /// The most calls one batch may carry (default 64).
    pub max_batch: usize,
    /// How long a client may take to send a request's line and headers, from its first
    /// byte (or from connecting, for the first request); the connection is closed after
    /// it (default `10s`).
    #[serde(with = "values::duration")]
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body, from the end of its headers;
    /// the request is answered 408 and the connection closed after it (default `30s`).
    #[serde(with = "values::duration")]
    pub body_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request; it is closed after
    /// it (default `60s`).
    #[serde(with = "values::duration")]
    pub idle_timeout: Duration,
    /// The most connections open at once (default 10,000); a connection past it is
    /// answered 503 and closed at once.
    pub max_connections: u32,
    /// The most connections one client address may hold open at once (default 1,000; an
    /// IPv6 address counts by its /64), so that one host cannot take every connection; a
    /// connection past it is answered 429 and closed at once. Connections from
    /// `trusted_proxies` are not counted: a proxy carries many clients.
    pub max_connections_per_address: u32,
    /// The browser origins (`scheme://host[:port]`) whose pages may call `/mcp`, besides
    /// this host's loopback ones. A request with any other `Origin` header is answered
    /// 403; one without it (not from a browser) passes.
    pub mcp_allowed_origins: Vec<WebOrigin>,
    /// The key that seals the `requestState` of multi-round MCP calls (2026-07-28) the
    /// gateway answers: at least 32 characters, the same on every replica behind one
    /// address (`mcp_state_key: ${MCP_STATE_KEY}`). Without one, a random key of this
    /// process is used: rounds survive reloads but not restarts, and need sticky routing
    /// between replicas.
    pub mcp_state_key: Option<EnvString>,
    /// How many MCP sessions of `/mcp` each user, and all users together, may hold, and
    /// how long an unused one is kept.
    pub mcp_sessions: McpSessionLimits,
    /// The proxies (addresses or networks) whose `X-Forwarded-For` names the client of a
    /// request they pass on (default: this host's loopback addresses). A client's address
    /// is what `identity.failed_credentials` counts by.
    pub trusted_proxies: Vec<TrustedProxy>,
    /// How long a counter or histogram of `/metrics` may go without an update before it
    /// leaves `/metrics` (default `1h`, at least `1s`; read at start): the series of tools
    /// a reload or an upstream removed do not pile up. A series that leaves and is updated
    /// again comes back counting from zero, which Prometheus reads as a counter reset.
    /// Gauges stay.
    #[serde(with = "values::duration")]
    pub metrics_idle_timeout: Duration,
}

/// `server.mcp_sessions:` — the bounds of the MCP sessions of `/mcp`.
///
/// A session costs the gateway about 125 KiB (docs/performance.md), so the defaults bound
/// what one key can take to about 4 MiB and what all of them can take to about 500 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSessionLimits {
    /// The most sessions one user may hold (default 32): far more than the one session per
    /// agent or editor window a client keeps, far less than a flood. Past it `initialize`
    /// is answered 429.
    pub per_user: usize,
    /// The most sessions all users together may hold (default 4,096). Past it
    /// `initialize` is answered 503; no session is evicted to make room.
    pub max: usize,
    /// How long a session with no request and no response streaming is kept (default
    /// `5m`, as long as the MCP server keeps a silent session: memory is bounded by the
    /// caps, and a shorter time would end the sessions of clients paced by a person);
    /// after it the session ends and its slot is free.
    #[serde(with = "values::duration")]
    pub idle_timeout: Duration,
    /// The most `subscriptions/listen` requests (MCP 2026-07-28) one user may have open at
    /// once (default 8, a quarter of `per_user`). A listen request belongs to no session,
    /// so `per_user` does not bound it; past it a new one is answered 429
    /// (`too_many_listens`) until one of the user's ends. A reload applies a new bound at
    /// once, to the requests open before too.
    pub listens_per_user: usize,
}

impl Default for McpSessionLimits {
    fn default() -> Self {
        McpSessionLimits {
            per_user: 32,
            max: 4096,
            idle_timeout: Duration::from_secs(300),
            listens_per_user: toolgate_mcp::DEFAULT_LISTENS_PER_USER,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            body_limit: ByteSize(1024 * 1024),
            max_header_bytes: ByteSize(DEFAULT_MAX_HEADER_BYTES),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            mcp: true,
            batch_concurrency: 8,
            max_batch: 64,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            mcp_allowed_origins: Vec::new(),
            mcp_state_key: None,
            mcp_sessions: McpSessionLimits::default(),
            trusted_proxies: TrustedProxy::loopback(),
            metrics_idle_timeout: Duration::from_secs(60 * 60),
        }
    }
}

/// The tools compiled into the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    /// `calculator`: evaluates an arithmetic expression.
    Calculator,
    /// `echo`: returns its text.
    Echo,
    /// `current_time`: the current UTC time.
    CurrentTime,
    /// `sleep`: waits a number of milliseconds (for testing timeouts and drains).
    Sleep,
}

/// `tools:` — which built-in tools to serve, and labels for any tool.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// The built-in tools to serve.
    #[serde(default)]
    pub builtin: Vec<BuiltinTool>,
    /// Labels by tool name (built-in or imported).
    #[serde(default)]
    pub labels: BTreeMap<String, ToolLabels>,
}

/// Labels of one tool. `category`, `speed` and `safety` become tags
/// (`category:math`, …) that authorization rules and approval can match on.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolLabels {
    /// What the tool is about, e.g. `math`.
    pub category: Option<String>,
    /// How fast it answers, e.g. `fast`.
    pub speed: Option<String>,
    /// How safe it is to call, e.g. `safe` or `dangerous`.
    pub safety: Option<String>,
    /// More tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Behaviour hints that override the tool's own.
    #[serde(default)]
    pub annotations: Option<AnnotationLabels>,
}

/// Behaviour hints of a tool.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnnotationLabels {
    /// The tool changes nothing.
    pub read_only: bool,
    /// Calling it twice with the same input has the effect of calling it once.
    pub idempotent: bool,
    /// It may destroy data.
    pub destructive: bool,
    /// It reaches outside systems.
    pub open_world: bool,
}

/// One user: an id, the SHA-256 of their API key, roles and a tenant.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// The user's id.
    pub id: String,
    /// The SHA-256 of the user's API key, in hex (`toolgate hash-key` prints it).
    pub key_sha256: KeyHash,
    /// The user's roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The tenant the user belongs to.
    pub tenant: Option<String>,
}

impl UserEntry {
    /// The user this entry makes: its id, roles and tenant.
    pub fn user(&self) -> User {
        let user = User::new(self.id.clone()).with_roles(self.roles.clone());
        match &self.tenant {
            Some(tenant) => user.with_tenant(tenant.clone()),
            None => user,
        }
    }
}

/// Why [`Config::user_named`] found no one user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UserNotFound {
    /// No user of `users:` has the id.
    #[error("no user `{id}` in the configuration's `users`")]
    Unknown {
        /// The id asked for.
        id: String,
    },
    /// Users have the id, none in the tenant asked for.
    #[error("no user `{id}` of tenant `{tenant}` in the configuration's `users` (`{id}` is a user of {}): name one of those", tenants_named(.tenants))]
    NotInTenant {
        /// The id asked for.
        id: String,
        /// The tenant asked for.
        tenant: String,
        /// The tenants the id is a user of (`None`: a user of no tenant).
        tenants: Vec<Option<String>>,
    },
    /// Users of several tenants have the id, none of no tenant, and no tenant was asked
    /// for.
    #[error("`{id}` is a user of {}, each a different caller: name the tenant too", tenants_named(.tenants))]
    SeveralTenants {
        /// The id asked for.
        id: String,
        /// The tenants the id is a user of.
        tenants: Vec<Option<String>>,
    },
}

/// `tenant `acme` and tenant `globex``, or `no tenant` for `None`.
fn tenants_named(tenants: &[Option<String>]) -> String {
    let named: Vec<String> = (tenants.iter())
        .map(|t| match t {
            Some(tenant) => format!("tenant `{tenant}`"),
            None => "no tenant".to_owned(),
        })
        .collect();
    match named.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => named.join(""),
    }
}

impl Config {
    /// The user of `users:` that a command or a test names by id (`toolgate mcp --user`,
    /// `toolgate tools --user`, a policy test's `user:`). A user id is unique only within
    /// its tenant, so with `tenant` it is the user of that id in that tenant; without, the
    /// user of that id and no tenant, or else the only user of that id.
    ///
    /// # Errors
    ///
    /// [`UserNotFound`] when no user has the id, none has it in `tenant`, or, without
    /// `tenant`, users of several tenants have it and none of no tenant.
    ///
    /// ```
    /// use toolgate_gateway::config::{UserNotFound, parse};
    ///
    /// let config = parse(&format!(
    ///     "users:\n  - {{id: ann, key_sha256: \"{}\", tenant: acme}}\n  - {{id: ann, key_sha256: \"{}\", tenant: globex}}\n",
    ///     "ab".repeat(32),
    ///     "cd".repeat(32),
    /// ))?;
    /// let ann = config.user_named("ann", Some("globex")).unwrap();
    /// assert_eq!(ann.tenant.as_deref(), Some("globex"));
    /// assert!(matches!(config.user_named("ann", None), Err(UserNotFound::SeveralTenants { .. })));
    /// # Ok::<(), toolgate_gateway::config::ConfigError>(())
    /// ```
    pub fn user_named(&self, id: &str, tenant: Option<&str>) -> Result<&UserEntry, UserNotFound> {
        let with_id: Vec<&UserEntry> = self.users.iter().filter(|u| u.id == id).collect();
        if with_id.is_empty() {
            return Err(UserNotFound::Unknown { id: id.to_owned() });
        }
        let tenants = || with_id.iter().map(|u| u.tenant.clone()).collect();
        match (tenant, with_id.as_slice()) {
            (Some(tenant), _) => (with_id.iter())
                .find(|u| u.tenant.as_deref() == Some(tenant))
                .copied()
                .ok_or_else(|| UserNotFound::NotInTenant {
                    id: id.to_owned(),
                    tenant: tenant.to_owned(),
                    tenants: tenants(),
                }),
            (None, [only]) => Ok(only),
            (None, several) => (several.iter())
                .find(|u| u.tenant.is_none())
                .copied()
                .ok_or_else(|| UserNotFound::SeveralTenants {
                    id: id.to_owned(),
                    tenants: tenants(),
                }),
        }
    }

    /// What is allowed but likely a mistake, one message per finding, in plain words that
    /// say what to change: `toolgate check` prints them and the gateway logs them when it
    /// starts or reloads. None stops the gateway.
    pub fn warnings(&self) -> Vec<String> {
        let callers_have_tenants = self.users.iter().any(|u| u.tenant.is_some())
            || (self.identity.oauth.as_ref()).is_some_and(|o| o.tenant_claim.is_some());
        let mut warnings = (self.policies.authorization.as_ref())
            .map(|a| a.warnings(callers_have_tenants))
            .unwrap_or_default();
        if callers_have_tenants {
            let untenanted = self.upstreams.iter().enumerate().filter(|(_, upstream)| {
                (upstream.as_caller.as_ref())
                    .and_then(|a| a.credentials.as_ref())
                    .is_some_and(|c| !c.is_empty())
            });
            warnings.extend(untenanted.map(|(i, _)| {
                format!(
                    "`upstreams[{i}].as_caller.credentials` are the credentials of callers without a tenant, while callers here have tenants (a user has `tenant:`, or `identity.oauth.tenant_claim` is set): a caller with a tenant gets only an entry of `tenant_credentials` (`tenant_credentials: {{ acme: {{ ann: ... }} }}`) and is refused the upstream otherwise"
                )
            }));
        }
        warnings
    }
}

/// Where audit records go.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "sink", rename_all = "snake_case")]
pub enum AuditConfig {
    /// One `tracing` event per record, in the gateway's log.
    Log {
        /// Include input and output values (default false: hashes only).
        #[serde(default)]
        include_values: bool,
        /// Record every stage's duration (default false: metrics carry durations).
        #[serde(default)]
        stage_timings: bool,
        /// The key input and output fingerprints are taken under (HMAC-SHA-256), the
        /// same on every replica: `${AUDIT_HASH_KEY}`, at least 16 characters. Without
        /// it, a random key is made at start, and fingerprints correlate only within one
        /// process.
        hash_key: Option<EnvString>,
    },
    /// One JSON line per record, appended to a file in batches.
    File {
        /// The file (`${VAR}` references are expanded).
        path: EnvPath,
        /// How often buffered records are written out (default `1s`; also on shutdown
        /// and reload). `0s` writes every record through before the call answers.
        #[serde(default, with = "values::opt_duration")]
        flush_every: Option<Duration>,
        /// Record every stage's duration (default false: metrics carry durations).
        #[serde(default)]
        stage_timings: bool,
        /// Include input and output values (default false: hashes only).
        #[serde(default)]
        include_values: bool,
        /// As for the `log` sink.
        hash_key: Option<EnvString>,
        /// The Ed25519 key that signs the chain's checkpoints: a 32-byte seed in
        /// base64 from a secret, `${AUDIT_SIGNING_KEY}` (`openssl rand -base64 32`).
        /// Without it the lines are chained but no checkpoint is written.
        signing_key: Option<EnvString>,
        /// A checkpoint after this many records (default 1000).
        checkpoint_every: Option<u64>,
        /// A checkpoint after the first record this long after the last one (default
        /// `60s`).
        #[serde(default, with = "values::opt_duration")]
        checkpoint_after: Option<Duration>,
        /// Start a new file when this one reaches this size (e.g. `100MiB`); the full
        /// one is renamed `PATH.UNIX_MS`, and the chain goes on in the new file.
        rotate_bytes: Option<ByteSize>,
        /// Start a new file at the first record this long after the file was opened.
        #[serde(default, with = "values::opt_duration")]
        rotate_after: Option<Duration>,
    },
}

impl AuditConfig {
    /// The key that signs checkpoints of the `file` sink, if configured.
    pub fn signing_key(&self) -> Option<&EnvString> {
        match self {
            AuditConfig::File { signing_key, .. } => signing_key.as_ref(),
            AuditConfig::Log { .. } => None,
        }
    }

    /// The configured fingerprint key, whichever the sink.
    pub fn hash_key(&self) -> Option<&EnvString> {
        match self {
            AuditConfig::Log { hash_key, .. } | AuditConfig::File { hash_key, .. } => {
                hash_key.as_ref()
            }
        }
    }
}

/// Usage statistics in a JSON file, saved periodically and on shutdown.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsConfig {
    /// The file (`${VAR}` references are expanded): not a directory, in a directory that
    /// exists and that the gateway can write in ([`Config::check_paths`]).
    pub path: EnvPath,
    /// How often to save (default 30 s).
    #[serde(default = "default_autosave", with = "values::duration")]
    pub autosave: Duration,
}

fn default_autosave() -> Duration {
    Duration::from_secs(30)
}

/// `console:` — the operator console served at `/console` (see `docs/console.md`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// How long a console session lasts after sign-in (default `8h`); the person signs in
    /// again after it.
    #[serde(with = "values::duration")]
    pub session_ttl: Duration,
    /// The most console sessions open at once (default 1,000); a sign-in past it is
    /// refused until one ends or expires.
    pub max_sessions: usize,
    /// The most console sessions one user may have open (default 8); their oldest ends
    /// when they sign in once more.
    pub max_sessions_per_user: usize,
    /// Sign-in through the issuer of `identity.oauth` (authorization code with PKCE), as
    /// this client; API keys only when absent.
    pub oauth: Option<ConsoleOAuthConfig>,
}

/// `console.oauth` — the console as a client of the issuer of `identity.oauth`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleOAuthConfig {
    /// The client id the issuer knows the console by.
    pub client_id: String,
    /// Its secret, for a confidential client (sent with HTTP Basic authentication); none
    /// for a public client, which PKCE alone protects.
    #[serde(default)]
    pub client_secret: Option<EnvString>,
    /// The scopes asked for (default `[openid]`); the access token must still be one
    /// `identity.oauth` accepts on `/v1`.
    #[serde(default = "default_console_scopes")]
    pub scopes: Vec<String>,
}

fn default_console_scopes() -> Vec<String> {
    vec!["openid".to_owned()]
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            session_ttl: Duration::from_secs(8 * 3600),
            max_sessions: 1000,
            max_sessions_per_user: 8,
            oauth: None,
        }
    }
}

/// Log output.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// `text` (default) or `json`.
    pub format: LogFormat,
    /// A `tracing` filter, e.g. `info` or `toolgate=debug` (default `info`; `RUST_LOG`
    /// overrides it).
    pub level: String,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            format: LogFormat::Text,
            level: "info".to_owned(),
        }
    }
}

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}
