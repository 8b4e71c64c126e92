//! `tools/call` of the 2026-07-28 revision answered in the task of its HTTP request.
//!
//! A request of 2026-07-28 belongs to no session: it carries its protocol version and
//! what its client can answer in `_meta`. rmcp serves each one with a service of its own:
//! a task for that service's loop, a task that waits for the loop to end and a task for
//! the handler, with channels between them and the HTTP request's task. That is most of
//! what a 2026-07-28 `tools/call` cost a server built on toolgate-mcp over a 2025 one
//! answered by [`DirectCalls`](super::direct::DirectCalls) (docs/performance.md). For a
//! `tools/call` that can send its caller nothing but its answer, the endpoint calls a
//! handler of its own — a [`Connection`] as rmcp's factory makes for such a request,
//! through rmcp's own dispatch ([`Service::handle_request`]) — in the task of the HTTP
//! request, and answers as rmcp would.
//!
//! A request is answered here only when rmcp would certainly have taken it and answered
//! it with its result alone; in every other case it goes to rmcp as before:
//!
//! - a `POST` of a single `tools/call` request, with a `Content-Type` of
//!   `application/json` and an `Accept` of both `application/json` and
//!   `text/event-stream` (no quality values), outside any session (no `Mcp-Session-Id`);
//! - a `Host` rmcp allows and no `Origin`;
//! - one `MCP-Protocol-Version` header of `2026-07-28`, the version `_meta` names too, and
//!   the client's capabilities in `_meta` (what that revision requires of a request);
//! - the standard headers rmcp checks at that revision (SEP-2243) as a client writes
//!   them: one `Mcp-Method` of `tools/call` and one `Mcp-Name` of the tool's name as it
//!   is (a name a client had to encode goes to rmcp), and no `Mcp-Param-*` header;
//! - nothing the call could send the caller besides its answer: no `progressToken`, no
//!   log level, and a client that declared neither `sampling`, `elicitation` nor `roots`;
//! - no event store configured (rmcp would keep the answer for a client to resume).
//!
//! The answer is what rmcp sends: the status it maps the answer to (400 for an
//! unsupported version, a missing capability or a header mismatch, 404 for an unknown
//! method, 200 otherwise); a JSON body when the service answers in JSON or the status is
//! not 200, an SSE stream whose one event is the answer otherwise. A client that leaves
//! before the answer drops the call, which cancels it, as rmcp cancels its handler. The one
//! difference: a call cut by the host's shutdown is answered with a JSON-RPC error and
//! status 503, where rmcp fails the request with 500.
//!
//! The handler's [`RequestContext`] needs a peer, which rmcp makes only for a service it
//! serves. The endpoint serves one for the purpose, once: a peer whose transport is closed
//! from the start, with the peer information rmcp gives a 2026-07-28 request (its
//! version, nothing declared). Nothing can reach a caller through it, and nothing has to:
//! the conditions above leave the call nothing to send but its answer, and a request to
//! the caller is refused at 2026-07-28 anyway.

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header;
use rmcp::model::{
    ClientCapabilities, ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, Extensions,
    GetMeta, Implementation, InitializeRequestParams, ProtocolVersion, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{RoleServer, Service};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::ServerInner;
use super::cancellation::GuardedBody;
use super::connection::Connection;
use super::direct::{self, AllowedHosts, JSON, PROTOCOL_VERSION, SESSION_ID};

const METHOD: &str = "mcp-method";
const NAME: &str = "mcp-name";
const PARAM_PREFIX: &str = "mcp-param-";
/// How a client writes a header value that must be encoded (SEP-2243).
const BASE64_PREFIX: &str = "=?base64?";

/// The `tools/call` requests of 2026-07-28 the endpoint answers itself; see the module.
pub(crate) struct StatelessCalls {
    /// What the endpoint serves, as rmcp's factory makes handlers of it.
    current: Arc<ArcSwap<ServerInner>>,
    /// The peer the handlers are given, made at the first call answered here.
    peer: OnceLock<Peer<RoleServer>>,
}

impl StatelessCalls {
    pub(crate) fn new(current: Arc<ArcSwap<ServerInner>>) -> Self {
        StatelessCalls {
            current,
            peer: OnceLock::new(),
        }
    }

    /// Whether the endpoint may answer `message` itself (see the module's documentation);
    /// `false` sends it to rmcp. `message` is the body of a `POST` of `application/json`
    /// (the only body the endpoint parses).
    pub(super) fn eligible(
        parts: &http::request::Parts,
        message: &ClientJsonRpcMessage,
        hosts: &AllowedHosts,
        rmcp: &LocalSessionManager,
    ) -> bool {
        let ClientJsonRpcMessage::Request(request) = message else {
            return false;
        };
        let ClientRequest::CallToolRequest(call) = &request.request else {
            return false;
        };
        let headers = &parts.headers;
        let version = ProtocolVersion::V_2026_07_28.as_str();
        if only(headers, PROTOCOL_VERSION) != Some(version)
            || only(headers, METHOD) != Some("tools/call")
            || only(headers, NAME).is_none_or(|name| {
                name != call.params.name.as_ref() || name.starts_with(BASE64_PREFIX)
            })
            || headers.contains_key(SESSION_ID)
            || headers.contains_key(header::ORIGIN)
            || headers
                .keys()
                .any(|name| name.as_str().starts_with(PARAM_PREFIX))
            || !direct::accepts_json_and_events(headers)
            || !hosts.allow(parts)
            || rmcp.event_store().is_some()
        {
            return false;
        }
        let meta = request.request.get_meta();
        meta.protocol_version()
            .is_some_and(|named| named.as_str() == version)
            && meta.get_progress_token().is_none()
            && meta.log_level().is_none()
            && meta.client_capabilities().is_some_and(|capabilities| {
                capabilities.sampling.is_none()
                    && capabilities.elicitation.is_none()
                    && capabilities.roots.is_none()
            })
    }

    /// Answers `message` (a request [`eligible`](Self::eligible) found) as rmcp would,
    /// running the call here, in the task that polls the returned future. `config` is the
    /// service's (JSON answers or SSE, the host's shutdown token); `guard` travels with the
    /// response's body.
    pub(super) async fn answer(
        &self,
        parts: http::request::Parts,
        message: ClientJsonRpcMessage,
        config: &StreamableHttpServerConfig,
        guard: DropGuard,
    ) -> http::Response<GuardedBody> {
        let ClientJsonRpcMessage::Request(mut request) = message else {
            unreachable!("only requests are eligible");
        };
        let id = request.id.clone();
        // The handler's token, cancelled when the call ends either way, as rmcp cancels
        // a request's token when it sends the answer or the client leaves.
        let ct = CancellationToken::new();
        let _cancel_on_exit = ct.clone().drop_guard();
        let mut context = RequestContext::new(id.clone(), self.peer().clone());
        context.ct = ct;
        context.meta = std::mem::take(request.request.get_meta_mut());
        let mut extensions = Extensions::new();
        extensions.insert(parts);
        context.extensions = extensions;
        let connection = Connection::new(Arc::clone(&self.current));
        let shutdown = config.cancellation_token.clone();
        let answer = tokio::select! {
            answer = connection.handle_request(request.request, context) => match answer {
                Ok(result) => ServerJsonRpcMessage::response(result, id.clone()),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id.clone())),
            },
            () = shutdown.cancelled() => {
                let error = ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    "the server is shutting down: make the call again",
                    None,
                );
                let answer = ServerJsonRpcMessage::error(error, Some(id.clone()));
                let mut response = json(&answer, id);
                *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                return response;
            }
        };
        let status = status_of(&answer);
        let mut response = if config.json_response || status != http::StatusCode::OK {
            json(&answer, id)
        } else {
            event_stream(direct::event(&answer, id))
        };
        *response.status_mut() = status;
        response.body_mut().guard = Some(guard);
        response
    }

    /// The peer handlers are given: one whose transport is closed, made once.
    fn peer(&self) -> &Peer<RoleServer> {
        self.peer.get_or_init(|| {
            let info = InitializeRequestParams::new(
                ClientCapabilities::default(),
                Implementation::default(),
            )
            .with_protocol_version(ProtocolVersion::V_2026_07_28);
            // The service's loop ends at once (its transport has nothing to read), and
            // with it what the peer sends fails at once.
            let transport = (
                futures::sink::drain::<rmcp::service::TxJsonRpcMessage<RoleServer>>(),
                futures::stream::empty(),
            );
            let running = rmcp::service::serve_directly(
                Connection::new(Arc::clone(&self.current)),
                transport,
                Some(info),
            );
            running.peer().clone()
        })
    }
}

/// The one value of header `name`, when it has exactly one, as text.
pub(super) fn only<'h>(headers: &'h http::HeaderMap, name: &str) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// The HTTP status rmcp answers a 2026-07-28 request with, from its answer (for a request
/// whose `_meta` holds what the revision requires).
fn status_of(answer: &ServerJsonRpcMessage) -> http::StatusCode {
    let ServerJsonRpcMessage::Error(error) = answer else {
        return http::StatusCode::OK;
    };
    match error.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => http::StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => http::StatusCode::NOT_FOUND,
        _ => http::StatusCode::OK,
    }
}

/// `answer`, the answer to request `id`, as a JSON body.
fn json(answer: &ServerJsonRpcMessage, id: RequestId) -> http::Response<GuardedBody> {
    let mut body = Vec::new();
    direct::write_answer(&mut body, answer, id);
    let mut response = http::Response::new(GuardedBody::complete(Bytes::from(body)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(JSON));
    response
}

/// An SSE stream whose one event is `event`, with rmcp's headers.
fn event_stream(event: Bytes) -> http::Response<GuardedBody> {
    let mut response = http::Response::new(GuardedBody::complete(event));
    direct::event_stream_headers(response.headers_mut());
    response
}
