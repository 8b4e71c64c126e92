//! The streamable HTTP endpoint, and how a client disconnect becomes a cancellation.
//!
//! rmcp keeps a session's calls running when the HTTP response carrying their result is
//! dropped (the client may resume the stream). For toolgate a disconnect means the
//! caller is gone, so each HTTP request carries a [`ClientDisconnected`] token that fires
//! when its response is dropped before it was sent in full; a `tools/call` that sees it
//! fire drops its invocation, which releases everything its hooks acquired.

use std::convert::Infallible;
use std::fmt::Display;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::connection::Connection;

/// Fires when the client of one HTTP request goes away before its response was sent in
/// full. [`McpHttpService`] puts one in every request's extensions.
#[derive(Clone, Debug, Default)]
pub struct ClientDisconnected(CancellationToken);

impl ClientDisconnected {
    /// Waits until the client disconnects.
    pub async fn cancelled(&self) {
        self.0.cancelled().await;
    }

    /// Whether the client has disconnected.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// The streamable HTTP endpoint of an [`McpServer`](crate::McpServer), from
/// [`McpServer::http_service`](crate::McpServer::http_service): a cloneable tower service
/// for `axum::Router::nest_service`.
#[derive(Clone)]
pub struct McpHttpService {
    inner: StreamableHttpService<Connection, LocalSessionManager>,
}

impl McpHttpService {
    pub(super) fn new(inner: StreamableHttpService<Connection, LocalSessionManager>) -> Self {
        McpHttpService { inner }
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
    B::Error: Display,
    B::Data: Send + 'static,
{
    type Response = http::Response<GuardedBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower_service::Service::<http::Request<B>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let token = CancellationToken::new();
        request
            .extensions_mut()
            .insert(ClientDisconnected(token.clone()));
        // Dropped with the response future (the client left while we were working) or
        // with an unfinished body (the client left mid-stream): either way, cancel.
        let guard = token.drop_guard();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| GuardedBody {
                inner: body,
                guard: Some(guard),
            }))
        })
    }
}

/// A response body that signals [`ClientDisconnected`] when dropped before its end.
pub struct GuardedBody {
    inner: BoxBody<Bytes, Infallible>,
    guard: Option<DropGuard>,
}

impl std::fmt::Debug for GuardedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedBody").finish_non_exhaustive()
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled
            && let Some(guard) = self.guard.take()
        {
            guard.disarm();
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
