//! Refusals made outside the gateway's handlers, as JSON errors like every other answer.
//!
//! A few answers are written before any handler of the gateway runs: axum's refusal of a
//! path or query string it cannot read, a path no route serves (404) or a method its route
//! does not take (405), and the MCP library's refusals of a request the MCP server never
//! sees (a missing session header, an `Accept` or `Content-Type` it does not take). They
//! come as plain text, or with no body at all. [`JsonErrorsLayer`] makes each of them
//! `{"error": {"code", "message"}}` with its status and headers kept, and marks it
//! `Connection: close` when the request came with a body: none of them reads it, and a
//! client not told would send its next request on a connection hyper is about to close.
//! (The MCP endpoint answers an `MCP-Protocol-Version` it does not speak with a JSON-RPC
//! error of its own, `-32022`, which this layer leaves alone.)
//!
//! The layer looks at a request's headers on the way in and at an answer's status and
//! type on the way out: nothing else, and no allocation, for the answers it leaves alone.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use tower_layer::Layer;
use tower_service::Service;

use super::ApiError;
use super::body::{closing_if, has_body};

/// The most of a plain refusal's text that is read to word its JSON message: more than the
/// request's headers can hold (`server.max_header_bytes`, 64 KiB by default), since a
/// refusal may repeat a header's value whole, and the text is in memory already.
const MOST_TEXT: usize = 1024 * 1024;

/// Marks an answer its handler wrote as a page for a person to read (a refused sign-in in
/// the console): left as it is, whatever its status.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnPage;

/// Wraps routes in [`JsonErrors`].
#[derive(Clone, Copy, Default)]
pub(super) struct JsonErrorsLayer;

impl<S> Layer<S> for JsonErrorsLayer {
    type Service = JsonErrors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        JsonErrors { inner }
    }
}

/// Makes the plain refusals of the routes it wraps JSON errors (see the module).
#[derive(Clone)]
pub(super) struct JsonErrors<S> {
    inner: S,
}

impl<S> Service<Request> for JsonErrors<S>
where
    S: Service<Request, Response = Response>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Answered<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        Answered {
            has_body: has_body(request.headers()),
            inner: self.inner.call(request),
        }
    }
}

/// The route's future; rewrites a plain refusal when the answer is ready.
pub(super) struct Answered<F> {
    inner: F,
    has_body: bool,
}

impl<F, E> Future for Answered<F>
where
    F: Future<Output = Result<Response, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(Pin::new(&mut self.inner).poll(cx));
        Poll::Ready(result.map(|response| {
            if is_plain_refusal(&response) {
                as_json(response, self.has_body)
            } else {
                response
            }
        }))
    }
}

/// A 4xx answer that is not JSON (nor an event stream, nor a page of the gateway's own).
fn is_plain_refusal(response: &Response) -> bool {
    if !response.status().is_client_error() || response.extensions().get::<OwnPage>().is_some() {
        return false;
    }
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let json = kind.starts_with("application/") && kind.contains("json");
    !json && !kind.starts_with("text/event-stream")
}

/// The JSON error of a plain refusal, with its status and its headers but its type and
/// length.
fn as_json(response: Response, has_body: bool) -> Response {
    let (parts, body) = response.into_parts();
    // These answers are texts in memory, whole at once; one that is not is worded
    // from its status alone.
    let text = axum::body::to_bytes(body, MOST_TEXT)
        .now_or_never()
        .and_then(Result::ok)
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let (code, message) = worded(parts.status, &text);
    let mut json = ApiError::new(parts.status, code, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            json.headers_mut().append(name, value.clone());
        }
    }
    closing_if(has_body, json)
}

/// The code and message of a plain refusal of `status` that said `text`.
fn worded(status: StatusCode, text: &str) -> (&'static str, String) {
    if let Some(rest) = text.strip_prefix("Failed to deserialize query string:") {
        return (
            "bad_query",
            format!(
                "the query string cannot be read: {}: give each parameter once, as the route's documentation says",
                rest.trim()
            ),
        );
    }
    if let Some(rest) = text.strip_prefix("Invalid URL:") {
        return (
            "bad_path",
            format!(
                "the path cannot be read: {}: percent-encode names as UTF-8",
                rest.trim()
            ),
        );
    }
    if text.contains("Session ID is required") {
        return (
            "session_required",
            "this request needs the `Mcp-Session-Id` header of an open session: start one with `initialize` (its answer carries the header), or send `initialize` itself as a valid request"
                .to_owned(),
        );
    }
    // The MCP library's refusals of an `Accept` that the gateway could not read as
    // accepting its types (see `accept`): say what to send instead.
    if text.starts_with("Not Acceptable: Client must accept both") {
        return (
            "not_acceptable",
            "a POST to `/mcp` is answered with `application/json` or `text/event-stream`, and the `Accept` header does not accept both: send `Accept: application/json, text/event-stream` (or `*/*`, or no `Accept`), without `q=0` on either"
                .to_owned(),
        );
    }
    if text.starts_with("Not Acceptable: Client must accept text/event-stream") {
        return (
            "not_acceptable",
            "a GET of `/mcp` is answered with `text/event-stream`, and the `Accept` header does not accept it: send `Accept: text/event-stream` (or `*/*`, or no `Accept`), without `q=0` on it"
                .to_owned(),
        );
    }
    let said = |fallback: &str| {
        if text.is_empty() {
            fallback.to_owned()
        } else {
            text.to_owned()
        }
    };
    match status {
        StatusCode::NOT_FOUND => (
            "not_found",
            "nothing is served at this path: the API's routes are under `/v1` and `/mcp` (docs/gateway.md lists them)".to_owned(),
        ),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "this path does not take this method: the `Allow` header lists the ones it takes"
                .to_owned(),
        ),
        StatusCode::NOT_ACCEPTABLE => (
            "not_acceptable",
            said("the `Accept` header names no type this path answers with"),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            said("the body's `Content-Type` is not one this path takes"),
        ),
        _ => ("bad_request", said("the request cannot be served as sent")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::HeaderValue;

    fn plain(status: StatusCode, text: &'static str) -> Response {
        let mut response = Response::new(Body::from(text));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_plain_refusal_becomes_a_json_error_with_its_status_and_headers() {
        let mut refused = plain(StatusCode::METHOD_NOT_ALLOWED, "");
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        assert!(is_plain_refusal(&refused));
        let json = as_json(refused, true);
        assert_eq!(json.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(json.headers()[header::ALLOW], "GET,HEAD");
        assert_eq!(json.headers()[header::CONNECTION], "close");
        assert_eq!(json.headers()[header::CONTENT_TYPE], "application/json");
        let error = &body(json).await["error"];
        assert_eq!(error["code"], "method_not_allowed");
        assert!(error["message"].as_str().unwrap().contains("`Allow`"));
    }

    #[tokio::test]
    async fn the_query_and_path_refusals_say_what_to_send_instead() {
        let query = plain(
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string: duplicate field `format`",
        );
        let error = &body(as_json(query, false)).await["error"];
        assert_eq!(error["code"], "bad_query");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("duplicate field `format`"), "{message}");
        assert!(!message.contains("deserialize"), "{message}");
        let path = plain(
            StatusCode::BAD_REQUEST,
            "Invalid URL: Invalid UTF-8 in `name`",
        );
        assert_eq!(
            body(as_json(path, false)).await["error"]["code"],
            "bad_path"
        );
    }

    #[tokio::test]
    async fn the_mcp_librarys_accept_refusals_say_what_to_send() {
        for (text, send) in [
            (
                "Not Acceptable: Client must accept both application/json and text/event-stream",
                "`Accept: application/json, text/event-stream`",
            ),
            (
                "Not Acceptable: Client must accept text/event-stream",
                "`Accept: text/event-stream`",
            ),
        ] {
            let refused = plain(StatusCode::NOT_ACCEPTABLE, text);
            let error = &body(as_json(refused, false)).await["error"];
            assert_eq!(error["code"], "not_acceptable");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(send), "{message}");
            assert!(message.contains("`*/*`"), "{message}");
        }
    }

    #[test]
    fn json_answers_event_streams_and_successes_are_left_alone() {
        let mut json = plain(StatusCode::BAD_REQUEST, "{}");
        json.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(!is_plain_refusal(&json));
        let mut stream = plain(StatusCode::NOT_FOUND, "");
        stream.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        assert!(!is_plain_refusal(&stream));
        assert!(!is_plain_refusal(&plain(StatusCode::OK, "# metrics")));
        assert!(!is_plain_refusal(&plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded"
        )));
    }
}
