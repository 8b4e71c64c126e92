//! The gateway's own limit on the size of a request's headers, `server.max_header_bytes`.
//!
//! A request past it is answered 431 `headers_too_large`, a JSON error like every other
//! answer, saying how large its headers are, the limit and what to do, and marked
//! `Connection: close` when it came with a body (which is not read). The connections the
//! gateway serves let hyper buffer heads of twice the limit at least
//! (`crate::connections`), so that it is this answer a client sees rather than hyper's
//! own, an empty 431 written while parsing, which only heads past hyper's buffer still
//! get. So do heads of more than 100 fields, hyper's own bound: raising it would make
//! hyper parse every request's head into arrays on the heap instead of the stack.
//!
//! The size of the headers is counted as they are sent on HTTP/1.1: each field's name
//! and value plus 4 bytes (`": "` and the line's `"\r\n"`). Whitespace around a value and
//! the request line are not counted, so this is a close approximation of the bytes on
//! the wire, never over it.
//!
//! [`HeaderLimitsLayer`] wraps the router's routes outside everything else but the
//! request metrics: it runs before bodies are looked at, before authentication and before
//! any handler. It walks the header map once per request, without allocating; only a
//! refusal allocates.

use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::future::Either;
use tower_layer::Layer;
use tower_service::Service;

use super::ApiError;
use super::body::{closing_if, has_body};

/// Wraps routes in [`HeaderLimits`], with `max_bytes` of headers at most
/// (`server.max_header_bytes`).
#[derive(Clone, Copy)]
pub(super) struct HeaderLimitsLayer {
    max_bytes: usize,
}

impl HeaderLimitsLayer {
    pub(super) fn new(max_bytes: usize) -> Self {
        HeaderLimitsLayer { max_bytes }
    }
}

impl<S> Layer<S> for HeaderLimitsLayer {
    type Service = HeaderLimits<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HeaderLimits {
            inner,
            max_bytes: self.max_bytes,
        }
    }
}

/// Answers 431 a request whose headers are over the limit (see the module), and passes
/// every other one on.
#[derive(Clone)]
pub(super) struct HeaderLimits<S> {
    inner: S,
    max_bytes: usize,
}

impl<S> Service<Request> for HeaderLimits<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<S::Future, std::future::Ready<Result<Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match over_limits(request.headers(), self.max_bytes) {
            None => Either::Left(self.inner.call(request)),
            Some(refused) => Either::Right(std::future::ready(Ok(closing_if(
                has_body(request.headers()),
                refused.into_response(),
            )))),
        }
    }
}

/// The 431 answer for `headers`, when they are more than `max_bytes` bytes.
fn over_limits(headers: &HeaderMap, max_bytes: usize) -> Option<ApiError> {
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if bytes > max_bytes {
        let (size, limit) = sizes(bytes, max_bytes);
        return Some(too_large(format!(
            "the request's headers are {size}, over the gateway's limit of {limit} (`server.max_header_bytes`): send smaller headers (a large cookie or token?)"
        )));
    }
    None
}

#[cold]
fn too_large(message: String) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        message,
    )
}

/// `bytes` and `limit` in words: in KiB when the limit is a whole number of them (the size
/// rounded up, so that it reads as over the limit), in bytes otherwise.
fn sizes(bytes: usize, limit: usize) -> (String, String) {
    if limit.is_multiple_of(1024) {
        (
            format!("{} KiB", bytes.div_ceil(1024)),
            format!("{} KiB", limit / 1024),
        )
    } else {
        (format!("{bytes} bytes"), format!("{limit} bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    fn headers(fields: usize, value_len: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(&"v".repeat(value_len)).unwrap();
        for i in 0..fields {
            let name = HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap();
            headers.insert(name, value.clone());
        }
        headers
    }

    fn message(error: ApiError) -> String {
        assert_eq!(error.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert_eq!(error.code(), "headers_too_large");
        error.body().message.clone()
    }

    #[test]
    fn headers_within_the_limit_pass() {
        assert!(over_limits(&headers(100, 10), 64 * 1024).is_none());
        // One field of exactly the limit: name, value and 4 bytes.
        assert!(over_limits(&headers(1, 1024 - 4 - 4), 1024).is_none());
    }

    #[test]
    fn headers_over_the_limit_are_refused_naming_it() {
        let large = over_limits(&headers(1, 70 * 1024), 64 * 1024).unwrap();
        let text = message(large);
        assert!(text.contains("are 71 KiB"), "{text}");
        assert!(text.contains("limit of 64 KiB"), "{text}");
        assert!(over_limits(&headers(1, 1024 - 4 - 4 + 1), 1024).is_some());
    }

    #[test]
    fn a_limit_that_is_not_whole_kib_is_said_in_bytes() {
        assert_eq!(
            sizes(2001, 2000),
            ("2001 bytes".to_owned(), "2000 bytes".to_owned())
        );
        assert_eq!(sizes(1025, 1024), ("2 KiB".to_owned(), "1 KiB".to_owned()));
    }
}
