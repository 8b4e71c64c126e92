//! Which response stream a log message of an HTTP upstream came on.
//!
//! Over streamable HTTP a server sends what concerns a request on that request's response
//! stream; rmcp tells toolgate the stream of a server's *request*
//! (`InboundStreamOrigin`) but not of a notification. A log message names no request, so
//! its stream is the only protocol fact that says whose it is. This HTTP client — reqwest,
//! as rmcp's own — writes the id of the POSTed request into the `_meta` of every
//! `notifications/message` on that POST's response stream, or a stream resumed from it
//! ([`STREAM_KEY`]), and removes the key from every other one (the standalone stream):
//! an upstream cannot name a stream itself. [`Frames`](super::frames::Frames) reads the
//! key, removes it, and routes the message to the call of that request.
//!
//! Each stream of a request is also held only while its call lives, a stream rmcp
//! resumes is attributed to the request whose stream it resumes, and every stream carries
//! only its own request's answer — the standalone stream none —, answered in its place
//! with an error when it does not read ([`request_streams`](super::request_streams)).
//!
//! It also keeps what rmcp last sent a request of the session with ([`Wire`]): the
//! session id, the credential and the protocol headers, which
//! [`Direct`](super::direct::Direct) sends its `tools/call` with.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetExtensions, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::cancelled;
use super::places::{Place, Places, Reserved, Waiting};
use super::post::Target;
use super::relay::{Dropped, RouteTicket, Routes};
use super::request_streams::{Owner, RequestStream, Resumable};
use super::response_stream::SseStream;
use super::unreadable::Unreadables;

/// The `_meta` key of a log message that holds the id of the request whose response
/// stream carried it. Written only by toolgate; never reaches a caller.
pub(crate) const STREAM_KEY: &str = "io.toolgate/stream";

/// How many requests refused with 404 a connection remembers, for their sending again
/// ([`StreamTagging::sent_again`]): rmcp sends again at most the requests it had in
/// flight (16 by default).
const MAX_EXPIRED: usize = 256;

/// The method whose notifications are tagged.
const LOG_METHOD: &str = "notifications/message";

/// rmcp's streamable HTTP client over reqwest, with log messages tagged by stream.
#[derive(Clone)]
pub(crate) struct StreamTagging {
    inner: reqwest::Client,
    wire: Arc<Wire>,
    /// Where an answer dropped from a request's stream is counted.
    routes: Arc<Routes>,
    /// What becomes of a message of the connection that does not read, on the streams of
    /// what rmcp sends and of what [`Direct`](super::direct::Direct) sends alike.
    unreadables: Arc<Unreadables>,
    /// The connection's streams that ended before their answer, for their resume.
    resumable: Arc<Resumable>,
    /// Cancelled when the upstream answers that it does not know the connection's
    /// session (HTTP 404 to a POST or to the standalone stream's GET): it has forgotten
    /// what it was told on it — the resource subscriptions among it — even if rmcp goes on
    /// in a session it sets up again.
    forgotten: CancellationToken,
    /// The upstream's bound on requests in flight: every request POSTed holds a place
    /// until its response is done with ([`places`](super::places)).
    places: Arc<Places>,
    /// The requests of the connection the upstream refused with 404 (it forgot the
    /// session), which rmcp sends again once it has set up a new one
    /// ([`StreamTagging::sent_again`]).
    expired: Arc<Mutex<VecDeque<RequestId>>>,
    /// Cancelled when the connection's transport is dropped (rmcp's worker token): a
    /// request still waiting for a place then gives up, rather than wait in the queue
    /// for a connection nobody will use — rmcp's worker does not stop its `initialize`
    /// when the attempt that made it gives up.
    closed: CancellationToken,
    /// Tells whether a request of the connection waits for a place now: while the
    /// connection is being made, whether its attempt is held up by the bound rather than
    /// by the upstream ([`Waiting`]).
    waiting: Waiting,
    /// Whether the upstream's tools are being imported over a bound taken over from the
    /// upstream connected before it ([`Link::importing`](super::link::Link)): a request
    /// without a place takes one only when one is free.
    importing: Arc<AtomicBool>,
}

impl StreamTagging {
    /// Over `inner`, the pooled client every HTTP upstream shares
    /// ([`http_pool::shared`](super::http_pool::shared)); one per connection, since its
    /// [`Wire`] is the connection's, whose calls are `routes`. `forgotten` is cancelled
    /// once the upstream answers that it does not know the connection's session. Its
    /// requests take their places among the upstream's in `places`, while `closed`, the
    /// token of the transport the client is for, is not cancelled; `waiting` tells when
    /// one of them is queued for its place.
    pub(crate) fn over(
        inner: reqwest::Client,
        routes: Arc<Routes>,
        forgotten: CancellationToken,
        places: Arc<Places>,
        closed: CancellationToken,
        waiting: Waiting,
        importing: Arc<AtomicBool>,
    ) -> Self {
        StreamTagging {
            inner,
            wire: Arc::default(),
            unreadables: Arc::new(Unreadables::new(Arc::clone(&routes))),
            routes,
            resumable: Arc::default(),
            forgotten,
            places,
            expired: Arc::default(),
            closed,
            waiting,
            importing,
        }
    }

    /// Whether `message`, request `id`, is rmcp setting up again the session the upstream
    /// forgot, or sending again a request refused then. Such a request does not wait for
    /// a place: it stands in for one refused with 404, whose place was given back, and
    /// the calls holding every other place may be waiting behind it — rmcp sends nothing
    /// else while it recovers the session — until their deadlines.
    fn sent_again(&self, id: &RequestId, message: &ClientJsonRpcMessage) -> bool {
        if !self.forgotten.is_cancelled() {
            return false;
        }
        let initialize = matches!(
            message,
            JsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::InitializeRequest(_))
        );
        let mut expired = self.expired.lock().unwrap_or_else(PoisonError::into_inner);
        match expired.iter().position(|refused| refused == id) {
            Some(at) => {
                expired.remove(at);
                true
            }
            None => initialize,
        }
    }

    /// What rmcp last sent a message of this connection with.
    pub(crate) fn wire(&self) -> &Arc<Wire> {
        &self.wire
    }

    /// What becomes of a message of this connection that does not read.
    pub(crate) fn unreadables(&self) -> &Unreadables {
        &self.unreadables
    }
}

/// Where and how the messages of one connection go: the endpoint, the session id the
/// upstream gave, the credential, and the headers every message carries (the protocol
/// version) — taken from the last message rmcp POSTed after the connection was set up,
/// without the headers that describe that one message (`Mcp-Method`, `Mcp-Name`,
/// `Mcp-Param-*`). Empty until rmcp POSTs such a message; replaced when rmcp
/// re-initializes an expired session and POSTs again; [`Wire::forget`] empties it.
#[derive(Default)]
pub(crate) struct Wire {
    last: Mutex<Option<Arc<Posted>>>,
}

/// See [`Wire`].
pub(crate) struct Posted {
    pub uri: Arc<str>,
    pub session_id: Option<Arc<str>>,
    pub auth_header: Option<String>,
    pub headers: HashMap<HeaderName, HeaderValue>,
    /// The same, ready for hyper's client: only for a plain-HTTP upstream.
    pub target: Option<Target>,
}

/// The header of the protocol version a message is sent at. (A `HashMap` of header names
/// is looked up by a `HeaderName`: a `&str` key hashes differently, and is never found.)
pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// The headers that describe one message rather than the connection (SEP-2243).
fn describes_one_message(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == "mcp-method" || name == "mcp-name" || name.starts_with("mcp-param-")
}

impl Wire {
    /// What the next message is to be sent with; `None` before rmcp has sent one.
    pub(crate) fn posted(&self) -> Option<Arc<Posted>> {
        self.lock().clone()
    }

    /// Forgets what was kept, when a message sent with it found the session expired:
    /// until rmcp has set up a new one and POSTed on it, nothing is sent around rmcp.
    pub(crate) fn forget(&self, stale: &Arc<Posted>) {
        let mut last = self.lock();
        if last.as_ref().is_some_and(|kept| Arc::ptr_eq(kept, stale)) {
            *last = None;
        }
    }

    /// Keeps how rmcp POSTed `message`, when it is what the connection's next messages are
    /// sent with: a message after set-up (one carrying the protocol version header), other
    /// than an answer to `initialize` or `server/discover` (which are sent without it).
    fn keep(
        &self,
        uri: &Arc<str>,
        session_id: Option<&Arc<str>>,
        auth_header: Option<&String>,
        headers: &HashMap<HeaderName, HeaderValue>,
    ) {
        if !headers.contains_key(&PROTOCOL_VERSION) {
            return;
        }
        let mut last = self.lock();
        let same = last.as_ref().is_some_and(|kept| {
            kept.session_id.as_ref() == session_id
                && kept.uri == *uri
                && kept.auth_header.as_ref() == auth_header
                && kept.headers.get(&PROTOCOL_VERSION) == headers.get(&PROTOCOL_VERSION)
        });
        if same {
            return;
        }
        *last = Some(Arc::new(Posted {
            target: Target::new(
                uri,
                auth_header.map(String::as_str),
                session_id.map(|id| &**id),
            ),
            uri: Arc::clone(uri),
            session_id: session_id.cloned(),
            auth_header: auth_header.cloned(),
            headers: headers
                .iter()
                .filter(|(name, _)| !describes_one_message(name))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Posted>>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StreamableHttpClient for StreamTagging {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        mut message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let (origin, ticket, reserved) = match &mut message {
            JsonRpcMessage::Request(request) => {
                let extensions = request.request.extensions_mut();
                (
                    Some(request.id.clone()),
                    extensions.remove::<RouteTicket>(),
                    extensions.remove::<Reserved>(),
                )
            }
            _ => (None, None, None),
        };
        // A request holds a place until its response is done with; a notification or an
        // answer to the upstream's request takes none (see `places`). Waiting here ends
        // when rmcp drops the POST (its caller gave up), or the connection is dropped.
        let place = match (&origin, reserved.and_then(|r| r.take())) {
            (Some(_), Some(place)) => Some(place),
            (Some(id), None) if self.sent_again(id, &message) => self.places.try_take(),
            (Some(_), None) if self.importing.load(Ordering::Relaxed) => self.places.try_take(),
            (Some(_), None) => tokio::select! {
                place = self.places.take_for(&self.waiting) => place,
                () = self.closed.cancelled() => {
                    return Err(StreamableHttpError::TransportChannelClosed);
                }
            },
            (None, _) => None,
        };
        self.wire.keep(
            &uri,
            session_id.as_ref(),
            auth_header.as_ref(),
            &custom_headers,
        );
        // rmcp drops this future when the request is given up (its cancellation token),
        // and reqwest the POST with it: the place is kept while the upstream may run it.
        let mut under_way = PlaceUnderWay { place };
        let response = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        // Answered — a stream's head came, or the whole of another answer — or failed: the
        // upstream is done with the request, or its stream holds the place from here.
        let place = under_way.place.take();
        if matches!(response, Err(StreamableHttpError::SessionExpired)) {
            self.forgotten.cancel();
            if let Some(id) = &origin {
                let mut expired = self.expired.lock().unwrap_or_else(PoisonError::into_inner);
                if expired.len() == MAX_EXPIRED {
                    expired.pop_front();
                }
                expired.push_back(id.clone());
            }
        }
        Ok(match (response?, origin) {
            (StreamableHttpPostResponse::Sse(stream, session), Some(id)) => {
                // The place goes with the connection: when the call's stream is let go
                // (`request_streams`), not when rmcp is done with it — at 2025-11-25 only
                // once the call's cancellation is answered, five seconds each; or, when the
                // stream ends before its answer, with the stream that resumes it. A call
                // given up keeps it while the upstream may still run it (`cancelled`).
                let stream = self.held(stream, Owner::Request(id.clone()), ticket, None, place);
                StreamableHttpPostResponse::Sse(tagged(stream, Some(id)), session)
            }
            (StreamableHttpPostResponse::Sse(stream, session), None) => {
                StreamableHttpPostResponse::Sse(tagged(stream, None), session)
            }
            (StreamableHttpPostResponse::Json(message, _), Some(id))
                if is_answer_to_another(&message, &id) =>
            {
                self.routes.dropped(Dropped::Answer);
                return Err(StreamableHttpError::UnexpectedServerResponse(
                    "the server answered the request with the answer to another request".into(),
                ));
            }
            (other, _) => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    /// The standalone stream (no `last_event_id`), whose answers are dropped, or the
    /// resume of a stream that ended at `last_event_id`, which is the stream of whichever
    /// request that one was, and holds the place that one held
    /// ([`request_streams`](super::request_streams)).
    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let (owner, ticket) = match &last_event_id {
            Some(event_id) => self.resumable.owner(event_id),
            None => (Owner::Standalone, None),
        };
        // The resume of a request's stream takes its place over as it starts: the request
        // is in flight at the upstream while the GET is under way, and rmcp drops the GET
        // when the request is given up.
        let place = match (&owner, &last_event_id) {
            (Owner::Request(_), Some(event_id)) => self.resumable.take_place(event_id),
            _ => None,
        };
        let mut under_way = PlaceUnderWay { place };
        let attached = session_id.is_some();
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id.clone(),
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        let place = under_way.place.take();
        // rmcp reads a 404 to a GET as any failed GET, and tries again without end.
        if attached
            && matches!(owner, Owner::Standalone)
            && stream.as_ref().err().is_some_and(session_unknown)
        {
            self.forgotten.cancel();
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                // Kept for rmcp's next try at the resume, as before this one.
                if let (Some(place), Some(event_id)) = (place, &last_event_id) {
                    let ticket = ticket.as_ref();
                    self.resumable
                        .ended(event_id, &owner, ticket, Some(place), None);
                }
                return Err(error);
            }
        };
        let origin = match &owner {
            Owner::Request(id) => Some(id.clone()),
            _ => None,
        };
        Ok(tagged(
            self.held(stream, owner, ticket, last_event_id, place),
            origin,
        ))
    }
}

/// The place of a request whose POST rmcp sends, or whose stream it resumes (a GET with
/// `Last-Event-ID`), while that is under way — its answer's head not yet come. Dropped so
/// — rmcp gave the request up, and dropped the POST or the GET with it — the place is
/// kept by a task of its own until the request's hold limit
/// ([`cancelled`]): reqwest's request went with rmcp's future, and with it all that could
/// tell when the upstream is done with the request. Taken out of it when the head comes
/// (or the request fails), it costs an answered request nothing.
struct PlaceUnderWay {
    /// `None` once the answer's head came (or the request failed).
    place: Option<Place>,
}

impl Drop for PlaceUnderWay {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            cancelled::keep_in_task(place, cancelled::Watched::Nothing, None);
        }
    }
}

impl StreamTagging {
    /// `stream`, of `owner`, held while the call of `ticket` lives, holding `place`.
    fn held(
        &self,
        stream: SseStream,
        owner: Owner,
        ticket: Option<RouteTicket>,
        resumed_from: Option<String>,
        place: Option<Place>,
    ) -> SseStream {
        RequestStream::new(
            stream,
            owner,
            ticket,
            resumed_from,
            place,
            Arc::clone(&self.resumable),
            Arc::clone(&self.unreadables),
        )
        .boxed()
    }

    /// POSTs the `tools/call` `id` of a call made from the calling task
    /// ([`Direct`](super::direct::Direct)), which reads the answer, filters it and resumes
    /// the stream itself: its stream is only tagged as `id`'s.
    pub(crate) async fn post_for_call(
        &self,
        id: &RequestId,
        posted: &Posted,
        message: ClientJsonRpcMessage,
        headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        let response = self
            .inner
            .post_message_with_response_limits(
                Arc::clone(&posted.uri),
                message,
                posted.session_id.clone(),
                posted.auth_header.clone(),
                headers,
                limits,
            )
            .await?;
        Ok(match response {
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(tagged(stream, Some(id.clone())), session)
            }
            other => other,
        })
    }

    /// Resumes from `last_event_id` the stream of the call `id` made from the calling
    /// task, tagged as its.
    pub(crate) async fn resume_for_call(
        &self,
        id: &RequestId,
        posted: &Posted,
        last_event_id: String,
    ) -> Result<SseStream, StreamableHttpError<reqwest::Error>> {
        let stream = self
            .inner
            .get_stream(
                Arc::clone(&posted.uri),
                posted.session_id.clone(),
                Some(last_event_id),
                posted.auth_header.clone(),
                posted.headers.clone(),
            )
            .await?;
        Ok(tagged(stream, Some(id.clone())))
    }
}

/// Whether `error`, the failure of a GET of a session, is the upstream saying that it
/// does not know the session (HTTP 404).
fn session_unknown(error: &StreamableHttpError<reqwest::Error>) -> bool {
    match error {
        StreamableHttpError::SessionExpired => true,
        StreamableHttpError::Client(e) => e.status() == Some(http::StatusCode::NOT_FOUND),
        _ => false,
    }
}

/// `stream` with every log message in it tagged as from `origin`'s response stream, or
/// (`None`: a stream that is no request's) untagged.
pub(crate) fn tagged(stream: SseStream, origin: Option<RequestId>) -> SseStream {
    stream
        .map(move |event| {
            event.map(|mut sse| {
                if let Some(data) = &mut sse.data {
                    tag(data, origin.as_ref());
                }
                sse
            })
        })
        .boxed()
}

/// Whether `message` is an answer (response or error) to a request other than `origin`.
fn is_answer_to_another(message: &ServerJsonRpcMessage, origin: &RequestId) -> bool {
    match message {
        JsonRpcMessage::Response(response) => response.id != *origin,
        JsonRpcMessage::Error(error) => error.id.as_ref().is_some_and(|id| id != origin),
        _ => false,
    }
}

/// Writes `origin` under [`STREAM_KEY`] into the `_meta` of a log message in `data` —
/// and removes whatever the upstream wrote there. Other messages are left as they are
/// (read only when they could be a log message: most events are not).
fn tag(data: &mut String, origin: Option<&RequestId>) {
    if !data.contains(LOG_METHOD) {
        return;
    }
    let Ok(mut message) = serde_json::from_str::<Value>(data) else {
        return;
    };
    let is_log = message.get("method").and_then(Value::as_str) == Some(LOG_METHOD)
        && message.get("id").is_none();
    let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
        return;
    };
    if !is_log {
        return;
    }
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    meta.remove(STREAM_KEY);
    if let Some(origin) = origin {
        meta.insert(STREAM_KEY.to_owned(), origin.clone().into_json_value());
    }
    *data = message.to_string();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tagged_as(data: Value, origin: Option<i64>) -> Value {
        let mut text = data.to_string();
        tag(&mut text, origin.map(RequestId::Number).as_ref());
        serde_json::from_str(&text).expect("JSON")
    }

    #[test]
    fn a_log_message_is_tagged_with_the_stream_it_came_on_and_nothing_else_is() {
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                         "params": {"level": "info", "data": "x"}});
        assert_eq!(
            tagged_as(log.clone(), Some(7))["params"]["_meta"][STREAM_KEY],
            7
        );
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": 1, "progress": 1, "message": "notifications/message"}});
        assert_eq!(tagged_as(progress.clone(), Some(7)), progress);
    }

    #[test]
    fn a_stream_an_upstream_names_itself_is_removed() {
        let forged = json!({"jsonrpc": "2.0", "method": "notifications/message",
                            "params": {"level": "info", "data": "x", "_meta": {STREAM_KEY: 3}}});
        assert!(
            tagged_as(forged.clone(), None)["params"]["_meta"]
                .get(STREAM_KEY)
                .is_none()
        );
        assert_eq!(tagged_as(forged, Some(9))["params"]["_meta"][STREAM_KEY], 9);
    }
}
