//! One MCP connection (a stdio connection, or a streamable HTTP session): the rmcp
//! `ServerHandler` that routes tools, prompts and resources into the pipeline.

// Logging is deprecated by SEP-2577 for the 2026-07-28 revision; clients on 2025-11-25 still
// set a level with `logging/setLevel`.
#![allow(deprecated)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, CreateTaskResult, CustomRequest,
    CustomResult, ErrorCode, ErrorData, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
    GetTaskResult, Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    Reference, ResourcesCapability, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, TASKS_EXTENSION_ID, UnsubscribeRequestParams,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_core::tool::{ToolDefinition, ToolSource};
use toolgate_core::{InvokeOptions, ToolError, User};
use toolgate_hooks::audit::ClientAddress;
use tracing::Instrument;

use super::ServerInner;
use super::cancellation::{ClientDisconnected, HostShutdown};
use super::features;
use super::listen_gate::{ListenGate, Subscribed};
use super::relayed::Relayed;
use super::rounds::Retry;
use super::span;
use super::tasks;
use crate::caller::{
    CallerKey, CallerRequest, InputRound, MISSING_CAPABILITY, Refusal, ResourceCheck,
    UPSTREAM_TASK, UpstreamTask, UpstreamTaskSlot,
};
use crate::client::{
    CallerAccessToken, NOT_SUBSCRIBED, PROMPT_PREFIX, PROMPT_TAG, RESOURCE_NOT_FOUND,
    RESOURCES_TAG, SUBSCRIPTIONS_UNSUPPORTED, TASKS_TAG, is_tool,
};
use crate::convert::{
    InputShape, decided_result, error_to_result, output_to_result, to_mcp_tool, unknown_tool,
};
use crate::listen_stream::ListenStream;

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// This process's id, read once: every connection's own id names it (`mcp-PID-N`), and a
/// 2026-07-28 request is served by a connection of its own (reading it is a system call).
static PROCESS_ID: std::sync::LazyLock<u32> = std::sync::LazyLock::new(std::process::id);

pub(crate) struct Connection {
    state: Arc<State>,
    /// Where this connection's sessions are registered for their `tools/call` to be
    /// answered in the task of the HTTP request: only on the connection rmcp serves, not
    /// on the handles kept there.
    direct: Option<Arc<dyn SessionRegistry>>,
}

/// Where a connection registers the HTTP sessions it serves, and forgets them when rmcp
/// drops it: the endpoint's table of sessions whose `tools/call` it answers in the task
/// of their HTTP request (`direct.rs`). A trait, so that this handler does not name the
/// endpoint that holds handles on it.
pub(crate) trait SessionRegistry: Send + Sync {
    /// Registers session `id`, served by `connection` with `peer`, unless it is already.
    fn register(&self, id: &str, connection: &Connection, peer: &Peer<RoleServer>);

    /// Forgets the sessions `ids` of `connection` (rmcp dropped it), cancelling their
    /// calls still running in the task of their HTTP request.
    fn forget(&self, ids: &[Arc<str>], connection: &Connection);
}

/// What a connection and its handles share; its sessions end with the last of them.
struct State {
    /// What the connection serves: swapped by the host on a reload
    /// ([`McpHttpService::serve`](super::McpHttpService::serve)).
    current: Arc<ArcSwap<ServerInner>>,
    /// The session id when the transport gives none (stdio).
    own_id: Arc<str>,
    /// The session ids this connection used, ended when it closes.
    sessions: Mutex<Vec<Arc<str>>>,
    /// The level set with `logging/setLevel`: log messages of imported tools' upstreams
    /// at or above it are relayed to this connection's calls.
    log_level: Mutex<Option<LoggingLevel>>,
    /// Whether the connection answered its `initialize`: another one is refused, and
    /// leaves what the client declared the first time as it was.
    initialized: AtomicBool,
    /// Cancelled when the connection closes (its sessions end): the resource
    /// subscriptions its sessions made end with them.
    ended: CancellationToken,
}

impl Connection {
    pub(crate) fn new(current: Arc<ArcSwap<ServerInner>>) -> Self {
        let n = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
        Connection {
            state: Arc::new(State {
                current,
                own_id: Arc::from(format!("mcp-{}-{n}", *PROCESS_ID)),
                sessions: Mutex::new(Vec::new()),
                log_level: Mutex::new(None),
                initialized: AtomicBool::new(false),
                ended: CancellationToken::new(),
            }),
            direct: None,
        }
    }

    /// This connection, registering its sessions with `direct`.
    pub(crate) fn answered_by(mut self, direct: Arc<dyn SessionRegistry>) -> Self {
        self.direct = Some(direct);
        self
    }

    /// Another handle on this connection's state, which registers nothing.
    pub(crate) fn handle(&self) -> Connection {
        Connection {
            state: Arc::clone(&self.state),
            direct: None,
        }
    }

    /// Whether `other` is a handle on this connection.
    pub(crate) fn same_as(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// Whether the session set a level for log messages (they would go to the caller
    /// during its calls).
    pub(crate) fn sets_log_level(&self) -> bool {
        self.state
            .log_level
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Registers the HTTP session of a request (its `parts`) for its calls to be answered
    /// in the task of their HTTP request: only a session rmcp routed the request by.
    fn register(&self, peer: &Peer<RoleServer>, parts: Option<&http::request::Parts>) {
        if let Some(direct) = &self.direct
            && let Some(id) = routed_session(peer, parts)
        {
            direct.register(id, self, peer);
        }
    }

    /// The MCP session of a request: the HTTP session rmcp routed it by, else this
    /// connection (stdio, and every request of 2026-07-28, which belongs to no session).
    fn session_id(
        &self,
        peer: &Peer<RoleServer>,
        parts: Option<&http::request::Parts>,
    ) -> Arc<str> {
        let id =
            routed_session(peer, parts).map_or_else(|| Arc::clone(&self.state.own_id), Arc::from);
        let mut sessions = self
            .state
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !sessions.contains(&id) {
            sessions.push(Arc::clone(&id));
        }
        id
    }

    fn user(&self, parts: Option<&http::request::Parts>) -> Arc<User> {
        user_of(&self.server(), parts)
    }
}

/// The caller of a request to `server` with HTTP `parts`: who the server's `identify`
/// finds in them, else the request's `Arc<User>` (or `User`) extension, else the server's
/// default user (and always the default user without HTTP, over stdio).
pub(super) fn user_of(server: &ServerInner, parts: Option<&http::request::Parts>) -> Arc<User> {
    let Some(parts) = parts else {
        return Arc::clone(&server.default_user);
    };
    if let Some(user) = server.identify.as_ref().and_then(|f| f(parts)) {
        return Arc::new(user);
    }
    if let Some(user) = parts.extensions.get::<Arc<User>>() {
        return Arc::clone(user);
    }
    if let Some(user) = parts.extensions.get::<User>() {
        return Arc::new(user.clone());
    }
    Arc::clone(&server.default_user)
}

impl Connection {
    /// What the connection serves now.
    pub(super) fn server(&self) -> Arc<ServerInner> {
        self.state.current.load_full()
    }

    /// The caller of `context`.
    pub(super) fn caller(&self, context: &RequestContext<RoleServer>) -> Arc<User> {
        self.user(context.extensions.get::<http::request::Parts>())
    }

    /// The definitions tagged `tag` the caller may see.
    fn visible_of(&self, tag: &str, context: &RequestContext<RoleServer>) -> Vec<ToolDefinition> {
        let (server, user) = (self.server(), self.caller(context));
        server
            .pipeline
            .definitions()
            .filter(|d| d.has_tag(tag) && allows(&server, d, &user))
            .cloned()
            .collect()
    }

    /// Runs `name` through the pipeline for the caller of `context`: its user and session,
    /// cancelled when the client cancels or disconnects or the host cuts the call, with
    /// what the upstream sends about it relayed to the caller.
    async fn run(
        &self,
        name: &str,
        input: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let user = self.caller(context);
        self.run_with(name, input, context, user, Extras::default())
            .await
    }

    /// [`run`](Self::run) for `user`, with what the request brings beyond its input.
    async fn run_with(
        &self,
        name: &str,
        input: Value,
        context: &RequestContext<RoleServer>,
        user: Arc<User>,
        extras: Extras,
    ) -> Result<Value, ToolError> {
        let Extras {
            round,
            refusal,
            listener,
            subscription_ended,
            upstream_task,
            relayed_task,
            resource_check,
        } = extras;
        let parts = context.extensions.get::<http::request::Parts>();
        // Fires when the client sends `notifications/cancelled`, or when the host cuts
        // the call at shutdown.
        let cancel = context.ct.child_token();
        let session = self.session_id(&context.peer, parts);
        let no_store = round.is_some();
        // A listen stream subscribes under a key of its own: a session may hold several.
        let subscriber = match &listener {
            Some(stream) => Arc::from(format!("{session}/listen/{}", stream.id())),
            None => Arc::clone(&session),
        };
        let caller = CallerRequest {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            log_level: context.meta.log_level().or(*self
                .state
                .log_level
                .lock()
                .unwrap_or_else(|e| e.into_inner())),
            session_id: subscriber,
            capabilities: context.client_capabilities().unwrap_or_default(),
            input_required_results: takes_input_required(context),
            round,
            refusal,
            listener,
            subscription_ended,
            session_ended: self.state.ended.clone(),
            upstream_task,
            relayed_task,
            resource_check,
        };
        let mut options = InvokeOptions::new()
            .session(session)
            .user(user)
            .cancellation(cancel.clone())
            .provide::<CallerKey>(caller);
        if let Some(token) = parts.and_then(|p| p.extensions.get::<CallerAccessToken>()) {
            options = options.provide::<CallerAccessToken>(token.clone());
        }
        if let Some(client) = parts.and_then(|p| p.extensions.get::<ClientAddress>()) {
            options = options.provide::<ClientAddress>(*client);
        }
        let server = self.server();
        if let Some(timeout) = server.call_timeout {
            options = options.timeout(timeout);
        }
        if no_store {
            options = options.no_store();
        }
        let invoke = server.pipeline.invoke(name, input, options);
        let invoke = async {
            match parts.and_then(|p| p.extensions.get::<HostShutdown>()) {
                Some(shutdown) => shutdown.cut(invoke, &cancel).await,
                None => invoke.await,
            }
        };
        match parts.and_then(|p| p.extensions.get::<ClientDisconnected>()) {
            // Dropping the invocation cancels it and releases what it holds.
            Some(disconnected) => tokio::select! {
                result = invoke => result,
                () = disconnected.cancelled() => {
                    tracing::debug!(tool = %name, "the HTTP client disconnected; call cancelled");
                    Err(ToolError::Cancelled)
                }
            },
            None => invoke.await,
        }
    }

    /// The answer to a 2026-07-28 caller asking again about its call that waits for
    /// approval in suspension `id`: the call's result once decided (by the server's
    /// [`outcome_tool`](super::McpServer::outcome_tool)), `input_required` with the state
    /// again while it waits, and the error that kept the outcome tool from answering when
    /// it was refused or failed ([`tasks::unreadable`]).
    async fn outcome(
        &self,
        definition: &ToolDefinition,
        id: &str,
        arguments: &str,
        context: &RequestContext<RoleServer>,
        user: Arc<User>,
        target: &str,
    ) -> Result<CallToolResponse, ErrorData> {
        let server = self.server();
        let Some(tool) = server.outcome_tool.clone() else {
            return Err(ErrorData::invalid_params(
                "`requestState` names a call waiting for approval, and this server serves no outcomes",
                None,
            ));
        };
        let asked = json!({ "id": id });
        match self
            .run_with(&tool, asked, context, Arc::clone(&user), Extras::default())
            .await
        {
            Ok(answer) if answer["status"] == "decided" => {
                Ok(decided_result(definition, &answer["result"]).into())
            }
            Ok(_) => Ok(CallToolResponse::InputRequired(
                server.seal.waiting(id, arguments, None, &user, target),
            )),
            // The call's own end: its result.
            Err(
                error @ (ToolError::UnknownSuspension { .. } | ToolError::SuspensionExpired { .. }),
            ) => Ok(error_to_result(&error).into()),
            // Not the call's end: it may still wait, so no result of it is answered.
            Err(error) => Err(tasks::unreadable(id, &tool, &error)),
        }
    }

    /// The task a caller is answered for a task its upstream created: a handle of our
    /// own, kept for the caller in the server's [`RelayedTasks`](super::RelayedTasks).
    fn hand_over(&self, task: UpstreamTask, user: &User) -> Result<CallToolResponse, ErrorData> {
        let UpstreamTask {
            tasks_tool,
            upstream_id,
            created,
        } = task;
        let mut task = created.task;
        let ttl = task.ttl_ms.map(std::time::Duration::from_millis);
        let relayed = Relayed {
            tasks_tool,
            upstream_id,
        };
        let handle = self
            .server()
            .relayed
            .insert(user, relayed, ttl)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        task.task_id = handle;
        // Kept no longer than the server keeps it.
        let most = super::MAX_RELAYED_TASK_AGE.as_millis() as u64;
        task.ttl_ms = Some(task.ttl_ms.map_or(most, |ms| ms.min(most)));
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// Relays a `tasks/*` request (`input` for the upstream's tasks tool) about the
    /// caller's task `handle`, which stands for `relayed`: the tool's output, or the error
    /// to answer — an upstream that no longer knows the task makes it unknown.
    async fn relay_task(
        &self,
        handle: &str,
        relayed: Relayed,
        input: Value,
        context: &RequestContext<RoleServer>,
        user: Arc<User>,
    ) -> Result<Value, ErrorData> {
        let extras = Extras {
            relayed_task: Some(relayed.upstream_id),
            ..Extras::default()
        };
        self.run_with(&relayed.tasks_tool, input, context, user, extras)
            .await
            .map_err(|error| match error {
                ToolError::InvalidInput(_) => tasks::unknown(handle),
                error => features::request_error(&error),
            })
    }

    /// Reads resource `uri` through the resources tools the caller may see, in turn: the
    /// first upstream that has the resource answers.
    async fn on_resource(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        for definition in self.visible_of(RESOURCES_TAG, context) {
            match self
                .run(&definition.name, json!({ "uri": uri }), context)
                .await
            {
                Ok(output) => return Ok(output),
                Err(e) if e.code() == RESOURCE_NOT_FOUND => continue,
                Err(e) => return Err(features::request_error(&e)),
            }
        }
        Err(features::resource_not_found(uri))
    }

    /// Runs a subscription request about resource `uri` — `input` is `{"subscribe": uri}`
    /// or `{"unsubscribe": uri}` — on the resources tools the caller may see, in turn. A
    /// subscription goes to an upstream that declared `resources.subscribe` and has the
    /// resource: first to one that lists it, in the configuration's order; only when none
    /// does, to one that answers `resources/read` for it (see `Link::subscribe`). An
    /// upstream that takes no subscriptions is sent nothing, and one that does not have the
    /// resource no subscription. One upstream's failure does not keep the caller from an
    /// upstream after it that has the resource: it is the answer only when none has it. An
    /// unsubscription goes to the upstream the caller is subscribed on; when it is
    /// subscribed nowhere, there is nothing to do. `listen` is the `subscriptions/listen`
    /// request a subscription is for: its stream, and the token cancelled when the
    /// subscription is ended for the caller.
    ///
    /// Each upstream tried is one call of its resources tool through the pipeline (audited
    /// and counted as any), which lists the resources at most once.
    pub(super) async fn on_subscription(
        &self,
        input: Value,
        uri: &str,
        context: &RequestContext<RoleServer>,
        listen: Option<&Subscribed>,
    ) -> Result<Value, ErrorData> {
        let unsubscribe = input.get("unsubscribe").is_some();
        let user = self.caller(context);
        let mut failed = None;
        let mut tools = self.visible_of(RESOURCES_TAG, context);
        // The passes: an unsubscription's one; a subscription's over the upstreams that
        // list the resource, then over those that did not, by a read.
        let passes: &[ResourceCheck] = if unsubscribe {
            &[ResourceCheck::ListedOrRead]
        } else {
            &[ResourceCheck::Listed, ResourceCheck::Read]
        };
        for &resource_check in passes {
            let mut unlisted = Vec::new();
            for definition in tools {
                let mut extras = Extras {
                    resource_check,
                    ..Extras::default()
                };
                if let Some(listen) = listen {
                    extras.listener = Some(listen.stream.clone());
                    extras.subscription_ended = listen.ended.clone();
                }
                let user = Arc::clone(&user);
                match self
                    .run_with(&definition.name, input.clone(), context, user, extras)
                    .await
                {
                    Ok(output) => return Ok(output),
                    Err(e) if e.code() == RESOURCE_NOT_FOUND => unlisted.push(definition),
                    Err(e) if [SUBSCRIPTIONS_UNSUPPORTED, NOT_SUBSCRIBED].contains(&e.code()) => {}
                    Err(e) => {
                        failed.get_or_insert_with(|| features::request_error(&e));
                    }
                }
            }
            tools = unlisted;
        }
        match failed {
            Some(error) => Err(error),
            None if unsubscribe => Ok(json!({})),
            None => Err(features::not_subscribable(uri)),
        }
    }

    /// The `key` lists of every upstream whose resources the caller may see, in order. An
    /// upstream that fails to list is left out, with a warning.
    async fn list_all(
        &self,
        input: Value,
        key: &str,
        context: &RequestContext<RoleServer>,
    ) -> Vec<Value> {
        let mut all = Vec::new();
        for definition in self.visible_of(RESOURCES_TAG, context) {
            match self.run(&definition.name, input.clone(), context).await {
                Ok(mut output) => {
                    if let Some(Value::Array(items)) = output.get_mut(key).map(Value::take) {
                        all.extend(items);
                    }
                }
                Err(e) => {
                    tracing::warn!(tool = %definition.name, error = %e.bounded_message(), "an upstream's resources could not be listed")
                }
            }
        }
        all
    }
    /// Answers a `tools/call` (in its span) of `definition`, the tool of `server` the
    /// request names, when `user` may call it.
    async fn answer_call(
        &self,
        request: CallToolRequestParams,
        server: &ServerInner,
        user: Arc<User>,
        definition: Option<&ToolDefinition>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name;
        let Some(definition) = definition else {
            return Err(unknown_tool(&name));
        };
        let target = format!("tools/call {name}");
        let seal = &server.seal;
        let round = match seal.retry(
            request.input_responses,
            request.request_state,
            &user,
            &target,
        )? {
            Some(Retry::Approval { id, arguments }) => {
                if arguments != arguments_digest(request.arguments.as_ref()) {
                    return Err(ErrorData::invalid_params(
                        "`requestState` belongs to a call with other arguments: send it back with the arguments of the call that waits for approval, or call without `requestState` to make a new call (which waits for its own approval); the waiting call is unaffected",
                        None,
                    ));
                }
                return self
                    .outcome(definition, &id, &arguments, context, user, &target)
                    .await;
            }
            Some(Retry::Round(round)) => Some(round),
            None => None,
        };
        // What a waiting call's state binds a later retry to.
        let arguments = (takes_input_required(context) && server.outcome_tool.is_some())
            .then(|| arguments_digest(request.arguments.as_ref()));
        let input =
            InputShape::of(&definition.input_schema).input(request.arguments.unwrap_or_default());
        let refusal = Refusal::default();
        let upstream_task = UpstreamTaskSlot::default();
        let result = self
            .run_with(
                &name,
                input,
                context,
                Arc::clone(&user),
                Extras {
                    round,
                    refusal: refusal.clone(),
                    upstream_task: upstream_task.clone(),
                    ..Extras::default()
                },
            )
            .await;
        // The upstream runs the call as a task: the caller polls a task of ours for it.
        if let Err(error) = &result
            && error.code() == UPSTREAM_TASK
            && let Some(task) = upstream_task.take()
        {
            return self.hand_over(task, &user);
        }
        match result {
            Ok(output) => Ok(output_to_result(definition, output).into()),
            Err(ToolError::UnknownTool { .. }) => Err(unknown_tool(&name)),
            Err(ToolError::InputRequired { requests, state }) if takes_input_required(context) => {
                Ok(CallToolResponse::InputRequired(
                    seal.answer(requests, state, &user, &target)?,
                ))
            }
            // A caller that takes tasks polls `tasks/get` for the outcome.
            Err(ToolError::Suspended {
                suspension_id,
                reason,
            }) if arguments.is_some() && takes_tasks(context) => Ok(CallToolResponse::Task(
                tasks::created(&suspension_id, &reason),
            )),
            // A 2026-07-28 caller asks again later with the state, and gets the outcome.
            Err(ToolError::Suspended {
                suspension_id,
                reason,
            }) if arguments.is_some() => Ok(CallToolResponse::InputRequired(seal.waiting(
                &suspension_id,
                arguments.as_deref().unwrap_or_default(),
                Some(&reason),
                &user,
                &target,
            ))),
            // The protocol's own error (-32021), which the caller's SDK acts on.
            Err(error) if error.code() == MISSING_CAPABILITY => Err(refusal
                .take()
                .unwrap_or_else(|| features::request_error(&error))),
            Err(error) => Ok(error_to_result(&error).into()),
        }
    }
}

/// What a request brings to its invocation beyond its input.
#[derive(Default)]
struct Extras {
    /// The caller's answers, when the request is a round of a multi-round call (its
    /// result is then not for a cache).
    round: Option<InputRound>,
    /// Where an upstream leaves its protocol error about the request.
    refusal: Refusal,
    /// The `subscriptions/listen` stream a resource subscription is for.
    listener: Option<ListenStream>,
    /// Cancelled when a subscription the request makes is ended for the caller.
    subscription_ended: CancellationToken,
    /// Where an upstream leaves the task it answered the request with.
    upstream_task: UpstreamTaskSlot,
    /// The upstream task a `tasks/*` request is about, found among the caller's own.
    relayed_task: Option<String>,
    /// How a resource subscription the request makes finds its upstream.
    resource_check: ResourceCheck,
}

/// The digest of a call's arguments, absent ones as `{}`: in canonical form, so that a
/// retry that writes them differently is the same call.
fn arguments_digest(arguments: Option<&serde_json::Map<String, Value>>) -> String {
    match arguments {
        Some(arguments) => toolgate_core::approval::digest(arguments),
        None => toolgate_core::approval::digest(&serde_json::Map::new()),
    }
}

/// The definition of `name` in `server` when `user` may see it.
fn visible<'s>(server: &'s ServerInner, name: &str, user: &User) -> Option<&'s ToolDefinition> {
    let definition = &server.pipeline.registry().get(name)?.definition;
    allows(server, definition, user).then_some(definition)
}

/// Whether `server`'s filter lets `user` see `definition`.
fn allows(server: &ServerInner, definition: &ToolDefinition, user: &User) -> bool {
    server
        .filter
        .as_ref()
        .is_none_or(|f| f.allows(definition, user))
}

/// Refuses a list request of `method` that gives a `cursor`. This server lists everything
/// in one page and gives no `nextCursor`, so any cursor is one it never gave: MCP has an
/// invalid cursor answered `-32602`, where serving the first page again would hand a client
/// that pages the same items twice. A client asks for the first page without one — or,
/// as some write it, with an empty cursor, which names no page and is read as none.
fn first_page(method: &str, request: Option<PaginatedRequestParams>) -> Result<(), ErrorData> {
    match request.and_then(|params| params.cursor) {
        None => Ok(()),
        Some(cursor) if cursor.is_empty() => Ok(()),
        Some(_) => Err(ErrorData::invalid_params(
            format!(
                "unknown cursor: this server lists everything in one page and gives no `nextCursor`, so `{method}` takes no `cursor`: send it without one"
            ),
            None,
        )),
    }
}

/// Whether the caller of `context` declared the tasks extension (SEP-2663).
fn takes_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// The `Mcp-Session-Id` of a request (its `parts`) served on `peer`, when rmcp routed the
/// request by it: on a connection that opened a 2025 session with `initialize`, which
/// rmcp serves only the requests that name that session. A 2026-07-28 request belongs to
/// no session, and rmcp serves it without looking at the header: there it is only what
/// the client wrote, and taken as a session it would let one client run calls in
/// another's session, read what it holds, and end it.
fn routed_session<'a>(
    peer: &Peer<RoleServer>,
    parts: Option<&'a http::request::Parts>,
) -> Option<&'a str> {
    let opened_a_session = peer
        .peer_info()
        .is_some_and(|info| info.protocol_version < ProtocolVersion::V_2026_07_28);
    if !opened_a_session {
        return None;
    }
    parts?.headers.get("mcp-session-id")?.to_str().ok()
}

/// Whether the caller of `context` speaks 2026-07-28 or later, and so takes
/// `input_required` results (older callers are asked each request on their connection).
pub(super) fn takes_input_required(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(direct) = self.direct.take() {
            let sessions = self
                .state
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            direct.forget(&sessions[..], self);
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.ended.cancel();
        let server = self.current.load_full();
        let sessions = self.sessions.get_mut().unwrap_or_else(|e| e.into_inner());
        for id in sessions.drain(..) {
            server.pipeline.end_session(&id);
        }
    }
}

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        let tagged = |tag: &str| {
            self.server()
                .pipeline
                .definitions()
                .any(|d| d.tags.iter().any(|t| t == tag))
        };
        if tagged(PROMPT_TAG) {
            capabilities.prompts = Some(Default::default());
        }
        if self.server().pipeline.definitions().any(completes) {
            capabilities.completions = Some(Default::default());
        }
        // Subscriptions: `resources/subscribe` at 2025-11-25, `subscriptions/listen` with
        // resource URIs at 2026-07-28.
        if tagged(RESOURCES_TAG) {
            let mut resources = ResourcesCapability::default();
            resources.subscribe = Some(true);
            capabilities.resources = Some(resources);
        }
        // Calls that wait for approval, and the tasks of upstreams, are tasks for callers
        // that declare the extension.
        if self.server().outcome_tool.is_some() || tagged(TASKS_TAG) {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
        }
        let mut info = ServerConfig::new(capabilities);
        info.server_info =
            Implementation::new(self.server().name.clone(), self.server().version.clone());
        info.instructions = self.server().instructions.clone();
        info
    }

    /// The lifecycle's first request, once per connection (MCP 2025-11-25, Lifecycle:
    /// "initialization MUST be the first interaction"). A second `initialize` is an invalid
    /// request: it would otherwise replace what the client declared — its capabilities,
    /// its protocol version — in the middle of the session, under calls in flight.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if self.state.initialized.swap(true, Ordering::AcqRel) {
            return Err(ErrorData::invalid_request(
                "this connection is already initialized: `initialize` is sent once, as the first request; the session goes on as it was set up (to start over, open a new connection or session)",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.register(
            &context.peer,
            context.extensions.get::<http::request::Parts>(),
        );
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        first_page("tools/list", request)?;
        let (server, user) = (self.server(), self.caller(&context));
        let tools = server
            .pipeline
            .definitions()
            .filter(|d| is_tool(d) && allows(&server, d, &user))
            .map(to_mcp_tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.register(
            &context.peer,
            context.extensions.get::<http::request::Parts>(),
        );
        let (server, user) = (self.server(), self.caller(&context));
        let definition = visible(&server, &request.name, &user).filter(|d| is_tool(d));
        let span = span::tools_call(definition.map(|d| d.name.as_str()), &context);
        let answer = self
            .answer_call(request, &server, user, definition, &context)
            .instrument(span.clone())
            .await;
        span::record_answer(&span, &answer);
        answer
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = request.task_id;
        let server = self.server();
        let user = self.caller(&context);
        if let Some(relayed) = server.relayed.get(&id, &user) {
            let input = json!({ "get": id });
            let output = self.relay_task(&id, relayed, input, &context, user).await?;
            let mut answer: GetTaskResult = serde_json::from_value(output).map_err(|e| {
                // serde's words quote what the upstream sent: kept within the bound.
                ErrorData::internal_error(
                    toolgate_core::error::error_text(format_args!(
                        "the upstream's task could not be read: {e}"
                    )),
                    None,
                )
            })?;
            answer.task.task.task_id = id;
            answer.meta = None;
            return Ok(answer);
        }
        let Some(tool) = server.outcome_tool.clone() else {
            return Err(tasks::unknown(&id));
        };
        let asked = json!({ "id": id });
        let run = self.run_with(&tool, asked, &context, user, Extras::default());
        let outcome = match run.await {
            Ok(outcome) => outcome,
            Err(ToolError::UnknownSuspension { .. }) => return Err(tasks::unknown(&id)),
            // Ended without a decision: the call's own end, as a decision's would be.
            Err(expired @ ToolError::SuspensionExpired { .. }) => {
                let result = error_to_result(&expired);
                return Ok(GetTaskResult::new(tasks::detailed(
                    &id,
                    &Value::Null,
                    Some(result),
                )));
            }
            Err(error) => return Err(tasks::unreadable(&id, &tool, &error)),
        };
        if tasks::was_withdrawn(&outcome) {
            return Ok(GetTaskResult::new(tasks::cancelled(&id, &outcome)));
        }
        let result = (outcome["status"] == "decided").then(|| {
            let decided = &outcome["result"];
            let name = decided["tool_name"].as_str().unwrap_or_default();
            match server.pipeline.definitions().find(|d| d.name == name) {
                Some(definition) => decided_result(definition, decided),
                // A reload removed the tool since: the outcome as it was kept, as text.
                None => CallToolResult::success(vec![ContentBlock::text(decided.to_string())]),
            }
        });
        Ok(GetTaskResult::new(tasks::detailed(&id, &outcome, result)))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = request.task_id;
        let user = self.caller(&context);
        if let Some(relayed) = self.server().relayed.get(&id, &user) {
            let input = json!({ "cancel": id });
            return self
                .relay_task(&id, relayed, input, &context, user)
                .await
                .map(drop);
        }
        let server = self.server();
        tasks::withdraw(&server.pipeline, &id, &user, server.on_withdrawal.as_ref()).await
    }

    /// `tasks/update` is relayed for a task an upstream created; toolgate's own tasks
    /// (calls waiting for approval) ask nothing of their callers.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = request.task_id;
        let user = self.caller(&context);
        let Some(relayed) = self.server().relayed.get(&id, &user) else {
            return Err(tasks::unknown(&id));
        };
        let input = json!({ "update": id, "inputResponses": request.input_responses });
        self.relay_task(&id, relayed, input, &context, user)
            .await
            .map(drop)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        first_page("prompts/list", request)?;
        let prompts = self
            .visible_of(PROMPT_TAG, &context)
            .iter()
            .map(features::prompt_of)
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = format!("{PROMPT_PREFIX}{}", request.name);
        let user = self.caller(&context);
        if !visible(&self.server(), &name, &user).is_some_and(|d| d.has_tag(PROMPT_TAG)) {
            return Err(features::unknown_prompt(&request.name));
        }
        let target = format!("prompts/get {}", request.name);
        let seal = Arc::clone(&self.server().seal);
        let round = match seal.retry(
            request.input_responses,
            request.request_state,
            &user,
            &target,
        )? {
            Some(Retry::Round(round)) => Some(round),
            Some(Retry::Approval { .. }) => {
                return Err(ErrorData::invalid_params(
                    "`requestState` names a call waiting for approval, not a prompt",
                    None,
                ));
            }
            None => None,
        };
        let input = Value::Object(request.arguments.unwrap_or_default());
        match self
            .run_with(
                &name,
                input,
                &context,
                Arc::clone(&user),
                Extras {
                    round,
                    ..Extras::default()
                },
            )
            .await
        {
            Ok(output) => features::prompt_result(output).map(GetPromptResponse::Complete),
            Err(ToolError::InputRequired { requests, state }) if takes_input_required(&context) => {
                Ok(GetPromptResponse::InputRequired(
                    seal.answer(requests, state, &user, &target)?,
                ))
            }
            Err(e) => Err(features::request_error(&e)),
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        first_page("resources/list", request)?;
        let listed = self
            .list_all(json!({"list": "resources"}), "resources", &context)
            .await;
        Ok(ListResourcesResult::with_all_items(features::items(listed)))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        first_page("resources/templates/list", request)?;
        let listed = self
            .list_all(json!({"list": "templates"}), "resourceTemplates", &context)
            .await;
        Ok(ListResourceTemplatesResult::with_all_items(
            features::items(listed),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let output = self.on_resource(&request.uri, &context).await?;
        features::resource_result(output).map(ReadResourceResponse::Complete)
    }

    /// Completions come through the pipeline, as a call of the tool the argument belongs
    /// to: the prompt's, or for a resource template each resources tool the caller may
    /// use in turn (the first with suggestions answers). Authorization, rate limits,
    /// audit and redaction apply as to `prompts/get` and `resources/read`; a refusal is
    /// a JSON-RPC error. Only imported prompts and resources are asked ([`completes`]): a
    /// prompt of the host's own has no completions, and its tool would read
    /// `{"complete": …}` as its arguments.
    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        // The caller's `_meta` is about this request to toolgate, not for the upstream.
        request.meta = None;
        let tools = match &request.r#ref {
            Reference::Prompt(prompt) => {
                let name = format!("{PROMPT_PREFIX}{}", prompt.name);
                let (server, user) = (self.server(), self.caller(&context));
                let definition = visible(&server, &name, &user)
                    .filter(|d| d.has_tag(PROMPT_TAG))
                    .ok_or_else(|| features::unknown_prompt(&prompt.name))?;
                completes(definition)
                    .then(|| definition.name.clone())
                    .into_iter()
                    .collect()
            }
            Reference::Resource(_) => self
                .visible_of(RESOURCES_TAG, &context)
                .into_iter()
                .filter(completes)
                .map(|d| d.name)
                .collect(),
            // A kind of reference a later revision added: nothing to suggest.
            _ => Vec::new(),
        };
        let input = json!({ "complete": request });
        for tool in tools {
            let output = self
                .run(&tool, input.clone(), &context)
                .await
                .map_err(|e| features::request_error(&e))?;
            let result = features::completion_result(output)?;
            if !result.completion.values.is_empty() {
                return Ok(result);
            }
        }
        Ok(CompleteResult::default())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.on_subscription(
            json!({ "subscribe": request.uri }),
            &request.uri,
            &context,
            None,
        )
        .await
        .map(drop)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.on_subscription(
            json!({ "unsubscribe": request.uri }),
            &request.uri,
            &context,
            None,
        )
        .await
        .map(drop)
    }

    /// `subscriptions/listen` (2026-07-28): resource updates, for the URIs the caller may
    /// read. List changes are not announced: the lists change only on a reload.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = requested.resource_subscriptions.clone();
        Some(accepted)
    }

    /// Subscribes each URI of the listen request through the pipeline (as
    /// `resources/subscribe`: authorization and audit apply), relays its updates to the
    /// stream until the caller ends it, then unsubscribes; see [`super::listen`]. Over
    /// streamable HTTP the request's [`ListenGate`] is then told whether the URIs are
    /// subscribed: until it is, the endpoint holds the acknowledgment back. Over stdio
    /// [`Served`](super::listen::Served) has subscribed them before rmcp acknowledged
    /// the request. A URI the caller may not read, or that no upstream has, refuses the
    /// whole request; a reload that withdraws the caller's access to one of them ends it
    /// with an error saying so.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let request = context.request_context();
        if let Some(subscribed) = request.extensions.get::<Subscribed>() {
            subscribed.stream.open(context.sink().clone()).await;
            return until_over(&context, &subscribed.ended).await;
        }
        let gate = request
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ListenGate>());
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let listening = self.subscribe_listen(&uris, request).await;
        if let Some(gate) = gate {
            gate.decide(listening.is_ok());
        }
        let listening = listening?;
        let subscribed = &listening.subscribed;
        subscribed.stream.open(context.sink().clone()).await;
        let over = until_over(&context, &subscribed.ended).await;
        self.unsubscribe_listen(listening, request).await;
        over
    }

    /// Sets the level of the log messages relayed from upstreams to this connection.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self
            .state
            .log_level
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(request.level);
        Ok(())
    }

    /// A request rmcp could not read as any method it knows. For a method this server
    /// serves this means malformed parameters: say what is wrong, rather than "method not
    /// found".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method;
        // `tasks/*` are served only by a server that advertises the extension (else rmcp
        // answers them method not found, whatever their parameters), and the methods
        // 2026-07-28 removed not to a caller of that revision.
        let removed = takes_input_required(&context)
            && super::params::REMOVED_IN_2026_07_28.contains(&method.as_str());
        let served = !removed
            && (!method.starts_with("tasks/") || self.get_info().capabilities.supports_tasks());
        if served && let Some(error) = super::params::malformed(&method, request.params.as_ref()) {
            return Err(error);
        }
        let hint = match method.as_str() {
            "tools/call" => Some(
                "`params` must be {\"name\": string, \"arguments\": object}; `arguments` holds the tool's arguments as a JSON object",
            ),
            "tools/list" => Some("`params` may only carry a string `cursor`"),
            _ => None,
        };
        Err(match hint {
            Some(hint) => {
                ErrorData::invalid_params(format!("malformed `{method}` request: {hint}"), None)
            }
            None => ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "method `{}` is not supported by this server",
                    toolgate_core::error::shown_id(&method)
                ),
                None,
            ),
        })
    }
}

/// Waits until listen request `context` is over: ended by the caller (`Ok`), or by a
/// reload that withdrew the caller's access to one of its resources (`ended`).
async fn until_over(
    context: &SubscriptionContext,
    ended: &CancellationToken,
) -> Result<(), ErrorData> {
    tokio::select! {
        () = context.cancelled() => Ok(()),
        () = ended.cancelled() => Err(features::access_withdrawn()),
    }
}

/// Whether `definition` is a prompt or resources tool that answers completion requests
/// (`{"complete": PARAMS}`): an imported one, whose upstream is asked.
fn completes(definition: &ToolDefinition) -> bool {
    matches!(definition.source, ToolSource::Mcp { .. })
        && definition
            .tags
            .iter()
            .any(|t| t == PROMPT_TAG || t == RESOURCES_TAG)
}
