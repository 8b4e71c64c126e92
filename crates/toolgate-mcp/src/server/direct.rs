//! `tools/call` of a streamable HTTP session answered in the task of its HTTP request.
//!
//! Through rmcp, a session's request goes from the HTTP connection's task to the session's
//! worker, to its service loop, to a handler task that runs the call, and the answer back
//! the same way, as an SSE stream. That is most of what `/mcp` costs over toolgate's own
//! `/v1` (docs/performance.md). For a `tools/call` that cannot need the session's other
//! streams, the endpoint calls the session's handler itself — the same
//! [`Connection`] rmcp serves, through rmcp's own dispatch ([`Service::handle_request`])
//! — as the response's SSE stream is polled, and sends its answer as that stream's one
//! event: what the client sees is what rmcp would have sent, without resumption (toolgate
//! takes a client that leaves for gone, and cancels its call).
//!
//! A request is answered here only when rmcp would certainly have taken it and sent its
//! answer on the request's own stream; in every other case it goes to rmcp as before:
//!
//! - a `POST` of a single `tools/call` request, with a `Content-Type` of
//!   `application/json` and an `Accept` of both `application/json` and
//!   `text/event-stream` (no quality values), in a session of the 2025 revisions whose
//!   handler has registered it (at `notifications/initialized` or its first call through
//!   rmcp) and that rmcp still holds;
//! - a `Host` rmcp allows, no `Origin` (a browser's request, which rmcp may check against
//!   its allowed origins), no `MCP-Protocol-Version` header other than the session's own
//!   version;
//! - nothing the call could send the caller before its answer: no `progressToken`, no
//!   log level set on the session, and a client that declared neither `sampling`,
//!   `elicitation` nor `roots` (an upstream's request for them is then refused without
//!   asking the caller, as through rmcp);
//! - rmcp heard from the session within half its keep-alive, since a session only answered
//!   here would look idle to rmcp, which would close it: every so often a call goes through
//!   rmcp and renews it.
//!
//! `notifications/cancelled` for a call answered here cancels it (and goes on to rmcp,
//! which ignores an id it does not know), and the call is not answered: its stream ends
//! without an event, as rmcp ends the stream of a call it was told to cancel (MCP,
//! cancellation: the receiver SHOULD NOT answer a cancelled request). A session rmcp
//! closes cancels its calls here, as rmcp cancels its own; those are answered.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, header};
use http_body::{Body, Frame, SizeHint};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData, Extensions,
    ProtocolVersion, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{RoleServer, Service};
use sync_wrapper::SyncWrapper;
use tokio_util::sync::CancellationToken;

use super::connection::{Connection, SessionRegistry};

pub(super) const SESSION_ID: &str = "mcp-session-id";
pub(super) const PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub(super) const JSON: &str = "application/json";
/// The media type of a Server-Sent Events stream.
pub(super) const EVENT_STREAM: &str = "text/event-stream";

/// The sessions whose `tools/call` the endpoint may answer itself: one entry per session
/// rmcp holds, made by its handler and removed when rmcp drops the handler.
pub(crate) struct DirectCalls {
    sessions: RwLock<HashMap<Arc<str>, Arc<DirectSession>>>,
    /// rmcp closes a session that exchanged no message for this long.
    keep_alive: Duration,
    /// What the sessions' `rmcp_seen` count from.
    epoch: Instant,
}

/// A session the endpoint may answer calls of.
pub(super) struct DirectSession {
    /// The session's id.
    id: Arc<str>,
    /// The session's handler (a handle sharing the state of the one rmcp serves).
    connection: Connection,
    /// The session's peer, as rmcp gives it to the handler.
    peer: Peer<RoleServer>,
    /// When rmcp last got a message of the session, in milliseconds since `epoch`.
    rmcp_seen: AtomicU64,
    /// The calls answered here and still running, by JSON-RPC id: each with a number of
    /// its own (the endpoint refuses an id still in flight, [`RequestIds`], so one in
    /// practice).
    running: Mutex<HashMap<RequestId, Vec<(u64, CancellationToken)>>>,
    /// Cancelled when rmcp drops the session: its calls here are cancelled with it.
    closed: CancellationToken,
}

impl DirectCalls {
    pub(crate) fn new(keep_alive: Option<Duration>) -> Self {
        DirectCalls {
            sessions: RwLock::new(HashMap::new()),
            keep_alive: keep_alive.unwrap_or(Duration::MAX),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The session of `headers`, when registered here, for a message on its way to rmcp;
    /// cancels the call answered here that a `notifications/cancelled` names (rmcp ignores
    /// an id it does not know).
    pub(super) fn to_rmcp(
        &self,
        headers: &HeaderMap,
        message: Option<&ClientJsonRpcMessage>,
    ) -> Option<Arc<DirectSession>> {
        let session = self.read().get(session_id(headers)?).cloned()?;
        if let Some(ClientJsonRpcMessage::Notification(notification)) = message
            && let ClientNotification::CancelledNotification(cancelled) = &notification.notification
            && let Some(id) = &cancelled.params.request_id
            && let Some(running) = session.running().get(id)
        {
            // Every call under that id: which one the client meant, it did not say.
            for (_, call) in running {
                call.cancel();
            }
        }
        Some(session)
    }

    /// The session whose call `message` is, when the endpoint may answer it itself (see
    /// the module's documentation); `None` sends it to rmcp. `message` is the body of a
    /// `POST` of `application/json` (the only body the endpoint parses).
    pub(super) async fn eligible(
        &self,
        parts: &http::request::Parts,
        message: &ClientJsonRpcMessage,
        config: &StreamableHttpServerConfig,
        hosts: &AllowedHosts,
        rmcp: &LocalSessionManager,
    ) -> Option<Arc<DirectSession>> {
        let ClientJsonRpcMessage::Request(request) = message else {
            return None;
        };
        if !matches!(request.request, ClientRequest::CallToolRequest(_)) {
            return None;
        }
        if !config.legacy_session_mode
            || !accepts_json_and_events(&parts.headers)
            || !hosts.allow(parts)
            || parts.headers.contains_key(header::ORIGIN)
            || {
                let meta = rmcp::model::GetMeta::get_meta(&request.request);
                meta.get_progress_token().is_some() || meta.protocol_version().is_some()
            }
        {
            return None;
        }
        let id = session_id(&parts.headers)?;
        let session = self.read().get(id).cloned()?;
        let seen = session.rmcp_seen.load(Ordering::Relaxed);
        let since = Duration::from_millis(self.now().saturating_sub(seen));
        if since >= self.keep_alive / 2 || session.closed.is_cancelled() {
            return None;
        }
        let info = session.peer.peer_info()?;
        let version = info.protocol_version.as_str();
        if version >= ProtocolVersion::V_2026_07_28.as_str()
            || parts
                .headers
                .get(PROTOCOL_VERSION)
                .is_some_and(|header| header.as_bytes() != version.as_bytes())
        {
            return None;
        }
        let capabilities = &info.capabilities;
        if capabilities.sampling.is_some()
            || capabilities.elicitation.is_some()
            || capabilities.roots.is_some()
            || session.connection.sets_log_level()
        {
            return None;
        }
        let held = rmcp.has_session(&session.id).await.unwrap_or(false);
        held.then_some(session)
    }
}

impl SessionRegistry for DirectCalls {
    fn register(&self, id: &str, connection: &Connection, peer: &Peer<RoleServer>) {
        if self.read().contains_key(id) {
            return;
        }
        let id: Arc<str> = Arc::from(id);
        let session = Arc::new(DirectSession {
            id: Arc::clone(&id),
            connection: connection.handle(),
            peer: peer.clone(),
            rmcp_seen: AtomicU64::new(self.now()),
            running: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
        });
        self.write().entry(id).or_insert(session);
    }

    fn forget(&self, ids: &[Arc<str>], connection: &Connection) {
        let mut sessions = self.write();
        for id in ids {
            if sessions
                .get(id)
                .is_some_and(|session| session.connection.same_as(connection))
                && let Some(session) = sessions.remove(id)
            {
                session.closed.cancel();
            }
        }
    }
}

impl DirectCalls {
    /// Forgets the session `id`, which the endpoint closed (its client's `DELETE`, or the
    /// host), cancelling its calls answered here. rmcp drops the session's handler too,
    /// which forgets it — but the entry holds the session's peer and a handle on its
    /// handler, and must not be what keeps them, and the session's state, alive.
    pub(super) fn closed(&self, id: &str) {
        let removed = self.write().remove(id);
        if let Some(session) = removed {
            session.closed.cancel();
        }
    }

    /// How many sessions are registered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.read().len()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Arc<str>, Arc<DirectSession>>> {
        self.sessions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Arc<str>, Arc<DirectSession>>> {
        self.sessions.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl DirectSession {
    /// The session's id.
    pub(super) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Notes that rmcp took a message of this session, which renews its keep-alive there.
    pub(super) fn renewed(&self, calls: &DirectCalls) {
        self.rmcp_seen.store(calls.now(), Ordering::Relaxed);
    }

    fn running(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<RequestId, Vec<(u64, CancellationToken)>>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The call `message` (a request, as [`DirectCalls::eligible`] found), run through
    /// rmcp's dispatch on the session's handler; it resolves to the SSE event carrying its
    /// answer, as rmcp would have sent it, or to none when the client cancelled it. It
    /// runs where it is polled: in the task of the HTTP connection.
    pub(super) fn answer(
        self: Arc<Self>,
        parts: http::request::Parts,
        message: ClientJsonRpcMessage,
    ) -> Call {
        Box::pin(async move {
            let ClientJsonRpcMessage::Request(mut request) = message else {
                unreachable!("only requests are eligible");
            };
            let id = request.id.clone();
            let ct = self.closed.child_token();
            let _running = Running::start(&self, id.clone(), ct.clone());
            let meta = std::mem::take(rmcp::model::GetMeta::get_meta_mut(&mut request.request));
            let mut extensions = Extensions::new();
            extensions.insert(parts);
            let mut context = RequestContext::new(id.clone(), self.peer.clone());
            context.ct = ct.clone();
            context.meta = meta;
            context.extensions = extensions;
            let answer = match self
                .connection
                .handle_request(request.request, context)
                .await
            {
                Ok(result) => ServerJsonRpcMessage::response(result, id.clone()),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id.clone())),
            };
            // Only `notifications/cancelled` cancels `ct` while the session is open: the
            // client withdrew the request, and an answer would be to nothing it waits on.
            if withdrawn_by_client(&ct, &self.closed) {
                tracing::debug!(%id, "the client cancelled the call; it is not answered");
                return None;
            }
            Some(event(&answer, id))
        })
    }
}

/// The headers rmcp gives a response that is an SSE stream.
pub(super) fn event_stream_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(EVENT_STREAM),
    );
    headers.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    headers.insert("x-accel-buffering", http::HeaderValue::from_static("no"));
}

/// Whether the token `ct` of a call of a session was cancelled by the client's
/// `notifications/cancelled` rather than by the session's end (`closed`).
fn withdrawn_by_client(ct: &CancellationToken, closed: &CancellationToken) -> bool {
    ct.is_cancelled() && !closed.is_cancelled()
}

/// A call answered here: it resolves to the SSE event carrying its answer, or to none for
/// a call its client cancelled.
pub(super) type Call = Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;

/// The SSE event carrying `answer`, the answer to request `id`.
pub(super) fn event(answer: &ServerJsonRpcMessage, id: RequestId) -> Bytes {
    let mut event = b"data: ".to_vec();
    write_answer(&mut event, answer, id);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

/// Appends `answer`, the answer to request `id`, as JSON to `out`; an answer that cannot
/// be written is replaced by an internal error for the same request.
pub(super) fn write_answer(out: &mut Vec<u8>, answer: &ServerJsonRpcMessage, id: RequestId) {
    let start = out.len();
    if let Err(error) = serde_json::to_writer(&mut *out, answer) {
        tracing::error!(%error, "an answer to tools/call could not be written as JSON");
        out.truncate(start);
        let failed = ServerJsonRpcMessage::error(
            ErrorData::internal_error("the answer could not be written as JSON", None),
            Some(id),
        );
        serde_json::to_writer(out, &failed).unwrap_or_default();
    }
}

/// Runs `call` until it ends or `keep_alive` passes, whichever comes first. A call that
/// ends in time (most do, long before a keep-alive comment would be due) is answered with
/// its event as the whole body, so the response's headers and body go out in one write; a
/// call still running then goes on as the body of the SSE stream whose headers go out now.
pub(super) async fn run(mut call: Call, keep_alive: Option<Duration>) -> Answer {
    let Some(every) = keep_alive else {
        return Answer::Ended(call.await);
    };
    match tokio::time::timeout(every, &mut call).await {
        Ok(event) => Answer::Ended(event),
        Err(_) => Answer::Running {
            call: SyncWrapper::new(call),
            every,
            ping: None,
        },
    }
}

/// The body of a call answered here: one SSE event with the JSON-RPC answer (none for a
/// call its client cancelled), preceded, for
/// a call that outlasts the keep-alive interval, by a comment every interval while it runs
/// (rmcp's stream does the same: proxies do not time the connection out, and a client that
/// left is noticed).
pub(super) enum Answer {
    /// The call ended: its event (if it is answered), until it is sent.
    Ended(Option<Bytes>),
    /// The call runs as the body is polled.
    Running {
        /// A body is shared between threads only to be moved, never polled from two.
        call: SyncWrapper<Call>,
        every: Duration,
        ping: Option<Pin<Box<tokio::time::Sleep>>>,
    },
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        match this {
            Answer::Ended(event) => Poll::Ready(event.take().map(|event| Ok(Frame::data(event)))),
            Answer::Running { call, every, ping } => {
                if let Poll::Ready(event) = call.get_mut().as_mut().poll(cx) {
                    *this = Answer::Ended(None);
                    return Poll::Ready(event.map(|event| Ok(Frame::data(event))));
                }
                let ping = ping.get_or_insert_with(|| Box::pin(tokio::time::sleep(*every)));
                if ping.as_mut().poll(cx).is_ready() {
                    ping.as_mut().reset(tokio::time::Instant::now() + *every);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                        b": keep-alive\n\n",
                    )))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Answer::Ended(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::Ended(event) => {
                SizeHint::with_exact(event.as_ref().map_or(0, |event| event.len() as u64))
            }
            Answer::Running { .. } => SizeHint::default(),
        }
    }
}

/// A call answered here, cancellable by `notifications/cancelled` until it ends.
struct Running<'a> {
    session: &'a DirectSession,
    id: RequestId,
    /// Which of the calls under `id` this is.
    number: u64,
}

impl<'a> Running<'a> {
    fn start(session: &'a DirectSession, id: RequestId, ct: CancellationToken) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        session
            .running()
            .entry(id.clone())
            .or_default()
            .push((number, ct));
        Running {
            session,
            id,
            number,
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.session.running();
        if let Some(calls) = running.get_mut(&self.id) {
            calls.retain(|(number, _)| *number != self.number);
            if calls.is_empty() {
                running.remove(&self.id);
            }
        }
    }
}

/// The JSON-RPC ids of the requests in flight in the sessions of an endpoint, whichever
/// way they are answered (here or through rmcp).
///
/// MCP forbids a requestor to reuse an id within a session, and rmcp routes a session's
/// answers by id: a second request with the id of one in flight would get the first one's
/// answer, and the first one's stream would never end. So the endpoint takes a request's id
/// before either path sees it, refuses a request whose id is taken ([`IdInFlight`]), and
/// gives the id back when the request's response ends or is dropped ([`TakenId`]). An
/// entry lives as long as its request: the set holds only requests in flight.
#[derive(Default)]
pub(super) struct RequestIds {
    taken: Mutex<HashSet<(Arc<str>, RequestId)>>,
}

/// A request whose id is the id of a request still in flight in its session.
#[derive(Debug, thiserror::Error)]
#[error(
    "a request with id `{}` is still in flight in this session: give each request its own id (an id is free again once its request is answered)",
    shown_request_id(.0)
)]
pub(super) struct IdInFlight(pub(super) RequestId);

/// A request id as a message repeats it: a number as it is, a string in quotes (`7` and
/// `"7"` are different ids), cut and escaped as every id a caller chose.
fn shown_request_id(id: &RequestId) -> String {
    match id {
        RequestId::Number(n) => n.to_string(),
        RequestId::String(s) => format!("\"{}\"", toolgate_core::error::shown_id(s)),
    }
}

impl RequestIds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(Arc<str>, RequestId)>> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `id` in `session` until the [`TakenId`] is dropped; an error when a request
    /// with that id is still in flight there.
    pub(super) fn take(
        self: &Arc<Self>,
        session: Arc<str>,
        id: &RequestId,
    ) -> Result<TakenId, IdInFlight> {
        let key = (session, id.clone());
        if !self.lock().insert(key.clone()) {
            return Err(IdInFlight(key.1));
        }
        Ok(TakenId {
            ids: Arc::clone(self),
            key,
        })
    }

    /// Frees every id taken in `session`, which ended (the requests still holding one end
    /// with it).
    pub(super) fn closed(&self, session: &str) {
        self.lock().retain(|(taken, _)| &**taken != session);
    }

    /// How many ids are taken, in every session.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A request id taken in its session ([`RequestIds::take`]), free again when dropped.
pub(super) struct TakenId {
    ids: Arc<RequestIds>,
    key: (Arc<str>, RequestId),
}

impl Drop for TakenId {
    fn drop(&mut self) {
        self.ids.lock().remove(&self.key);
    }
}

/// A response body holding its request's id ([`TakenId`]) until it ends or is dropped:
/// until the answer was sent, or the client left.
pub(super) struct Releasing<B> {
    inner: B,
    taken: Option<TakenId>,
}

impl<B> Releasing<B> {
    pub(super) fn new(inner: B, taken: Option<TakenId>) -> Self {
        Releasing { inner, taken }
    }
}

impl<B: Body + Unpin> Body for Releasing<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.taken = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_ID).and_then(|v| v.to_str().ok())
}

/// Whether `Accept` lists both media types a streamable HTTP client must take, without
/// quality values (rmcp weighs those; they go to rmcp).
pub(super) fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for item in value.split(',') {
            let item = item.trim();
            if item.contains(';') {
                return false;
            }
            json |= item.eq_ignore_ascii_case(JSON);
            events |= item.eq_ignore_ascii_case(EVENT_STREAM);
        }
    }
    json && events
}

/// The hosts rmcp's check against DNS rebinding lets in (its `allowed_hosts`), read once
/// as rmcp reads them for each request: an empty list allows every host; an entry without
/// a port allows its host on any port.
pub(super) struct AllowedHosts {
    /// `None`: every host. Hosts without brackets, in lower case.
    entries: Option<Vec<(String, Option<u16>)>>,
}

impl AllowedHosts {
    pub(super) fn new(allowed: &[String]) -> Self {
        if allowed.is_empty() {
            return AllowedHosts { entries: None };
        }
        let entries = allowed
            .iter()
            .map(|entry| entry.trim())
            .filter(|entry| !entry.is_empty())
            .map(|entry| match http::uri::Authority::try_from(entry) {
                Ok(authority) => (normalize(authority.host()), authority.port_u16()),
                Err(_) => (normalize(entry), None),
            })
            .collect();
        AllowedHosts {
            entries: Some(entries),
        }
    }

    /// Whether the request's `Host` (or its URI's authority) is let in.
    pub(super) fn allow(&self, parts: &http::request::Parts) -> bool {
        let Some(entries) = &self.entries else {
            return true;
        };
        let authority = match parts.headers.get(header::HOST) {
            Some(host) => host
                .to_str()
                .ok()
                .and_then(|host| http::uri::Authority::try_from(host).ok()),
            None => parts.uri.authority().cloned(),
        };
        let Some(authority) = authority else {
            return false;
        };
        let host = unbracketed(authority.host());
        entries.iter().any(|(entry, port)| {
            entry.eq_ignore_ascii_case(host)
                && port.is_none_or(|port| authority.port_u16() == Some(port))
        })
    }
}

/// A host as rmcp compares it: without the brackets of an IPv6 address, in lower case.
fn normalize(host: &str) -> String {
    unbracketed(host).to_ascii_lowercase()
}

fn unbracketed(host: &str) -> &str {
    host.trim_matches('[').trim_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut request = http::Request::post("/mcp");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_request_id_is_taken_in_its_session_until_its_request_ends() {
        let ids = Arc::new(RequestIds::default());
        let (one, two): (Arc<str>, Arc<str>) = (Arc::from("one"), Arc::from("two"));
        let seven = RequestId::Number(7);
        let first = ids.take(Arc::clone(&one), &seven).expect("free");
        let refused = ids.take(Arc::clone(&one), &seven).err().expect("taken");
        assert_eq!(
            refused.to_string(),
            "a request with id `7` is still in flight in this session: give each request its own id (an id is free again once its request is answered)"
        );
        // Another session, and the string "7", are other ids.
        let other = ids.take(Arc::clone(&two), &seven).expect("another session");
        let string = RequestId::String(Arc::from("7"));
        let quoted = ids.take(Arc::clone(&one), &string).expect("a string id");
        let again = ids.take(Arc::clone(&one), &string).err().expect("taken");
        assert!(
            again
                .to_string()
                .starts_with("a request with id `\"7\"` is"),
            "{again}"
        );
        drop(first);
        let _reused = ids.take(Arc::clone(&one), &seven).expect("free again");
        // A session that ends frees its ids; its requests' guards free nothing else.
        ids.closed("one");
        assert_eq!(ids.len(), 1);
        drop(quoted);
        drop(other);
        assert_eq!(ids.len(), 0);
    }

    #[tokio::test]
    async fn a_response_body_frees_its_id_at_its_end_or_when_dropped() {
        use http_body_util::BodyExt;
        let ids = Arc::new(RequestIds::default());
        let session: Arc<str> = Arc::from("s");
        let id = RequestId::Number(1);
        let taken = ids.take(Arc::clone(&session), &id).expect("free");
        let mut body = Releasing::new(http_body_util::Full::new(Bytes::from("x")), Some(taken));
        assert!(body.frame().await.is_some());
        assert_eq!(ids.len(), 1, "taken until the body ends");
        assert!(body.frame().await.is_none());
        assert_eq!(ids.len(), 0, "free at its end");
        let taken = ids.take(Arc::clone(&session), &id).expect("free");
        let body = Releasing::new(http_body_util::Full::new(Bytes::from("x")), Some(taken));
        drop(body);
        assert_eq!(ids.len(), 0, "free when dropped");
    }

    #[test]
    fn accept_must_list_both_media_types_without_weights() {
        let both = parts(&[("accept", "application/json, text/event-stream")]);
        assert!(accepts_json_and_events(&both.headers));
        let split = parts(&[
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
        ]);
        assert!(accepts_json_and_events(&split.headers));
        let one = parts(&[("accept", "application/json")]);
        assert!(!accepts_json_and_events(&one.headers));
        let weighted = parts(&[("accept", "application/json;q=0, text/event-stream")]);
        assert!(!accepts_json_and_events(&weighted.headers));
    }

    #[test]
    fn hosts_are_allowed_as_rmcp_allows_them() {
        let host_allowed = |parts: &http::request::Parts, allowed: &[String]| {
            AllowedHosts::new(allowed).allow(parts)
        };
        let loopback: Vec<String> = StreamableHttpServerConfig::default().allowed_hosts;
        assert!(host_allowed(
            &parts(&[("host", "127.0.0.1:8080")]),
            &loopback
        ));
        assert!(host_allowed(&parts(&[("host", "LOCALHOST")]), &loopback));
        assert!(host_allowed(&parts(&[("host", "[::1]:80")]), &loopback));
        assert!(!host_allowed(
            &parts(&[("host", "evil.example:8080")]),
            &loopback
        ));
        assert!(!host_allowed(&parts(&[("host", "not a host")]), &loopback));
        let with_port = vec!["example.com:8443".to_owned()];
        assert!(host_allowed(
            &parts(&[("host", "example.com:8443")]),
            &with_port
        ));
        assert!(!host_allowed(
            &parts(&[("host", "example.com:8080")]),
            &with_port
        ));
        assert!(host_allowed(&parts(&[("host", "anything")]), &[]));
    }
}
