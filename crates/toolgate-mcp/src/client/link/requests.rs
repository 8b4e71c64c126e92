//! The upstream's requests other than `tools/call`, `tasks/*` and subscriptions: listing,
//! prompts, resources, completion, and the one request they all make. A caller's prompt,
//! read and completion are cancelled upstream when the caller gives them up
//! ([`abandoned`](super::abandoned)).

use rmcp::RoleClient;
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, GetPromptRequest,
    GetPromptRequestParams, GetPromptResult, JsonObject, Prompt, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate, ServerCapabilities,
    ServerResult, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use tokio::time::Instant;
use toolgate_core::{ToolError, ToolInvokeContext};

use super::abandoned::cancellable;
use super::errors::{RESOURCE_NOT_FOUND, input_required};
use super::{Channel, Link};
use crate::caller::{CallerKey, CallerRequest};

impl Link {
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
                        cancellable(&peer, request, options).await
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
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(
            ReadResourceRequestParams::new(uri.to_owned()),
        ));
        self.request(self.channel_for(caller), deadline, |peer| async move {
            // An answer of another kind is a failure of the connection, as rmcp's
            // `read_resource_once` has it.
            match cancellable(&peer, request, PeerRequestOptions::no_options()).await? {
                answer @ (ServerResult::ReadResourceResult(_)
                | ServerResult::InputRequiredResult(_)) => Ok(answer),
                _ => Err(ServiceError::UnexpectedResponse),
            }
        })
        .await
        .and_then(|answer| match answer {
            ServerResult::ReadResourceResult(result) => Ok(result),
            ServerResult::InputRequiredResult(asked) => Err(input_required(asked)),
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
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(request));
        self.request(&self.current, deadline, |peer| async move {
            // An answer of another kind is a failure of the connection, as rmcp's
            // `complete` has it.
            match cancellable(&peer, request, PeerRequestOptions::no_options()).await? {
                ServerResult::CompleteResult(result) => Ok(result),
                _ => Err(ServiceError::UnexpectedResponse),
            }
        })
        .await
    }

    /// One request other than `tools/call`, with the deadline and the upstream's refusals
    /// as errors a caller can act on. Not sent again: these are cheap to ask again.
    pub(super) async fn request<T, F, Fut>(
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
        self.request_on(channel, (peer, generation), started, deadline, send)
            .await
    }

    /// [`request`](Self::request) on connection `generation` of `channel`, whose peer is
    /// `peer`, made at `started`: for a caller that must know which connection answered.
    pub(super) async fn request_on<T, F, Fut>(
        &self,
        channel: &Channel,
        (peer, generation): (Peer<RoleClient>, u64),
        started: Instant,
        deadline: Instant,
        send: F,
    ) -> Result<T, ToolError>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        match tokio::time::timeout_at(deadline, send(peer)).await {
            Err(_) => Err(self.timed_out(started)),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(self.refused(e)),
            Ok(Err(e)) => Err(self.failed(channel, generation, e).await),
        }
    }
}
