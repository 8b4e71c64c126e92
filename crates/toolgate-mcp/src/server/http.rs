//! The streamable HTTP endpoint: rmcp's, with each request's body read first, a
//! [`ClientDisconnected`] in each request, and some calls answered in the task of their
//! HTTP request ([`DirectCalls`] in a 2025 session, [`StatelessCalls`] at 2026-07-28).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::Body;
use http_body_util::BodyExt;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::{CancellationToken, DropGuard};

use arc_swap::ArcSwap;

use super::cancellation::{ClientDisconnected, GuardedBody};
use super::connection::Connection;
use super::connection::user_of;
use super::direct::{self, AllowedHosts, DirectCalls, Releasing, RequestIds, TakenId};
use super::held;
use super::listen_gate::{self, ListenGate};
use super::opening;
use super::owners::Owners;
use super::plain_errors;
use super::refusal_words;
use super::repeated_headers;
use super::request_body;
use super::stateless::StatelessCalls;
use super::{McpServer, ServerInner};
use toolgate_core::CallerId;

/// The streamable HTTP endpoint of an [`McpServer`](crate::McpServer), from
/// [`McpServer::http_service`](crate::McpServer::http_service): a cloneable tower service
/// for `axum::Router::nest_service`.
///
/// It reads each request's body in full (at most the configuration's
/// `max_request_body_bytes`) before the MCP server sees it, and answers what is wrong
/// with it with its own status and a JSON-RPC error without an id: 413 for a body over
/// the limit, 408 for one that did not arrive in time (the body failed with an
/// [`std::io::Error`] of kind `TimedOut`), 400 with `-32700` (parse error) for a body
/// that is not JSON, 400 with `-32600` (invalid request) for JSON that is not a
/// JSON-RPC message, and 400 with `-32602` (invalid params) and the request's id for a
/// request whose `_meta` gives a log level or a progress token of the wrong kind. The MCP
/// server's own refusals of a request as sent (a header that does not match the body, say)
/// reach the caller with their message escaped and cut to 256 characters, where rmcp would
/// repeat what the caller sent whole; an `MCP-Protocol-Version` header that is not visible
/// ASCII or names a revision the server does not speak, which rmcp answers in plain text, is
/// a JSON-RPC error (400, `-32022`) with the request's id naming the revisions to send; one
/// of MCP's own headers (`Mcp-Session-Id`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
/// `Last-Event-Id`, an `Mcp-Param-*`) sent twice is refused 400 with `-32600` (rmcp would
/// read the first, a proxy in front may read the last), and a `ping` of 2026-07-28 (a
/// revision without it) is answered 404, `-32601`, in words naming the method and what to
/// send instead. An `initialize` without
/// `Mcp-Session-Id` whose `params` rmcp cannot read is answered 400 with `-32602` and the
/// request's id, naming the field that is wrong and what it must be, where rmcp would ask
/// for a session id.
///
/// An `initialize` without `Mcp-Session-Id` is handled in a task of its own, and the
/// session it opens is closed at once when its client hangs up before the answer is
/// returned: a host that counts sessions from the answers it sees never misses one.
///
/// Each session belongs to the caller who opened it (the user the server's
/// [`identify`](crate::McpServer::identify) finds, or the request's `Arc<User>`
/// extension: an id in a tenant, so `ann` of another tenant is another caller): a request
/// that names its `Mcp-Session-Id` with anyone else's credential — a call, a `GET` for its
/// stream, a `DELETE` — is answered 404 as for an id never issued, and never reaches the
/// session.
///
/// A request whose id is the id of a request of the same session still in flight (not yet
/// answered, its client still there) is refused 400 with `-32600` and its id, in words
/// naming the id: MCP forbids reusing an id within a session, and rmcp, which routes a
/// session's answers by id, would give it the first request's answer and leave the first
/// request's stream open for good.
#[derive(Clone)]
pub struct McpHttpService {
    endpoint: Arc<Endpoint>,
    current: Arc<ArcSwap<ServerInner>>,
}

/// What each request of an [`McpHttpService`] reads, shared by its clones: one count to
/// take per request, and nothing of rmcp's service copied unless the request goes to it.
struct Endpoint {
    rmcp: StreamableHttpService<Connection, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// rmcp's allowed hosts, read once.
    hosts: AllowedHosts,
    /// The sessions whose `tools/call` this service answers itself.
    direct: Arc<DirectCalls>,
    /// The `tools/call` requests of 2026-07-28 this service answers itself.
    stateless: StatelessCalls,
    /// Who opened each session.
    owners: Owners,
    /// The ids of the requests in flight in each session.
    ids: Arc<RequestIds>,
}

impl McpHttpService {
    pub(super) fn new(
        inner: StreamableHttpService<Connection, LocalSessionManager>,
        sessions: Arc<LocalSessionManager>,
        current: Arc<ArcSwap<ServerInner>>,
        direct: Arc<DirectCalls>,
    ) -> Self {
        let stateless = StatelessCalls::new(Arc::clone(&current));
        let hosts = AllowedHosts::new(&inner.config.allowed_hosts);
        McpHttpService {
            endpoint: Arc::new(Endpoint {
                rmcp: inner,
                sessions,
                hosts,
                direct,
                stateless,
                owners: Owners::default(),
                ids: Arc::default(),
            }),
            current,
        }
    }

    /// Ends the session `id` as a `DELETE` from its client would: its worker stops, its
    /// streams end and what it held is freed now rather than at rmcp's keep-alive. A
    /// host that forgets a session (it expired, or was refused) calls this so that the
    /// session does not live on unseen. An id that is not open is ignored.
    pub async fn close_session(&self, id: &str) {
        self.endpoint.close(id).await;
    }

    /// Serves what `next` serves — its pipeline, filter, principals and timeout — from
    /// the next request on, in every session of this service, the open ones included: a
    /// host that reloads its configuration keeps this service, and with it its clients'
    /// sessions, instead of making every client initialize again. Calls in flight finish
    /// on what they started with. (This service's HTTP settings, such as the body limit,
    /// stay.)
    pub fn serve_as(&self, next: &McpHttpService) {
        let next = McpServer {
            inner: next.current.load_full(),
        };
        self.serve(&next);
    }

    /// Serves `server` — its pipeline, filter, principals and timeout — from the next
    /// request on, as [`serve_as`](Self::serve_as) does with another service's: for a
    /// host that keeps one endpoint for the life of its process and builds a server for
    /// each configuration.
    pub fn serve(&self, server: &McpServer) {
        // The `subscriptions/listen` requests open now still count against their users.
        let listens = self.current.load().listens.clone();
        let server = server.clone().counting_listens_in(&listens);
        self.current.store(server.inner);
    }
}

impl Endpoint {
    /// Ends the session `id` (see [`McpHttpService::close_session`]).
    async fn close(&self, id: &str) {
        self.owners.forget(id);
        self.direct.closed(id);
        self.ids.closed(id);
        let id: SessionId = Arc::from(id);
        // The only error is a worker that already stopped: the session is gone either way.
        let _ = self.sessions.close_session(&id).await;
    }
}

impl std::fmt::Debug for McpHttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService").finish_non_exhaustive()
    }
}

impl<B> tower_service::Service<http::Request<B>> for McpHttpService
where
    B: Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B::Data: Send + 'static,
{
    type Response = http::Response<GuardedBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    /// Always ready: a request that goes to rmcp waits for rmcp's service to be ready.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let token = CancellationToken::new();
        request
            .extensions_mut()
            .insert(ClientDisconnected(token.clone()));
        // Dropped with the response future (the client left while we were working) or
        // with an unfinished body (the client left mid-stream): either way, cancel.
        let guard = token.drop_guard();
        let endpoint = Arc::clone(&self.endpoint);
        let current = Arc::clone(&self.current);
        Box::pin(async move {
            let Endpoint {
                rmcp,
                sessions,
                hosts,
                direct,
                stateless,
                owners,
                ids,
            } = &*endpoint;
            let config = &rmcp.config;
            let limit = config.max_request_body_bytes;
            let (request, message) = match request_body::read(request, limit).await {
                Ok(read) => read,
                Err(rejection) => return Ok(rejection),
            };
            let (parts, body) = request.into_parts();
            if let Some(refused) = repeated_headers::refusal(&parts.headers, message.as_ref()) {
                return Ok(refused);
            }
            // A session is its opener's: anyone else is told it does not exist.
            let caller = CallerId::of(&user_of(&current.load(), Some(&parts)));
            let named = parts.headers.get(SESSION_ID_HEADER).map(|id| id.to_str());
            let named = match named {
                None => None,
                Some(Ok(id)) if owners.may_use(id, &caller) => Some(id.to_owned()),
                Some(_) => return Ok(unknown_session()),
            };
            if named.is_none()
                && let Some(refused) = opening::malformed(&parts.headers, message.as_ref())
            {
                return Ok(refused);
            }
            if let Some(refused) = opening::mismatched_version(&parts.headers, message.as_ref()) {
                return Ok(refused);
            }
            let message = match message {
                Some(message) if StatelessCalls::eligible(&parts, &message, hosts, sessions) => {
                    let answer = stateless.answer(parts, message, config, guard);
                    return Ok(answer.await);
                }
                message => message,
            };
            let session = match &message {
                Some(message) => {
                    direct
                        .eligible(&parts, message, config, hosts, sessions)
                        .await
                }
                None => None,
            };
            if let Some(session) = session
                && let Some(message) = message
            {
                let taken = match take_id(ids, named.as_deref(), Some(session.id()), &message) {
                    Ok(taken) => taken,
                    Err(refused) => return Ok(refused),
                };
                let call = session.answer(parts, message);
                let answer = direct::run(call, config.sse_keep_alive).await;
                return Ok(answered(answer, taken, guard));
            }
            let session = direct.to_rmcp(&parts.headers, message.as_ref());
            // Held until the response ends or is dropped, as this future is.
            let taken = match &message {
                Some(message) => {
                    let known = session.as_ref().map(|session| session.id());
                    match take_id(ids, named.as_deref(), known, message) {
                        Ok(taken) => taken,
                        Err(refused) => return Ok(refused),
                    }
                }
                None => None,
            };
            let mut parts = parts;
            let listen = is_listen(message.as_ref()).then(|| {
                let (gate, decision) = ListenGate::new();
                parts.extensions.insert(gate);
                decision
            });
            let post = parts.method == http::Method::POST;
            let delete = parts.method == http::Method::DELETE;
            let one_request = matches!(message, Some(ClientJsonRpcMessage::Request(_)));
            let opens = named.is_none() && opening::opens_session(message.as_ref());
            let request = http::Request::from_parts(parts, body);
            let mut rmcp = rmcp.clone();
            // A session opened for a client that hangs up meanwhile is closed (`opening`).
            let (response, opening) = if opens {
                let closing = Arc::clone(&endpoint);
                let close = move |id: String| {
                    tokio::spawn(async move { closing.close(&id).await });
                };
                match opening::apart(rmcp, request, close).await {
                    Some((response, opening)) => (response, Some(opening)),
                    None => return Ok(opening::failed()),
                }
            } else {
                std::future::poll_fn(|cx| {
                    tower_service::Service::<http::Request<http_body_util::Full<Bytes>>>::poll_ready(
                        &mut rmcp, cx,
                    )
                })
                .await?;
                (
                    tower_service::Service::call(&mut rmcp, request).await?,
                    None,
                )
            };
            match &named {
                Some(id) if delete && response.status().is_success() => {
                    owners.forget(id);
                    direct.closed(id);
                    ids.closed(id);
                }
                Some(_) => {}
                None => {
                    let issued = response.headers().get(SESSION_ID_HEADER);
                    if let Some(id) = issued.and_then(|id| id.to_str().ok()) {
                        owners.record(id, caller, sessions).await;
                    }
                }
            }
            if let Some(session) = session
                && response.status().is_success()
            {
                session.renewed(direct);
            }
            let (mut head, mut body) = response.into_parts();
            let ours;
            (body, ours) = plain_errors::reworded(&mut head, body, message.as_ref());
            if !ours && refusal_words::may_repeat_the_request(head.status, &head.headers) {
                body = refusal_words::cut(body);
            }
            if let Some(decision) = listen
                && is_event_stream(&head.headers)
            {
                body = listen_gate::acknowledged_once_subscribed(body, decision).await;
            }
            if post && is_event_stream(&head.headers) {
                let hold = config.sse_keep_alive.unwrap_or(HOLD_WITHOUT_KEEP_ALIVE);
                body = held::first_events(body, hold, one_request).await;
            }
            if taken.is_some() {
                body = Releasing::new(body, taken).boxed();
            }
            // The host has the answer from here on, and takes the session or closes it.
            if let Some(opening) = opening {
                opening.answered();
            }
            Ok(http::Response::from_parts(
                head,
                GuardedBody {
                    inner: body,
                    guard: Some(guard),
                },
            ))
        })
    }
}

/// Whether `message` is a `subscriptions/listen` request, whose acknowledgment waits for
/// its resources to be subscribed ([`listen_gate`]).
fn is_listen(message: Option<&ClientJsonRpcMessage>) -> bool {
    matches!(
        message,
        Some(ClientJsonRpcMessage::Request(request))
            if matches!(request.request, ClientRequest::SubscriptionsListenRequest(_))
    )
}

/// The header that names a session.
const SESSION_ID_HEADER: &str = "mcp-session-id";

/// The answer to a request naming a session that is not open for its caller: rmcp's own
/// answer to an id it never issued, so that the two cannot be told apart.
fn unknown_session() -> http::Response<GuardedBody> {
    let mut response = http::Response::new(GuardedBody::complete(Bytes::from_static(
        b"Not Found: Session not found",
    )));
    *response.status_mut() = http::StatusCode::NOT_FOUND;
    response
}

/// How long the start of an SSE response is held ([`held`]) when the configuration sets no
/// keep-alive interval: rmcp's default interval.
const HOLD_WITHOUT_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Whether a response's `Content-Type` is an SSE stream.
fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with(direct::EVENT_STREAM))
}

/// Takes the id of `message` in the session `named` (`known`: the same id, already shared)
/// while the request is in flight; `None` for what is not a request of a session. A
/// request whose id is taken is refused: 400, `-32600`, in words naming the id.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response, returned at once"
)]
fn take_id(
    ids: &Arc<RequestIds>,
    named: Option<&str>,
    known: Option<&Arc<str>>,
    message: &ClientJsonRpcMessage,
) -> Result<Option<TakenId>, http::Response<GuardedBody>> {
    let (Some(named), ClientJsonRpcMessage::Request(request)) = (named, message) else {
        return Ok(None);
    };
    let session = known.map_or_else(|| Arc::from(named), Arc::clone);
    match ids.take(session, &request.id) {
        Ok(taken) => Ok(Some(taken)),
        Err(in_flight) => {
            let message = in_flight.to_string();
            Err(request_body::rejection(
                http::StatusCode::BAD_REQUEST,
                in_flight.0.into_json_value(),
                i64::from(ErrorCode::INVALID_REQUEST.0),
                message,
            ))
        }
    }
}

/// A call answered by [`DirectCalls`]: an SSE stream, as rmcp's, its body carrying `guard`
/// and the call's id, `taken` until the body ends.
fn answered(
    answer: direct::Answer,
    taken: Option<TakenId>,
    guard: DropGuard,
) -> http::Response<GuardedBody> {
    let mut response = http::Response::new(GuardedBody {
        inner: Releasing::new(answer, taken).boxed(),
        guard: Some(guard),
    });
    direct::event_stream_headers(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use toolgate_core::User;

    use std::num::NonZeroUsize;

    use super::super::listens::DEFAULT_LISTENS_PER_USER;
    use super::*;

    fn server() -> McpServer {
        McpServer::new(toolgate_core::Pipeline::builder().build().unwrap())
    }

    fn at_most(max: usize) -> NonZeroUsize {
        NonZeroUsize::new(max).unwrap()
    }

    #[tokio::test]
    async fn an_endpoint_serving_a_new_configuration_still_counts_the_listens_open_before() {
        let endpoint = server().http_service(Default::default());
        let alice = User::new("alice");
        let open: Vec<_> = (0..DEFAULT_LISTENS_PER_USER)
            .map(|_| endpoint.current.load().listens.open(&alice).unwrap())
            .collect();
        endpoint.serve(&server());
        assert!(
            endpoint.current.load().listens.open(&alice).is_err(),
            "a reload frees no place"
        );
        drop(open);
        assert!(endpoint.current.load().listens.open(&alice).is_ok());
    }

    #[tokio::test]
    async fn a_server_bound_to_two_listens_per_user_refuses_the_third() {
        let endpoint = server()
            .listens_per_user(at_most(2))
            .http_service(Default::default());
        let (alice, bob) = (User::new("alice"), User::new("bob"));
        let listens = endpoint.current.load().listens.clone();
        let _open = [listens.open(&alice).unwrap(), listens.open(&alice).unwrap()];
        let refused = listens
            .open(&alice)
            .expect_err("the third is past the bound");
        assert_eq!(refused.data.unwrap()["code"], "too_many_listens");
        assert!(
            refused.message.contains("you have 2 open already"),
            "{}",
            refused.message
        );
        assert!(listens.open(&bob).is_ok(), "bob has a bound of his own");
    }

    #[tokio::test]
    async fn an_endpoint_serving_a_new_bound_applies_it_to_the_listens_open_before() {
        let endpoint = server().http_service(Default::default());
        let alice = User::new("alice");
        let open: Vec<_> = (0..2)
            .map(|_| endpoint.current.load().listens.open(&alice).unwrap())
            .collect();

        endpoint.serve(&server().listens_per_user(at_most(1)));
        let refused = endpoint.current.load().listens.open(&alice);
        assert!(refused.is_err(), "alice holds more than the new bound");

        endpoint.serve(&server().listens_per_user(at_most(3)));
        let third = endpoint.current.load().listens.open(&alice);
        assert!(third.is_ok(), "a raised bound makes room at once");
        assert!(endpoint.current.load().listens.open(&alice).is_err());
        drop((open, third));
    }

    /// A request to `endpoint` with `body` (JSON), in session `session`; the answer's
    /// status, its session id header and its whole body.
    async fn exchange(
        endpoint: &mut McpHttpService,
        method: http::Method,
        session: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> (http::StatusCode, Option<String>, Bytes) {
        let mut request = http::Request::builder()
            .method(method)
            .uri("http://localhost/mcp")
            .header(http::header::HOST, "localhost")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(session) = session {
            request = request.header(SESSION_ID_HEADER, session);
        }
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let request = request
            .body(http_body_util::Full::new(body))
            .expect("a request");
        let response = tower_service::Service::call(endpoint, request)
            .await
            .expect("answered");
        let status = response.status();
        let issued = response
            .headers()
            .get(SESSION_ID_HEADER)
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect()
            .await
            .expect("read")
            .to_bytes();
        (status, issued, body)
    }

    /// How many sessions `endpoint` registers for direct calls: once `expected`, or after
    /// `looks` looks 10 ms apart.
    async fn registered_once(endpoint: &McpHttpService, expected: usize, looks: u32) -> usize {
        for _ in 0..looks {
            if endpoint.endpoint.direct.len() == expected {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        endpoint.endpoint.direct.len()
    }

    #[tokio::test]
    async fn a_session_its_client_deletes_is_no_longer_registered_for_direct_calls() {
        let mut endpoint = server().http_service(Default::default());
        for round in 0..3 {
            let initialize = serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}},
            });
            let (status, issued, body) =
                exchange(&mut endpoint, http::Method::POST, None, Some(initialize)).await;
            assert!(status.is_success(), "{status}: {body:?}");
            let session = issued.expect("a session");
            let initialized =
                serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let (status, _, body) = exchange(
                &mut endpoint,
                http::Method::POST,
                Some(&session),
                Some(initialized),
            )
            .await;
            assert!(status.is_success(), "{status}: {body:?}");
            // rmcp hands the notification to the session's handler after the answer.
            let registered = registered_once(&endpoint, 1, 200).await;
            assert_eq!(registered, 1, "round {round}: registered");

            let (status, _, body) =
                exchange(&mut endpoint, http::Method::DELETE, Some(&session), None).await;
            assert!(status.is_success(), "{status}: {body:?}");
            // Given time for anything that would forget it later.
            let registered = registered_once(&endpoint, 0, 100).await;
            assert_eq!(registered, 0, "round {round}: still registered");
        }
    }
}
