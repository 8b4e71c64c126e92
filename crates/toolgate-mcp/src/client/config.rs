//! How an upstream MCP server is configured.

use std::sync::Arc;
use std::time::Duration;

use toolgate_core::secret::Secret;
use toolgate_core::tool::ToolDefinition;

use super::bounds::UpstreamBounds;
use super::per_caller::{CallerCredentials, PerCaller};
use super::secrets::ScrubbedToo;

/// How to reach an upstream MCP server.
///
/// Its `Debug` output leaves out what may be a credential: environment values, and the
/// URL's user, password and query.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamTransport {
    /// Start a program and speak MCP over its stdin and stdout. It is started again
    /// (with backoff) when it dies.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for the program. It inherits nothing of the host's
        /// environment but [`STDIO_PASSED_ENV`](crate::STDIO_PASSED_ENV) and
        /// `inherit_env`; these override both.
        env: Vec<(String, String)>,
        /// Further variables of the host's environment passed on to the program, when
        /// set (see [`UpstreamConfig::inherit_env`]).
        inherit_env: Vec<String>,
    },
    /// Connect to a streamable HTTP endpoint (plain HTTP; meant for loopback or a
    /// TLS-terminating sidecar).
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:9000/mcp`.
        url: String,
    },
}

impl std::fmt::Debug for UpstreamTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                inherit_env,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("inherit_env", inherit_env)
                .finish(),
            UpstreamTransport::Http { url } => {
                let shown = match url::Url::parse(url) {
                    Ok(mut parsed) => {
                        let _ = parsed.set_username("");
                        let _ = parsed.set_password(None);
                        parsed.set_query(None);
                        parsed.to_string()
                    }
                    Err(_) => "(not a valid URL)".to_owned(),
                };
                f.debug_struct("Http").field("url", &shown).finish()
            }
        }
    }
}

/// Backoff between attempts to reach an upstream that is down: `initial`, doubled per
/// failed attempt, capped at `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The wait after `failures` consecutive failed attempts (at least one).
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolgate_mcp::Backoff;
    ///
    /// let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(1) };
    /// assert_eq!(b.delay(1), Duration::from_millis(100));
    /// assert_eq!(b.delay(3), Duration::from_millis(400));
    /// assert_eq!(b.delay(30), Duration::from_secs(1));
    /// ```
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.initial.saturating_mul(1 << doublings).min(self.max)
    }
}

/// The most requests in flight to one HTTP upstream at once, by default
/// ([`UpstreamConfig::max_connections`]): four times the busiest load toolgate is measured
/// at (64 connections, docs/performance.md), so such a load never waits, and eight times
/// the idle connections kept per host, while a flood of thousands of callers holds at
/// most 256 descriptors per upstream — a quarter of the usual 1,024 a process may open
/// before it raises its limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// One upstream MCP server whose tools are imported.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_mcp::{UpstreamConfig, UpstreamTransport};
///
/// let github = UpstreamConfig::http("github", "http://127.0.0.1:9000/mcp")
///     .credential_env("GITHUB_MCP_TOKEN")
///     .prefix("gh.")
///     .call_timeout(Duration::from_secs(20));
/// let files = UpstreamConfig::stdio("files", "mcp-files", ["--root", "/srv"]);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// The server's name: in [`ToolSource::Mcp`](toolgate_core::tool::ToolSource::Mcp), logs
    /// and errors.
    pub name: String,
    /// How to reach it.
    pub transport: UpstreamTransport,
    /// The environment variable holding the credential toolgate presents to the
    /// upstream: sent as `Authorization: Bearer …` over HTTP, passed to a stdio program
    /// in the same variable (whatever [`UpstreamConfig::inherit_env`] names). The inbound
    /// caller's own token is never forwarded.
    pub credential_env: Option<String>,
    /// Prepended to every imported tool's name. Without one, an imported tool whose name
    /// is taken is refused ([`McpError::Collision`](crate::McpError::Collision)).
    pub prefix: Option<String>,
    /// Tools declared in configuration. When given, only these are imported, with these
    /// definitions; differences from what the server reports are logged as warnings,
    /// and they are registered even when the server is down at start-up.
    pub declared_tools: Vec<ToolDefinition>,
    /// The deadline of one call (the invocation's own deadline applies when earlier).
    pub call_timeout: Duration,
    /// The deadline of one connection attempt, handshake included.
    pub connect_timeout: Duration,
    /// Backoff between connection attempts.
    pub backoff: Backoff,
    /// The most requests in flight to the upstream at once, hence the most connections
    /// open to it for them (HTTP upstreams; see [`max_connections`](Self::max_connections)).
    /// `None`, the default: [`DEFAULT_MAX_CONNECTIONS`]. A bound set, even to the default,
    /// is refused for a stdio upstream, which has no such bound.
    pub max_connections: Option<usize>,
    /// The most of the upstream's requests in flight one caller may hold at once (HTTP
    /// upstreams; see [`max_connections_per_caller`](Self::max_connections_per_caller)).
    /// `None`, the default: half of [`max_in_flight`](Self::max_in_flight), rounded up.
    /// Refused for a stdio upstream, as [`max_connections`](Self::max_connections) is.
    pub max_connections_per_caller: Option<usize>,
    /// Whether arguments are checked against each imported tool's input schema before
    /// the call leaves (on by default): a wrong argument is the caller's `invalid_input`
    /// naming the field, not the upstream's failure.
    pub validate_arguments: bool,
    /// Whether toolgate first asks the server for the 2026-07-28 revision
    /// (`server/discover`, on by default), falling back to 2025-11-25 (`initialize`) when
    /// it answers that it does not know the method. Turn it off for a server that does
    /// not answer unknown methods at all (the probe would wait out the connect timeout).
    pub discover: bool,
    /// Where each caller's credential comes from, when the upstream is called as the
    /// caller rather than with [`credential_env`](Self::credential_env) (HTTP only; see
    /// [`per_caller`](crate::per_caller)).
    pub per_caller: Option<PerCaller>,
    /// Credentials held elsewhere that what this upstream sends is scrubbed of as well as
    /// its own ([`scrub_also`](Self::scrub_also)).
    pub(crate) scrubbed_too: ScrubbedToo,
    /// Where the bound on its requests in flight is kept across its connections
    /// ([`bounds`](Self::bounds)).
    pub(crate) bounds: Option<UpstreamBounds>,
}

impl UpstreamConfig {
    fn new(name: impl Into<String>, transport: UpstreamTransport) -> Self {
        UpstreamConfig {
            name: name.into(),
            transport,
            credential_env: None,
            prefix: None,
            declared_tools: Vec::new(),
            call_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            max_connections: None,
            max_connections_per_caller: None,
            validate_arguments: true,
            discover: true,
            per_caller: None,
            scrubbed_too: ScrubbedToo::default(),
            bounds: None,
        }
    }

    /// Scrubs `secrets` — credentials the host holds for others: other upstreams',
    /// callers', its own — from everything this upstream sends, as its own
    /// [`secrets`](Self::secrets) are: results, errors, notifications, its requests to
    /// callers, the definitions it lists, its stderr. An upstream can come by another's
    /// credential (a stdio program runs as the host's user and reads its environment; an
    /// HTTP upstream called as several callers sees each one's); it cannot hand it on.
    ///
    /// ```
    /// use toolgate_core::secret::Secret;
    /// use toolgate_mcp::UpstreamConfig;
    ///
    /// let search_token = Secret::new("srch-T0ken-of-search-77");
    /// let files = UpstreamConfig::stdio("files", "mcp-files", ["--root", "/srv"])
    ///     .scrub_also([search_token]);
    /// ```
    #[must_use]
    pub fn scrub_also(mut self, secrets: impl IntoIterator<Item = Secret>) -> Self {
        let mut held = self.scrubbed_too.0.as_ref().clone();
        held.extend(secrets);
        self.scrubbed_too = ScrubbedToo(Arc::new(held));
        self
    }

    /// An upstream started as a program speaking MCP over stdio.
    pub fn stdio<I, S>(name: impl Into<String>, command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(
            name,
            UpstreamTransport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: Vec::new(),
                inherit_env: Vec::new(),
            },
        )
    }

    /// An upstream reached over streamable HTTP.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(name, UpstreamTransport::Http { url: url.into() })
    }

    /// Adds an environment variable for a stdio program (ignored over HTTP).
    ///
    /// The program inherits nothing else of the host's environment but
    /// [`STDIO_PASSED_ENV`](crate::STDIO_PASSED_ENV) and what
    /// [`inherit_env`](Self::inherit_env) names; a variable set here overrides those.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let UpstreamTransport::Stdio { env, .. } = &mut self.transport {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Passes these variables of the host's environment on to a stdio program, when set
    /// (ignored over HTTP).
    ///
    /// A stdio program starts with a cleared environment: only
    /// [`STDIO_PASSED_ENV`](crate::STDIO_PASSED_ENV) (`PATH`, `HOME`, the locale…), the
    /// variables named here, those set with [`env`](Self::env) and the
    /// [`credential_env`](Self::credential_env) variable reach it, so that a third
    /// party's server does not read the host's own secrets. A value is read each time the
    /// program is started. A name that is not one of letters, digits and `_` (not
    /// starting with a digit) is refused by [`Upstream::connect`](crate::Upstream::connect).
    /// A variable named like a credential (see
    /// [`is_credential_name`](crate::is_credential_name)) is scrubbed from what the
    /// upstream sends, as its configured credential is.
    ///
    /// ```
    /// use toolgate_mcp::UpstreamConfig;
    ///
    /// let github = UpstreamConfig::stdio("github", "npx", ["-y", "@modelcontextprotocol/server-github"])
    ///     .inherit_env(["GITHUB_TOKEN", "HTTPS_PROXY"]);
    /// ```
    #[must_use]
    pub fn inherit_env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let UpstreamTransport::Stdio { inherit_env, .. } = &mut self.transport {
            inherit_env.extend(names.into_iter().map(Into::into));
        }
        self
    }

    /// Reads the credential from this environment variable.
    #[must_use]
    pub fn credential_env(mut self, var: impl Into<String>) -> Self {
        self.credential_env = Some(var.into());
        self
    }

    /// Prefixes imported tool names.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Declares a tool (see [`declared_tools`](Self::declared_tools)).
    #[must_use]
    pub fn declare(mut self, tool: ToolDefinition) -> Self {
        self.declared_tools.push(tool);
        self
    }

    /// Sets the deadline of one call.
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Keeps the bound on the requests in flight to this upstream (its
    /// [`max_connections`](Self::max_connections) and each caller's share) in `bounds`, so
    /// that an upstream connected again with the same configuration and the same `bounds`
    /// — a host's reload — shares one bound with this one while both carry requests,
    /// instead of each having its own ([`UpstreamBounds`]). Without it, each
    /// [`Upstream::connect`](crate::Upstream::connect) starts a bound of its own.
    ///
    /// ```
    /// use toolgate_mcp::{UpstreamBounds, UpstreamConfig};
    ///
    /// let bounds = UpstreamBounds::new();
    /// let crm = UpstreamConfig::http("crm", "http://127.0.0.1:9001/mcp").bounds(&bounds);
    /// ```
    #[must_use]
    pub fn bounds(mut self, bounds: &UpstreamBounds) -> Self {
        self.bounds = Some(bounds.clone());
        self
    }

    /// Sets the deadline of one connection attempt.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the most requests in flight to an HTTP upstream at once, all of its
    /// connections together — the shared one and each caller's own (default
    /// [`DEFAULT_MAX_CONNECTIONS`]). Over HTTP/1 each request in flight holds a TCP
    /// connection until its answer's stream is read, so this bounds the connections the
    /// upstream is sent requests on, as Envoy's per-cluster `max_requests` /
    /// `max_connections` do. A request past the bound waits for one to end, never past
    /// its call's deadline: a call still waiting then fails with 503 `upstream_busy`,
    /// which names the bound and tells the caller to try again. One caller may hold at most
    /// its share of the bound ([`max_connections_per_caller`](Self::max_connections_per_caller)).
    ///
    /// A call whose connection is being made — a caller's own link's first `initialize`,
    /// a reconnect — and whose attempt runs out of time while one of its requests still
    /// waits for a place fails with 503 `upstream_busy` too, and the attempt is not
    /// counted as a failed one: the upstream is at its bound, not down, and the backoff
    /// does not grow with the load.
    ///
    /// Counted: every request POSTed to the upstream (calls, lists, reads, `initialize`),
    /// and a request's stream resumed with a GET (`Last-Event-ID`) after the upstream
    /// ended it before the answer, which keeps the request's place. Not counted:
    /// notifications and answers to the upstream's own requests (answered at once; an
    /// answer a call waits for must never wait behind it), a session set up again after
    /// the upstream forgot it and the requests sent again then, when no place is free
    /// (the calls holding the places wait on them), and the standalone stream (GET),
    /// which is long-lived and bounded with the sessions. A stdio upstream has one pipe,
    /// and no such bound.
    ///
    /// 0 is refused by [`Upstream::connect`](crate::Upstream::connect), and so is any bound
    /// set on a stdio upstream — [`DEFAULT_MAX_CONNECTIONS`] too: a bound given where none
    /// applies is a mistake in the configuration, whatever its value.
    ///
    /// ```
    /// use toolgate_mcp::{DEFAULT_MAX_CONNECTIONS, UpstreamConfig};
    ///
    /// let search = UpstreamConfig::http("search", "http://127.0.0.1:9000/mcp").max_connections(64);
    /// assert_eq!(search.max_connections, Some(64));
    /// assert_eq!(search.max_in_flight(), 64);
    /// let crm = UpstreamConfig::http("crm", "http://127.0.0.1:9001/mcp");
    /// assert_eq!(crm.max_connections, None);
    /// assert_eq!(crm.max_in_flight(), DEFAULT_MAX_CONNECTIONS);
    /// ```
    #[must_use]
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = Some(max);
        self
    }

    /// The most requests in flight to the upstream at once: the bound
    /// [`max_connections`](Self::max_connections) set, else [`DEFAULT_MAX_CONNECTIONS`].
    pub fn max_in_flight(&self) -> usize {
        self.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS)
    }

    /// Sets the most of an HTTP upstream's requests in flight one caller may hold at once
    /// (default: half of [`max_in_flight`](Self::max_in_flight), rounded up — 128 of the
    /// default 256). The caller is the invocation's authenticated user
    /// ([`User::caller_key`](toolgate_core::User::caller_key): the id in its tenant). Without
    /// a share, one caller — hundreds of calls, or lists and reads — could hold every place
    /// of [`max_connections`](Self::max_connections), and every other caller of the
    /// upstream would wait, and fail with 503 `upstream_busy` at its deadline.
    ///
    /// A caller's request past its share waits, in order, for one of the caller's own
    /// requests to finish, holding none of the upstream's places meanwhile, and never past
    /// its deadline: still waiting then, it fails with 503 `upstream_share_used` (with a
    /// `Retry-After`), which tells the caller that its own requests hold it up and how many
    /// it may have. Calls and a caller's other requests — lists, reads, `prompts/get`,
    /// completions, subscriptions, `tasks/*` — count alike. A request no caller makes (the
    /// anonymous user's, where nobody is authenticated, or one the gateway makes itself:
    /// a reconnect's `initialize`, a subscription made again) takes no share. A share equal
    /// to the bound lets one caller hold every place, as before shares were counted.
    ///
    /// 0 is refused by [`Upstream::connect`](crate::Upstream::connect), and so is a share
    /// above [`max_in_flight`](Self::max_in_flight) or set on a stdio upstream.
    ///
    /// ```
    /// use toolgate_mcp::UpstreamConfig;
    ///
    /// let search = UpstreamConfig::http("search", "http://127.0.0.1:9000/mcp")
    ///     .max_connections(64)
    ///     .max_connections_per_caller(8);
    /// assert_eq!(search.max_connections_per_caller, Some(8));
    /// assert_eq!(search.max_in_flight_per_caller(), 8);
    /// let crm = UpstreamConfig::http("crm", "http://127.0.0.1:9001/mcp");
    /// assert_eq!(crm.max_connections_per_caller, None);
    /// assert_eq!(crm.max_in_flight_per_caller(), 128);
    /// let small = UpstreamConfig::http("small", "http://127.0.0.1:9002/mcp").max_connections(5);
    /// assert_eq!(small.max_in_flight_per_caller(), 3);
    /// ```
    #[must_use]
    pub fn max_connections_per_caller(mut self, max: usize) -> Self {
        self.max_connections_per_caller = Some(max);
        self
    }

    /// The most of the upstream's requests in flight one caller may hold at once: the
    /// share [`max_connections_per_caller`](Self::max_connections_per_caller) set, else
    /// half of [`max_in_flight`](Self::max_in_flight), rounded up.
    pub fn max_in_flight_per_caller(&self) -> usize {
        self.max_connections_per_caller
            .unwrap_or_else(|| self.max_in_flight().div_ceil(2))
    }

    /// Whether arguments are checked against the imported tools' input schemas before a
    /// call leaves (on by default). Turn it off only for an upstream whose schemas are
    /// known to be wrong.
    #[must_use]
    pub fn validate_arguments(mut self, on: bool) -> Self {
        self.validate_arguments = on;
        self
    }

    /// Whether to ask the server for the 2026-07-28 revision first (on by default); off:
    /// 2025-11-25 only. See [`discover`](Self::discover).
    #[must_use]
    pub fn discover(mut self, on: bool) -> Self {
        self.discover = on;
        self
    }

    /// Calls the upstream as each caller: every call carries the credential `source`
    /// gives for its caller, on a connection of that caller's own (see
    /// [`per_caller`](crate::per_caller)). HTTP upstreams only: for a stdio
    /// one, [`Upstream::connect`](crate::Upstream::connect) refuses the configuration.
    ///
    /// ```
    /// use toolgate_core::secret::Secret;
    /// use toolgate_mcp::{StaticCallerCredentials, UpstreamConfig};
    ///
    /// let crm = UpstreamConfig::http("crm", "https://crm.example/mcp").credentials_per_caller(
    ///     StaticCallerCredentials::new([("ann", Secret::new("token-of-ann"))]),
    /// );
    /// assert!(crm.per_caller.is_some());
    /// ```
    #[must_use]
    pub fn credentials_per_caller(self, source: impl CallerCredentials) -> Self {
        self.per_caller(PerCaller::new(std::sync::Arc::new(source)))
    }

    /// As [`credentials_per_caller`](Self::credentials_per_caller), with the limits of
    /// the per-caller connections spelled out.
    #[must_use]
    pub fn per_caller(mut self, per_caller: PerCaller) -> Self {
        self.per_caller = Some(per_caller);
        self
    }

    /// Sets the reconnection backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}
