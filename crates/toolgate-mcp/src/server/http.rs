//! The streamable HTTP endpoint, and how a client disconnect or the host's shutdown
//! becomes a cancellation.
//!
//! rmcp keeps a session's calls running when the HTTP response carrying their result is
//! dropped (the client may resume the stream). For toolgate a disconnect means the
//! caller is gone, so each HTTP request carries a [`ClientDisconnected`] token that fires
//! when its response is dropped before it was sent in full; a `tools/call` that sees it
//! fire drops its invocation, which releases everything its hooks acquired.
//!
//! A host that stops while calls still run puts a [`HostShutdown`] in each request
//! instead: the client is still there and waits for an answer, so the call is cancelled
//! through the pipeline and answered.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolgate_core::ToolError;

use arc_swap::ArcSwap;

use super::ServerInner;
use super::connection::Connection;
use super::request_body;

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

/// Cuts the calls of an HTTP request when the host server shuts down before they finish.
///
/// A host that drains before it stops puts one in the extensions of each request it hands
/// to [`McpHttpService`] (clones share one token). When the host cancels the token, a
/// `tools/call` of that request still running is cancelled through the pipeline's
/// cancellation token — so its tail runs: `on_error`, the audit record, the releases — and
/// the client is answered with a tool result with `isError: true` carrying `error`, on
/// the stream it is waiting on.
///
/// Cheap to clone (one `Arc`).
///
/// # Examples
///
/// ```
/// use tokio_util::sync::CancellationToken;
/// use toolgate_core::ToolError;
/// use toolgate_mcp::HostShutdown;
///
/// let cut = CancellationToken::new();
/// let shutdown = HostShutdown::new(
///     cut.clone(),
///     ToolError::abort("the server shut down before the call finished", "shutting_down", 503),
/// );
/// // Put `shutdown.clone()` in every request's extensions; at the end of the grace:
/// cut.cancel();
/// ```
#[derive(Clone, Debug)]
pub struct HostShutdown(Arc<Shutdown>);

#[derive(Debug)]
struct Shutdown {
    token: CancellationToken,
    error: ToolError,
}

impl HostShutdown {
    /// Calls are cut when `token` is cancelled, and answered with `error`.
    pub fn new(token: CancellationToken, error: ToolError) -> Self {
        HostShutdown(Arc::new(Shutdown { token, error }))
    }

    /// Runs `invoke` (a call whose pipeline cancellation token is `cancel`) to its end.
    /// If the host shuts down first, cancels the call through `cancel`, lets its tail
    /// run, and answers with the shutdown's error — unless the call finished anyway.
    pub(super) async fn cut<F>(&self, invoke: F, cancel: &CancellationToken) -> F::Output
    where
        F: Future<Output = Result<serde_json::Value, ToolError>>,
    {
        let mut invoke = std::pin::pin!(invoke);
        tokio::select! {
            biased;
            result = &mut invoke => result,
            () = self.0.token.cancelled() => {
                cancel.cancel();
                match invoke.await {
                    Err(ToolError::Cancelled) => Err(self.0.error.clone()),
                    ended => ended,
                }
            }
        }
    }
}

/// The streamable HTTP endpoint of an [`McpServer`](crate::McpServer), from
/// [`McpServer::http_service`](crate::McpServer::http_service): a cloneable tower service
/// for `axum::Router::nest_service`.
///
/// It reads each request's body in full (at most the configuration's
/// `max_request_body_bytes`) before the MCP server sees it, and answers what is wrong
/// with it with its own status and a JSON-RPC error without an id: 413 for a body over
/// the limit, 408 for one that did not arrive in time (the body failed with an
/// [`std::io::Error`] of kind `TimedOut`), 400 with `-32700` (parse error) for a body
/// that is not JSON and 400 with `-32600` (invalid request) for JSON that is not a
/// JSON-RPC message.
#[derive(Clone)]
pub struct McpHttpService {
    inner: StreamableHttpService<Connection, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    current: Arc<ArcSwap<ServerInner>>,
}

impl McpHttpService {
    pub(super) fn new(
        inner: StreamableHttpService<Connection, LocalSessionManager>,
        sessions: Arc<LocalSessionManager>,
        current: Arc<ArcSwap<ServerInner>>,
    ) -> Self {
        McpHttpService {
            inner,
            sessions,
            current,
        }
    }

    /// Ends the session `id` as a `DELETE` from its client would: its worker stops, its
    /// streams end and what it held is freed now rather than at rmcp's keep-alive. A
    /// host that forgets a session (it expired, or was refused) calls this so that the
    /// session does not live on unseen. An id that is not open is ignored.
    pub async fn close_session(&self, id: &str) {
        let id: SessionId = Arc::from(id);
        // The only error is a worker that already stopped: the session is gone either way.
        let _ = self.sessions.close_session(&id).await;
    }

    /// Serves what `next` serves — its pipeline, filter, principals and timeout — from
    /// the next request on, in every session of this service, the open ones included: a
    /// host that reloads its configuration keeps this service, and with it its clients'
    /// sessions, instead of making every client initialize again. Calls in flight finish
    /// on what they started with. (This service's HTTP settings, such as the body limit,
    /// stay.)
    pub fn serve_as(&self, next: &McpHttpService) {
        self.current.store(next.current.load_full());
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
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B::Data: Send + 'static,
{
    type Response = http::Response<GuardedBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower_service::Service::<http::Request<http_body_util::Full<Bytes>>>::poll_ready(
            &mut self.inner,
            cx,
        )
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let token = CancellationToken::new();
        request
            .extensions_mut()
            .insert(ClientDisconnected(token.clone()));
        // Dropped with the response future (the client left while we were working) or
        // with an unfinished body (the client left mid-stream): either way, cancel.
        let guard = token.drop_guard();
        let mut inner = self.inner.clone();
        let limit = inner.config.max_request_body_bytes;
        Box::pin(async move {
            let request = match request_body::read(request, limit).await {
                Ok(request) => request,
                Err(rejection) => return Ok(rejection),
            };
            let response = inner.call(request).await?;
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

impl GuardedBody {
    /// A body of `bytes` that nothing waits on.
    pub(super) fn complete(bytes: Bytes) -> GuardedBody {
        GuardedBody {
            inner: http_body_util::Full::new(bytes)
                .map_err(|never| match never {})
                .boxed(),
            guard: None,
        }
    }
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
