//! The connection to one upstream: established on demand, re-established with backoff
//! when the upstream dies.

// Resource subscriptions are deprecated by SEP-2577 for the 2026-07-28 revision (which
// listens instead); upstreams and clients on 2025-11-25 subscribe.
#![allow(deprecated)]

use std::borrow::Cow;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientRequest, CompleteRequestParams, CompleteResult, ErrorCode, ErrorData,
    GetExtensions, GetPromptRequest, GetPromptRequestParams, GetPromptResult, InputRequiredResult,
    JsonObject, Prompt, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, RequestId, RequestMetaObject, Resource, ResourceTemplate,
    ServerCapabilities, ServerResult, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, CreateTaskResult, GetTaskParams, GetTaskRequest,
    GetTaskResult, InputResponses, TASKS_EXTENSION_ID, TaskPayload, UpdateTaskParams,
    UpdateTaskRequest,
};
use rmcp::service::RxJsonRpcMessage;
use rmcp::service::{ClientLifecycleMode, Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::IntoTransport;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientServiceExt, RoleClient};
use serde_json::Value;
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use toolgate_core::error::InputViolations;
use toolgate_core::secret::Secret;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{ToolError, ToolInvokeContext, User};
use toolgate_hooks::secrets::Scrubber;
use tracing::Instrument;

use super::direct::Direct;
use super::failure::{Refusal, connect_failure, is_connection_failure, refusal, request_failure};
use super::frames::Frames;
use super::http_pool;
use super::input::ask_caller;
use super::per_caller::CallerLinks;
use super::relay::{Relay, Routes, Subscriber, UpstreamClient};
use super::stdio::{MAX_MESSAGE_BYTES, OVERSIZED_ANSWER, Oversized, StdioUpstream};
use super::streams::StreamTagging;
use super::{UpstreamConfig, UpstreamTransport};
use crate::caller::{
    CallerKey, CallerRequest, InputRound, ResourceCheck, UPSTREAM_TASK, UpstreamTask,
    missing_capability,
};

type Session = RunningService<RoleClient, UpstreamClient>;

/// The error code of a resource the upstream does not have.
pub(crate) const RESOURCE_NOT_FOUND: &str = "resource_not_found";
/// The error code of a subscription asked of an upstream that did not declare
/// `resources.subscribe`: it is not sent there.
pub(crate) const SUBSCRIPTIONS_UNSUPPORTED: &str = "subscriptions_unsupported";
/// The error code of an unsubscription from an upstream the caller's session is not
/// subscribed to the resource on: it is not sent there.
pub(crate) const NOT_SUBSCRIBED: &str = "not_subscribed";

/// How many rounds of `input_required` results toolgate fulfils for one call of a caller
/// that cannot take them (2025-11-25), asking it each request, before it gives up.
const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;

/// What [`Link::revision`] holds: the revision of the current connection, not known yet
/// (it has not connected), 2025-11-25 or 2026-07-28.
const UNKNOWN: u8 = 0;
const SPEAKS_2025: u8 = 1;
const SPEAKS_2026: u8 = 2;

/// How long one call may wait for an upstream that is down to come back.
const MAX_WAIT_PER_CALL: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Default)]
struct State {
    session: Option<Session>,
    /// `tools/call` on the session's connection from the calling task (HTTP only).
    direct: Option<Arc<Direct>>,
    /// The tools the upstream lists on this connection: known for the legacy one, where
    /// a 2025-11-25 caller's call goes only for a tool the upstream has at 2025-11-25.
    tools: HashSet<String>,
    /// Consecutive failed connection attempts.
    failures: u32,
    /// No new attempt before this instant.
    retry_at: Option<Instant>,
    /// Why the latest attempt failed (scrubbed), while attempts fail: told to whoever
    /// sets the upstream up (`toolgate check`, the gateway's start), never to a caller.
    last_failure: Option<String>,
    /// Counts connections, so a failure forgets only the connection it happened on.
    generation: u64,
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
}

impl Channel {
    fn new(server: &str, legacy: bool, asks_callers: bool) -> Self {
        Channel {
            legacy,
            asks_callers,
            routes: Arc::new(Routes::new(server)),
            state: Mutex::default(),
            oversized: Arc::default(),
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
}

/// The name of an upstream's tasks tool, set once it is registered; shared by the
/// upstream's connections.
pub(crate) type TasksTool = Arc<std::sync::OnceLock<String>>;

/// The shortest and longest wait between two `tasks/get` of a task toolgate polls itself.
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

impl Link {
    pub fn new(config: UpstreamConfig, credential: Option<String>) -> Self {
        let tasks_tool = TasksTool::default();
        let callers = config
            .per_caller
            .as_ref()
            .map(|per_caller| CallerLinks::new(&config, per_caller));
        let name = config.name.clone();
        // Only a request on a call's own response stream names the caller it is for.
        let relays_requests = matches!(config.transport, UpstreamTransport::Http { .. });
        Link {
            scrubber: config.scrubber(),
            config,
            credential,
            current: Channel::new(&name, false, relays_requests),
            legacy: Channel::new(&name, true, relays_requests),
            plain: Channel::new(&name, true, false),
            revision: AtomicU8::new(UNKNOWN),
            callers,
            tasks_tool,
        }
    }

    /// The link of one caller, with `credential`: scrubbed from what comes back as well
    /// as the configuration's own credentials.
    pub fn for_caller(config: UpstreamConfig, credential: Secret) -> Self {
        let mut secrets = config.secrets();
        secrets.push(credential.clone());
        let mut link = Link::new(config, Some(credential.expose().to_owned()));
        link.scrubber = Scrubber::for_secrets(&secrets);
        link
    }

    /// The link `ctx`'s call goes on: this one, or for an upstream called as the caller,
    /// the caller's own (its credential obtained now, or remembered).
    ///
    /// # Errors
    ///
    /// The credential source's, when the caller cannot have one.
    pub async fn as_caller(
        self: &Arc<Self>,
        ctx: &ToolInvokeContext,
    ) -> Result<Arc<Link>, ToolError> {
        match &self.callers {
            None => Ok(Arc::clone(self)),
            Some(callers) => {
                callers
                    .link(ctx, |config, credential| {
                        let mut link = Link::for_caller(config, credential);
                        link.tasks_tool = Arc::clone(&self.tasks_tool);
                        link
                    })
                    .await
            }
        }
    }

    /// The per-caller connections held now (none for an upstream not called as each
    /// caller).
    pub fn held_caller_links(&self) -> Vec<Arc<Link>> {
        self.callers
            .as_ref()
            .map_or_else(Vec::new, CallerLinks::held_links)
    }

    /// How many per-caller connections are held.
    pub fn caller_links(&self) -> u64 {
        self.callers.as_ref().map_or(0, CallerLinks::held)
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

    /// `text` without the upstream's credentials: for log lines and error messages.
    pub fn scrubbed(&self, mut text: String) -> String {
        self.scrubber.scrub_string(&mut text);
        text
    }

    /// A call's result without the upstream's credentials, before the pipeline sees it:
    /// an upstream that echoes its token (or leaks it in an error) cannot get it to the
    /// caller, a cache entry, an audit record or a log line.
    pub fn scrub(&self, result: Result<Value, ToolError>) -> Result<Value, ToolError> {
        if self.scrubber.is_empty() {
            return result;
        }
        match result {
            Ok(mut output) => {
                if self.scrubber.scrub_value(&mut output) > 0 {
                    tracing::warn!(server = %self.config.name, "the MCP server's answer contained its own credential; it was scrubbed");
                }
                Ok(output)
            }
            Err(mut error) => {
                self.scrubber.scrub_error(&mut error);
                Err(error)
            }
        }
    }

    /// A discovered tool's definition without the upstream's credentials.
    pub fn scrub_definition(&self, mut definition: ToolDefinition) -> ToolDefinition {
        if self.scrubber.is_empty() {
            return definition;
        }
        self.scrubber.scrub_string(&mut definition.description);
        if let Some(title) = &mut definition.title {
            self.scrubber.scrub_string(title);
        }
        self.scrubber.scrub_value(&mut definition.input_schema);
        if let Some(schema) = &mut definition.output_schema {
            self.scrubber.scrub_value(schema);
        }
        definition
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
    /// until `deadline` and [`MAX_WAIT_PER_CALL`] for an upstream that is down.
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
                state.session = None;
                state.direct = None;
            }
            let now = Instant::now();
            if let Some(retry_at) = state.retry_at.filter(|t| *t > now) {
                if retry_at >= wait_until {
                    return Err(self.unavailable(retry_at - now));
                }
                tokio::time::sleep_until(retry_at).await;
            }
            let attempt_deadline = deadline.min(Instant::now() + self.config.connect_timeout);
            // A connection outlives the call that opened it: its tasks' spans get a root
            // of their own, not the call's (which they would otherwise keep open).
            let connect = self.connect(channel, state.generation + 1).instrument(
                tracing::info_span!(parent: None, "mcp.connection", server = %self.config.name),
            );
            match tokio::time::timeout_at(attempt_deadline, connect).await {
                Ok(Ok((session, direct, tools))) => {
                    if state.failures > 0 {
                        tracing::info!(server = %self.config.name, "MCP server reconnected");
                    }
                    state.failures = 0;
                    state.retry_at = None;
                    state.last_failure = None;
                    state.session = Some(session);
                    state.direct = direct;
                    state.tools = tools;
                    state.generation += 1;
                }
                failed => {
                    let reason = match failed {
                        Ok(Err(reason)) => self.scrubbed(reason),
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

    fn unavailable(&self, wait: std::time::Duration) -> ToolError {
        busy(
            "upstream_unavailable",
            wait,
            format!("MCP server `{}` is unavailable", self.config.name),
        )
    }

    /// A new connection on `channel`, which will be its `generation`, with its calls
    /// from the calling task (HTTP); for the legacy channel, with the names of the tools
    /// the upstream lists on it.
    async fn connect(
        &self,
        channel: &Channel,
        generation: u64,
    ) -> Result<(Session, Option<Arc<Direct>>, HashSet<String>), String> {
        let (session, direct) = self.open(channel, generation).await?;
        if !channel.legacy {
            let modern = session
                .peer()
                .peer_info()
                .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28);
            let revision = if modern { SPEAKS_2026 } else { SPEAKS_2025 };
            self.revision.store(revision, Ordering::Relaxed);
            return Ok((session, direct, HashSet::new()));
        }
        let tools = session
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| request_failure(&e))?;
        Ok((
            session,
            direct,
            tools.into_iter().map(|t| t.name.into_owned()).collect(),
        ))
    }

    async fn open(
        &self,
        channel: &Channel,
        generation: u64,
    ) -> Result<(Session, Option<Arc<Direct>>), String> {
        let connection = channel.routes.next_connection();
        match &self.config.transport {
            UpstreamTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                if let (Some(var), Some(value)) = (&self.config.credential_env, &self.credential) {
                    cmd.env(var, value);
                }
                let (transport, stderr) =
                    StdioUpstream::start(cmd, generation, Arc::clone(&channel.oversized))
                        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(relay_stderr(
                        self.config.name.clone(),
                        self.scrubber.clone(),
                        stderr,
                    ));
                }
                let (frames, _) =
                    self.frames(channel, connection, transport.into_transport(), false);
                let session = self
                    .client(channel, connection)
                    .serve_with_lifecycle(frames, self.lifecycle(channel))
                    .await
                    .map_err(|e| connect_failure(&e))?;
                Ok((session, None))
            }
            UpstreamTransport::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = &self.credential {
                    config = config.auth_header(token.clone());
                }
                let http = StreamTagging::over(http_pool::shared().map_err(|e| e.to_string())?);
                let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
                let (frames, side_door) = self.frames(channel, connection, transport, true);
                let client = self.client(channel, connection);
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

    fn client(&self, channel: &Channel, connection: u64) -> UpstreamClient {
        UpstreamClient {
            routes: Arc::clone(&channel.routes),
            connection,
            asks_callers: channel.asks_callers,
        }
    }

    /// Drops the connection if it is still the one that failed.
    async fn forget(&self, channel: &Channel, generation: u64) {
        let mut state = channel.state.lock().await;
        if state.generation == generation {
            state.session = None;
            state.direct = None;
        }
    }

    /// Every tool the upstream lists.
    pub async fn list_tools(&self, deadline: Instant) -> Result<Vec<Tool>, ToolError> {
        let (peer, generation) = self.peer(&self.current, deadline).await?;
        match tokio::time::timeout_at(deadline, peer.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(self.failed(&self.current, generation, e).await),
            Err(_) => Err(ToolError::Timeout {
                after: self.config.connect_timeout,
            }),
        }
    }

    /// The upstream's capabilities, once connected.
    pub async fn capabilities(&self, deadline: Instant) -> Option<ServerCapabilities> {
        let (peer, _) = self.peer(&self.current, deadline).await.ok()?;
        peer.peer_info().map(|info| info.capabilities.clone())
    }

    /// Every prompt the upstream lists.
    pub async fn list_prompts(&self, deadline: Instant) -> Result<Vec<Prompt>, ToolError> {
        self.request(&self.current, deadline, |peer| async move {
            peer.list_all_prompts().await
        })
        .await
    }

    /// Gets a prompt by its upstream name, for the invocation `ctx`: an `input_required`
    /// answer is the caller's to fulfil, as for a tool ([`rounds`](Self::rounds)).
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: JsonObject,
        deadline: Instant,
        ctx: &ToolInvokeContext,
    ) -> Result<GetPromptResult, ToolError> {
        let caller = ctx.try_get::<CallerKey>();
        let channel = self.channel_for(caller.as_deref());
        self.rounds(ctx, deadline, |round| {
            let mut params =
                GetPromptRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
            if let Some(round) = round {
                params.input_responses = Some(round.responses);
                params.request_state = round.state;
            }
            let caller = caller.clone();
            async move {
                let answer = self
                    .request(channel, deadline, |peer| async move {
                        let options = Self::options_for(&peer, caller.as_deref());
                        let request =
                            ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
                        peer.send_request_with_option(request, options)
                            .await?
                            .await_response()
                            .await
                    })
                    .await?;
                match answer {
                    ServerResult::GetPromptResult(result) => Ok(result),
                    ServerResult::InputRequiredResult(asked) => Err(input_required(asked)),
                    _ => Err(ToolError::execution(format!(
                        "MCP server `{}` answered `prompts/get` with something other than a prompt",
                        self.config.name
                    ))),
                }
            }
        })
        .await
    }

    /// Every resource the upstream lists, to `caller`.
    pub async fn list_resources(
        &self,
        caller: Option<&CallerRequest>,
        deadline: Instant,
    ) -> Result<Vec<Resource>, ToolError> {
        self.request(self.channel_for(caller), deadline, |peer| async move {
            peer.list_all_resources().await
        })
        .await
    }

    /// Every resource template the upstream lists, to `caller`.
    pub async fn list_resource_templates(
        &self,
        caller: Option<&CallerRequest>,
        deadline: Instant,
    ) -> Result<Vec<ResourceTemplate>, ToolError> {
        self.request(self.channel_for(caller), deadline, |peer| async move {
            peer.list_all_resource_templates().await
        })
        .await
    }

    /// Reads a resource. An upstream that answers `input_required` for a resource gets
    /// its requests to the caller as an error (rounds of resource reads are not relayed).
    pub async fn read_resource(
        &self,
        uri: &str,
        caller: Option<&CallerRequest>,
        deadline: Instant,
    ) -> Result<ReadResourceResult, ToolError> {
        let params = ReadResourceRequestParams::new(uri.to_owned());
        self.request(self.channel_for(caller), deadline, |peer| async move {
            peer.read_resource_once(params).await
        })
        .await
        .and_then(|answer| match answer {
            ReadResourceResponse::Complete(result) => Ok(result),
            ReadResourceResponse::InputRequired(asked) => Err(input_required(asked)),
            _ => Err(ToolError::execution(format!(
                "MCP server `{}` answered `resources/read` with something other than contents",
                self.config.name
            ))),
        })
        .map_err(|e| match e {
            // The URI is the only parameter: a server that refuses it (as 2026-07-28
            // servers and some SDKs do for an unknown resource) does not have it.
            ToolError::InvalidInput(violations) => {
                ToolError::abort(violations.to_string(), RESOURCE_NOT_FOUND, 404)
            }
            other => other,
        })
    }

    /// Completion suggestions for an argument (scrubbed by the tool that asks, as every
    /// answer of the upstream is).
    pub async fn complete(
        &self,
        request: CompleteRequestParams,
        deadline: Instant,
    ) -> Result<CompleteResult, ToolError> {
        self.request(&self.current, deadline, |peer| async move {
            peer.complete(request).await
        })
        .await
    }

    /// Subscribes `caller`'s session to resource `uri` (the upstream once, for its first
    /// subscriber); `notifications/resources/updated` for it is relayed to every session
    /// subscribed. A subscription lasts until unsubscribed, the session ends, or the
    /// upstream connection is re-established (subscribe again then).
    ///
    /// The upstream is asked only when it declared `resources.subscribe`
    /// ([`SUBSCRIPTIONS_UNSUPPORTED`] otherwise) and has the resource, as the caller's
    /// [`ResourceCheck`](crate::ResourceCheck) finds out ([`serves`](Self::serves);
    /// [`RESOURCE_NOT_FOUND`] otherwise): no subscription to a URI goes to an upstream
    /// that does not serve it.
    pub async fn subscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
        user: Arc<User>,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let channel = self.subscription_channel();
        // A resource someone here is subscribed to is known to be the upstream's.
        if !channel.routes.watched(uri) {
            if !self.takes_subscriptions(deadline).await? {
                return Err(ToolError::abort(
                    format!(
                        "MCP server `{}` does not support resource subscriptions",
                        self.config.name
                    ),
                    SUBSCRIPTIONS_UNSUPPORTED,
                    404,
                ));
            }
            if !self.serves(uri, caller, deadline).await? {
                return Err(ToolError::abort(
                    self.scrubbed(format!(
                        "MCP server `{}` does not have resource `{uri}`",
                        self.config.name
                    )),
                    RESOURCE_NOT_FOUND,
                    404,
                ));
            }
        }
        if !channel.routes.subscribe(uri, caller, user) {
            return Ok(());
        }
        let params = SubscribeRequestParams::new(uri.to_owned());
        let subscribed = self
            .request(channel, deadline, |peer| async move {
                peer.subscribe(params).await
            })
            .await;
        if subscribed.is_err() {
            channel.routes.unsubscribe(uri, &caller.session_id);
        }
        subscribed
    }

    /// Unsubscribes `caller`'s session from resource `uri` (the upstream too, when no
    /// session is left); [`NOT_SUBSCRIBED`], and nothing sent, when the session is not
    /// subscribed to it here.
    pub async fn unsubscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let channel = self.subscription_channel();
        if !channel.routes.is_subscribed(uri, &caller.session_id) {
            return Err(ToolError::abort(
                self.scrubbed(format!(
                    "not subscribed to resource `{uri}` on MCP server `{}`",
                    self.config.name
                )),
                NOT_SUBSCRIBED,
                404,
            ));
        }
        if !channel.routes.unsubscribe(uri, &caller.session_id) {
            return Ok(());
        }
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        self.request(channel, deadline, |peer| async move {
            peer.unsubscribe(params).await
        })
        .await
    }

    /// Whether the upstream declared `resources.subscribe` (on the connection
    /// subscriptions go on).
    async fn takes_subscriptions(&self, deadline: Instant) -> Result<bool, ToolError> {
        let (peer, _) = self.peer(self.subscription_channel(), deadline).await?;
        Ok(peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        }))
    }

    /// Whether the upstream has resource `uri`, by what it answers `caller`: it lists it,
    /// or else answers `resources/read` for it (as a read is routed: an upstream that
    /// answers "not found" does not have it; another failure is the answer) — or only
    /// one of the two, as the caller's [`ResourceCheck`](crate::ResourceCheck) says.
    async fn serves(
        &self,
        uri: &str,
        caller: &CallerRequest,
        deadline: Instant,
    ) -> Result<bool, ToolError> {
        if caller.resource_check != ResourceCheck::Read {
            // An upstream that lists nothing (or fails to) may still serve it from a
            // template.
            let listed = self.list_resources(Some(caller), deadline).await;
            if listed.is_ok_and(|resources| resources.iter().any(|r| r.uri == uri)) {
                return Ok(true);
            }
        }
        if caller.resource_check == ResourceCheck::Listed {
            return Ok(false);
        }
        match self.read_resource(uri, Some(caller), deadline).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == RESOURCE_NOT_FOUND => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves the resource subscriptions made through this connection to `next` — the
    /// same upstream's connection in the configuration that replaces this one — for the
    /// subscribers `may_read` still allows; the others end (no update reaches them any
    /// more). Nobody is left here, so the upstream is unsubscribed here from every
    /// resource; on `next`, it is subscribed to each resource someone moved to. How many
    /// subscriptions moved, and how many ended.
    pub async fn hand_over_subscriptions(
        &self,
        next: Option<&Link>,
        may_read: &(dyn Fn(&User) -> bool + Sync),
    ) -> (usize, usize) {
        let (mut moved, mut ended) = (0, 0);
        for channel in [&self.current, &self.legacy] {
            for (uri, subscribers) in channel.routes.take_all() {
                for subscriber in subscribers {
                    let allowed = next.filter(|_| may_read(subscriber.user()));
                    match allowed {
                        Some(next) if next.adopt(&uri, subscriber.clone()).await => moved += 1,
                        _ => {
                            subscriber.end();
                            ended += 1;
                        }
                    }
                }
                self.unsubscribe_upstream(channel, &uri).await;
            }
        }
        (moved, ended)
    }

    /// Ends the resource subscriptions of the subscribers `may_read` refuses (a new
    /// configuration withdrew their access): no update reaches them any more, and the
    /// upstream is unsubscribed from a resource left without subscribers. How many
    /// subscriptions ended.
    pub async fn end_subscriptions_unless(
        &self,
        may_read: &(dyn Fn(&User) -> bool + Sync),
    ) -> usize {
        let mut ended = 0;
        for channel in [&self.current, &self.legacy] {
            let (unsubscribe, n) = channel.routes.end_unless(may_read);
            ended += n;
            for uri in unsubscribe {
                self.unsubscribe_upstream(channel, &uri).await;
            }
        }
        ended
    }

    /// Takes in a subscription to `uri` made on another connection to this upstream,
    /// subscribing the upstream when it is the first; whether it holds.
    async fn adopt(&self, uri: &str, subscriber: Subscriber) -> bool {
        let channel = self.subscription_channel();
        let key: Arc<str> = Arc::from(subscriber.key());
        if !channel.routes.adopt(uri, subscriber) {
            return true;
        }
        let deadline = Instant::now() + self.config.call_timeout;
        let params = SubscribeRequestParams::new(uri.to_owned());
        let subscribed = self
            .request(channel, deadline, |peer| async move {
                peer.subscribe(params).await
            })
            .await;
        if let Err(e) = &subscribed {
            tracing::warn!(server = %self.config.name, %uri, error = %e, "a subscription could not be moved to the new configuration's connection; it ended");
            channel.routes.unsubscribe(uri, &key);
        }
        subscribed.is_ok()
    }

    /// Unsubscribes the upstream from `uri` on `channel`, where nobody watches it any
    /// more; a failure is only logged (the subscribers are gone either way).
    async fn unsubscribe_upstream(&self, channel: &Channel, uri: &str) {
        let deadline = Instant::now() + self.config.call_timeout;
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        let unsubscribed = self
            .request(channel, deadline, |peer| async move {
                peer.unsubscribe(params).await
            })
            .await;
        if let Err(e) = unsubscribed {
            tracing::warn!(server = %self.config.name, %uri, error = %e, "the MCP server could not be unsubscribed from a resource nobody watches on this connection any more");
        }
    }

    /// One request other than `tools/call`, with the deadline and the upstream's refusals
    /// as errors a caller can act on. Not sent again: these are cheap to ask again.
    async fn request<T, F, Fut>(
        &self,
        channel: &Channel,
        deadline: Instant,
        send: F,
    ) -> Result<T, ToolError>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let started = Instant::now();
        let (peer, generation) = self.peer(channel, deadline).await?;
        match tokio::time::timeout_at(deadline, send(peer)).await {
            Err(_) => Err(self.timed_out(started)),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(self.refused(e)),
            Ok(Err(e)) => Err(self.failed(channel, generation, e).await),
        }
    }

    /// The upstream's refusal of a request that needs a capability the caller did not
    /// declare (2026-07-28: `-32021`), as the caller's error naming what to declare
    /// ([`MISSING_CAPABILITY`], 400; over MCP, `-32021` again).
    fn missing_capability(&self, e: &ErrorData, caller: Option<&CallerRequest>) -> ToolError {
        let required = e
            .data
            .as_ref()
            .and_then(|data| data.get("requiredCapabilities"))
            .cloned();
        let who = format!("MCP server `{}`", self.config.name);
        let (mut error, mut refusal) = missing_capability(&who, required);
        self.scrubber.scrub_error(&mut error);
        refusal.message = self.scrubbed(refusal.message.into_owned()).into();
        if let Some(caller) = caller {
            caller.refusal.set(refusal);
        }
        error
    }

    /// The error of a request whose answer was too long to read, answered in its place
    /// ([`OVERSIZED_ANSWER`]): the upstream's failure, and this call's alone.
    fn oversized_answer(&self) -> ToolError {
        ToolError::execution(format!(
            "MCP server `{}` answered with more than {} MiB, more than toolgate reads: ask it for less; its connection stays open for other calls",
            self.config.name,
            MAX_MESSAGE_BYTES / (1024 * 1024)
        ))
    }

    /// The upstream's JSON-RPC error as a toolgate error: a resource it does not have is
    /// `resource_not_found` (404), a bad parameter `invalid_input` (400), anything else
    /// the upstream's failure.
    fn refused(&self, e: ErrorData) -> ToolError {
        if is_oversized_answer(&e) {
            return self.oversized_answer();
        }
        let message = self.scrubbed(format!(
            "MCP server `{}` refused the request: {}",
            self.config.name, e.message
        ));
        match e.code {
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY => self.missing_capability(&e, None),
            ErrorCode::RESOURCE_NOT_FOUND => ToolError::abort(message, RESOURCE_NOT_FOUND, 404),
            ErrorCode::INVALID_PARAMS => ToolError::InvalidInput(InputViolations::one("", message)),
            _ => ToolError::execution(message),
        }
    }

    /// Calls a tool upstream by its upstream name, for the invocation `ctx`. What the
    /// upstream sends about the call — progress, log messages, sampling and elicitation
    /// requests — is relayed to the invocation's MCP caller, and an `input_required`
    /// answer is the caller's to fulfil ([`rounds`](Self::rounds)). Dropping the future
    /// cancels the upstream call (`notifications/cancelled`). `arguments_in_headers`:
    /// the tool's schema sends arguments in headers too (`x-mcp-header`), which rmcp
    /// writes, so the call goes through rmcp ([`Direct`]).
    pub async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
        arguments_in_headers: bool,
        deadline: Instant,
        ctx: &ToolInvokeContext,
    ) -> Result<CallToolResult, ToolError> {
        let caller = ctx.try_get::<CallerKey>();
        self.rounds(ctx, deadline, |round| {
            let call = Call {
                name,
                arguments: &arguments,
                round,
                caller: caller.clone(),
                direct: !arguments_in_headers,
            };
            self.call_once(call, deadline)
        })
        .await
    }

    /// Runs `once` — one request to the upstream, with the caller's answers to the last
    /// round — until the upstream answers more than `input_required`. An MCP caller of
    /// 2026-07-28 gets the `input_required` error to fulfil itself (its retry is a new
    /// invocation); an MCP caller of 2025-11-25 is asked each request on its connection,
    /// and the request is made again with its answers, at most [`MAX_ROUNDS`] times. A
    /// result made with the caller's answers is not for a cache ([`set_no_store`]).
    ///
    /// [`set_no_store`]: ToolInvokeContext::set_no_store
    async fn rounds<T, F, Fut>(
        &self,
        ctx: &ToolInvokeContext,
        deadline: Instant,
        mut once: F,
    ) -> Result<T, ToolError>
    where
        F: FnMut(Option<InputRound>) -> Fut,
        Fut: Future<Output = Result<T, ToolError>>,
    {
        let caller = ctx.try_get::<CallerKey>();
        let mut round = caller.as_ref().and_then(|c| c.round.clone());
        let mut rounds = 0;
        loop {
            match once(round.take()).await {
                Err(ToolError::InputRequired { requests, state }) => {
                    let Some(caller) = caller.as_ref().filter(|c| !c.input_required_results) else {
                        return Err(ToolError::InputRequired { requests, state });
                    };
                    if rounds == MAX_ROUNDS {
                        return Err(ToolError::execution(format!(
                            "MCP server `{}` still asked for input after {MAX_ROUNDS} rounds of answers; the call was given up",
                            self.config.name
                        )));
                    }
                    rounds += 1;
                    ctx.set_no_store();
                    let responses =
                        ask_caller(caller, requests, deadline, &self.config.name).await?;
                    round = Some(InputRound { responses, state });
                }
                answer => return answer,
            }
        }
    }

    /// What the upstream is told about the caller with each request, at 2026-07-28 (in
    /// the request's `_meta`; a 2025-11-25 upstream was told at `initialize`): what the
    /// caller can answer — nothing without an MCP caller — and the log level it asked for.
    fn options_for(peer: &Peer<RoleClient>, caller: Option<&CallerRequest>) -> PeerRequestOptions {
        let modern = peer
            .peer_info()
            .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28);
        if !modern {
            return PeerRequestOptions::no_options();
        }
        let mut meta = RequestMetaObject::new();
        meta.set_client_capabilities(caller.map_or_else(
            ClientCapabilities::default,
            CallerRequest::relayed_capabilities,
        ));
        if let Some(level) = caller.and_then(|c| c.log_level) {
            meta.set_log_level(level);
        }
        PeerRequestOptions::no_options().with_meta(meta)
    }

    /// One `tools/call` upstream: from the calling task when the connection can
    /// ([`Direct`]), else through rmcp.
    async fn call_once(
        &self,
        call: Call<'_>,
        deadline: Instant,
    ) -> Result<CallToolResult, ToolError> {
        let started = Instant::now();
        // A request that could not be sent never ran: it is safe to send it again once,
        // on a new connection. A request lost after it was sent is not retried.
        let channel = self
            .channel_for_tool(call.name, call.caller.as_deref(), deadline)
            .await?;
        let caller = call.caller.as_deref();
        for attempt in 0..2 {
            let Connected {
                peer,
                generation,
                direct,
            } = self.connected(channel, deadline).await?;
            let options = crate::trace_context::inject(Self::options_for(&peer, caller));
            // The route goes on the wire with the request: what the upstream sends about
            // the call reaches this caller, and no other, while `relay` lives.
            let (mut relay, ticket) = Relay::new(call.caller.clone());
            let prepared = direct
                .as_ref()
                .filter(|_| call.direct && !Self::answers_requests_at_2026(&peer, caller))
                .and_then(|direct| {
                    let progress = caller.is_some_and(|c| c.progress_token.is_some());
                    let prepared = direct.prepare(&peer, call.params(), &options, progress)?;
                    Some((direct, prepared))
                });
            if let Some((direct, prepared)) = prepared {
                let mut cancel = CancelOnDrop {
                    peer: peer.clone(),
                    id: Some(prepared.id.clone()),
                };
                let answered = tokio::time::timeout_at(
                    deadline,
                    relayed(&mut relay, direct.send(prepared, ticket.clone())),
                )
                .await;
                // `None`: not taken (the session expired); through rmcp, which sets up a
                // new one.
                if let Some(answered) = answered.transpose() {
                    if answered.is_ok() {
                        cancel.id = None;
                    }
                    return self
                        .answer(channel, generation, caller, answered, (started, deadline))
                        .await;
                }
                cancel.id = None;
            }
            let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(call.params()));
            request.extensions_mut().insert(ticket);
            let sent =
                tokio::time::timeout_at(deadline, peer.send_request_with_option(request, options))
                    .await;
            let handle = match sent {
                Err(_) => return Err(self.timed_out(started)),
                Ok(Ok(handle)) => handle,
                Ok(Err(e)) if attempt == 0 => {
                    let error = self.scrubbed(request_failure(&e));
                    tracing::warn!(server = %self.config.name, %error, "could not send the call; reconnecting");
                    self.forget(channel, generation).await;
                    continue;
                }
                Ok(Err(e)) => return Err(self.broken(channel, generation, e)),
            };
            let mut cancel = CancelOnDrop {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
            };
            let answered =
                tokio::time::timeout_at(deadline, relayed(&mut relay, handle.await_response()))
                    .await;
            if answered.is_ok() {
                cancel.id = None;
            }
            return self
                .answer(channel, generation, caller, answered, (started, deadline))
                .await;
        }
        Err(ToolError::transient(format!(
            "MCP server `{}` could not be reached; try again",
            self.config.name
        )))
    }

    /// Whether `caller` can answer the upstream's requests on a 2026-07-28 connection:
    /// rmcp answers such a request only on the stream of a request it sent itself
    /// (SEP-2260), so the call goes through rmcp.
    fn answers_requests_at_2026(peer: &Peer<RoleClient>, caller: Option<&CallerRequest>) -> bool {
        caller.is_some_and(CallerRequest::answers_requests)
            && peer
                .peer_info()
                .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28)
    }

    /// The call's answer (`answered`: within the deadline or not), as the caller's result
    /// or error; a connection that failed under it is forgotten. A task (SEP-2663) is
    /// left for the server to hand to a caller that takes tasks ([`UPSTREAM_TASK`]);
    /// for any other caller toolgate polls it to its end, within the call's deadline.
    async fn answer(
        &self,
        channel: &Channel,
        generation: u64,
        caller: Option<&CallerRequest>,
        answered: Result<Result<ServerResult, ServiceError>, tokio::time::error::Elapsed>,
        (started, deadline): (Instant, Instant),
    ) -> Result<CallToolResult, ToolError> {
        match answered {
            Ok(Ok(ServerResult::CreateTaskResult(mut created))) => {
                created.task.status_message = created.task.status_message.map(|m| self.scrubbed(m));
                let relayed = caller
                    .filter(|c| c.takes_tasks())
                    .zip(self.tasks_tool.get());
                let Some((caller, tasks_tool)) = relayed else {
                    return self.await_task(created, started, deadline).await;
                };
                caller.upstream_task.set(UpstreamTask {
                    tasks_tool: tasks_tool.clone(),
                    upstream_id: created.task.task_id.clone(),
                    created,
                });
                Err(ToolError::abort(
                    format!(
                        "MCP server `{}` runs the call as a task: poll it with `tasks/get`",
                        self.config.name
                    ),
                    UPSTREAM_TASK,
                    202,
                ))
            }
            Err(_) => Err(self.timed_out(started)),
            Ok(Err(ServiceError::McpError(e)))
                if e.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                Err(self.missing_capability(&e, caller))
            }
            Ok(Err(ServiceError::McpError(e))) if is_oversized_answer(&e) => {
                Err(self.oversized_answer())
            }
            Ok(Err(ServiceError::McpError(e))) => Err(ToolError::execution(format!(
                "MCP server `{}` refused the call: {}",
                self.config.name, e.message
            ))),
            Ok(Err(e)) => Err(self.failed(channel, generation, e).await),
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
            Ok(Ok(ServerResult::InputRequiredResult(asked))) => Err(input_required(asked)),
            Ok(Ok(_)) => Err(ToolError::execution(format!(
                "MCP server `{}` answered the call with something other than a tool result",
                self.config.name
            ))),
        }
    }

    /// `request` (a `tasks/*` request) to the upstream, declaring the tasks extension in
    /// its `_meta`, as the extension requires of every `tasks/*` request.
    async fn task_request(
        &self,
        request: ClientRequest,
        deadline: Instant,
    ) -> Result<ServerResult, ToolError> {
        self.request(&self.current, deadline, |peer| async move {
            peer.send_request_with_option(request, tasks_options())
                .await?
                .await_response()
                .await
        })
        .await
    }

    /// `tasks/get` of the upstream's task `id`.
    ///
    /// # Errors
    ///
    /// The upstream's refusal (`invalid_input` for a task it does not know), or the
    /// request's failure.
    pub async fn get_task(&self, id: &str, deadline: Instant) -> Result<GetTaskResult, ToolError> {
        let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id)));
        match self.task_request(request, deadline).await? {
            ServerResult::GetTaskResult(task) => Ok(task),
            _ => Err(self.unexpected("tasks/get")),
        }
    }

    /// `tasks/cancel` of the upstream's task `id`.
    ///
    /// # Errors
    ///
    /// As [`get_task`](Self::get_task).
    pub async fn cancel_task(&self, id: &str, deadline: Instant) -> Result<(), ToolError> {
        let request =
            ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(id)));
        self.task_request(request, deadline).await.map(drop)
    }

    /// `tasks/update` of the upstream's task `id`: the caller's answers to what the task
    /// asked.
    ///
    /// # Errors
    ///
    /// As [`get_task`](Self::get_task).
    pub async fn update_task(
        &self,
        id: &str,
        responses: InputResponses,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let request = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
            UpdateTaskParams::new(id, responses),
        ));
        self.task_request(request, deadline).await.map(drop)
    }

    fn unexpected(&self, method: &str) -> ToolError {
        ToolError::execution(format!(
            "MCP server `{}` answered `{method}` with something else than its result",
            self.config.name
        ))
    }

    /// The end of the upstream's task `created`, polled with `tasks/get` for a caller
    /// that does not take tasks: its result, or an error when it failed, was
    /// cancelled, asks for input (which such a caller cannot give in a task) or does not
    /// end by `deadline`. A task given up before it ends — at the deadline, or the call
    /// dropped — is cancelled upstream.
    async fn await_task(
        &self,
        created: CreateTaskResult,
        started: Instant,
        deadline: Instant,
    ) -> Result<CallToolResult, ToolError> {
        let id = created.task.task_id;
        let mut interval = created.task.poll_interval_ms;
        // Nobody will ask for the task once this call is given up — at its deadline, or
        // dropped — so the upstream may stop its work.
        let (peer, _) = self.peer(&self.current, deadline).await?;
        let mut cancel = CancelTaskOnDrop {
            peer,
            id: Some(id.clone()),
        };
        loop {
            let wait = interval
                .map_or(POLL_BOUNDS.0, Duration::from_millis)
                .clamp(POLL_BOUNDS.0, POLL_BOUNDS.1);
            if Instant::now() + wait >= deadline {
                return Err(self.timed_out(started));
            }
            tokio::time::sleep(wait).await;
            let task = self.get_task(&id, deadline).await?.task;
            interval = task.task.poll_interval_ms;
            let name = &self.config.name;
            if task.status().is_terminal() {
                cancel.id = None;
            }
            match task.payload {
                TaskPayload::Working => continue,
                TaskPayload::Completed { result } => {
                    return serde_json::from_value(Value::Object(result)).map_err(|e| {
                        ToolError::execution(format!(
                            "MCP server `{name}` ended its task with a result that is not a tool result: {e}"
                        ))
                    });
                }
                TaskPayload::Failed { error } => {
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                    return Err(ToolError::execution(self.scrubbed(format!(
                        "MCP server `{name}`: the call's task failed: {message}"
                    ))));
                }
                TaskPayload::Cancelled => {
                    return Err(ToolError::execution(format!(
                        "MCP server `{name}` cancelled the call's task"
                    )));
                }
                _ => {
                    return Err(ToolError::execution(format!(
                        "MCP server `{name}` asks for input in the call's task, which only a caller that declares the tasks extension can give"
                    )));
                }
            }
        }
    }

    fn timed_out(&self, started: Instant) -> ToolError {
        ToolError::Timeout {
            after: started.elapsed(),
        }
    }

    /// The error of a request that failed on connection `generation` of `channel` with
    /// no JSON-RPC answer. An upstream that answered the request with a failure status,
    /// or with a body toolgate cannot read, failed that request alone: the connection
    /// stays, and the other callers on it go on ([`Self::refusal_error`]). Otherwise the
    /// connection failed, and is dropped for the next call to open a new one
    /// ([`Self::broken`]).
    async fn failed(&self, channel: &Channel, generation: u64, e: ServiceError) -> ToolError {
        if e.auth_challenge().is_none()
            && let Some(refused) = refusal(&e)
        {
            let reason = self.scrubbed(request_failure(&e));
            tracing::warn!(server = %self.config.name, %reason, "the MCP server failed a request");
            return self.refusal_error(refused);
        }
        // rmcp fails a request whose own response stream ended before its answer (an
        // upstream that wrote it wrong, or cut it) as if the connection had closed: the
        // connection is dropped only if it did. One that closes later is found closed by
        // the next call ([`Self::connected`]).
        if matches!(e, ServiceError::TransportClosed) && self.still_open(channel, generation).await
        {
            tracing::warn!(server = %self.config.name, "the MCP server ended a request's stream before its answer");
            return busy(
                "upstream_unavailable",
                self.config.backoff.delay(1),
                format!(
                    "MCP server `{}` ended the request's stream before its answer",
                    self.config.name
                ),
            );
        }
        self.forget(channel, generation).await;
        self.broken(channel, generation, e)
    }

    /// Whether connection `generation` of `channel` is still the channel's, and open.
    async fn still_open(&self, channel: &Channel, generation: u64) -> bool {
        let state = channel.state.lock().await;
        state.generation == generation
            && state
                .session
                .as_ref()
                .is_some_and(|session| !session.is_transport_closed() && !session.is_closed())
    }

    /// The caller's error for a request the upstream answered and failed: what it
    /// answered, in words, and none of its body (which may echo what it was sent).
    fn refusal_error(&self, refused: Refusal) -> ToolError {
        let name = &self.config.name;
        let wait = |asked: Option<Duration>| asked.unwrap_or_else(|| self.config.backoff.delay(1));
        match refused {
            Refusal::TooLarge => ToolError::execution(format!(
                "MCP server `{name}` answered with more than toolgate reads"
            )),
            Refusal::Unreadable => ToolError::execution(format!(
                "MCP server `{name}` answered with something other than a JSON-RPC answer to the request"
            )),
            Refusal::Status {
                status: 429,
                retry_after,
            } => busy(
                "upstream_rate_limited",
                wait(retry_after),
                format!(
                    "MCP server `{name}` is limiting toolgate's requests (HTTP 429); try again later"
                ),
            ),
            Refusal::Status {
                status: status @ 502..=504,
                retry_after,
            } => busy(
                "upstream_unavailable",
                wait(retry_after),
                format!("MCP server `{name}` is unavailable (HTTP {status}); try again later"),
            ),
            Refusal::Status {
                status: status @ (401 | 403),
                ..
            } => ToolError::execution(format!(
                "MCP server `{name}` refused the credential toolgate sent it ({}); the operator must check the credential it is given",
                http_status(status)
            )),
            Refusal::Status {
                status: status @ 500..,
                ..
            } => ToolError::transient(format!(
                "MCP server `{name}` failed the request ({})",
                http_status(status)
            )),
            Refusal::Status { status, .. } => ToolError::execution(format!(
                "MCP server `{name}` refused the request ({})",
                http_status(status)
            )),
        }
    }

    /// The error of a request that failed on connection `generation` of `channel`, not
    /// by the upstream's answer. The connection failing is 503 `upstream_unavailable`
    /// with the wait before the next attempt to connect; an upstream that wrote a message
    /// too long to read ended its connection, and is the upstream's failure (502). The
    /// transport's own words go to the log, not to the caller.
    fn broken(&self, channel: &Channel, generation: u64, e: ServiceError) -> ToolError {
        let reason = self.scrubbed(request_failure(&e));
        tracing::warn!(server = %self.config.name, %reason, "a request to the MCP server failed");
        if channel.oversized.ended(generation) {
            return ToolError::execution(format!(
                "MCP server `{}` sent a message of more than {} MiB, more than toolgate reads; its connection was closed and will be opened again for the next call",
                self.config.name,
                MAX_MESSAGE_BYTES / (1024 * 1024)
            ));
        }
        if e.auth_challenge().is_some() {
            // Reached, and refused the credential: waiting does not help.
            return ToolError::execution(format!(
                "MCP server `{}` refused the credential toolgate sent it (HTTP 401 or 403); the operator must check the credential it is given",
                self.config.name
            ));
        }
        if is_connection_failure(&e) {
            return busy(
                "upstream_unavailable",
                self.config.backoff.delay(1),
                format!(
                    "the connection to MCP server `{}` failed; it is being re-established",
                    self.config.name
                ),
            );
        }
        ToolError::transient(format!(
            "MCP server `{}` could not answer: {reason}",
            self.config.name
        ))
    }
}

/// 503 with `code`: the upstream cannot take the request now; the caller may try again
/// after `delay`.
fn busy(code: &'static str, delay: Duration, reason: String) -> ToolError {
    ToolError::RetryAfter {
        delay,
        reason,
        code: Cow::Borrowed(code),
        status: 503,
    }
}

/// `status` with its name, as "HTTP 413 Payload Too Large".
fn http_status(status: u16) -> String {
    match http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(name) => format!("HTTP {status} {name}"),
        None => format!("HTTP {status}"),
    }
}

/// An upstream's `input_required` answer as the caller's error: what it asks, and the
/// upstream's state, which the caller is to send back (sealed by the server first).
fn input_required(asked: InputRequiredResult) -> ToolError {
    let requests = asked.input_requests.unwrap_or_default();
    ToolError::InputRequired {
        requests: serde_json::to_value(requests)
            .unwrap_or_else(|_| Value::Object(Default::default())),
        state: asked.request_state,
    }
}

/// A channel's connection, as [`Link::connected`] hands it out.
struct Connected {
    peer: Peer<RoleClient>,
    /// Which connection of the channel it is.
    generation: u64,
    /// Its calls from the calling task (HTTP only).
    direct: Option<Arc<Direct>>,
}

/// One `tools/call` of a caller's, as [`Link::call_once`] sends it.
struct Call<'a> {
    /// The tool's name at the upstream.
    name: &'a str,
    arguments: &'a JsonObject,
    /// The caller's answers to the upstream's last `input_required` round.
    round: Option<InputRound>,
    caller: Option<Arc<CallerRequest>>,
    /// Whether it may be sent from the calling task ([`Direct`]).
    direct: bool,
}

impl Call<'_> {
    fn params(&self) -> CallToolRequestParams {
        let mut params =
            CallToolRequestParams::new(self.name.to_owned()).with_arguments(self.arguments.clone());
        if let Some(round) = &self.round {
            params.input_responses = Some(round.responses.clone());
            params.request_state = round.state.clone();
        }
        params
    }
}

/// Awaits `answer`, relaying to the caller what the upstream sends about the call as it
/// comes. Only the receiving is raced with the answer; a relay under way finishes (a
/// relay dropped halfway would lose its notification), and what was queued before the
/// answer is relayed before it.
async fn relayed<T>(relay: &mut Relay, answer: impl Future<Output = T>) -> T {
    if !relay.has_caller() {
        return answer.await;
    }
    tokio::pin!(answer);
    loop {
        tokio::select! {
            answer = &mut answer => {
                relay.drain().await;
                return answer;
            }
            relayed = relay.next() => relay.relay(relayed).await,
        }
    }
}

/// Tells the upstream a call was abandoned (deadline, cancellation, the caller gone) when
/// dropped before its answer came.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    /// `None` once answered.
    id: Option<RequestId>,
}

/// The options of a `tasks/*` request: the tasks extension declared in its `_meta`, as the
/// extension requires of every one.
fn tasks_options() -> PeerRequestOptions {
    let mut capabilities = ClientCapabilities::default();
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(capabilities);
    PeerRequestOptions::no_options().with_meta(meta)
}

/// Cancels an upstream task toolgate polls when the poll is given up before the task ends.
struct CancelTaskOnDrop {
    peer: Peer<RoleClient>,
    /// `None` once the task has ended.
    id: Option<String>,
}

impl Drop for CancelTaskOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                    CancelTaskParams::new(id),
                ));
                let cancelled = async {
                    peer.send_request_with_option(request, tasks_options())
                        .await?
                        .await_response()
                        .await
                };
                let _ = tokio::time::timeout(POLL_BOUNDS.1, cancelled).await;
            });
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the call was cancelled at toolgate".to_owned()),
                    ))
                    .await;
            });
        }
    }
}

/// The longest line of a stdio upstream's stderr relayed whole; longer ones are cut.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// Relays a stdio upstream's stderr into the log, one event per line (target
/// `toolgate_mcp::upstream`, level `info`), with the upstream's credentials scrubbed: a
/// program that prints its token on failure does not get it into the log.
async fn relay_stderr(server: String, scrubber: Scrubber, stderr: tokio::process::ChildStderr) {
    use futures::StreamExt;
    use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(MAX_STDERR_LINE));
    while let Some(line) = lines.next().await {
        match line {
            Ok(mut line) => {
                scrubber.scrub_string(&mut line);
                tracing::info!(target: "toolgate_mcp::upstream", %server, "{line}");
            }
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                tracing::info!(target: "toolgate_mcp::upstream", %server, "(a line of more than {MAX_STDERR_LINE} bytes was left out)");
            }
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}

/// Whether `e` is the error toolgate answered in place of an answer too long to read.
fn is_oversized_answer(e: &ErrorData) -> bool {
    (e.data.as_ref()).is_some_and(|data| data.get(OVERSIZED_ANSWER).is_some())
}
