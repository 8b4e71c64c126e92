//! The upstream's requests other than `tools/call`, `tasks/*` and subscriptions: listing,
//! prompts, resources, completion, and the one request they all make. A caller's list,
//! prompt, read and completion are cancelled upstream when the caller gives them up
//! ([`abandoned`](super::abandoned)).
//!
//! Lists are asked page by page here ([`list_all`]), not through rmcp's `list_all_*`: those
//! follow `nextCursor` for as long as the upstream gives one, keeping every page, and
//! answer from rmcp's response cache. An upstream that always gives a cursor (a buggy or
//! hostile one) made the gateway ask until the deadline, holding every page; and the cache,
//! one per connection, served a caller a list another caller was answered earlier on the
//! shared connection (for as long as the upstream's `ttlMs` said, up to a day), or an
//! expired one when the upstream failed. Each list is now asked of the upstream, at most
//! [`MAX_LIST_PAGES`] pages, [`MAX_LISTED`] items and [`MAX_LISTED_BYTES`] of it.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::RoleClient;
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, CustomResult,
    GetPromptRequest, GetPromptRequestParams, GetPromptResult, JsonObject, ListPromptsRequest,
    ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest, PaginatedRequestParams,
    Prompt, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResult, Resource,
    ResourceTemplate, ServerCapabilities, ServerResult, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use tokio::time::Instant;
use toolgate_core::error::{grouped, shown_id};
use toolgate_core::json::text_len;
use toolgate_core::{ToolError, ToolInvokeContext, User};

use super::abandoned::cancellable;
use super::errors::{RESOURCE_NOT_FOUND, input_required};
use super::{Channel, Link};
use crate::caller::{CallerKey, CallerRequest};
use crate::client::UpstreamTransport;
use crate::client::places::Seat;

/// The most pages toolgate asks for to list one of an upstream's lists (its tools, prompts,
/// resources or resource templates): an upstream that gives a next page after this many
/// fails the listing, rather than being asked until the deadline.
pub(crate) const MAX_LIST_PAGES: usize = 1_000;

/// The most items toolgate takes in one of an upstream's lists, over all its pages: an
/// upstream that lists more fails the listing, rather than filling the gateway's memory.
pub(crate) const MAX_LISTED: usize = 100_000;

/// The most bytes (as JSON) of items toolgate takes in one of an upstream's lists, over all
/// its pages: an upstream that lists more fails the listing. Without it, [`MAX_LIST_PAGES`]
/// pages of items as long as a message can be (16 MiB) were held: 16 GiB.
pub(crate) const MAX_LISTED_BYTES: usize = 64 * 1024 * 1024;

impl Link {
    /// Every tool the upstream lists (asked by the gateway itself: in no caller's share).
    pub async fn list_tools(&self, deadline: Instant) -> Result<Vec<Tool>, ToolError> {
        self.list(&self.current, None, deadline).await
    }

    /// The upstream's capabilities, once connected.
    pub async fn capabilities(&self, deadline: Instant) -> Option<ServerCapabilities> {
        let (peer, _) = self.peer(&self.current, deadline).await.ok()?;
        peer.peer_info().map(|info| info.capabilities.clone())
    }

    /// Every prompt the upstream lists (asked by the gateway itself: in no caller's share).
    pub async fn list_prompts(&self, deadline: Instant) -> Result<Vec<Prompt>, ToolError> {
        self.list(&self.current, None, deadline).await
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
                    .request(
                        channel,
                        Some(ctx.user()),
                        deadline,
                        |peer, seat| async move {
                            let options = Self::options_for(&peer, caller.as_deref());
                            let request =
                                ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
                            cancellable(&peer, request, options, seat.as_ref()).await
                        },
                    )
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

    /// Every resource the upstream lists, to `caller`, `user`'s request (in the user's
    /// share of the upstream's requests in flight; `None`: the gateway's own).
    pub async fn list_resources(
        &self,
        caller: Option<&CallerRequest>,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<Vec<Resource>, ToolError> {
        self.list(self.channel_for(caller), user, deadline).await
    }

    /// Every resource template the upstream lists, to `caller`, `user`'s request (as
    /// [`list_resources`](Self::list_resources)).
    pub async fn list_resource_templates(
        &self,
        caller: Option<&CallerRequest>,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<Vec<ResourceTemplate>, ToolError> {
        self.list(self.channel_for(caller), user, deadline).await
    }

    /// Reads a resource. An upstream that answers `input_required` for a resource gets
    /// its requests to the caller as an error (rounds of resource reads are not relayed).
    /// `user`'s request, as [`list_resources`](Self::list_resources).
    pub async fn read_resource(
        &self,
        uri: &str,
        caller: Option<&CallerRequest>,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<ReadResourceResult, ToolError> {
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(
            ReadResourceRequestParams::new(uri.to_owned()),
        ));
        self.request(
            self.channel_for(caller),
            user,
            deadline,
            |peer, seat| async move {
                // An answer of another kind is a failure of the connection, as rmcp's
                // `read_resource_once` has it.
                let options = PeerRequestOptions::no_options();
                match cancellable(&peer, request, options, seat.as_ref()).await? {
                    answer @ (ServerResult::ReadResourceResult(_)
                    | ServerResult::InputRequiredResult(_)) => Ok(answer),
                    _ => Err(ServiceError::UnexpectedResponse),
                }
            },
        )
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
    /// answer of the upstream is), `user`'s request (as
    /// [`list_resources`](Self::list_resources)).
    pub async fn complete(
        &self,
        request: CompleteRequestParams,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<CompleteResult, ToolError> {
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(request));
        self.request(&self.current, user, deadline, |peer, seat| async move {
            // An answer of another kind is a failure of the connection, as rmcp's
            // `complete` has it.
            let options = PeerRequestOptions::no_options();
            match cancellable(&peer, request, options, seat.as_ref()).await? {
                ServerResult::CompleteResult(result) => Ok(result),
                _ => Err(ServiceError::UnexpectedResponse),
            }
        })
        .await
    }

    /// Every item of one of the upstream's lists, on `channel` ([`list_all`]), for `user`.
    async fn list<T: Listed>(
        &self,
        channel: &Channel,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<Vec<T>, ToolError> {
        let server = &self.config.name;
        self.request(channel, user, deadline, |peer, seat| async move {
            list_all(&peer, server, seat.as_ref()).await
        })
        .await?
        .map_err(ToolError::execution)
    }

    /// One request other than `tools/call`, with the deadline and the upstream's refusals
    /// as errors a caller can act on. Not sent again: these are cheap to ask again.
    ///
    /// `send` is given the request's [`Seat`] among the upstream's requests in flight (an
    /// HTTP upstream's; for [`cancellable`]), in `user`'s share of them (`None`: a
    /// request of the gateway's own, in nobody's): a request still waiting for a place at
    /// `deadline` fails with 503 `upstream_busy`, as a call does — or, while it waits for
    /// its caller's share, with 503 `upstream_share_used`.
    pub(super) async fn request<T, F, Fut>(
        &self,
        channel: &Channel,
        user: Option<&User>,
        deadline: Instant,
        send: F,
    ) -> Result<T, ToolError>
    where
        F: FnOnce(Peer<RoleClient>, Option<Seat>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let started = Instant::now();
        let (peer, generation) = self.peer(channel, deadline).await?;
        self.request_on(channel, (peer, generation), user, started, deadline, send)
            .await
    }

    /// [`request`](Self::request) on connection `generation` of `channel`, whose peer is
    /// `peer`, made at `started`: for a caller that must know which connection answered.
    pub(super) async fn request_on<T, F, Fut>(
        &self,
        channel: &Channel,
        (peer, generation): (Peer<RoleClient>, u64),
        user: Option<&User>,
        started: Instant,
        deadline: Instant,
        send: F,
    ) -> Result<T, ToolError>
    where
        F: FnOnce(Peer<RoleClient>, Option<Seat>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        // Over stdio, one pipe: no bound, no seat. Nor for an import over a bound taken
        // over: the transport takes a place for it only when one is free.
        let importing = self.importing.load(Ordering::Relaxed);
        let http = matches!(self.config.transport, UpstreamTransport::Http { .. });
        let seat = (http && !importing).then(|| {
            let sharer = user.and_then(|user| self.places.sharer(user));
            Seat::new(Arc::clone(&self.places), sharer, Some(deadline))
        });
        let sent = send(peer, seat.clone());
        tokio::pin!(sent);
        let answered = tokio::time::timeout_at(deadline, &mut sent).await;
        // Read while the request still lives: once it is dropped, it leaves the queue.
        if answered.is_err()
            && let Some(held_up) = seat.and_then(|seat| seat.held_up(started.elapsed()))
        {
            tracing::warn!(server = %self.config.name, reason = %held_up, "a request waited for a place among the MCP server's requests in flight until its deadline");
            return Err(self.no_place(held_up));
        }
        match answered {
            Err(_) => Err(self.timed_out(started)),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(self.refused(e)),
            Ok(Err(e)) => Err(self.failed(channel, generation, e).await),
        }
    }
}

/// One of the lists an upstream gives page by page, as [`list_all`] asks for it.
pub(super) trait Listed: Sized + serde::Serialize {
    /// What is listed, for errors: `tools`, `prompts`, ...
    const WHAT: &'static str;

    /// The request for the page `params` names.
    fn request(params: PaginatedRequestParams) -> ClientRequest;

    /// An answer's items and the cursor of its next page; `None` for an answer of
    /// another kind.
    fn page(answer: ServerResult) -> Option<(Vec<Self>, Option<String>)>;

    /// What is wrong with `raw`, an answer rmcp could not read as a page of this list
    /// (it keeps such an answer as raw JSON), in an error naming `server`; `None` when
    /// it does not look like a page of it at all.
    fn unreadable(raw: &CustomResult, server: &str) -> Option<String> {
        let _ = (raw, server);
        None
    }
}

impl Listed for Tool {
    const WHAT: &'static str = "tools";

    fn request(params: PaginatedRequestParams) -> ClientRequest {
        ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params))
    }

    fn page(answer: ServerResult) -> Option<(Vec<Self>, Option<String>)> {
        match answer {
            ServerResult::ListToolsResult(page) => Some((page.tools, page.next_cursor)),
            _ => None,
        }
    }

    /// The first tool of the page that is not an MCP tool, and why: one tool whose
    /// `inputSchema` is a string makes rmcp refuse the whole page, which it reports as
    /// an answer "of the wrong kind".
    fn unreadable(raw: &CustomResult, server: &str) -> Option<String> {
        let listed = raw.0.get("tools")?.as_array()?;
        let (at, tool) = (listed.iter().enumerate())
            .find(|(_, tool)| serde_json::from_value::<Tool>((*tool).clone()).is_err())?;
        let not_object = |field: &str| tool.get(field).is_some_and(|v| !v.is_object());
        let why = if !tool.get("name").is_some_and(serde_json::Value::is_string) {
            "its `name` is not a string"
        } else if tool.get("inputSchema").is_none() {
            "it has no `inputSchema`"
        } else if not_object("inputSchema") {
            "its `inputSchema` is not a JSON object"
        } else if not_object("outputSchema") && !tool["outputSchema"].is_null() {
            "its `outputSchema` is not a JSON object"
        } else {
            "a field has the wrong type"
        };
        let name = tool.get("name").and_then(serde_json::Value::as_str);
        Some(format!(
            "MCP server `{server}` lists a tool toolgate cannot read, so none of its tools can be imported: tool {} of the page (`{}`): {why}; the server must fix its definition",
            at + 1,
            shown_id(name.unwrap_or_default()),
        ))
    }
}

impl Listed for Prompt {
    const WHAT: &'static str = "prompts";

    fn request(params: PaginatedRequestParams) -> ClientRequest {
        ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(params))
    }

    fn page(answer: ServerResult) -> Option<(Vec<Self>, Option<String>)> {
        match answer {
            ServerResult::ListPromptsResult(page) => Some((page.prompts, page.next_cursor)),
            _ => None,
        }
    }
}

impl Listed for Resource {
    const WHAT: &'static str = "resources";

    fn request(params: PaginatedRequestParams) -> ClientRequest {
        ClientRequest::ListResourcesRequest(ListResourcesRequest::with_param(params))
    }

    fn page(answer: ServerResult) -> Option<(Vec<Self>, Option<String>)> {
        match answer {
            ServerResult::ListResourcesResult(page) => Some((page.resources, page.next_cursor)),
            _ => None,
        }
    }
}

impl Listed for ResourceTemplate {
    const WHAT: &'static str = "resource templates";

    fn request(params: PaginatedRequestParams) -> ClientRequest {
        ClientRequest::ListResourceTemplatesRequest(ListResourceTemplatesRequest::with_param(
            params,
        ))
    }

    fn page(answer: ServerResult) -> Option<(Vec<Self>, Option<String>)> {
        match answer {
            ServerResult::ListResourceTemplatesResult(page) => {
                Some((page.resource_templates, page.next_cursor))
            }
            _ => None,
        }
    }
}

/// Every item of one of the lists of `server`, whose connection is `peer`: asked page by
/// page, each page's request [`cancellable`] (given up, the upstream is told and its
/// stream let go), none answered from rmcp's response cache; with a `seat`, each page
/// takes its place there in turn.
///
/// # Errors
///
/// Outside, a request that failed (as [`cancellable`]; an answer of another kind is
/// [`ServiceError::UnexpectedResponse`], as rmcp has it). Inside, in plain words, an
/// upstream that lists wrong: that gives a cursor it gave before (its list would never end), more than
/// [`MAX_LIST_PAGES`] pages, more than [`MAX_LISTED`] items or more than
/// [`MAX_LISTED_BYTES`] of them.
pub(super) async fn list_all<T: Listed>(
    peer: &Peer<RoleClient>,
    server: &str,
    seat: Option<&Seat>,
) -> Result<Result<Vec<T>, String>, ServiceError> {
    let mut items = Vec::new();
    // The length of `items` as JSON.
    let mut bytes = 0_usize;
    // The cursors given, by their hash: a cursor can be as long as a page.
    let hasher = RandomState::new();
    let mut cursors = HashSet::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let options = PeerRequestOptions::no_options();
        let answer = cancellable(peer, T::request(params), options, seat);
        let answer = answer.await?;
        if let ServerResult::CustomResult(raw) = &answer
            && let Some(why) = T::unreadable(raw, server)
        {
            return Ok(Err(why));
        }
        let (page, next) = T::page(answer).ok_or(ServiceError::UnexpectedResponse)?;
        if page.len() > MAX_LISTED - items.len() {
            return Ok(Err(format!(
                "MCP server `{server}` lists more than {} {}, more than toolgate takes: it cannot be listed",
                grouped(MAX_LISTED as u64),
                T::WHAT
            )));
        }
        bytes = bytes.saturating_add(page.iter().map(text_len).fold(0, usize::saturating_add));
        if bytes > MAX_LISTED_BYTES {
            return Ok(Err(format!(
                "MCP server `{server}` lists more than {} MiB of {}, more than toolgate takes: it cannot be listed",
                MAX_LISTED_BYTES / (1024 * 1024),
                T::WHAT
            )));
        }
        items.extend(page);
        let Some(next) = next else {
            return Ok(Ok(items));
        };
        if !cursors.insert(hasher.hash_one(&next)) {
            return Ok(Err(format!(
                "MCP server `{server}` gave the same next-page cursor twice while listing its {}: its list would never end",
                T::WHAT
            )));
        }
        cursor = Some(next);
    }
    Ok(Err(format!(
        "MCP server `{server}` lists its {} in more than {} pages, more than toolgate asks for: it cannot be listed",
        T::WHAT,
        grouped(MAX_LIST_PAGES as u64)
    )))
}
