//! Request bodies with a deadline, and answers that tell the watchdog when they are sent.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

use super::watchdog::InFlight;

type BoxError = Box<dyn StdError + Send + Sync>;

/// A request body that fails with [`BodyTimedOut`] (inside an [`std::io::Error`] of kind
/// `TimedOut`) when it has not arrived in full within its limit. The clock starts the
/// first time the body is waited for, so a body that came with the headers costs no
/// timer.
pub(super) struct TimedBody<B> {
    inner: B,
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Set once the body has been read to its end (see [`BodyRead`]).
    read: BodyRead,
}

impl<B: HttpBody> TimedBody<B> {
    /// `inner` with its deadline, and what tells whether it was read to its end.
    pub(super) fn new(inner: B, limit: Duration) -> (Self, BodyRead) {
        let read = BodyRead::new(inner.is_end_stream());
        let body = TimedBody {
            inner,
            limit,
            sleep: None,
            read: read.clone(),
        };
        (body, read)
    }
}

/// Whether a request's body has been read to its end, shared by its [`TimedBody`] and the
/// [`Answering`] of its answer. An answer sent while some of the body is unread — a body
/// refused part-way (413 past `server.body_limit` on a chunked body, 400 for a broken
/// chunk) or not read at all — is the connection's last: hyper closes it rather than
/// read the rest as the next request, and the answer must say so (`Connection: close`),
/// or a keep-alive client sends its next request on a connection being closed and gets no
/// answer. A request without a body costs no allocation.
#[derive(Clone)]
pub(super) struct BodyRead(Option<Arc<AtomicBool>>);

impl BodyRead {
    fn new(ended: bool) -> Self {
        BodyRead((!ended).then(|| Arc::new(AtomicBool::new(false))))
    }

    fn ended(&self) {
        if let Some(read) = &self.0 {
            read.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the body was read to its end (or there was none).
    pub(super) fn is_done(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|read| read.load(Ordering::Relaxed))
    }
}

impl<B> HttpBody for TimedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if frame.is_none() || this.inner.is_end_stream() {
                this.read.ended();
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let limit = this.limit;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            BodyTimedOut(limit),
        )))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body did not arrive in full within `server.body_timeout`.
#[derive(Debug)]
pub struct BodyTimedOut(Duration);

impl fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the request body did not arrive within {:?} (`server.body_timeout`): send it at once, right after the headers",
            self.0
        )
    }
}

impl StdError for BodyTimedOut {}

/// The body of an answer; the request counts as answered once it is sent in full or
/// dropped.
pub(super) struct AnswerBody {
    inner: Body,
    _in_flight: InFlight,
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The router's answer to one request, holding its [`InFlight`] until the answer's body
/// takes it.
pub(super) struct Answering<F> {
    pub(super) future: F,
    pub(super) in_flight: Option<InFlight>,
    /// Whether the answer says `Connection: close` (hyper then closes the connection
    /// once it is sent).
    pub(super) close_connection: bool,
    /// Whether the request's body was read to its end: when it was not, the answer says
    /// `Connection: close` too, as hyper closes the connection after it.
    pub(super) body_read: BodyRead,
}

impl<F, E> Future for Answering<F>
where
    F: Future<Output = Result<Response, E>> + Unpin,
{
    type Output = Result<http::Response<AnswerBody>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut response = ready!(Pin::new(&mut this.future).poll(cx))?;
        if this.close_connection || !this.body_read.is_done() {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let in_flight = this
            .in_flight
            .take()
            .expect("an answer is polled again after it was ready");
        Poll::Ready(Ok(response.map(|inner| AnswerBody {
            inner,
            _in_flight: in_flight,
        })))
    }
}
