//! `tools/call` to a streamable-HTTP upstream from the task that makes the call.
//!
//! Through rmcp, a request goes from the calling task to the session's service loop, from
//! there to the transport's worker, which POSTs it in a task of its own and reads the
//! response stream in another, and the answer comes back the same way: at 16 connections
//! these hops and rmcp's client worker were a third of the gateway's CPU for a `/mcp`
//! call and half for a `/v1` call (docs/performance.md, "Where a call's time goes"). For
//! `tools/call`, the one request on every call's path, toolgate POSTs the request itself,
//! in the calling task, and reads the answer there, as JSON or as an SSE stream, resuming
//! a stream the upstream closes early (`Last-Event-ID`) as rmcp would. It POSTs on hyper's
//! pooled client ([`post`](super::post)) to a plain-HTTP upstream reached without a
//! proxy, and on the connection's reqwest client (rmcp's) otherwise.
//!
//! What is not the call's answer goes where rmcp's own frames go. Every message on the
//! call's stream passes [`Inbound::take`] first — the same scrubbing and the same
//! attribution as a frame through rmcp ([`Frames`](super::frames::Frames)): progress and
//! log messages (tagged with this stream by [`StreamTagging`]) are queued for the call
//! they belong to. The upstream's requests (sampling, elicitation) and any other message
//! are then handed to rmcp through the connection's side door, with the stream they came
//! on, and rmcp answers them as if it had read them itself. The answer is scrubbed by the
//! same code.
//!
//! rmcp keeps everything else: setting the connection up (`initialize` or
//! `server/discover`), the standalone stream, `notifications/cancelled`, answering the
//! upstream's requests, and setting up a session again when the upstream has expired it.
//! A call goes through rmcp instead when there is nothing yet to send it with (rmcp has
//! not POSTed on the connection since setting it up: [`Wire`]); when the tool's arguments
//! travel in headers too (`x-mcp-header` annotations, 2026-07-28), which rmcp writes; and
//! when the upstream answers that the session has expired (HTTP 404: the call was not
//! taken), so that rmcp sets up a new one.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientConfig, ClientJsonRpcMessage, ClientRequest,
    GetExtensions, GetMeta, JsonRpcMessage, NumberOrString, ProgressToken, ProtocolVersion,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{
    InboundStreamOrigin, Peer, PeerRequestOptions, RxJsonRpcMessage, ServiceError,
};
use rmcp::transport::DynamicTransportError;
use rmcp::transport::common::client_side_sse::{ExponentialBackoff, SseRetryPolicy};
use rmcp::transport::streamable_http_client::{
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use tokio::sync::mpsc;

use super::cancelled::{self, Watched};
use super::frames::Inbound;
use super::http_pool::{self, Plain};
use super::places::Place;
use super::post::{self, PostError, UnderWay};
use super::relay::{Dropped, RouteTicket};
use super::request_streams::capped_retry;
use super::response_stream::SseStream;
use super::streams::{self, PROTOCOL_VERSION, Posted, StreamTagging, Wire};
use super::unreadable::CameOn;

/// The calls of one connection made from the calling task; see the module.
pub(crate) struct Direct {
    client: StreamTagging,
    /// hyper's pooled client, for a plain-HTTP upstream reached without a proxy (a
    /// call whose [`Posted`] has a target).
    plain: Plain,
    inbound: Inbound,
    side_door: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
    /// Who toolgate is, told with each request at 2026-07-28 as rmcp tells it.
    identity: ClientConfig,
    /// Numbers the requests sent here. Their ids are strings (`toolgate-N`), rmcp's are
    /// numbers: the two never name the same request of the connection.
    sent: AtomicU64,
}

/// A `tools/call` ready to go: its id, its message, and what it goes with.
pub(crate) struct Prepared {
    pub id: RequestId,
    /// Its progress token: only when the caller asked for progress.
    token: Option<ProgressToken>,
    message: ClientJsonRpcMessage,
    posted: Arc<Posted>,
    headers: HashMap<HeaderName, HeaderValue>,
}

/// How many times in a row a call's stream is resumed without a message coming on it.
const MAX_RESUMES: usize = 5;

impl Direct {
    /// The calls made around rmcp on the connection whose HTTP client is `client`, whose
    /// messages come in through `inbound`, and whose rmcp session takes what else comes
    /// through `side_door`.
    pub(crate) fn new(
        client: StreamTagging,
        inbound: Inbound,
        side_door: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
        identity: ClientConfig,
    ) -> Self {
        Direct {
            client,
            plain: http_pool::plain(),
            inbound,
            side_door,
            identity,
            sent: AtomicU64::new(0),
        }
    }

    fn wire(&self) -> &Arc<Wire> {
        self.client.wire()
    }

    /// The `tools/call` of `params` on `peer`'s session with `options`, as rmcp would send
    /// it; `None` when it is to go through rmcp (see the module). With a progress token
    /// only when `progress` (the caller asked for progress): rmcp gives every request one,
    /// but progress nobody asked for would only be dropped, and an upstream may answer a
    /// call without one sooner (in the request's own task, with one write).
    pub(crate) fn prepare(
        &self,
        peer: &Peer<RoleClient>,
        params: CallToolRequestParams,
        options: &PeerRequestOptions,
        progress: bool,
    ) -> Option<Prepared> {
        let posted = self.wire().posted()?;
        let version = peer.peer_info()?.protocol_version.clone();
        // Sent with what rmcp sent on this session, and only once rmcp sends at the
        // session's version (not a message of the set-up it fell back from).
        if posted.headers.get(&PROTOCOL_VERSION)?.as_bytes() != version.as_str().as_bytes() {
            return None;
        }
        let mut headers = posted.headers.clone();
        if version >= ProtocolVersion::STANDARD_HEADERS {
            headers.insert(
                HeaderName::from_static("mcp-method"),
                HeaderValue::from_static("tools/call"),
            );
            headers.insert(
                HeaderName::from_static("mcp-name"),
                plain_header_value(&params.name)?,
            );
        }
        let id = RequestId::String(
            format!("toolgate-{}", self.sent.fetch_add(1, Ordering::Relaxed)).into(),
        );
        let token = progress.then(|| {
            ProgressToken(match &id {
                RequestId::String(id) => NumberOrString::String(Arc::clone(id)),
                RequestId::Number(n) => NumberOrString::Number(*n),
            })
        });
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let meta = request.get_meta_mut();
        if !version.has_initialize() {
            meta.set_protocol_version(version);
            meta.set_client_info(self.identity.client_info.clone());
            meta.set_client_capabilities(self.identity.capabilities.clone());
        }
        if let Some(extra) = options.meta.clone() {
            meta.extend(extra);
        }
        if let Some(token) = &token {
            meta.set_progress_token(token.clone());
        }
        Some(Prepared {
            id: id.clone(),
            token,
            message: JsonRpcMessage::request(request, id),
            posted,
            headers,
        })
    }

    /// Sends `call`, its route (`ticket`) registered as it goes, and reads the upstream's
    /// answer; `None` when the upstream did not take it (the session expired), and it is
    /// to go through rmcp. `place`, the call's among the upstream's requests in flight,
    /// is held until the answer's stream is done with (drained, or dropped); when the
    /// future is dropped before the answer (the call given up), for as long as the
    /// upstream may still run the call ([`InFlight`]).
    pub(crate) async fn send(
        &self,
        call: Prepared,
        ticket: RouteTicket,
        place: Place,
    ) -> Option<Result<ServerResult, ServiceError>> {
        let Prepared {
            id,
            token,
            message,
            posted,
            headers,
        } = call;
        self.inbound.register(id.clone(), token, ticket);
        let mut flight = InFlight {
            id: &id,
            place: Some(place),
            under_way: UnderWay::default(),
            stream: None,
        };
        let answer = self.exchange(message, &posted, headers, &mut flight).await;
        flight.settle();
        answer
    }

    /// POSTs `message`, the call of `flight`, and reads the upstream's answer (see
    /// [`send`](Self::send)).
    async fn exchange(
        &self,
        message: ClientJsonRpcMessage,
        posted: &Arc<Posted>,
        headers: HashMap<HeaderName, HeaderValue>,
        flight: &mut InFlight<'_>,
    ) -> Option<Result<ServerResult, ServiceError>> {
        let id = flight.id;
        let limits = StreamableHttpResponseLimits::default();
        let response = match &posted.target {
            Some(target) => {
                let under_way = &mut flight.under_way;
                let response =
                    post::post(&self.plain, target, &headers, &message, &limits, under_way).await;
                response.map(|answer| tagged(answer, id)).map_err(failed)
            }
            None => self
                .client
                .post_for_call(id, posted, message, headers, limits)
                .await
                .map_err(failed),
        };
        let stream = match response {
            Err(Failed::Expired) => {
                self.wire().forget(posted);
                return None;
            }
            Err(Failed::Other(e)) => return Some(Err(e)),
            Ok(StreamableHttpPostResponse::Accepted) => {
                return Some(Err(unexpected(
                    "the server accepted the call without answering it",
                )));
            }
            Ok(StreamableHttpPostResponse::Json(message, _)) => {
                return Some(match self.take(id, message).await {
                    Some(answer) => answer,
                    // An answer to the POST that is not the call's: not a JSON-RPC
                    // exchange toolgate can go on with.
                    None => Err(unexpected(
                        "the server answered the call with a message for another request",
                    )),
                });
            }
            Ok(StreamableHttpPostResponse::Sse(stream, _)) => stream,
            Ok(_) => {
                return Some(Err(unexpected(
                    "the server answered the call in a form toolgate does not read",
                )));
            }
        };
        flight.stream = Some(stream);
        Some(self.read_stream(posted, flight).await)
    }

    /// Reads the call's SSE stream until its answer, resuming it from the last event id
    /// when the upstream closes it first.
    async fn read_stream(
        &self,
        posted: &Posted,
        flight: &mut InFlight<'_>,
    ) -> Result<ServerResult, ServiceError> {
        let id = flight.id;
        let mut last_event_id: Option<String> = None;
        let mut server_retry: Option<Duration> = None;
        let mut resumes = 0;
        loop {
            let Some(stream) = flight.stream.as_mut() else {
                return Err(unexpected("the call's stream is gone"));
            };
            let ended = match stream.next().await {
                Some(Ok(event)) => {
                    if let Some(retry) = event.retry {
                        server_retry = Some(Duration::from_millis(capped_retry(retry)));
                    }
                    if event.id.is_some() {
                        last_event_id = event.id;
                    }
                    let is_message = matches!(event.event.as_deref(), None | Some("" | "message"));
                    let Some(data) = event.data.filter(|_| is_message) else {
                        continue;
                    };
                    let message = match super::message::read(&data) {
                        Ok(message) => message,
                        // An event with no data (one that primes the stream for a
                        // resumption) is no message.
                        Err(_) if data.trim().is_empty() => continue,
                        // The call's answer, unreadable, is answered in its place, so the
                        // call fails now rather than at its deadline; any other message
                        // that does not read is skipped, as rmcp skips it.
                        Err(e) => match self.client.unreadables().take(
                            data.as_bytes(),
                            Some(&e),
                            CameOn::StreamOf(id),
                        ) {
                            Some(answer) => answer,
                            None => continue,
                        },
                    };
                    resumes = 0;
                    if let Some(answer) = self.take(id, message).await {
                        if let (Some(stream), Some(place)) =
                            (flight.stream.take(), flight.place.take())
                        {
                            finish(stream, place);
                        }
                        return answer;
                    }
                    continue;
                }
                Some(Err(e)) => match stream_fault(&e) {
                    Some(fault) => return Err(fault),
                    None => Err(e),
                },
                None => Ok(()),
            };
            // Closed before the answer: resumable only from an event id it sent.
            let Some(from) = last_event_id.clone() else {
                return Err(match ended {
                    Err(e) => broken_off(&e),
                    Ok(()) => unexpected("the server closed the call's stream without answering"),
                });
            };
            if resumes == MAX_RESUMES {
                return Err(unexpected(
                    "the server closed the call's stream again and again without answering",
                ));
            }
            let wait = server_retry
                .take()
                .or_else(|| ExponentialBackoff::default().retry(resumes))
                .unwrap_or_default();
            resumes += 1;
            // The request may still run meanwhile: given up now, it keeps its place.
            flight.stream = None;
            tokio::time::sleep(wait).await;
            flight.stream = match self.client.resume_for_call(id, posted, from).await {
                Ok(stream) => Some(stream),
                Err(e) => return Err(transport(e)),
            };
        }
    }

    /// Takes one message of the call's stream in: the call's answer (`id`), scrubbed; or
    /// anything else, scrubbed and attributed, and — unless it was a progress or log
    /// message, which is queued for its call — handed to rmcp with the stream it came on.
    async fn take(
        &self,
        id: &RequestId,
        mut message: ServerJsonRpcMessage,
    ) -> Option<Result<ServerResult, ServiceError>> {
        if let JsonRpcMessage::Request(request) = &mut message {
            request
                .request
                .extensions_mut()
                .insert(InboundStreamOrigin::OutboundRequest(id.clone()));
        }
        let answers_call = match &message {
            JsonRpcMessage::Response(response) => &response.id == id,
            JsonRpcMessage::Error(error) => error.id.as_ref().is_none_or(|of| of == id),
            _ => false,
        };
        // An answer on this call's stream to another request — one in flight for another
        // caller, or one never sent — is nobody's here: handed to rmcp, it would answer
        // whichever request of the connection has that id.
        if matches!(
            message,
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)
        ) && !answers_call
        {
            self.inbound.dropped(Dropped::Answer);
            return None;
        }
        let message = self.inbound.take(message)?;
        match message {
            JsonRpcMessage::Response(response) if answers_call => Some(Ok(response.result)),
            JsonRpcMessage::Error(error) if answers_call => {
                Some(Err(ServiceError::McpError(error.error)))
            }
            JsonRpcMessage::Notification(notification)
                if super::frames::is_queued(&notification.notification) =>
            {
                None
            }
            other => {
                // rmcp gone: the connection is closing, and the message has nobody to
                // answer it.
                let _ = self.side_door.send(other).await;
                None
            }
        }
    }
}

/// A call's place, its POST while under way, and its stream once it has one, while the
/// call is in flight. Dropped before [`settle`](Self::settle) — the call given up, its
/// future dropped — the place is kept while the upstream may still run the call, from a
/// task of its own, the POST still under way and the rest of the stream read there
/// ([`cancelled`](super::cancelled)); settled, all are given back.
struct InFlight<'a> {
    id: &'a RequestId,
    place: Option<Place>,
    /// Where the call's POST on hyper's client is with the upstream.
    under_way: UnderWay,
    stream: Option<SseStream>,
}

impl InFlight<'_> {
    /// The call is over with the upstream (answered, failed, or not taken): what it still
    /// holds is given back.
    fn settle(&mut self) {
        self.stream = None;
        self.place = None;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let Some(place) = self.place.take() else {
            return;
        };
        let watched = match (self.stream.take(), self.under_way.take_sent()) {
            (Some(stream), _) => Watched::Stream(stream),
            (None, Some(sent)) => Watched::Posting(Box::pin(async move {
                let limits = StreamableHttpResponseLimits::default();
                post::stream_of(sent.await.ok()?, &limits)
            })),
            // Answered, its answer still being read: the upstream is done with it.
            (None, None) if self.under_way.answered() => return,
            (None, None) => Watched::Nothing,
        };
        let origin = Some(self.id.clone().into_json_value());
        cancelled::keep_in_task(place, watched, origin);
    }
}

/// How long the rest of a call's stream is read after its answer, for its HTTP
/// connection to go back to the pool (as rmcp does).
const DRAIN: Duration = Duration::from_millis(50);

/// Reads what is left of a call's stream after its answer, so that its HTTP connection
/// goes back to the pool instead of being closed: what has already come is read now (an
/// upstream usually ends the stream right after the answer), the rest, if any, by a task
/// of its own for at most [`DRAIN`], so the answer does not wait for it. What the stream
/// still carries is dropped, as rmcp drops it. The call's `place` goes with the stream:
/// its connection is in use until then.
fn finish(mut stream: SseStream, place: Place) {
    loop {
        match stream.next().now_or_never() {
            Some(Some(_)) => continue,
            Some(None) => return,
            None => break,
        }
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(DRAIN, async { while stream.next().await.is_some() {} }).await;
        drop(place);
    });
}

/// The error of a call whose stream the upstream wrote wrong: an event longer than
/// toolgate reads, or lines that are not SSE. It is that call's alone — the connection is
/// sound — and not resumed, as the upstream would write the same again. `None` when the
/// body itself failed (see [`broken_off`]): resumed when it can be.
fn stream_fault(e: &sse_stream::Error) -> Option<ServiceError> {
    match e {
        sse_stream::Error::Body(_) if post::event_too_large(e) => Some(transport(
            StreamableHttpError::<PostError>::ResponseBodyTooLarge {
                max_size: StreamableHttpResponseLimits::default().max_sse_event_size,
            },
        )),
        sse_stream::Error::Body(_) => None,
        _ => Some(unexpected("the server's stream for the call is not SSE")),
    }
}

/// The error of a call whose own stream broke off (reading its body failed, after the
/// response's head came) before its answer, and could not be resumed: as rmcp fails such a
/// request, as if the connection had closed ([`ServiceError::TransportClosed`]). The
/// connection is dropped only if it did close: the upstream may have cut this one
/// response (a tool that failed while writing it, a proxy's read timeout), and the
/// session is shared by other callers, whose calls go on. The body's error goes to the
/// log.
fn broken_off(e: &sse_stream::Error) -> ServiceError {
    tracing::debug!(error = %e, "an MCP server's stream for a call broke off before its answer");
    ServiceError::TransportClosed
}

/// `value` as a header value as it is, when it needs no encoding (SEP-2243 encodes a
/// value with characters outside visible ASCII, or with blanks at its ends); `None`
/// otherwise, for rmcp to write.
fn plain_header_value(value: &str) -> Option<HeaderValue> {
    let bytes = value.as_bytes();
    let plain = !value.is_empty()
        && bytes.iter().all(|b| (0x20..=0x7e).contains(b))
        && !matches!(bytes.first(), Some(b' '))
        && !matches!(bytes.last(), Some(b' '))
        && !value.starts_with("=?base64?");
    plain.then(|| HeaderValue::from_str(value).ok()).flatten()
}

/// Why a call's POST brought no answer to read.
enum Failed {
    /// The upstream expired the session: the call was not taken.
    Expired,
    /// Anything else: the call fails with this.
    Other(ServiceError),
}

/// What `e`, a POST's failure, means for the call.
fn failed<E: std::error::Error + Send + Sync + 'static>(e: StreamableHttpError<E>) -> Failed {
    match e {
        StreamableHttpError::SessionExpired => Failed::Expired,
        other => Failed::Other(transport(other)),
    }
}

/// `answer` with its stream's log messages tagged as the call `id`'s (as [`StreamTagging`]
/// tags the streams of what it sends).
fn tagged(answer: StreamableHttpPostResponse, id: &RequestId) -> StreamableHttpPostResponse {
    match answer {
        StreamableHttpPostResponse::Sse(stream, session) => {
            StreamableHttpPostResponse::Sse(streams::tagged(stream, Some(id.clone())), session)
        }
        other => other,
    }
}

/// A failure of the HTTP exchange, as rmcp reports one.
fn transport<E: std::error::Error + Send + Sync + 'static>(
    e: StreamableHttpError<E>,
) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "streamable HTTP",
        std::any::TypeId::of::<Direct>(),
        Box::new(e),
    ))
}

fn unexpected(what: &'static str) -> ServiceError {
    transport(StreamableHttpError::<PostError>::UnexpectedServerResponse(
        Cow::Borrowed(what),
    ))
}

/// Whether a tool's input schema promotes any of its arguments to headers
/// (`x-mcp-header`, SEP-2243): such a call is left to rmcp, which writes them.
pub(crate) fn has_header_arguments(schema: &serde_json::Value) -> bool {
    match schema {
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(key, value)| key == "x-mcp-header" || has_header_arguments(value)),
        serde_json::Value::Array(items) => items.iter().any(has_header_arguments),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_whose_arguments_go_in_headers_is_left_to_rmcp() {
        assert!(has_header_arguments(
            &json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}})
        ));
        assert!(!has_header_arguments(
            &json!({"type": "object", "properties": {
            "text": {"type": "string"}}})
        ));
    }

    #[test]
    fn a_name_that_would_need_encoding_in_a_header_is_left_to_rmcp() {
        assert!(plain_header_value("echo").is_some());
        assert!(plain_header_value("é").is_none());
        assert!(plain_header_value(" echo").is_none());
        assert!(plain_header_value("=?base64?ZQ==?=").is_none());
        assert!(plain_header_value("").is_none());
    }
}
