//! A `tools/call` POSTed to a plain-HTTP upstream on hyper's pooled client
//! ([`http_pool::plain`](super::http_pool::plain)), without reqwest's layers.
//!
//! What is sent is what rmcp's reqwest client sends: the message as JSON, `Accept` of both
//! media types, the credential as a bearer token, the connection's headers and its session
//! id. What comes back is read as rmcp reads it, into the same
//! [`StreamableHttpPostResponse`] or [`StreamableHttpError`]: an SSE stream (each event
//! bounded in size), a JSON message (bounded), `202` and `204` as accepted, `404` on a
//! session as the session expired, a challenge on `401` or `403`, `429` and server errors
//! with their `Retry-After`, and a JSON-RPC error in the body of any other failure as that
//! error. An upstream whose URL is `https`, or one reached through a proxy, is sent to by
//! reqwest ([`Direct`](super::direct::Direct) chooses).

use std::borrow::Cow;
use std::collections::HashMap;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use futures::StreamExt;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::ResponseFuture;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use toolgate_core::error::with_causes;

use super::http_pool::{MAX_REDIRECTS, Plain};
use super::response_stream::SseStream;

/// Where and with what a connection's calls are POSTed on hyper's client: made once, when
/// rmcp's own POST shows them ([`Wire`](super::streams::Wire)).
#[derive(Debug)]
pub(crate) struct Target {
    uri: http::Uri,
    authorization: Option<HeaderValue>,
    session_id: Option<HeaderValue>,
}

impl Target {
    /// The target of an upstream at `uri`, with `auth_header` (a bearer token) and the
    /// session `session_id`; `None` when the URL is not plain HTTP or holds a user and
    /// password, the environment sends it through a proxy ([`proxied`](super::http_pool::proxied)),
    /// or the token or the session id cannot be a header (reqwest then sends, and
    /// reports that its own way).
    pub(crate) fn new(
        uri: &str,
        auth_header: Option<&str>,
        session_id: Option<&str>,
    ) -> Option<Self> {
        if !uri.get(..7)?.eq_ignore_ascii_case("http://") {
            return None;
        }
        let authorization = match auth_header {
            Some(token) => {
                let mut value = HeaderValue::try_from(format!("Bearer {token}")).ok()?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let session_id = match session_id {
            Some(id) => Some(HeaderValue::from_str(id).ok()?),
            None => None,
        };
        let uri: http::Uri = uri.parse().ok()?;
        // A user and password in the URL: reqwest sends them as Basic credentials.
        if uri.authority()?.as_str().contains('@') || super::http_pool::proxied(&uri) {
            return None;
        }
        Some(Target {
            uri,
            authorization,
            session_id,
        })
    }
}

/// The request could not be sent or its answer not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    /// No connection, or the request could not be written.
    #[error("the request could not be sent ({})", with_causes(.0))]
    Send(#[source] hyper_util::client::legacy::Error),
    /// The upstream redirected the request more times than are followed.
    #[error("the server redirected the request more than {MAX_REDIRECTS} times")]
    Redirects,
    /// The answer's body broke off.
    #[error("the answer could not be read ({})", with_causes(.0))]
    Read(#[source] hyper::Error),
}

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<PostError>>;

/// Where a [`post`] is with the upstream, for a caller that gives the POST up before its
/// answer: the request under way is left here rather than in the POST's future, so that
/// it can be handed on instead of dropped — dropping it would close its HTTP connection,
/// and with it what tells when the upstream is done with the request
/// ([`cancelled`](super::cancelled)). It costs the POST nothing: hyper's request is
/// already boxed.
#[derive(Default)]
pub(crate) struct UnderWay {
    /// The request sent (or being sent), its answer's head not yet come.
    sent: Option<ResponseFuture>,
    /// Whether the upstream answered other than with a stream (JSON, a failure, no
    /// answer): it is done with the request, whatever is left of the body to read.
    answered: bool,
}

impl UnderWay {
    /// The request sent whose answer's head has not come yet, taken.
    pub(crate) fn take_sent(&mut self) -> Option<ResponseFuture> {
        self.sent.take()
    }

    /// Whether the upstream answered the request other than with a stream.
    pub(crate) fn answered(&self) -> bool {
        self.answered
    }
}

const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";
const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// POSTs `message` to `target` with `headers` on `client`, and reads the answer as rmcp
/// would (see the module); `under_way` tells meanwhile where the POST is with the
/// upstream. A `307` or `308` to the same origin is followed, as reqwest follows it for
/// rmcp ([`http_pool`](super::http_pool)); any other redirect is the answer.
pub(crate) async fn post(
    client: &Plain,
    target: &Target,
    headers: &HashMap<HeaderName, HeaderValue>,
    message: &ClientJsonRpcMessage,
    limits: &StreamableHttpResponseLimits,
    under_way: &mut UnderWay,
) -> Posted {
    let body = Bytes::from(serde_json::to_vec(message)?);
    let mut uri = target.uri.clone();
    let mut redirects = 0;
    loop {
        let request = request(target, uri.clone(), headers, body.clone());
        let response = under_way.sent.insert(client.request(request)).await;
        under_way.sent = None;
        let response = response.map_err(|e| {
            under_way.answered = true;
            StreamableHttpError::Client(PostError::Send(e))
        })?;
        match same_origin_redirect(&uri, &response) {
            None => {
                under_way.answered = !is_event_stream(&response);
                return read(response, target.session_id.is_some(), limits).await;
            }
            Some(_) if redirects == MAX_REDIRECTS => {
                under_way.answered = true;
                return Err(StreamableHttpError::Client(PostError::Redirects));
            }
            Some(next) => {
                redirects += 1;
                uri = next;
            }
        }
    }
}

/// The POST of `body` to `uri`, with `target`'s credential and session and `headers`.
fn request(
    target: &Target,
    uri: http::Uri,
    headers: &HashMap<HeaderName, HeaderValue>,
    body: Bytes,
) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::new(Full::new(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    let fields = request.headers_mut();
    fields.reserve(headers.len() + 4);
    fields.insert(
        ACCEPT,
        HeaderValue::from_static("text/event-stream, application/json"),
    );
    fields.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    if let Some(authorization) = &target.authorization {
        fields.insert(AUTHORIZATION, authorization.clone());
    }
    for (name, value) in headers {
        fields.insert(name.clone(), value.clone());
    }
    if let Some(session_id) = &target.session_id {
        fields.insert(SESSION_ID, session_id.clone());
    }
    request
}

/// Where `response` to a request to `uri` redirects it, when it is a `307` or `308` (which
/// keep the method and the body) to the same origin (a redirect elsewhere would hand the
/// credential and the session to another host).
fn same_origin_redirect(uri: &http::Uri, response: &http::Response<Incoming>) -> Option<http::Uri> {
    if !matches!(
        response.status(),
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
    ) {
        return None;
    }
    let location = response.headers().get(LOCATION)?.to_str().ok()?;
    let from = url::Url::parse(&uri.to_string()).ok()?;
    let to = from.join(location).ok()?;
    (to.origin() == from.origin())
        .then(|| to.as_str().parse().ok())
        .flatten()
}

/// The answer `response` as rmcp reads the answer to a request.
async fn read(
    response: http::Response<Incoming>,
    session_was_attached: bool,
    limits: &StreamableHttpResponseLimits,
) -> Posted {
    let status = response.status();
    let headers = response.headers();
    if let Some(challenge) = headers.get(WWW_AUTHENTICATE) {
        let challenge = || {
            challenge.to_str().map(str::to_owned).map_err(|_| {
                StreamableHttpError::UnexpectedServerResponse(Cow::Borrowed(
                    "invalid www-authenticate header value",
                ))
            })
        };
        if status == StatusCode::UNAUTHORIZED {
            return Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
                challenge()?,
            )));
        }
        if status == StatusCode::FORBIDDEN {
            let challenge = challenge()?;
            let scope = required_scope(&challenge);
            return Err(StreamableHttpError::InsufficientScope(
                InsufficientScopeError::new(challenge, scope),
            ));
        }
    }
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Ok(StreamableHttpPostResponse::Accepted);
    }
    if status == StatusCode::NOT_FOUND && session_was_attached {
        return Err(StreamableHttpError::SessionExpired);
    }
    let content_type = headers
        .get(CONTENT_TYPE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let is_json = content_type
        .as_deref()
        .is_some_and(|ct| media_type_is(ct, JSON));
    let status_error =
        (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()).then(|| {
            let retry_after = headers
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            HttpStatusError::new(status.as_u16(), retry_after)
        });
    let status_error = match status_error {
        Some(error) if !is_json || status == StatusCode::TOO_MANY_REQUESTS => {
            return Err(error.into());
        }
        other => other,
    };
    let session_id = headers
        .get(SESSION_ID)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = response.into_body();
    if !status.is_success() {
        return failure(body, status, is_json, status_error, limits, session_id).await;
    }
    match content_type.as_deref() {
        Some(ct) if media_type_is(ct, EVENT_STREAM) => {
            let events = events(body, limits);
            Ok(StreamableHttpPostResponse::Sse(events, session_id))
        }
        Some(ct) if media_type_is(ct, JSON) => {
            let body = bounded(body, limits.max_json_response_size).await?;
            let text = std::str::from_utf8(&body).map_err(|_| {
                StreamableHttpError::UnexpectedServerResponse(Cow::Borrowed(
                    "the server's JSON answer is not UTF-8",
                ))
            })?;
            match super::message::read(text) {
                Ok(message) => Ok(StreamableHttpPostResponse::Json(message, session_id)),
                Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                    format!("the server's answer is not a JSON-RPC message: {e}"),
                ))),
            }
        }
        _ => Err(StreamableHttpError::UnexpectedContentType(content_type)),
    }
}

/// Whether `response` is a stream of events the request's answer is to come on, as
/// [`read`] reads it: a success other than `202` and `204`, of type `text/event-stream`.
fn is_event_stream(response: &http::Response<Incoming>) -> bool {
    let status = response.status();
    status.is_success()
        && !matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT)
        && response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|ct| media_type_is(&String::from_utf8_lossy(ct.as_bytes()), EVENT_STREAM))
}

/// The events of `body`, each bounded in size.
fn events(body: Incoming, limits: &StreamableHttpResponseLimits) -> SseStream {
    sse_stream::SseStream::new(EventSized::new(body, limits.max_sse_event_size)).boxed()
}

/// The stream of events `response`, the answer to a request given up, brings: `None`
/// when it brings no stream (the answer itself, a failure, nothing to answer), the
/// upstream being done with the request. The answer is not read further.
pub(crate) fn stream_of(
    response: http::Response<Incoming>,
    limits: &StreamableHttpResponseLimits,
) -> Option<SseStream> {
    is_event_stream(&response).then(|| events(response.into_body(), limits))
}

/// What a failed answer (`status`) means: a JSON-RPC error in a JSON body is the answer;
/// otherwise the status error, or the status with the start of the body.
async fn failure(
    body: Incoming,
    status: StatusCode,
    is_json: bool,
    status_error: Option<HttpStatusError>,
    limits: &StreamableHttpResponseLimits,
    session_id: Option<String>,
) -> Posted {
    let is_auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
    let text = if is_json && !is_auth_failure {
        match bounded(body, limits.max_json_response_size).await {
            Ok(body) => {
                if let Some(error) = json_rpc_error(&body) {
                    return Ok(StreamableHttpPostResponse::Json(error, session_id));
                }
                prefix(&body, limits.max_error_response_size)
            }
            Err(error @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                return Err(status_error.map_or(error, StreamableHttpError::from));
            }
            Err(_) => String::from("<failed to read response body>"),
        }
    } else {
        match truncated(body, limits.max_error_response_size).await {
            Ok(start) => prefix(&start, limits.max_error_response_size),
            Err(_) => String::from("<failed to read response body>"),
        }
    };
    Err(match status_error {
        Some(error) => error.into(),
        None => StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
            "HTTP {status}: {text}"
        ))),
    })
}

/// The whole of `body`, when it is at most `max` bytes.
async fn bounded(body: Incoming, max: usize) -> Result<Bytes, StreamableHttpError<PostError>> {
    match Limited::new(body, max).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) => match e.downcast::<hyper::Error>() {
            Ok(e) => Err(StreamableHttpError::Client(PostError::Read(*e))),
            Err(_) => Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max }),
        },
    }
}

/// The first `max` bytes of `body`, however long it is; the rest is left unread.
async fn truncated(mut body: Incoming, max: usize) -> Result<Vec<u8>, hyper::Error> {
    let mut start = Vec::new();
    while start.len() < max {
        let Some(frame) = body.frame().await else {
            break;
        };
        if let Ok(data) = frame?.into_data() {
            let room = max - start.len();
            start.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    Ok(start)
}

/// The first `max` bytes of `body` as text.
fn prefix(body: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&body[..body.len().min(max)]).into_owned()
}

/// `body` when it is a JSON-RPC error message.
fn json_rpc_error(body: &[u8]) -> Option<rmcp::model::ServerJsonRpcMessage> {
    match serde_json::from_slice(body) {
        Ok(message @ JsonRpcMessage::Error(_)) => Some(message),
        _ => None,
    }
}

/// Whether the media type `value` is `expected`, whatever its case and parameters.
fn media_type_is(value: &str, expected: &str) -> bool {
    value.split(';').next().is_some_and(|essence| {
        essence
            .trim_matches([' ', '\t'])
            .eq_ignore_ascii_case(expected)
    })
}

/// The `scope` a `WWW-Authenticate` challenge asks for.
fn required_scope(challenge: &str) -> Option<String> {
    let start = challenge.find("scope=")? + "scope=".len();
    let rest = &challenge[start..];
    let scope = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    Some(scope.to_owned())
}

/// An event of the stream was longer than it may be.
#[derive(Debug, thiserror::Error)]
#[error("an event of the server's stream is longer than {0} bytes")]
pub(crate) struct EventTooLarge(usize);

/// A response body that fails once an SSE event in it grows past a size: an upstream
/// cannot make toolgate buffer an event without end.
struct EventSized {
    body: Incoming,
    size: EventSize,
    failed: bool,
}

impl EventSized {
    fn new(body: Incoming, max: usize) -> Self {
        EventSized {
            body,
            size: EventSize::new(max),
            failed: false,
        }
    }
}

/// The size of the SSE event being read, counted across chunks: an event ends at an empty
/// line, and a line ends at `\n`, `\r\n` or `\r`.
struct EventSize {
    max: usize,
    /// Bytes of the event read so far.
    event: usize,
    /// Whether the last byte ended a line (a line ending next ends the event).
    at_line_start: bool,
    /// Whether the last byte was `\r` (a `\n` after it is the same line ending).
    after_cr: bool,
}

impl EventSize {
    fn new(max: usize) -> Self {
        EventSize {
            max,
            event: 0,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// Counts `chunk` into the current event; `false` once the event is too long.
    fn observe(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    if self.at_line_start {
                        self.event = 0;
                    } else {
                        self.at_line_start = true;
                        self.event += 1;
                    }
                }
                _ => {
                    self.after_cr = false;
                    self.at_line_start = false;
                    self.event += 1;
                }
            }
            if self.event > self.max {
                return false;
            }
        }
        true
    }
}

/// Whether `e`, an error of a stream [`post`] answered with, is an event of it longer than
/// the limit (not the connection failing).
pub(crate) fn event_too_large(e: &sse_stream::Error) -> bool {
    matches!(
        e,
        sse_stream::Error::Body(body)
            if matches!(body.downcast_ref::<EventsError>(), Some(EventsError::TooLarge(_)))
    )
}

/// The error [`EventSized`] yields: the body's own or [`EventTooLarge`].
#[derive(Debug, thiserror::Error)]
enum EventsError {
    #[error(transparent)]
    Body(#[from] hyper::Error),
    #[error(transparent)]
    TooLarge(#[from] EventTooLarge),
}

impl Body for EventSized {
    type Data = Bytes;
    type Error = EventsError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, EventsError>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let frame = match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                self.failed = true;
                return Poll::Ready(Some(Err(e.into())));
            }
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref()
            && !self.size.observe(data.chunk())
        {
            self.failed = true;
            let max = self.size.max;
            return Poll::Ready(Some(Err(EventTooLarge(max).into())));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, RequestId};
    use tokio::net::TcpListener;

    /// What a test server answers: status, headers, body.
    type Answer = (u16, Vec<(&'static str, &'static str)>, String);

    /// A server on loopback that answers every request with `answer`, keeping the headers
    /// of the last request it read — except one to `/redirected`, which it sends on to
    /// `/mcp` with a `307`; its URL (of `/mcp`).
    async fn server(answer: Answer, seen: Arc<Mutex<http::HeaderMap>>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answer, seen) = (answer.clone(), Arc::clone(&seen));
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |request: http::Request<Incoming>| {
                            let (answer, seen) = (answer.clone(), Arc::clone(&seen));
                            async move {
                                *seen.lock().expect("headers") = request.headers().clone();
                                let _ = request.into_body().collect().await;
                                let (status, headers, body) = answer;
                                let mut response =
                                    http::Response::new(Full::new(Bytes::from(body)));
                                *response.status_mut() =
                                    StatusCode::from_u16(status).expect("a status");
                                for (name, value) in headers {
                                    response
                                        .headers_mut()
                                        .append(name, HeaderValue::from_static(value));
                                }
                                Ok::<_, Infallible>(response)
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        format!("http://{address}/mcp")
    }

    fn call() -> ClientJsonRpcMessage {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new("echo"),
        ));
        JsonRpcMessage::request(request, RequestId::String("toolgate-1".into()))
    }

    /// What posting a call to `target` gives, read with `limits`.
    async fn sent_with(target: &Target, limits: StreamableHttpResponseLimits) -> Posted {
        let plain = super::super::http_pool::build_plain();
        post(
            &plain,
            target,
            &HashMap::new(),
            &call(),
            &limits,
            &mut UnderWay::default(),
        )
        .await
    }

    async fn sent(target: &Target) -> Posted {
        sent_with(target, StreamableHttpResponseLimits::default()).await
    }

    /// What posting a call to a server that answers `answer` gives, with `limits`.
    async fn posted_with(answer: Answer, limits: StreamableHttpResponseLimits) -> Posted {
        let url = server(answer, Arc::default()).await;
        let target = Target::new(&url, Some("token"), Some("session-1")).expect("a target");
        sent_with(&target, limits).await
    }

    async fn posted(status: u16, headers: &[(&'static str, &'static str)], body: &str) -> Posted {
        posted_with(
            (status, headers.to_vec(), body.to_owned()),
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    const ANSWER: &str = r#"{"jsonrpc":"2.0","id":"toolgate-1","result":{"content":[]}}"#;
    const ERROR: &str =
        r#"{"jsonrpc":"2.0","id":"toolgate-1","error":{"code":-32602,"message":"no such tool"}}"#;

    /// A `200` with the call's answer as JSON.
    fn json_answer() -> Answer {
        (200, vec![("content-type", JSON)], ANSWER.into())
    }

    #[tokio::test]
    async fn a_call_is_sent_with_its_credential_session_and_media_types() {
        let seen = Arc::default();
        let url = server(json_answer(), Arc::clone(&seen)).await;
        let target = Target::new(&url, Some("token"), Some("session-1")).expect("a target");
        let headers = HashMap::from([(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_static("2025-11-25"),
        )]);
        let limits = StreamableHttpResponseLimits::default();
        let answer = post(
            &super::super::http_pool::build_plain(),
            &target,
            &headers,
            &call(),
            &limits,
            &mut UnderWay::default(),
        )
        .await;
        assert!(matches!(
            answer,
            Ok(StreamableHttpPostResponse::Json(
                JsonRpcMessage::Response(_),
                _
            ))
        ));
        let seen = seen.lock().expect("headers").clone();
        assert_eq!(seen["authorization"], "Bearer token");
        assert_eq!(seen["mcp-session-id"], "session-1");
        assert_eq!(seen["mcp-protocol-version"], "2025-11-25");
        assert_eq!(seen["content-type"], "application/json");
        assert_eq!(seen["accept"], "text/event-stream, application/json");
    }

    #[tokio::test]
    async fn an_answer_is_read_as_an_sse_stream_or_as_json_with_the_session_it_names() {
        let sse = "event: message\ndata: ".to_owned() + ANSWER + "\n\n";
        match posted(200, &[("content-type", "text/event-stream")], &sse).await {
            Ok(StreamableHttpPostResponse::Sse(mut events, None)) => {
                let event = events
                    .next()
                    .await
                    .expect("an event")
                    .expect("a readable event");
                assert_eq!(event.data.as_deref(), Some(ANSWER));
                assert!(events.next().await.is_none());
            }
            other => panic!("not an SSE stream: {other:?}"),
        }
        let json = posted(
            200,
            &[
                ("content-type", "application/json; charset=utf-8"),
                ("mcp-session-id", "s2"),
            ],
            ANSWER,
        )
        .await;
        assert!(
            matches!(json, Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Response(_), Some(id))) if id == "s2")
        );
    }

    #[tokio::test]
    async fn each_status_means_what_it_means_to_rmcp() {
        assert!(matches!(
            posted(202, &[], "").await,
            Ok(StreamableHttpPostResponse::Accepted)
        ));
        assert!(matches!(
            posted(404, &[], "").await,
            Err(StreamableHttpError::SessionExpired)
        ));
        match posted(500, &[("retry-after", "7")], "down").await {
            Err(StreamableHttpError::HttpStatus(e)) => {
                assert_eq!((e.status, e.retry_after.as_deref()), (500, Some("7")));
            }
            other => panic!("not a status error: {other:?}"),
        }
        let json = [("content-type", "application/json")];
        assert!(
            matches!(posted(429, &json, ERROR).await, Err(StreamableHttpError::HttpStatus(e)) if e.status == 429)
        );
        // A JSON-RPC error in a failure's body is the call's answer.
        assert!(matches!(
            posted(503, &json, ERROR).await,
            Ok(StreamableHttpPostResponse::Json(
                JsonRpcMessage::Error(_),
                _
            ))
        ));
        assert!(matches!(
            posted(400, &json, ERROR).await,
            Ok(StreamableHttpPostResponse::Json(
                JsonRpcMessage::Error(_),
                _
            ))
        ));
        match posted(400, &[], "bad request").await {
            Err(e @ StreamableHttpError::UnexpectedServerResponse(_)) => {
                assert_eq!(
                    e.to_string(),
                    "unexpected server response: HTTP 400 Bad Request: bad request"
                );
            }
            other => panic!("not an unexpected response: {other:?}"),
        }
        assert!(matches!(
            posted(401, &[("www-authenticate", "Bearer realm=\"x\"")], "").await,
            Err(StreamableHttpError::AuthRequired(e)) if e.www_authenticate_header == "Bearer realm=\"x\""
        ));
        assert!(matches!(
            posted(403, &[("www-authenticate", "Bearer scope=\"tools\"")], "").await,
            Err(StreamableHttpError::InsufficientScope(e)) if e.get_required_scope() == Some("tools")
        ));
        assert!(matches!(
            posted(200, &[("content-type", "text/plain")], "hello").await,
            Err(StreamableHttpError::UnexpectedContentType(Some(ct))) if ct == "text/plain"
        ));
    }

    /// A posted call's outcome in words, to compare two clients' readings of one answer.
    async fn described<E: std::error::Error + Send + Sync + 'static>(
        outcome: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
    ) -> String {
        match outcome {
            Ok(StreamableHttpPostResponse::Accepted) => "accepted".to_owned(),
            Ok(StreamableHttpPostResponse::Json(message, session)) => format!(
                "json {} {session:?}",
                serde_json::to_string(&message).expect("JSON")
            ),
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let events: Vec<String> = events
                    .map(|event| match event {
                        Ok(event) => format!("{:?} {:?}", event.event, event.data),
                        Err(e) => format!("error {e}"),
                    })
                    .collect()
                    .await;
                format!("sse {events:?} {session:?}")
            }
            Ok(_) => "another answer".to_owned(),
            Err(StreamableHttpError::HttpStatus(e)) => {
                format!("status {} {:?}", e.status, e.retry_after)
            }
            Err(e) => format!("error {e}"),
        }
    }

    #[tokio::test]
    async fn every_answer_reads_as_rmcps_own_client_reads_it() {
        use rmcp::transport::streamable_http_client::StreamableHttpClient;
        let json = || vec![("content-type", "application/json")];
        let sse = format!("event: message\ndata: {ANSWER}\n\n: a comment\n\ndata: 1\ndata: 2\n\n");
        let answers: Vec<Answer> = vec![
            (200, json(), ANSWER.into()),
            (
                200,
                vec![
                    ("content-type", "application/json"),
                    ("mcp-session-id", "s2"),
                ],
                ANSWER.into(),
            ),
            (200, vec![("content-type", "text/event-stream")], sse),
            (200, vec![("content-type", "text/plain")], "hello".into()),
            (200, vec![], "hello".into()),
            (200, json(), "not json".into()),
            (202, vec![], String::new()),
            (204, vec![], String::new()),
            (404, vec![], String::new()),
            (400, vec![], "bad request".into()),
            (400, json(), ERROR.into()),
            (400, json(), r#"{"not": "an error"}"#.into()),
            (422, vec![("content-type", "text/html")], "<p>no</p>".into()),
            (429, vec![("retry-after", "3")], String::new()),
            (429, json(), ERROR.into()),
            (500, vec![("retry-after", "7")], "down".into()),
            (503, json(), ERROR.into()),
            (503, json(), "{}".into()),
            (401, vec![], "who are you".into()),
            (
                401,
                vec![("www-authenticate", "Bearer realm=\"x\"")],
                String::new(),
            ),
            (
                403,
                vec![("www-authenticate", "Bearer scope=\"tools\"")],
                String::new(),
            ),
            (403, json(), ERROR.into()),
            // Longer than the start of a failure's body that is kept (64 KiB).
            (400, vec![], "x".repeat(70_000)),
            (401, json(), "y".repeat(70_000)),
        ];
        let limits = StreamableHttpResponseLimits::default();
        let plain = super::super::http_pool::build_plain();
        let theirs = reqwest::Client::new();
        for answer in answers {
            let url = server(answer.clone(), Arc::default()).await;
            let target = Target::new(&url, Some("token"), Some("session-1")).expect("a target");
            let ours = described(
                post(
                    &plain,
                    &target,
                    &HashMap::new(),
                    &call(),
                    &limits,
                    &mut UnderWay::default(),
                )
                .await,
            )
            .await;
            let rmcps = described(
                theirs
                    .post_message_with_response_limits(
                        url.into(),
                        call(),
                        Some("session-1".into()),
                        Some("token".into()),
                        HashMap::new(),
                        limits,
                    )
                    .await,
            )
            .await;
            if answer.2 == "not json" {
                // The one difference: rmcp names its Rust type and quotes the body; toolgate
                // says what is wrong in words, and relays none of the upstream's body.
                assert!(rmcps.starts_with("error unexpected server response: could not parse"));
                assert_eq!(
                    ours,
                    "error unexpected server response: the server's answer is not a JSON-RPC message: expected ident at line 1 column 2"
                );
                continue;
            }
            assert_eq!(ours, rmcps, "the answer {answer:?}");
        }
    }

    #[tokio::test]
    async fn a_redirect_to_the_same_origin_is_followed_and_one_elsewhere_is_the_answer() {
        let seen = Arc::default();
        let landing = server(json_answer(), Arc::clone(&seen)).await;
        let location: &'static str = landing.clone().leak();
        let redirecting = server(
            (307, vec![("location", location)], String::new()),
            Arc::default(),
        )
        .await;
        let elsewhere = Target::new(&redirecting, Some("token"), None).expect("a target");
        // Another port is another origin: the 307 is the answer, the credential goes no further.
        assert!(matches!(
            sent(&elsewhere).await,
            Err(StreamableHttpError::UnexpectedServerResponse(text)) if text.starts_with("HTTP 307")
        ));
        assert!(seen.lock().expect("headers").is_empty());
        // A server that redirects to itself (its own origin) until toolgate stops.
        let url = server(
            (308, vec![("location", "/mcp")], String::new()),
            Arc::default(),
        )
        .await;
        let target = Target::new(&url, None, None).expect("a target");
        assert!(matches!(
            sent(&target).await,
            Err(StreamableHttpError::Client(PostError::Redirects))
        ));
        // The same origin: followed, with the credential.
        let target = Target::new(&landing.replace("/mcp", "/redirected"), Some("token"), None)
            .expect("a target");
        let answer = sent(&target).await;
        assert!(
            matches!(answer, Ok(StreamableHttpPostResponse::Json(..))),
            "{answer:?}"
        );
        assert_eq!(
            seen.lock().expect("headers")["authorization"],
            "Bearer token"
        );
    }

    #[tokio::test]
    async fn an_answer_past_its_bound_is_refused() {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_json_response_size = 16;
        limits.max_sse_event_size = 16;
        let json = (
            200,
            vec![("content-type", "application/json")],
            ANSWER.to_owned(),
        );
        assert!(matches!(
            posted_with(json, limits).await,
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size: 16 })
        ));
        let sse = (
            200,
            vec![("content-type", "text/event-stream")],
            format!("data: {ANSWER}\n\n"),
        );
        let Ok(StreamableHttpPostResponse::Sse(mut events, _)) = posted_with(sse, limits).await
        else {
            panic!("not an SSE stream");
        };
        let refused = events.next().await.expect("an item").expect_err("an error");
        assert!(
            refused.to_string().contains("longer than 16 bytes"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn a_server_that_cannot_be_reached_is_a_client_error_that_says_why() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let url = format!("http://{}/mcp", listener.local_addr().expect("its address"));
        drop(listener);
        let target = Target::new(&url, None, None).expect("a target");
        match sent(&target).await {
            Err(e @ StreamableHttpError::Client(PostError::Send(_))) => {
                let text = e.to_string();
                assert!(
                    text.contains("could not be sent") && text.contains("refused"),
                    "{text}"
                );
            }
            other => panic!("not a send failure: {other:?}"),
        }
    }

    #[test]
    fn a_scope_is_read_from_a_challenge_quoted_or_not() {
        assert_eq!(
            required_scope(r#"Bearer error="insufficient_scope", scope="tools:call admin""#)
                .as_deref(),
            Some("tools:call admin")
        );
        assert_eq!(
            required_scope("Bearer scope=read, realm=x").as_deref(),
            Some("read")
        );
        assert_eq!(required_scope("Bearer realm=x"), None);
    }

    #[test]
    fn a_media_type_matches_whatever_its_case_and_parameters() {
        assert!(media_type_is("Application/JSON; charset=utf-8", JSON));
        assert!(media_type_is(" text/event-stream", EVENT_STREAM));
        assert!(!media_type_is("application/jsonx", JSON));
    }

    #[test]
    fn a_plain_http_url_has_a_target_and_others_do_not() {
        assert!(Target::new("http://127.0.0.1:8080/mcp", Some("t"), Some("s")).is_some());
        assert!(Target::new("HTTP://example.com/mcp", None, None).is_some());
        assert!(Target::new("https://example.com/mcp", None, None).is_none());
        assert!(Target::new("http://example.com/mcp", Some("bad\ntoken"), None).is_none());
        assert!(Target::new("http://example.com/mcp", None, Some("bad\nid")).is_none());
        assert!(Target::new("http", None, None).is_none());
        assert!(Target::new("http://user:secret@example.com/mcp", None, None).is_none());
    }

    #[test]
    fn a_credential_is_marked_sensitive() {
        let target = Target::new("http://h/mcp", Some("secret"), None).expect("a target");
        let authorization = target.authorization.expect("a credential");
        assert!(authorization.is_sensitive());
        assert_eq!(authorization, "Bearer secret");
    }

    #[test]
    fn an_event_is_bounded_across_chunks_and_the_bound_starts_again_at_each_event() {
        // A line counts with its line ending: "data: 1234\n" is 11 bytes.
        let mut size = EventSize::new(12);
        assert!(size.observe(b"data: 12"));
        assert!(size.observe(b"34\n\n"));
        // A new event: its count starts again, whatever line endings ended the last one.
        assert!(size.observe(b"data: 1234\r\n\r\ndata: 1234\r\rdata: 123"));
        assert!(!size.observe(b"4567"));
    }

    #[test]
    fn an_event_split_into_many_lines_counts_them_all() {
        let mut size = EventSize::new(10);
        assert!(size.observe(b"data: 1\n"));
        assert!(!size.observe(b"data: 2\n"));
    }
}
