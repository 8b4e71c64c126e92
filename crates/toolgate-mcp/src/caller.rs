//! The MCP request an invocation serves, handed to the tools it calls: an imported tool
//! relays its upstream's progress, sampling and elicitation to it.

// Logging is deprecated by SEP-2577 for the 2026-07-28 revision; clients on 2025-11-25 still
// set a level and expect `notifications/message`.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{
    ClientCapabilities, ErrorCode, ErrorData, InputResponses, LoggingLevel, ProgressToken,
};
use rmcp::service::Peer;
use serde_json::Value;
use toolgate_core::ToolError;
use toolgate_core::external::TypeMapKey;

/// The caller of a request that came in over MCP: its connection, what it declared it can
/// answer, and what it asked for (progress, log messages, a round of a multi-round call). [`McpServer`](crate::McpServer) provides it to every invocation
/// it starts (request scope, under [`CallerKey`]); an
/// [`ImportedTool`](crate::ImportedTool) relays to it what its upstream sends during the
/// call — `notifications/progress` with the caller's own token, `notifications/message`
/// at or above the level the caller set, and `sampling/createMessage` and
/// `elicitation/create` requests, answered by the caller.
///
/// A host that serves MCP itself, and calls a pipeline with imported tools for its own
/// callers, makes one with [`new`](Self::new) and sets the fields its request has: the
/// struct is `#[non_exhaustive]`, so that a field added for a new revision of the protocol
/// does not break the host's code.
///
/// ```
/// use std::sync::Arc;
///
/// use toolgate_mcp::CallerRequest;
/// use toolgate_mcp::rmcp::{RoleServer, model::LoggingLevel, service::Peer};
///
/// fn caller_of(peer: Peer<RoleServer>, session: &str) -> CallerRequest {
///     let mut caller = CallerRequest::new(peer, Arc::from(session));
///     caller.log_level = Some(LoggingLevel::Warning);
///     caller
/// }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallerRequest {
    /// The caller's connection.
    pub peer: Peer<RoleServer>,
    /// The caller's `_meta.progressToken`, when it asked for progress.
    pub progress_token: Option<ProgressToken>,
    /// The level the caller asked log messages at — with `logging/setLevel` (2025-11-25)
    /// or in the request's `_meta` (2026-07-28); `None`: it gets no log messages.
    pub log_level: Option<LoggingLevel>,
    /// The caller's MCP session (what its resource subscriptions belong to).
    pub session_id: Arc<str>,
    /// What the caller declared it can answer: at `initialize` (2025-11-25), or in the
    /// request's `_meta` (2026-07-28). An upstream is told these, so that it asks only
    /// what the caller can answer.
    pub capabilities: ClientCapabilities,
    /// Whether the caller speaks 2026-07-28 or later: it is answered an
    /// `input_required` result to fulfil itself, where a 2025-11-25 caller is asked each
    /// request on its connection.
    pub input_required_results: bool,
    /// The caller's answers to the previous round of a multi-round call, when this
    /// request is a retry.
    pub round: Option<InputRound>,
    /// Where an upstream's protocol error about the caller's request is left for the
    /// server to answer with as it was (the `data` of `-32021` names the capabilities
    /// to declare), while the pipeline sees it as a toolgate error.
    pub refusal: Refusal,
    /// The stream of the caller's `subscriptions/listen` request (2026-07-28), when the
    /// request subscribes a resource for it: updates go there, not to a session.
    pub listener: Option<crate::listen_stream::ListenStream>,
    /// Cancelled when a resource subscription this request makes is ended for the caller
    /// (a reload withdrew its access to the resource): a `subscriptions/listen` request
    /// then ends with an error that says so.
    pub subscription_ended: tokio_util::sync::CancellationToken,
    /// Cancelled when the caller's session (`session_id`'s MCP session or connection)
    /// ends: the resource subscriptions it made end with it, and an upstream left
    /// without a subscriber to a resource is unsubscribed from it.
    pub session_ended: tokio_util::sync::CancellationToken,
    /// Where an upstream that answered the caller's `tools/call` with a task (SEP-2663)
    /// leaves that task for the server, which hands the caller a handle of its own for it.
    pub upstream_task: UpstreamTaskSlot,
    /// The upstream task a `tasks/*` request of the caller is about, once the server has
    /// found it among the caller's own: only then does an upstream's tasks tool relay
    /// the request.
    pub relayed_task: Option<String>,
    /// How a resource subscription this request makes finds out whether the upstream
    /// has the resource.
    pub resource_check: ResourceCheck,
}

/// How a resource subscription finds out whether an upstream has the resource: no
/// subscription goes to an upstream that does not. [`McpServer`](crate::McpServer)'s
/// `resources/subscribe` tries every upstream in two passes: first those that list the
/// resource, then those that answer a read of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResourceCheck {
    /// The upstream lists the resource, or else answers a read of it.
    #[default]
    ListedOrRead,
    /// The upstream lists the resource.
    Listed,
    /// The upstream answers a read of the resource (it was found not to list it).
    Read,
}

/// A task an upstream created for a caller's `tools/call`: which upstream's tasks tool
/// reaches it, its id there, and the upstream's handle as it answered it.
#[derive(Clone, Debug)]
pub struct UpstreamTask {
    /// The tool that relays `tasks/*` requests to the upstream that holds the task.
    pub tasks_tool: String,
    /// The task's id at the upstream (never shown to the caller).
    pub upstream_id: String,
    /// The upstream's answer to the call (`CreateTaskResult`).
    pub created: rmcp::model::CreateTaskResult,
}

/// The slot an [`UpstreamTask`] is left in for the server. Clones share the slot.
#[derive(Clone, Debug, Default)]
pub struct UpstreamTaskSlot(Arc<std::sync::Mutex<Option<UpstreamTask>>>);

impl UpstreamTaskSlot {
    /// Leaves `task` for the server.
    pub fn set(&self, task: UpstreamTask) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// The task left, if any.
    pub fn take(&self) -> Option<UpstreamTask> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The error code of a call whose upstream answered with a task, which the server hands
/// to the caller as a task of its own (an [`UpstreamTask`]).
pub const UPSTREAM_TASK: &str = "upstream_task";

/// An upstream's JSON-RPC error about a caller's request, kept for the server's answer.
/// Clones share the slot.
#[derive(Clone, Debug, Default)]
pub struct Refusal(Arc<std::sync::Mutex<Option<ErrorData>>>);

impl Refusal {
    /// Leaves `error` for the server.
    pub fn set(&self, error: ErrorData) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
    }

    /// The error left, if any.
    pub fn take(&self) -> Option<ErrorData> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A retry of a multi-round call (MCP 2026-07-28, SEP-2322): the caller's answers to the
/// requests of the last `input_required` result, and the state that came with it.
#[derive(Clone, Debug, Default)]
pub struct InputRound {
    /// The answers, by the keys of the requests.
    pub responses: InputResponses,
    /// The state the upstream sent with its requests — already verified and opened by
    /// the server: what the caller holds is sealed by toolgate.
    pub state: Option<String>,
}

/// The error code of a request refused because the caller did not declare a capability it
/// needs (over MCP, `-32021`; 400 elsewhere).
pub const MISSING_CAPABILITY: &str = "missing_client_capability";

/// A request that needs capabilities the client did not declare (`required`, a
/// `requiredCapabilities` object), asked by `who`: the toolgate error
/// ([`MISSING_CAPABILITY`], 400), and the protocol's `-32021` with `required` for the
/// server to answer over MCP.
pub(crate) fn missing_capability(who: &str, required: Option<Value>) -> (ToolError, ErrorData) {
    let names = required
        .as_ref()
        .and_then(Value::as_object)
        .map(|required| {
            let names: Vec<String> = required.keys().map(|name| format!("`{name}`")).collect();
            names.join(", ")
        })
        .filter(|names| !names.is_empty())
        .unwrap_or_else(|| "a capability".to_owned());
    let message = format!(
        "{who} needs the client to declare {names}: declare it (at 2026-07-28, in the request's `_meta`), or ask without it"
    );
    let data = required.map(|required| serde_json::json!({ "requiredCapabilities": required }));
    let refusal = ErrorData::new(
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        message.clone(),
        data,
    );
    (ToolError::abort(message, MISSING_CAPABILITY, 400), refusal)
}

/// The request-scope provider key of [`CallerRequest`].
pub struct CallerKey;

impl TypeMapKey for CallerKey {
    type Value = CallerRequest;
}

impl CallerRequest {
    /// The caller on connection `peer`, in MCP session `session_id` (what its resource
    /// subscriptions belong to; a key of the host's own for a caller without a session),
    /// that asked for nothing and declared nothing: no progress, no log messages, no
    /// capabilities (so an upstream asks it nothing), a 2025-11-25 caller, not a round of
    /// a multi-round call, subscriptions checked as [`ResourceCheck::ListedOrRead`], and
    /// a session that never ends until the host cancels
    /// [`session_ended`](Self::session_ended).
    pub fn new(peer: Peer<RoleServer>, session_id: Arc<str>) -> Self {
        CallerRequest {
            peer,
            progress_token: None,
            log_level: None,
            session_id,
            capabilities: ClientCapabilities::default(),
            input_required_results: false,
            round: None,
            refusal: Refusal::default(),
            listener: None,
            subscription_ended: tokio_util::sync::CancellationToken::new(),
            session_ended: tokio_util::sync::CancellationToken::new(),
            upstream_task: UpstreamTaskSlot::default(),
            relayed_task: None,
            resource_check: ResourceCheck::default(),
        }
    }

    /// Whether a log message at `level` is for this caller.
    pub fn wants_log(&self, level: LoggingLevel) -> bool {
        self.log_level
            .is_some_and(|wanted| severity(level) >= severity(wanted))
    }

    /// Whether the caller declared it can answer `sampling/createMessage`.
    pub fn can_sample(&self) -> bool {
        self.capabilities.sampling.is_some()
    }

    /// Whether the caller declared it can answer `elicitation/create`.
    pub fn can_elicit(&self) -> bool {
        self.capabilities.elicitation.is_some()
    }

    /// Whether the caller declared it can answer an upstream's requests during a call:
    /// `sampling/createMessage` or `elicitation/create`.
    pub fn answers_requests(&self) -> bool {
        self.can_sample() || self.can_elicit()
    }

    /// Whether the caller declared the tasks extension (SEP-2663): an upstream may then
    /// answer its calls with tasks, which it polls itself.
    pub fn takes_tasks(&self) -> bool {
        self.capabilities.supports_tasks()
    }

    /// Whether the caller declared it can answer `roots/list`.
    pub fn can_list_roots(&self) -> bool {
        self.capabilities.roots.is_some()
    }

    /// The error of a request that needs capabilities the caller did not declare
    /// (`required`, such as sampling): answered over MCP as the protocol's `-32021` with
    /// `requiredCapabilities`, so that the client's SDK can tell what to declare.
    ///
    /// ```
    /// # use toolgate_mcp::CallerRequest;
    /// # use toolgate_mcp::rmcp::model::ClientCapabilities;
    /// # fn f(caller: &CallerRequest) -> Result<(), toolgate_core::ToolError> {
    /// if !caller.can_sample() {
    ///     let mut required = ClientCapabilities::default();
    ///     required.sampling = Some(Default::default());
    ///     return Err(caller.missing_capability(required));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn missing_capability(&self, required: ClientCapabilities) -> ToolError {
        let (error, refusal) =
            missing_capability("this request", serde_json::to_value(required).ok());
        self.refusal.set(refusal);
        error
    }

    /// What an upstream is told the caller can answer, through toolgate: sampling,
    /// elicitation and roots as the caller declared them, the tasks extension when the
    /// caller declared it (toolgate relays the upstream's tasks), and nothing toolgate
    /// does not relay (experimental capabilities, other extensions).
    pub fn relayed_capabilities(&self) -> ClientCapabilities {
        let mut relayed = ClientCapabilities::default();
        relayed.sampling = self.capabilities.sampling.clone();
        relayed.elicitation = self.capabilities.elicitation.clone();
        relayed.roots = self.capabilities.roots.clone();
        if self.takes_tasks() {
            relayed
                .extensions
                .get_or_insert_with(Default::default)
                .insert(
                    rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                    Default::default(),
                );
        }
        relayed
    }
}

/// The rank of a level, from `debug` (0) to `emergency` (7).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
