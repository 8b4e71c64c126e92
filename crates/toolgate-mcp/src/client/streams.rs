//! Which response stream a log message of an HTTP upstream came on.
//!
//! Over streamable HTTP a server sends what concerns a request on that request's response
//! stream; rmcp tells toolgate the stream of a server's *request*
//! (`InboundStreamOrigin`) but not of a notification. A log message names no request, so
//! its stream is the only protocol fact that says whose it is. This HTTP client — reqwest,
//! as rmcp's own — writes the id of the POSTed request into the `_meta` of every
//! `notifications/message` on that POST's response stream ([`STREAM_KEY`]), and removes
//! the key from every other one (the standalone stream, a resumed stream): an upstream
//! cannot name a stream itself. [`Frames`](super::frames::Frames) reads the key, removes
//! it, and routes the message to the call of that request.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;

/// The `_meta` key of a log message that holds the id of the request whose response
/// stream carried it. Written only by toolgate; never reaches a caller.
pub(crate) const STREAM_KEY: &str = "io.toolgate/stream";

/// The method whose notifications are tagged.
const LOG_METHOD: &str = "notifications/message";

/// rmcp's streamable HTTP client over reqwest, with log messages tagged by stream.
#[derive(Clone)]
pub(crate) struct StreamTagging {
    inner: reqwest::Client,
}

impl StreamTagging {
    /// Over a reqwest client set up as rmcp's own: no idle pooling (rmcp's reason:
    /// delayed-ACK stalls), and only same-origin 307 and 308 redirects followed, at most
    /// [`MAX_REDIRECTS`] — any other would turn the POST into a GET, or replay the session
    /// and the credential to another host.
    pub(crate) fn new() -> Result<Self, String> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            let keeps_method = matches!(attempt.status().as_u16(), 307 | 308);
            if same_origin && keeps_method && attempt.previous().len() <= MAX_REDIRECTS {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        let inner = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirects)
            .build()
            .map_err(|e| format!("cannot set up an HTTP client: {e}"))?;
        Ok(StreamTagging { inner })
    }
}

/// The most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

type SseStream = BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>;

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
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let origin = match &message {
            JsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
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
            .await?;
        Ok(match response {
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(tagged(stream, origin), session)
            }
            other => other,
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
        let stream = self
            .inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await?;
        Ok(tagged(stream, None))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(tagged(stream, None))
    }
}

/// `stream` with every log message in it tagged as from `origin`'s response stream, or
/// (`None`: a stream that is no request's) untagged.
fn tagged(stream: SseStream, origin: Option<RequestId>) -> SseStream {
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
