//! How a client disconnect or the host's shutdown becomes a cancellation.
//!
//! rmcp keeps a session's calls running when the HTTP response carrying their result is
//! dropped (the client may resume the stream). For toolgate a disconnect means the
//! caller is gone, so each HTTP request carries a [`ClientDisconnected`] token that fires
//! when its response ([`GuardedBody`]) is dropped before it was sent in full; a
//! `tools/call` that sees it fire drops its invocation, which releases everything its
//! hooks acquired.
//!
//! A host that stops while calls still run puts a [`HostShutdown`] in each request
//! instead: the client is still there and waits for an answer, so the call is cancelled
//! through the pipeline and answered.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolgate_core::ToolError;

/// Fires when the client of one HTTP request goes away before its response was sent in
/// full. [`McpHttpService`](crate::McpHttpService) puts one in every request's extensions.
#[derive(Clone, Debug, Default)]
pub struct ClientDisconnected(pub(super) CancellationToken);

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
/// to [`McpHttpService`](crate::McpHttpService) (clones share one token). When the host cancels the token, a
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

/// A response body that signals [`ClientDisconnected`] when dropped before its end.
pub struct GuardedBody {
    pub(super) inner: BoxBody<Bytes, Infallible>,
    pub(super) guard: Option<DropGuard>,
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
