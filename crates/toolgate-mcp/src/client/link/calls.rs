//! `tools/call`: one call, its rounds of `input_required` answers, and what the upstream
//! sends about it on the way.

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientRequest,
    ErrorCode, GetExtensions, JsonObject, ProtocolVersion, RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use tokio::time::Instant;
use toolgate_core::error::error_text;
use toolgate_core::{ToolError, ToolInvokeContext, User};

use super::abandoned::CancelOnDrop;
use super::errors::{input_required, is_oversized_answer};
use super::{Channel, Link};
use crate::caller::{CallerKey, CallerRequest, InputRound, UPSTREAM_TASK, UpstreamTask};
use crate::client::direct::Direct;
use crate::client::input::ask_caller;
use crate::client::places::{Place, Reserved};
use crate::client::relay::Relay;
use crate::client::unreadable;

/// How many rounds of `input_required` results toolgate fulfils for one call of a caller
/// that cannot take them (2025-11-25), asking it each request, before it gives up.
const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;

impl Link {
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
                user: ctx.user(),
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
    pub(super) async fn rounds<T, F, Fut>(
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
    pub(super) fn options_for(
        peer: &Peer<RoleClient>,
        caller: Option<&CallerRequest>,
    ) -> PeerRequestOptions {
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
                // Nothing is sent yet: a call that finds no place by its deadline was
                // never the upstream's.
                let place = self.place(call.user, deadline).await?;
                let mut cancel = CancelOnDrop::new(peer.clone(), prepared.id.clone());
                let answered = tokio::time::timeout_at(
                    deadline,
                    relayed(&mut relay, direct.send(prepared, ticket.clone(), place)),
                )
                .await;
                // `None`: not taken (the session expired); through rmcp, which sets up a
                // new one.
                if let Some(answered) = answered.transpose() {
                    if answered.is_ok() {
                        cancel.answered();
                    }
                    return self
                        .answer(
                            channel,
                            generation,
                            call.asker(),
                            answered,
                            (started, deadline),
                        )
                        .await;
                }
                cancel.answered();
            }
            let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(call.params()));
            request.extensions_mut().insert(ticket);
            // Taken here, within the deadline, and handed to the transport with the request.
            let place = self.place(call.user, deadline).await?;
            request.extensions_mut().insert(Reserved::new(place));
            let sent =
                tokio::time::timeout_at(deadline, peer.send_request_with_option(request, options))
                    .await;
            let handle = match sent {
                Err(_) => return Err(self.timed_out(started)),
                Ok(Ok(handle)) => handle,
                Ok(Err(e)) if attempt == 0 => {
                    let error = self.failure_words(&e);
                    tracing::warn!(server = %self.config.name, %error, "could not send the call; reconnecting");
                    self.forget(channel, generation).await;
                    continue;
                }
                Ok(Err(e)) => return Err(self.broken(channel, generation, e)),
            };
            let mut cancel = CancelOnDrop::new(peer.clone(), handle.id.clone());
            let answered =
                tokio::time::timeout_at(deadline, relayed(&mut relay, handle.await_response()))
                    .await;
            if answered.is_ok() {
                cancel.answered();
            }
            return self
                .answer(
                    channel,
                    generation,
                    call.asker(),
                    answered,
                    (started, deadline),
                )
                .await;
        }
        Err(ToolError::transient(format!(
            "MCP server `{}` could not be reached; try again",
            self.config.name
        )))
    }

    /// A place among the upstream's requests in flight for a call of `user`'s — in the
    /// user's share first — waiting for one until `deadline` at most.
    ///
    /// # Errors
    ///
    /// When the deadline comes first: 503 `upstream_share_used` while the call waits for
    /// its caller's share ([`ShareUsed`](crate::client::places::ShareUsed)), else 503
    /// `upstream_busy` ([`Busy`](crate::client::places::Busy)).
    async fn place(&self, user: &User, deadline: Instant) -> Result<Place, ToolError> {
        let sharer = self.places.sharer(user);
        self.places
            .take(sharer.as_ref(), Some(deadline))
            .await
            .map_err(|e| self.no_place(e))
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
        (caller, user): (Option<&CallerRequest>, &User),
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
                    return self.await_task(created, user, started, deadline).await;
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
            Ok(Err(ServiceError::McpError(e))) if unreadable::why_answered(&e).is_some() => {
                let why = unreadable::why_answered(&e).unwrap_or_default();
                Err(self.unreadable_answer("this call", why))
            }
            Ok(Err(ServiceError::McpError(e))) => {
                // Scrubbed whole, then cut: a cut never leaves half a credential behind.
                let sent = self.scrubbed_sent(e.message.into_owned());
                Err(ToolError::execution(error_text(format_args!(
                    "MCP server `{}` refused the call: {sent}",
                    self.config.name
                ))))
            }
            Ok(Err(e)) => Err(self.failed(channel, generation, e).await),
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
            Ok(Ok(ServerResult::InputRequiredResult(asked))) => Err(input_required(asked)),
            Ok(Ok(_)) => Err(ToolError::execution(format!(
                "MCP server `{}` answered the call with something other than a tool result",
                self.config.name
            ))),
        }
    }
}

/// A channel's connection, as [`Link::connected`] hands it out.
pub(super) struct Connected {
    pub(super) peer: Peer<RoleClient>,
    /// Which connection of the channel it is.
    pub(super) generation: u64,
    /// Its calls from the calling task (HTTP only).
    pub(super) direct: Option<Arc<Direct>>,
}

/// One `tools/call` of a caller's, as [`Link::call_once`] sends it.
struct Call<'a> {
    /// The tool's name at the upstream.
    name: &'a str,
    arguments: &'a JsonObject,
    /// The caller's answers to the upstream's last `input_required` round.
    round: Option<InputRound>,
    caller: Option<Arc<CallerRequest>>,
    /// Who makes it: its place is taken in this user's share.
    user: &'a User,
    /// Whether it may be sent from the calling task ([`Direct`]).
    direct: bool,
}

impl Call<'_> {
    /// Who asks: the caller's request, and the user.
    fn asker(&self) -> (Option<&CallerRequest>, &User) {
        (self.caller.as_deref(), self.user)
    }

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
