//! Admission to `/v1` and `/mcp` while the gateway drains, as a tower layer.
//!
//! Every request to these routes is a call for the [`Drain`]: it is admitted while the
//! gateway serves, and counted as in flight until its answer has been sent in full (or
//! dropped), so that the drain knows when every caller has its answer. Once the drain has
//! started, new requests are refused at once with 503 `shutting_down` and a
//! `Retry-After`, before authentication: the caller should go to another replica.
//!
//! One exception: a `GET /mcp` opens the stream an MCP session's server-initiated
//! messages come on. It is no call and may stay open as long as the session does, so it
//! is not counted; it ends when the drain starts (the client opens it again elsewhere).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, Either};
use http_body::{Frame, SizeHint};
use tower_layer::Layer;
use tower_service::Service;

use super::ApiError;
use crate::drain::{CallInFlight, Drain, Refused};

/// Wraps routes in [`Admit`].
#[derive(Clone)]
pub(super) struct AdmitLayer {
    drain: Drain,
}

impl AdmitLayer {
    /// Admits requests as `drain` allows.
    pub(super) fn new(drain: Drain) -> Self {
        AdmitLayer { drain }
    }
}

impl<S> Layer<S> for AdmitLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Admit {
            inner,
            drain: self.drain.clone(),
        }
    }
}

/// Refuses requests once the drain has started; counts the others in flight (see the
/// module's docs).
#[derive(Clone)]
pub(super) struct Admit<S> {
    inner: S,
    drain: Drain,
}

/// What an admitted request holds until its answer is sent.
enum Held {
    /// A call, counted in flight until this is dropped.
    Call { _in_flight: CallInFlight },
    /// An MCP session's stream, ended when the drain starts.
    Stream(BoxFuture<'static, ()>),
    /// A stream the drain ended.
    Ended,
}

impl<S> Admit<S> {
    fn hold(&self, request: &Request) -> Result<Held, Refused> {
        let opens_stream = request.method() == Method::GET && request.uri().path() == "/mcp";
        if !opens_stream {
            let in_flight = self.drain.admit()?;
            return Ok(Held::Call {
                _in_flight: in_flight,
            });
        }
        if self.drain.is_draining() {
            return Err(Refused);
        }
        let drain = self.drain.clone();
        Ok(Held::Stream(Box::pin(async move { drain.started().await })))
    }
}

impl<S> Service<Request> for Admit<S>
where
    S: Service<Request, Response = Response>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<Response, S::Error>>, Admitted<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.hold(&request) {
            Ok(held) => Either::Right(Admitted {
                future: self.inner.call(request),
                held: Some(held),
            }),
            Err(refused) => Either::Left(std::future::ready(Ok(ApiError::from(
                &toolgate_core::ToolError::from(refused),
            )
            .into_response()))),
        }
    }
}

/// The answer to an admitted request, holding what it holds until the answer's body
/// takes it.
pub(super) struct Admitted<F> {
    future: F,
    held: Option<Held>,
}

impl<F, E> Future for Admitted<F>
where
    F: Future<Output = Result<Response, E>> + Unpin,
{
    type Output = Result<Response, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let response = ready!(Pin::new(&mut this.future).poll(cx))?;
        let held = this
            .held
            .take()
            .expect("an answer is polled again after it was ready");
        Poll::Ready(Ok(response.map(|inner| Body::new(HeldBody { inner, held }))))
    }
}

/// An answer's body, holding its request's [`Held`] until it is sent in full or dropped.
struct HeldBody {
    inner: Body,
    held: Held,
}

impl HttpBody for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let ended = match &mut this.held {
            Held::Call { .. } => false,
            Held::Stream(drain_started) => drain_started.as_mut().poll(cx).is_ready(),
            Held::Ended => true,
        };
        if ended {
            // Never polls the finished future again.
            this.held = Held::Ended;
            return Poll::Ready(None);
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.held, Held::Ended) || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
