//! [`HookFuture`]: what a stage method returns, ready at once or boxed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::control::HookResult;

/// The future a stage method returns.
///
/// A hook whose work is synchronous returns a ready value and pays no allocation:
/// `HookFuture::ok()`, or `ctx.abort(…).into()`. A hook that awaits wraps its async block
/// with [`HookFuture::new`], which boxes it once.
#[must_use = "a hook future does nothing unless awaited"]
pub struct HookFuture<'a>(Inner<'a>);

enum Inner<'a> {
    Ready(Option<HookResult>),
    Boxed(Pin<Box<dyn Future<Output = HookResult> + Send + 'a>>),
}

impl<'a> HookFuture<'a> {
    /// A future that is already done with `Ok(())`: let the pipeline continue.
    pub fn ok() -> Self {
        HookFuture(Inner::Ready(Some(Ok(()))))
    }

    /// A future that is already done with `result`.
    pub fn ready(result: HookResult) -> Self {
        HookFuture(Inner::Ready(Some(result)))
    }

    /// Wraps async work.
    pub fn new(future: impl Future<Output = HookResult> + Send + 'a) -> Self {
        HookFuture(Inner::Boxed(Box::pin(future)))
    }

    /// Whether this future is already done with `Ok(())`: the common answer of a
    /// synchronous hook, which the pipeline takes without moving the result out.
    #[inline]
    pub(crate) fn is_ready_ok(&self) -> bool {
        matches!(self.0, Inner::Ready(Some(Ok(()))))
    }

    /// The result, when the future is already done (a synchronous hook); the future back
    /// otherwise. The pipeline takes a ready result without polling.
    #[inline]
    pub(crate) fn into_ready(self) -> Result<HookResult, Self> {
        match self.0 {
            Inner::Ready(Some(result)) => Ok(result),
            inner => Err(HookFuture(inner)),
        }
    }
}

impl From<HookResult> for HookFuture<'_> {
    fn from(result: HookResult) -> Self {
        HookFuture::ready(result)
    }
}

impl Future for HookFuture<'_> {
    type Output = HookResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<HookResult> {
        match &mut self.0 {
            Inner::Ready(result) => Poll::Ready(
                result
                    .take()
                    .expect("a HookFuture must not be polled after it completed"),
            ),
            Inner::Boxed(future) => future.as_mut().poll(cx),
        }
    }
}
