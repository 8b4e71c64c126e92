//! [`McpServer`]: a pipeline served over MCP.

mod cancellation;
mod connection;
mod direct;
mod features;
mod held;
mod http;
mod listen;
mod listen_gate;
mod listens;
mod message;
mod opening;
mod owners;
mod params;
mod plain_errors;
mod refusal_words;
mod relayed;
mod repeated_headers;
mod request_body;
mod request_meta;
mod rounds;
mod span;
mod stateless;
mod stdio;
mod tasks;

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
    session::local::{LocalSessionManager, SessionConfig},
};
use toolgate_core::suspension::{DecidedCall, SuspendedInvocation};
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Pipeline, User};

pub use self::cancellation::{ClientDisconnected, GuardedBody, HostShutdown};
pub use self::http::McpHttpService;
pub use self::listens::DEFAULT_LISTENS_PER_USER;
pub use self::relayed::{MAX_AGE as MAX_RELAYED_TASK_AGE, RelayedTasks};
use crate::McpError;
use connection::{Connection, SessionRegistry};
use direct::DirectCalls;
use listen::Served;
use rounds::StateSeal;

/// Decides which tools `tools/list` shows to a principal — where the authorization
/// policy plugs in, so a caller never sees a tool it may not call. A tool hidden from a
/// caller is also unknown to it at `tools/call`.
///
/// # Examples
///
/// ```
/// use toolgate_mcp::ListFilter;
///
/// // Tools tagged `admin` are listed to admins only.
/// let filter = ListFilter::new(|tool, user| !tool.has_tag("admin") || user.has_role("admin"));
/// ```
#[derive(Clone)]
pub struct ListFilter(Arc<Allows>);

type Allows = dyn Fn(&ToolDefinition, &User) -> bool + Send + Sync;

impl ListFilter {
    /// A filter from a predicate: `true` lists the tool to the user.
    pub fn new(allows: impl Fn(&ToolDefinition, &User) -> bool + Send + Sync + 'static) -> Self {
        ListFilter(Arc::new(allows))
    }

    /// Whether `user` may see `tool`.
    pub fn allows(&self, tool: &ToolDefinition, user: &User) -> bool {
        (self.0)(tool, user)
    }
}

impl fmt::Debug for ListFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ListFilter(..)")
    }
}

type Identify = Arc<dyn Fn(&::http::request::Parts) -> Option<User> + Send + Sync>;

pub(crate) struct ServerInner {
    pub pipeline: Pipeline,
    pub filter: Option<ListFilter>,
    pub default_user: Arc<User>,
    pub identify: Option<Identify>,
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
    pub call_timeout: Option<Duration>,
    /// Seals the `requestState` of rounds answered to callers.
    pub seal: Arc<StateSeal>,
    /// The tool that tells a caller the outcome of its call that waited for approval.
    pub outcome_tool: Option<String>,
    /// The tasks upstreams created for callers, by the handles the callers hold.
    pub relayed: RelayedTasks,
    /// Told of each call its caller withdrew with `tasks/cancel`, waiting or running.
    pub on_withdrawal: Option<OnWithdrawal>,
    /// The open `subscriptions/listen` requests of each user, and how many each may have:
    /// the table kept by an endpoint across the servers it serves in turn.
    pub listens: listens::Listens,
}

/// What a host does when a caller withdraws its call: which call, who withdrew it (its
/// caller), and the reason it was withdrawn with.
pub type OnWithdrawal = Arc<dyn Fn(Withdrawal<'_>, &User, &str) + Send + Sync>;

/// A call its caller withdrew with `tasks/cancel`, as [`OnWithdrawal`] is told of it.
#[derive(Clone, Copy, Debug)]
pub enum Withdrawal<'a> {
    /// A call that waited for approval: it was rejected, as by an approver.
    Waiting(&'a SuspendedInvocation),
    /// A call an approver decided, which ran: its withdrawal was kept over its running
    /// record, which this is, and the host running the call stops it. Told once per
    /// withdrawal, by the process that kept it; a call that ended first, or was withdrawn
    /// already, is not told again.
    Running(&'a DecidedCall),
}

/// A [`Pipeline`] served as an MCP server: every `tools/call` runs through the pipeline.
///
/// Who calls: over HTTP, the principal is what [`identify`](Self::identify) finds in the
/// request, else a [`User`] (or `Arc<User>`) that the host's authentication middleware put
/// in the request's extensions, else the [default user](Self::default_user). Over stdio it
/// is the default user (anonymous unless set).
///
/// The MCP session is the pipeline's session scope: the `Mcp-Session-Id` of a streamable
/// HTTP session (2025 revisions, which rmcp checks), or one id per stdio connection. A
/// request of 2026-07-28 belongs to no session: it runs in a session of its own whatever
/// `Mcp-Session-Id` it names. Session-scoped providers are dropped when the connection
/// ends.
///
/// Cheap to clone (one `Arc`).
///
/// # Examples
///
/// ```no_run
/// use toolgate_core::{Pipeline, User};
/// use toolgate_mcp::{ListFilter, McpServer};
///
/// # async fn run(pipeline: Pipeline) -> Result<(), toolgate_mcp::McpError> {
/// McpServer::new(pipeline)
///     .default_user(User::new("local").with_roles(["dev"]))
///     .list_filter(ListFilter::new(|tool, user| !tool.has_tag("admin") || user.has_role("admin")))
///     .serve_stdio()
///     .await
/// # }
/// ```
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<ServerInner>,
}

impl McpServer {
    /// A server for this pipeline: every tool listed, the anonymous user, no call timeout.
    pub fn new(pipeline: Pipeline) -> Self {
        McpServer {
            inner: Arc::new(ServerInner {
                pipeline,
                filter: None,
                default_user: User::anonymous(),
                identify: None,
                name: "toolgate".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                instructions: None,
                call_timeout: None,
                seal: Arc::new(StateSeal::random()),
                outcome_tool: None,
                relayed: RelayedTasks::default(),
                on_withdrawal: None,
                listens: listens::Listens::default(),
            }),
        }
    }

    /// This server, counting its open `subscriptions/listen` requests in `listens`, under
    /// its own bound: an endpoint that serves it next keeps counting those opened before.
    fn counting_listens_in(self, listens: &listens::Listens) -> Self {
        let listens = listens.bounded_as(&self.inner.listens);
        self.edit(|inner| inner.listens = listens)
    }

    fn edit(mut self, f: impl FnOnce(&mut ServerInner)) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => f(inner),
            None => {
                let old = &self.inner;
                let mut inner = ServerInner {
                    pipeline: old.pipeline.clone(),
                    filter: old.filter.clone(),
                    default_user: Arc::clone(&old.default_user),
                    identify: old.identify.clone(),
                    name: old.name.clone(),
                    version: old.version.clone(),
                    instructions: old.instructions.clone(),
                    call_timeout: old.call_timeout,
                    seal: Arc::clone(&old.seal),
                    outcome_tool: old.outcome_tool.clone(),
                    relayed: old.relayed.clone(),
                    on_withdrawal: old.on_withdrawal.clone(),
                    listens: old.listens.clone(),
                };
                f(&mut inner);
                self.inner = Arc::new(inner);
            }
        }
        self
    }

    /// The principal of calls that carry no identity (all stdio calls).
    #[must_use]
    pub fn default_user(self, user: User) -> Self {
        self.edit(|s| s.default_user = Arc::new(user))
    }

    /// Finds the principal of an HTTP request (from a header, a verified token…). `None`
    /// falls back to a `User` in the request's extensions, then to the default user.
    #[must_use]
    pub fn identify(
        self,
        identify: impl Fn(&::http::request::Parts) -> Option<User> + Send + Sync + 'static,
    ) -> Self {
        self.edit(|s| s.identify = Some(Arc::new(identify)))
    }

    /// Filters `tools/list` (and what `tools/call` accepts) per principal.
    #[must_use]
    pub fn list_filter(self, filter: ListFilter) -> Self {
        self.edit(|s| s.filter = Some(filter))
    }

    /// The name and version the server reports at `initialize`.
    #[must_use]
    pub fn server_info(self, name: impl Into<String>, version: impl Into<String>) -> Self {
        let (name, version) = (name.into(), version.into());
        self.edit(|s| {
            s.name = name;
            s.version = version;
        })
    }

    /// Instructions for the client, reported at `initialize`.
    #[must_use]
    pub fn instructions(self, instructions: impl Into<String>) -> Self {
        let instructions = instructions.into();
        self.edit(|s| s.instructions = Some(instructions))
    }

    /// A deadline for every call made over MCP (none by default).
    #[must_use]
    pub fn call_timeout(self, timeout: Duration) -> Self {
        self.edit(|s| s.call_timeout = Some(timeout))
    }

    /// How many `subscriptions/listen` requests (MCP 2026-07-28) one user — an id in a
    /// tenant — may have open at once over every connection of this server (default
    /// [`DEFAULT_LISTENS_PER_USER`]). Past it a new one is refused with `data.code`
    /// `too_many_listens` and `data.status` 429 until one of that user's ends.
    ///
    /// An endpoint that serves this server in place of another
    /// ([`McpHttpService::serve`]) keeps counting the requests open before and bounds
    /// them by this from the next request on: a user with more open than a lowered bound
    /// keeps them, and opens no other until under it.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// # use toolgate_core::Pipeline;
    /// # use toolgate_mcp::McpServer;
    /// # fn f(pipeline: Pipeline) {
    /// let server = McpServer::new(pipeline).listens_per_user(NonZeroUsize::new(2).unwrap());
    /// # }
    /// ```
    #[must_use]
    pub fn listens_per_user(self, max: NonZeroUsize) -> Self {
        // A table of its own: a server cloned before keeps its own bound.
        self.edit(|s| s.listens = listens::Listens::new(max))
    }

    /// The key that seals the `requestState` of the multi-round calls it answers (MCP
    /// 2026-07-28: an upstream's `input_required` result), so that a caller can neither
    /// forge nor change one, nor replay one given to another user or for another tool.
    /// At least 32 bytes; the same on every replica that serves the same callers, and kept
    /// across restarts for rounds to survive them. Without one, a random key of this
    /// server is used.
    ///
    /// # Errors
    ///
    /// [`McpError::Config`] when the key is shorter than 32 bytes.
    ///
    /// ```
    /// # use toolgate_core::Pipeline;
    /// # use toolgate_mcp::McpServer;
    /// # fn f(pipeline: Pipeline) -> Result<(), toolgate_mcp::McpError> {
    /// let key = std::env::var("MCP_STATE_KEY").unwrap_or_else(|_| "0".repeat(64));
    /// let server = McpServer::new(pipeline).request_state_key(key.as_bytes())?;
    /// # Ok(()) }
    /// ```
    pub fn request_state_key(self, key: &[u8]) -> Result<Self, McpError> {
        let seal = Arc::new(StateSeal::with_key(key)?);
        Ok(self.edit(|s| s.seal = seal))
    }

    /// The tool that tells a caller the outcome of its call that waited for a person's
    /// approval (the gateway's `toolgate.outcome`): called with `{"id": SUSPENSION_ID}`
    /// as the caller, it answers `{"status": "waiting"}` until the call is decided, then
    /// `{"status": "decided", "result": R}`, `R` the call's result in the agent form
    /// (`status` `success` with `output`, or `error` with `code` and `message`). For an id
    /// that is not one of the caller's calls it fails with
    /// [`ToolError::UnknownSuspension`](toolgate_core::ToolError::UnknownSuspension), and
    /// with [`SuspensionExpired`](toolgate_core::ToolError::SuspensionExpired) for a call of
    /// theirs that expired; any other error (the authorization policy refusing the tool, a
    /// rate limit, a store that does not answer) reaches the caller as the error of their
    /// request, saying what to do — never as an unknown task.
    ///
    /// With one, a call suspended for approval answers a 2026-07-28 caller
    /// `input_required` with only a sealed `requestState` (no requests): the caller calls
    /// again with it later — SDKs do, after a pause — and gets `input_required` again
    /// while the call waits, then the call's own result. A caller that declares the tasks
    /// extension (`io.modelcontextprotocol/tasks`, SEP-2663, which the server then
    /// advertises) is answered a task instead, whose id is the suspension id: `tasks/get`
    /// answers `working` while the call waits, then `completed` with its result;
    /// `tasks/cancel` withdraws the call (it is rejected, as by an approver, and
    /// [`on_withdrawal`](Self::on_withdrawal) is told). A 2025-11-25 caller
    /// is answered a result saying the call waits, with the suspension id, as without one.
    #[must_use]
    pub fn outcome_tool(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.edit(|s| s.outcome_tool = Some(name))
    }

    /// Keeps the tasks that upstreams create for callers (SEP-2663) in `table`: the one
    /// of the server this one replaces on a reload, so that callers can still poll the
    /// tasks they were handed. A server has a table of its own by default.
    ///
    /// A caller that declares the tasks extension and calls an imported tool whose
    /// upstream answers with a task is handed a task of the server's own, whose
    /// `tasks/get`, `tasks/update` and `tasks/cancel` the server relays to the upstream
    /// for that caller alone ([`RelayedTasks`]).
    #[must_use]
    pub fn relayed_tasks(self, table: RelayedTasks) -> Self {
        self.edit(|s| s.relayed = table)
    }

    /// Calls `told` each time a caller withdraws its call with `tasks/cancel`: a waiting
    /// call (it is rejected, as by an approver) or one that runs after an approval (its
    /// withdrawal is kept over its running record): how a host tells whoever it tells of
    /// decisions — the gateway sends its `suspension.decided` webhook for the first,
    /// `suspension.withdrawn` for the second.
    #[must_use]
    pub fn on_withdrawal(
        self,
        told: impl Fn(Withdrawal<'_>, &User, &str) + Send + Sync + 'static,
    ) -> Self {
        let told: OnWithdrawal = Arc::new(told);
        self.edit(|s| s.on_withdrawal = Some(told))
    }

    /// The pipeline this server serves.
    pub fn pipeline(&self) -> &Pipeline {
        &self.inner.pipeline
    }

    /// Serves one MCP connection over stdin and stdout until the client closes it.
    ///
    /// # Errors
    ///
    /// [`McpError::Transport`] when the MCP handshake fails or the connection breaks.
    pub async fn serve_stdio(&self) -> Result<(), McpError> {
        let (stdin, stdout) = rmcp::transport::stdio();
        self.serve_io(stdin, stdout).await
    }

    /// Serves one MCP connection over a byte stream pair (a pipe, a socket) until the
    /// client closes it.
    ///
    /// Each line the client writes is one JSON-RPC message. A line that is not one is
    /// answered with a JSON-RPC error — with the request's `id` when it can be read — and
    /// the connection goes on: a line that is not JSON `-32700` (parse error); one over
    /// 16 MiB (read past, not held), one nested deeper than 127 levels, a batch or any
    /// other JSON that is not a valid message `-32600` (invalid request), saying what is
    /// wrong; a request whose `_meta` gives a log level or a progress token of the wrong
    /// kind `-32602` (invalid params), unrun. An invalid notification is dropped
    /// unanswered, as JSON-RPC has it.
    ///
    /// # Errors
    ///
    /// [`McpError::Transport`] when the MCP handshake fails or the connection breaks.
    pub async fn serve_io<R, W>(&self, read: R, write: W) -> Result<(), McpError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (lines, read, write) = stdio::LineFilter::start(read, write);
        let served = async {
            let running = Served(Connection::new(Arc::new(ArcSwap::new(Arc::clone(
                &self.inner,
            )))))
            .serve((read, write))
            .await
            .map_err(|e| McpError::Transport(e.to_string()))?;
            running
                .waiting()
                .await
                .map_err(|e| McpError::Transport(e.to_string()))?;
            Ok(())
        }
        .await;
        lines.finish().await;
        served
    }

    /// The streamable HTTP endpoint: a tower service to mount in an axum router with
    /// `Router::nest_service("/mcp", …)`. A client that disconnects while a call runs
    /// cancels the call. `config` is rmcp's: sessions, SSE keep-alive (how quickly a
    /// disconnect is noticed on a streaming response), allowed hosts, shutdown token.
    pub fn http_service(&self, config: StreamableHttpServerConfig) -> McpHttpService {
        self.http_service_with_sessions(config, SessionConfig::default())
    }

    /// [`http_service`](Self::http_service), with rmcp's settings of each session:
    /// notably `keep_alive`, after which rmcp closes a session that exchanged no message
    /// (default five minutes). A host that expires sessions itself, with
    /// [`McpHttpService::close_session`], sets it to at least its own idle time, as a net
    /// for sessions it never learnt of.
    pub fn http_service_with_sessions(
        &self,
        config: StreamableHttpServerConfig,
        sessions: SessionConfig,
    ) -> McpHttpService {
        let current = Arc::new(ArcSwap::new(Arc::clone(&self.inner)));
        let connections = Arc::clone(&current);
        let direct = Arc::new(DirectCalls::new(sessions.keep_alive));
        let registry: Arc<dyn SessionRegistry> = Arc::<DirectCalls>::clone(&direct);
        let mut manager = LocalSessionManager::default();
        manager.session_config = sessions;
        let manager = Arc::new(manager);
        let service = StreamableHttpService::new(
            move || Ok(Connection::new(Arc::clone(&connections)).answered_by(Arc::clone(&registry))),
            Arc::clone(&manager),
            config,
        );
        McpHttpService::new(service, manager, current, direct)
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner.name)
            .field("pipeline", &self.inner.pipeline)
            .finish_non_exhaustive()
    }
}
