//! The connection to one upstream: established on demand, re-established with backoff
//! when the upstream dies.

// Resource subscriptions are deprecated by SEP-2577 for the 2026-07-28 revision (which
// listens instead); upstreams and clients on 2025-11-25 subscribe.
#![allow(deprecated)]

use std::borrow::Cow;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, CompleteRequestParams, CompleteResult, ErrorCode, ErrorData,
    GetPromptRequestParams, GetPromptResult, JsonObject, Prompt, ReadResourceRequestParams,
    ReadResourceResult, RequestId, Resource, ResourceTemplate, ServerCapabilities, ServerResult,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::IntoTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;
use toolgate_core::{InputViolations, ToolDefinition, ToolError};
use toolgate_hooks::secrets::Scrubber;

use super::relay::{OrderedProgress, Routes, UpstreamClient};
use super::{UpstreamConfig, UpstreamTransport};
use crate::caller::CallerRequest;

type Session = RunningService<RoleClient, UpstreamClient>;

/// The error code of a resource the upstream does not have.
pub(crate) const RESOURCE_NOT_FOUND: &str = "resource_not_found";

/// How long one call may wait for an upstream that is down to come back.
const MAX_WAIT_PER_CALL: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Default)]
struct State {
    session: Option<Session>,
    /// Consecutive failed connection attempts.
    failures: u32,
    /// No new attempt before this instant.
    retry_at: Option<Instant>,
    /// Counts connections, so a failure forgets only the connection it happened on.
    generation: u64,
}

pub(crate) struct Link {
    pub config: UpstreamConfig,
    credential: Option<String>,
    /// Every credential of `config`: scrubbed from what the upstream sends back.
    scrubber: Scrubber,
    /// The calls in flight, for relaying what the upstream sends about them.
    routes: Arc<Routes>,
    state: Mutex<State>,
}

impl Link {
    pub fn new(config: UpstreamConfig, credential: Option<String>) -> Self {
        Link {
            scrubber: config.scrubber(),
            config,
            credential,
            routes: Arc::default(),
            state: Mutex::new(State::default()),
        }
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
    pub async fn peer(&self, deadline: Instant) -> Result<(Peer<RoleClient>, u64), ToolError> {
        let wait_until = deadline.min(Instant::now() + MAX_WAIT_PER_CALL);
        let mut state = self.state.lock().await;
        loop {
            if let Some(session) = &state.session {
                if !session.is_transport_closed() && !session.is_closed() {
                    return Ok((session.peer().clone(), state.generation));
                }
                tracing::warn!(server = %self.config.name, "MCP server connection lost; reconnecting");
                state.session = None;
            }
            let now = Instant::now();
            if let Some(retry_at) = state.retry_at.filter(|t| *t > now) {
                if retry_at >= wait_until {
                    return Err(self.unavailable(retry_at - now));
                }
                tokio::time::sleep_until(retry_at).await;
            }
            let attempt_deadline = deadline.min(Instant::now() + self.config.connect_timeout);
            match tokio::time::timeout_at(attempt_deadline, self.connect()).await {
                Ok(Ok(session)) => {
                    if state.failures > 0 {
                        tracing::info!(server = %self.config.name, "MCP server reconnected");
                    }
                    state.failures = 0;
                    state.retry_at = None;
                    state.session = Some(session);
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
                    if Instant::now() >= wait_until {
                        return Err(self.unavailable(wait));
                    }
                }
            }
        }
    }

    fn unavailable(&self, wait: std::time::Duration) -> ToolError {
        ToolError::RetryAfter {
            delay: wait,
            reason: format!("MCP server `{}` is unavailable", self.config.name),
            code: Cow::Borrowed("upstream_unavailable"),
            status: 503,
        }
    }

    async fn connect(&self) -> Result<Session, String> {
        match &self.config.transport {
            UpstreamTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                if let (Some(var), Some(value)) = (&self.config.credential_env, &self.credential) {
                    cmd.env(var, value);
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(relay_stderr(
                        self.config.name.clone(),
                        self.scrubber.clone(),
                        stderr,
                    ));
                }
                self.client()
                    .serve(self.ordered(transport.into_transport()))
                    .await
                    .map_err(|e| e.to_string())
            }
            UpstreamTransport::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = &self.credential {
                    config = config.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                self.client()
                    .serve(self.ordered(transport))
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }

    fn ordered<T>(&self, transport: T) -> OrderedProgress<T> {
        OrderedProgress::new(transport, Arc::clone(&self.routes))
    }

    fn client(&self) -> UpstreamClient {
        UpstreamClient {
            routes: Arc::clone(&self.routes),
        }
    }

    /// Drops the connection if it is still the one that failed.
    async fn forget(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state.generation == generation {
            state.session = None;
        }
    }

    /// Every tool the upstream lists.
    pub async fn list_tools(&self, deadline: Instant) -> Result<Vec<Tool>, ToolError> {
        let (peer, generation) = self.peer(deadline).await?;
        match tokio::time::timeout_at(deadline, peer.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => {
                self.forget(generation).await;
                Err(ToolError::transient(e.to_string()))
            }
            Err(_) => Err(ToolError::Timeout {
                after: self.config.connect_timeout,
            }),
        }
    }

    /// The upstream's capabilities, once connected.
    pub async fn capabilities(&self, deadline: Instant) -> Option<ServerCapabilities> {
        let (peer, _) = self.peer(deadline).await.ok()?;
        peer.peer_info().map(|info| info.capabilities.clone())
    }

    /// Every prompt the upstream lists.
    pub async fn list_prompts(&self, deadline: Instant) -> Result<Vec<Prompt>, ToolError> {
        self.request(
            deadline,
            |peer| async move { peer.list_all_prompts().await },
        )
        .await
    }

    /// Gets a prompt by its upstream name.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: JsonObject,
        deadline: Instant,
    ) -> Result<GetPromptResult, ToolError> {
        let params = GetPromptRequestParams::new(name.to_owned()).with_arguments(arguments);
        self.request(
            deadline,
            |peer| async move { peer.get_prompt(params).await },
        )
        .await
    }

    /// Every resource the upstream lists.
    pub async fn list_resources(&self, deadline: Instant) -> Result<Vec<Resource>, ToolError> {
        self.request(
            deadline,
            |peer| async move { peer.list_all_resources().await },
        )
        .await
    }

    /// Every resource template the upstream lists.
    pub async fn list_resource_templates(
        &self,
        deadline: Instant,
    ) -> Result<Vec<ResourceTemplate>, ToolError> {
        self.request(deadline, |peer| async move {
            peer.list_all_resource_templates().await
        })
        .await
    }

    /// Reads a resource.
    pub async fn read_resource(
        &self,
        uri: &str,
        deadline: Instant,
    ) -> Result<ReadResourceResult, ToolError> {
        let params = ReadResourceRequestParams::new(uri.to_owned());
        self.request(
            deadline,
            |peer| async move { peer.read_resource(params).await },
        )
        .await
        .map_err(|e| match e {
            // The URI is the only parameter: a server that refuses it (as 2026-07-28
            // servers and some SDKs do for an unknown resource) does not have it.
            ToolError::InvalidInput(violations) => {
                ToolError::abort(violations.to_string(), RESOURCE_NOT_FOUND, 404)
            }
            other => other,
        })
    }

    /// Completion suggestions for an argument.
    pub async fn complete(
        &self,
        request: CompleteRequestParams,
        deadline: Instant,
    ) -> Result<CompleteResult, ToolError> {
        let answer = self
            .request(deadline, |peer| async move { peer.complete(request).await })
            .await;
        answer.map(|mut result| {
            for value in &mut result.completion.values {
                self.scrubber.scrub_string(value);
            }
            result
        })
    }

    /// Subscribes `caller`'s session to resource `uri` (the upstream once, for its first
    /// subscriber); `notifications/resources/updated` for it is relayed to every session
    /// subscribed. A subscription lasts until unsubscribed, the session ends, or the
    /// upstream connection is re-established (subscribe again then).
    pub async fn subscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        if !self.routes.subscribe(uri, caller) {
            return Ok(());
        }
        let params = SubscribeRequestParams::new(uri.to_owned());
        let subscribed = self
            .request(deadline, |peer| async move { peer.subscribe(params).await })
            .await;
        if subscribed.is_err() {
            self.routes.unsubscribe(uri, &caller.session_id);
        }
        subscribed
    }

    /// Unsubscribes `caller`'s session from resource `uri` (the upstream too, when no
    /// session is left).
    pub async fn unsubscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        if !self.routes.unsubscribe(uri, &caller.session_id) {
            return Ok(());
        }
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        self.request(
            deadline,
            |peer| async move { peer.unsubscribe(params).await },
        )
        .await
    }

    /// One request other than `tools/call`, with the deadline and the upstream's refusals
    /// as errors a caller can act on. Not sent again: these are cheap to ask again.
    async fn request<T, F, Fut>(&self, deadline: Instant, send: F) -> Result<T, ToolError>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let started = Instant::now();
        let (peer, generation) = self.peer(deadline).await?;
        match tokio::time::timeout_at(deadline, send(peer)).await {
            Err(_) => Err(self.timed_out(started)),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(self.refused(e)),
            Ok(Err(e)) => {
                self.forget(generation).await;
                Err(self.broken(e))
            }
        }
    }

    /// The upstream's JSON-RPC error as a toolgate error: a resource it does not have is
    /// `resource_not_found` (404), a bad parameter `invalid_input` (400), anything else
    /// the upstream's failure.
    fn refused(&self, e: ErrorData) -> ToolError {
        let message = self.scrubbed(format!(
            "MCP server `{}` refused the request: {}",
            self.config.name, e.message
        ));
        match e.code {
            ErrorCode::RESOURCE_NOT_FOUND => ToolError::abort(message, RESOURCE_NOT_FOUND, 404),
            ErrorCode::INVALID_PARAMS => ToolError::InvalidInput(InputViolations::one("", message)),
            _ => ToolError::execution(message),
        }
    }

    /// Calls a tool upstream by its upstream name. What the upstream sends about the call
    /// — progress, sampling and elicitation requests — is relayed to `caller`. Dropping
    /// the future cancels the upstream call (`notifications/cancelled`).
    pub async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
        deadline: Instant,
        caller: Option<Arc<CallerRequest>>,
    ) -> Result<CallToolResult, ToolError> {
        let started = Instant::now();
        // A request that could not be sent never ran: it is safe to send it again once,
        // on a new connection. A request lost after it was sent is not retried.
        for attempt in 0..2 {
            let (peer, generation) = self.peer(deadline).await?;
            let params =
                CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
            let sent = tokio::time::timeout_at(deadline, send_call(&peer, params)).await;
            let handle = match sent {
                Err(_) => return Err(self.timed_out(started)),
                Ok(Ok(handle)) => handle,
                Ok(Err(e)) if attempt == 0 => {
                    let error = self.scrubbed(e.to_string());
                    tracing::warn!(server = %self.config.name, %error, "could not send the call; reconnecting");
                    self.forget(generation).await;
                    continue;
                }
                Ok(Err(e)) => return Err(self.broken(e)),
            };
            let mut relay = caller.map(|caller| {
                self.routes
                    .add(handle.id.clone(), handle.progress_token.clone(), caller)
            });
            let mut cancel = CancelOnDrop {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
            };
            let answered = tokio::time::timeout_at(deadline, async {
                let Some(relay) = relay.as_mut() else {
                    return handle.await_response().await;
                };
                let answer = handle.await_response();
                tokio::pin!(answer);
                loop {
                    // Only the receiving is raced with the answer; a relay under way
                    // finishes (a relay dropped halfway would lose its notification).
                    tokio::select! {
                        answer = &mut answer => {
                            relay.drain().await;
                            return answer;
                        }
                        relayed = relay.next() => relay.relay(relayed).await,
                    }
                }
            })
            .await;
            return match answered {
                Err(_) => Err(self.timed_out(started)),
                Ok(Ok(ServerResult::CallToolResult(result))) => {
                    cancel.id = None;
                    Ok(result)
                }
                Ok(Ok(_)) => {
                    cancel.id = None;
                    Err(ToolError::execution(format!(
                        "MCP server `{}` answered the call with something other than a tool result",
                        self.config.name
                    )))
                }
                Ok(Err(ServiceError::McpError(e))) => {
                    cancel.id = None;
                    Err(ToolError::execution(format!(
                        "MCP server `{}` refused the call: {}",
                        self.config.name, e.message
                    )))
                }
                Ok(Err(e)) => {
                    self.forget(generation).await;
                    Err(self.broken(e))
                }
            };
        }
        Err(ToolError::transient(format!(
            "MCP server `{}` could not be reached; try again",
            self.config.name
        )))
    }

    fn timed_out(&self, started: Instant) -> ToolError {
        ToolError::Timeout {
            after: started.elapsed(),
        }
    }

    fn broken(&self, e: ServiceError) -> ToolError {
        ToolError::transient(format!(
            "the connection to MCP server `{}` failed during the call ({}); it is being re-established, try again",
            self.config.name,
            self.scrubbed(e.to_string())
        ))
    }
}

/// Sends `tools/call` without waiting for the answer.
async fn send_call(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
) -> Result<rmcp::service::RequestHandle<RoleClient>, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    peer.send_request_with_option(request, PeerRequestOptions::no_options())
        .await
}

/// Tells the upstream a call was abandoned (deadline, cancellation, the caller gone) when
/// dropped before its answer came.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    /// `None` once answered.
    id: Option<RequestId>,
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
