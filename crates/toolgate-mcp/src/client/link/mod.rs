//! The connection to one upstream: established on demand, re-established with backoff
//! when the upstream dies.

mod abandoned;
mod callers;
mod calls;
mod errors;
mod keeper;
mod requests;
mod scrub;
mod stderr;
mod subscriptions;
mod tasks;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use rmcp::model::ProtocolVersion;
use rmcp::service::RxJsonRpcMessage;
use rmcp::service::{ClientLifecycleMode, Peer, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpClientWorker,
};
use rmcp::{ClientHandler, ClientServiceExt, RoleClient};
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::ToolError;
use toolgate_hooks::secrets::Scrubber;
use tracing::Instrument;

use super::direct::Direct;
use super::failure::{connect_failure, request_failure};
use super::frames::Frames;
use super::http_pool;
use super::per_caller::CallerLinks;
use super::places::{Places, Waiting};
use super::relay::{Routes, UpstreamClient};
use super::request_streams;
use super::stdio::{Oversized, StdioUpstream};
use super::stdio_env;
use super::streams::StreamTagging;
use super::{UpstreamConfig, UpstreamTransport};
use crate::caller::CallerRequest;
use calls::Connected;
use stderr::relay_stderr;

pub(crate) use errors::RESOURCE_NOT_FOUND;
pub(crate) use subscriptions::{NOT_SUBSCRIBED, SUBSCRIPTIONS_UNSUPPORTED};

type Session = RunningService<RoleClient, UpstreamClient>;

/// What [`Link::revision`] holds: the revision of the current connection, not known yet
/// (it has not connected), 2025-11-25 or 2026-07-28.
const UNKNOWN: u8 = 0;
const SPEAKS_2025: u8 = 1;
const SPEAKS_2026: u8 = 2;

/// How long one call may wait for an upstream that is down to come back.
const MAX_WAIT_PER_CALL: std::time::Duration = std::time::Duration::from_secs(2);

/// A connection that ends sooner than this after it was made counts as a failed attempt:
/// a program that starts, answers `initialize` and dies at its first call is restarted
/// with backoff, not once per call.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Default)]
struct State {
    session: Option<Session>,
    /// `tools/call` on the session's connection from the calling task (HTTP only).
    direct: Option<Arc<Direct>>,
    /// The tools the upstream lists on this connection: known for the legacy one, where
    /// a 2025-11-25 caller's call goes only for a tool the upstream has at 2025-11-25.
    tools: HashSet<String>,
    /// Consecutive failed connection attempts (a connection that ended before it
    /// [`SETTLED`] among them).
    failures: u32,
    /// When the session was made.
    opened_at: Option<Instant>,
    /// No new attempt before this instant.
    retry_at: Option<Instant>,
    /// Why the latest attempt failed (scrubbed), while attempts fail: told to whoever
    /// sets the upstream up (`toolgate check`, the gateway's start), never to a caller.
    last_failure: Option<String>,
    /// Counts connections, so a failure forgets only the connection it happened on.
    generation: u64,
    /// Cancelled when the session's connection ends, or (HTTP) the upstream forgets its
    /// session: what the upstream was told on it is lost ([`Made::ended`]).
    ended: CancellationToken,
}

/// A new connection, as [`Link::connect`] makes it.
struct Made {
    session: Session,
    /// Its calls from the calling task (HTTP).
    direct: Option<Arc<Direct>>,
    /// The tools the upstream lists on it (the legacy channel).
    tools: HashSet<String>,
    /// Cancelled when rmcp's session over the connection ends, however it ends, or when
    /// the upstream answers that it does not know the connection's HTTP session (rmcp then
    /// sets one up again on the same connection, without what the upstream was told).
    ended: CancellationToken,
}

/// One connection to the upstream, and the calls in flight on it.
struct Channel {
    /// Whether it speaks 2025-11-25 only (`initialize`, no `server/discover`).
    legacy: bool,
    /// Whether toolgate declares `sampling` and `elicitation` on it, to relay the
    /// upstream's requests for them to the callers that can answer.
    asks_callers: bool,
    /// The calls in flight, for relaying what the upstream sends about them.
    routes: Arc<Routes>,
    state: Mutex<State>,
    /// Which connection (of a stdio upstream) ended on a message too long to read.
    oversized: Arc<Oversized>,
    /// Whether a task keeps the channel connected for its resource subscriptions
    /// ([`keeper`]).
    kept: AtomicBool,
}

impl Channel {
    fn new(server: &str, legacy: bool, asks_callers: bool) -> Self {
        Channel {
            legacy,
            asks_callers,
            routes: Arc::new(Routes::new(server)),
            state: Mutex::default(),
            oversized: Arc::default(),
            kept: AtomicBool::new(false),
        }
    }
}

/// The connections to one upstream. An upstream that speaks both revisions is spoken to
/// in each caller's: a 2026-07-28 caller's requests go on the `current` connection
/// (2026-07-28), a 2025-11-25 caller's on the `legacy` one, made when first needed — the
/// upstream behaves for each caller as it would without toolgate (server-to-client
/// requests mid-call at 2025-11-25, `input_required` results at 2026-07-28). Requests
/// without an MCP caller go on `current`. An upstream that speaks only 2025-11-25 has
/// `current` at that revision.
///
/// At 2025-11-25 what a client can answer is declared once, at `initialize`, for the whole
/// connection. Over streamable HTTP, a caller that declared neither `sampling` nor
/// `elicitation` (and requests without an MCP caller, at that revision) go on `plain`, a
/// 2025-11-25 connection that declares nothing either: the upstream is told the truth
/// about who it serves — it does not ask for what nobody on the connection can answer, and
/// an upstream that answers a call in its request's task only for such a client can
/// ([`channel_for`]). Over stdio no connection declares either — an upstream's request
/// there names no call, so it is never relayed — and `plain` is not used.
///
/// [`channel_for`]: Link::channel_for
pub(crate) struct Link {
    pub config: UpstreamConfig,
    credential: Option<String>,
    /// Every credential of `config`: scrubbed from what the upstream sends back.
    scrubber: Scrubber,
    current: Channel,
    legacy: Channel,
    plain: Channel,
    /// The revision `current` speaks: [`UNKNOWN`] until it first connects, then
    /// [`SPEAKS_2025`] or [`SPEAKS_2026`].
    revision: AtomicU8,
    /// The connections of each caller, for an upstream called as the caller.
    callers: Option<CallerLinks<Link>>,
    /// The name of the tool that relays `tasks/*` requests to this upstream, once one
    /// is registered (the upstream advertised the tasks extension at import): only then
    /// is a task the upstream answers with handed to the caller.
    pub(crate) tasks_tool: TasksTool,
    /// The bound on the requests in flight to the upstream, shared with each caller's
    /// link ([`places`](crate::client::places)).
    pub(crate) places: Arc<Places>,
    /// Whether the upstream's tools are being imported over a bound taken over from the
    /// upstream connected before this one alike (a host's reload,
    /// [`UpstreamBounds`](crate::UpstreamBounds)): until the import ends
    /// ([`Upstream::connect`](crate::Upstream::connect)), its requests wait for no place —
    /// each takes one when one is free, and goes without otherwise. The calls of the
    /// configuration the reload replaces may hold every place for as long as they run, and
    /// a reload that waited behind them would fail. It is the only way past the bound: an
    /// import's few requests (its `initialize`, the lists), once per reload.
    pub(crate) importing: Arc<AtomicBool>,
}

/// The name of an upstream's tasks tool, set once it is registered; shared by the
/// upstream's connections.
pub(crate) type TasksTool = Arc<std::sync::OnceLock<String>>;

impl Link {
    pub fn new(config: UpstreamConfig, credential: Option<String>) -> Self {
        let tasks_tool = TasksTool::default();
        let callers = config
            .per_caller
            .as_ref()
            .map(|per_caller| CallerLinks::new(&config, per_caller));
        let name = config.name.clone();
        let (max, share) = (config.max_in_flight(), config.max_in_flight_per_caller());
        let url = match &config.transport {
            UpstreamTransport::Http { url } => Some(url.as_str()),
            UpstreamTransport::Stdio { .. } => None,
        };
        // Shared with the upstream connected before this one alike, when kept.
        let (places, took_over_bound) = match &config.bounds {
            Some(bounds) => bounds.places(&name, url, max, share, config.call_timeout),
            None => (Places::new(&name, max, share, config.call_timeout), false),
        };
        // Only a request on a call's own response stream names the caller it is for.
        let relays_requests = matches!(config.transport, UpstreamTransport::Http { .. });
        Link {
            scrubber: config.scrubber(None),
            config,
            credential,
            current: Channel::new(&name, false, relays_requests),
            legacy: Channel::new(&name, true, relays_requests),
            plain: Channel::new(&name, true, false),
            revision: AtomicU8::new(UNKNOWN),
            callers,
            tasks_tool,
            places,
            importing: Arc::new(AtomicBool::new(took_over_bound)),
        }
    }

    /// Whether `current` speaks 2026-07-28 (false until it first connects).
    fn modern(&self) -> bool {
        self.revision.load(Ordering::Relaxed) == SPEAKS_2026
    }

    /// The connection for `caller`'s requests. Of an upstream that speaks 2026-07-28: the
    /// current one for a caller of that revision and for requests without an MCP caller;
    /// for a 2025-11-25 caller, the legacy one, or the plain one when it can answer no
    /// request of the upstream. Of an upstream that speaks only 2025-11-25: the plain one
    /// for a caller that can answer none, and for requests without an MCP caller; else
    /// the current one. The current one while the upstream's revision is not known yet.
    /// Over stdio, where no connection asks callers anything, never the plain one.
    fn channel_for(&self, caller: Option<&CallerRequest>) -> &Channel {
        let plain =
            self.current.asks_callers && !caller.is_some_and(CallerRequest::answers_requests);
        match self.revision.load(Ordering::Relaxed) {
            SPEAKS_2026 => match caller {
                Some(c) if !c.input_required_results && plain => &self.plain,
                Some(c) if !c.input_required_results => &self.legacy,
                _ => &self.current,
            },
            SPEAKS_2025 if plain => &self.plain,
            _ => &self.current,
        }
    }

    /// The connection resource subscriptions go on, for callers of both revisions: one at
    /// 2025-11-25, whose `resources/subscribe` a 2026-07-28 upstream still answers there
    /// (at 2026-07-28 it has only `subscriptions/listen`).
    fn subscription_channel(&self) -> &Channel {
        if self.modern() {
            &self.legacy
        } else {
            &self.current
        }
    }

    /// The connection for `caller`'s call of tool `name`: as [`channel_for`], but a tool
    /// the upstream lists only at 2026-07-28 is called there, its `input_required`
    /// rounds put to a 2025-11-25 caller by toolgate.
    ///
    /// [`channel_for`]: Self::channel_for
    async fn channel_for_tool(
        &self,
        name: &str,
        caller: Option<&CallerRequest>,
        deadline: Instant,
    ) -> Result<&Channel, ToolError> {
        let channel = self.channel_for(caller);
        if !channel.legacy {
            return Ok(channel);
        }
        self.peer(channel, deadline).await?;
        let listed = channel.state.lock().await.tools.contains(name);
        Ok(if listed { channel } else { &self.current })
    }

    /// A live connection, connecting if needed. One call waits out short backoffs (up
    /// to [`MAX_WAIT_PER_CALL`] in all, within its deadline); past that it fails at once
    /// with a retry-after naming the wait, so callers of a dead upstream do not hang.
    async fn peer(
        &self,
        channel: &Channel,
        deadline: Instant,
    ) -> Result<(Peer<RoleClient>, u64), ToolError> {
        let connected = self.connected(channel, deadline).await?;
        Ok((connected.peer, connected.generation))
    }

    /// The channel's connection, made now if it has none (or lost it), waiting at most
    /// until `deadline` and [`MAX_WAIT_PER_CALL`] for an upstream that is down. On a new
    /// connection of a channel where someone watches a resource, the upstream is
    /// subscribed again to what is watched ([`resubscribe`](Self::resubscribe)).
    async fn connected(
        &self,
        channel: &Channel,
        deadline: Instant,
    ) -> Result<Connected, ToolError> {
        let wait_until = deadline.min(Instant::now() + MAX_WAIT_PER_CALL);
        let mut state = channel.state.lock().await;
        loop {
            if let Some(session) = &state.session {
                if !session.is_transport_closed() && !session.is_closed() {
                    return Ok(Connected {
                        peer: session.peer().clone(),
                        generation: state.generation,
                        direct: state.direct.clone(),
                    });
                }
                tracing::warn!(server = %self.config.name, "MCP server connection lost; reconnecting");
                self.drop_session(&mut state);
            }
            let now = Instant::now();
            if let Some(retry_at) = state.retry_at.filter(|t| *t > now) {
                if retry_at >= wait_until {
                    return Err(self.unavailable(retry_at - now));
                }
                tokio::time::sleep_until(retry_at).await;
            }
            let attempt_started = Instant::now();
            let attempt_deadline = deadline.min(attempt_started + self.config.connect_timeout);
            // Whether the attempt is held up by the bound on requests in flight, not by the
            // upstream: one of its requests is queued for a place.
            let waiting = Waiting::default();
            // A connection outlives the call that opened it: its tasks' spans get a root
            // of their own, not the call's (which they would otherwise keep open).
            let connect = self
                .connect(channel, state.generation + 1, &waiting)
                .instrument(
                    tracing::info_span!(parent: None, "mcp.connection", server = %self.config.name),
                );
            tokio::pin!(connect);
            let outcome = tokio::time::timeout_at(attempt_deadline, &mut connect).await;
            // Read while the attempt still lives: once it is dropped, its requests leave
            // the queue (at once, on another thread).
            let held_up = outcome.is_err() && waiting.now();
            match outcome {
                Ok(Ok(made)) => {
                    if state.failures > 0 {
                        tracing::info!(server = %self.config.name, "MCP server reconnected");
                    }
                    // Failures are forgotten once the connection has settled
                    // ([`Self::drop_session`]).
                    state.opened_at = Some(Instant::now());
                    state.retry_at = None;
                    state.last_failure = None;
                    let peer = made.session.peer().clone();
                    state.session = Some(made.session);
                    state.direct = made.direct;
                    state.tools = made.tools;
                    state.ended = made.ended;
                    state.generation += 1;
                    // The upstream knows nothing of what a connection before this one
                    // was told: whoever watches a resource here has it subscribed again.
                    if channel.routes.watched_any() {
                        self.resubscribe(channel, peer, state.generation);
                    }
                }
                // Out of time while a request of its own still waited for a place: the
                // upstream has as many requests in flight as it may be sent, and is not
                // down. 503 `upstream_busy` at the call's deadline (before it, another
                // attempt), and no failure: the backoff does not grow with the load.
                Err(_) if held_up => {
                    if Instant::now() < deadline {
                        continue;
                    }
                    tracing::warn!(server = %self.config.name, max = self.config.max_in_flight(), "a connection attempt waited for a place among the MCP server's requests in flight until the call's deadline (`max_connections`); the upstream is busy, not down");
                    let busy = self.places.busy(attempt_started.elapsed());
                    return Err(self.busy_upstream(busy));
                }
                failed => {
                    let reason = match failed {
                        // The upstream's words, of any length (an error it answered
                        // `tools/list` with): scrubbed whole, then cut.
                        Ok(Err(reason)) => toolgate_core::error::error_text(format_args!(
                            "{}",
                            self.scrubbed(reason)
                        )),
                        _ => "the connection attempt timed out".to_owned(),
                    };
                    state.failures += 1;
                    let wait = self.config.backoff.delay(state.failures);
                    state.retry_at = Some(Instant::now() + wait);
                    tracing::warn!(server = %self.config.name, failures = state.failures, %reason, retry_in_ms = wait.as_millis() as u64, "cannot connect to MCP server");
                    state.last_failure = Some(reason);
                    if Instant::now() >= wait_until {
                        return Err(self.unavailable(wait));
                    }
                }
            }
        }
    }

    /// Why the latest attempt to connect failed, while attempts fail (scrubbed).
    pub(crate) async fn last_failure(&self) -> Option<String> {
        self.current.state.lock().await.last_failure.clone()
    }

    /// A new connection on `channel`, which will be its `generation`, with its calls
    /// from the calling task (HTTP); for the legacy channel, with the names of the tools
    /// the upstream lists on it.
    /// `waiting` tells when one of its requests waits for a place (HTTP).
    async fn connect(
        &self,
        channel: &Channel,
        generation: u64,
        waiting: &Waiting,
    ) -> Result<Made, String> {
        let ended = CancellationToken::new();
        let (session, direct) = self.open(channel, generation, &ended, waiting).await?;
        let made = |session, tools| Made {
            session,
            direct,
            tools,
            ended,
        };
        if !channel.legacy {
            let modern = session
                .peer()
                .peer_info()
                .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28);
            let revision = if modern { SPEAKS_2026 } else { SPEAKS_2025 };
            self.revision.store(revision, Ordering::Relaxed);
            return Ok(made(session, HashSet::new()));
        }
        let tools =
            requests::list_all::<rmcp::model::Tool>(session.peer(), &self.config.name, None)
                .await
                .map_err(|e| request_failure(&e))??;
        Ok(made(
            session,
            tools.into_iter().map(|t| t.name.into_owned()).collect(),
        ))
    }

    /// Opens connection `generation` of `channel`; `ended` is cancelled when it ends
    /// ([`Made::ended`]); `waiting` tells when a request of it waits for a place.
    async fn open(
        &self,
        channel: &Channel,
        generation: u64,
        ended: &CancellationToken,
        waiting: &Waiting,
    ) -> Result<(Session, Option<Arc<Direct>>), String> {
        let connection = channel.routes.next_connection();
        match &self.config.transport {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                inherit_env,
            } => {
                let mut cmd = stdio_env::command(command, args, env, inherit_env);
                if let (Some(var), Some(value)) = (&self.config.credential_env, &self.credential) {
                    cmd.env(var, value);
                }
                let (transport, stderr) = StdioUpstream::start(
                    cmd,
                    generation,
                    Arc::clone(&channel.oversized),
                    self.config.call_timeout,
                    Arc::clone(&channel.routes),
                )
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(relay_stderr(
                        self.config.name.clone(),
                        self.scrubber.clone(),
                        stderr,
                    ));
                }
                let (mut frames, _) =
                    self.frames(channel, connection, transport.into_transport(), false);
                frames.cancel_on_end(ended.clone());
                let session = self
                    .client(channel, connection, generation)
                    .serve_with_lifecycle(frames, self.lifecycle(channel))
                    .await
                    .map_err(|e| connect_failure(&e))?;
                Ok((session, None))
            }
            UpstreamTransport::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.retry_config = request_streams::reconnect_policy();
                if let Some(token) = &self.credential {
                    config = config.auth_header(token.clone());
                }
                // Cancelled when the transport is dropped: a connection attempt given up
                // takes no place, and sends nothing, after it.
                let closed = CancellationToken::new();
                let http = StreamTagging::over(
                    http_pool::shared().map_err(|e| e.to_string())?,
                    Arc::clone(&channel.routes),
                    ended.clone(),
                    Arc::clone(&self.places),
                    closed.clone(),
                    waiting.clone(),
                    Arc::clone(&self.importing),
                );
                let transport = WorkerTransport::spawn_with_ct(
                    StreamableHttpClientWorker::new(http.clone(), config),
                    closed,
                );
                let (mut frames, side_door) = self.frames(channel, connection, transport, true);
                frames.cancel_on_end(ended.clone());
                let client = self.client(channel, connection, generation);
                let direct = side_door.map(|door| {
                    Arc::new(Direct::new(
                        http,
                        frames.inbound().clone(),
                        door,
                        client.get_info(),
                    ))
                });
                let session = client
                    .serve_with_lifecycle(frames, self.lifecycle(channel))
                    .await
                    .map_err(|e| connect_failure(&e))?;
                Ok((session, direct))
            }
        }
    }

    /// On the current channel, 2026-07-28 when the upstream speaks it (asked with
    /// `server/discover`), else 2025-11-25; on the legacy channel, 2025-11-25.
    fn lifecycle(&self, channel: &Channel) -> ClientLifecycleMode {
        let legacy = ClientLifecycleMode::Initialize;
        if channel.legacy || !self.config.discover {
            return legacy;
        }
        ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        }
    }

    /// Connection number `connection` of `channel`, every frame of it scrubbed and
    /// attributed ([`Frames`]); `http` when its log messages carry the stream they came
    /// on ([`StreamTagging`]) and it has a side door for [`Direct`] calls.
    fn frames<T>(
        &self,
        channel: &Channel,
        connection: u64,
        transport: T,
        http: bool,
    ) -> (
        Frames<T>,
        Option<mpsc::Sender<RxJsonRpcMessage<RoleClient>>>,
    ) {
        Frames::new(
            transport,
            Arc::clone(&channel.routes),
            connection,
            self.scrubber.clone(),
            http,
            http,
        )
    }

    fn client(&self, channel: &Channel, connection: u64, generation: u64) -> UpstreamClient {
        UpstreamClient {
            routes: Arc::clone(&channel.routes),
            connection,
            generation,
            asks_callers: channel.asks_callers,
            call_timeout: self.config.call_timeout,
        }
    }

    /// Drops the connection if it is still the one that failed.
    async fn forget(&self, channel: &Channel, generation: u64) {
        let mut state = channel.state.lock().await;
        if state.generation == generation {
            self.drop_session(&mut state);
        }
    }

    /// Drops the session of `state`, which ended. One that ended before it [`SETTLED`]
    /// is a failed attempt: the next waits out the backoff. One that had settled ends
    /// the failures before it.
    fn drop_session(&self, state: &mut State) {
        state.session = None;
        state.direct = None;
        match state.opened_at.take() {
            Some(opened) if opened.elapsed() < SETTLED => {
                state.failures += 1;
                let wait = self.config.backoff.delay(state.failures);
                state.retry_at = Some(Instant::now() + wait);
                tracing::warn!(server = %self.config.name, failures = state.failures, retry_in_ms = wait.as_millis() as u64, "MCP server connection ended soon after it was made");
            }
            Some(_) => state.failures = 0,
            None => {}
        }
    }

    /// Whether connection `generation` of `channel` is still the channel's, and open.
    async fn still_open(&self, channel: &Channel, generation: u64) -> bool {
        self.open_peer(channel, generation).await.is_some()
    }

    /// The peer of connection `generation` of `channel` while it is still the channel's
    /// and open; `None` once it is gone. Never connects.
    async fn open_peer(&self, channel: &Channel, generation: u64) -> Option<Peer<RoleClient>> {
        let state = channel.state.lock().await;
        state
            .session
            .as_ref()
            .filter(|session| {
                state.generation == generation
                    && !session.is_transport_closed()
                    && !session.is_closed()
            })
            .map(|session| session.peer().clone())
    }
}
