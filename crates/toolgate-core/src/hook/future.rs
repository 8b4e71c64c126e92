//! [`HookFuture`]: what a stage method returns — ready at once, boxed, or, from
//! [`Next::run`], the rest of the execution chain not yet started — and [`Next`], the rest
//! of the chain an `around_execute` wrapper calls. One module: each is made of the other.

use std::any::TypeId;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Hook;
use crate::context::ToolInvokeContext;
use crate::control::HookResult;
use crate::stage::Stage;

/// The future a stage method returns.
///
/// A hook whose work is synchronous returns a ready value and pays no allocation:
/// `HookFuture::ok()`, or `ctx.abort(…).into()`. A hook that awaits wraps its async block
/// with [`HookFuture::new`], which boxes it once. [`Next::run`] returns the rest of the
/// execution chain not yet started: a wrapper that hands it back as it is (the trait's
/// default `around_execute`) costs no allocation, and the pipeline runs the attempt inside
/// its own future.
#[must_use = "a hook future does nothing unless awaited"]
pub struct HookFuture<'a>(Inner<'a>);

// The order of the first two variants matters: `Ready(Ok(()))` and `Default` take
// neighbouring values of the result's tag, so that telling "done with `Ok(())`" from the
// rest is one range comparison ([`HookFuture::is_ready_ok`]).
enum Inner<'a> {
    Ready(HookResult),
    /// Done with `Ok(())`, made by the trait's default method (as on every call).
    Default(DefaultMethod),
    /// Polled to its end.
    Taken,
    Boxed(Pin<Box<dyn Future<Output = HookResult> + Send + 'a>>),
    /// The rest of the execution chain, started when first polled (or by the pipeline,
    /// which takes it apart without polling); with the type it was called on when the
    /// trait's default `around_execute` made it (as [`DefaultMethod`] names a type).
    Next(Next<'a>, &'a mut ToolInvokeContext, Option<fn() -> TypeId>),
}

/// Which default method of [`Hook`] made a future: its stage, and the type it was called
/// on. Only the engine makes one, in the trait's default methods (and in its forwarding
/// hooks, [`HookFuture::forwarded`]). A type's method for a stage is either the default,
/// which makes this on every call, or an override, which cannot call the default it
/// replaces: whatever it hands back — another hook's future, or the default of another of
/// its stages — names another type or another stage. So a future naming the stage and the
/// type the pipeline called proves the method is the default, which finishes at once on
/// every call.
#[derive(Clone, Copy)]
pub(crate) struct DefaultMethod {
    stage: Stage,
    /// `TypeId::of::<Self>` of the hook: called to compare, since function pointers are
    /// not reliably equal.
    type_of: fn() -> TypeId,
}

impl<'a> HookFuture<'a> {
    /// What the trait's default method of `stage` returns on `hook`: done with `Ok(())`.
    #[inline]
    pub(crate) fn default_method<H: Hook + ?Sized>(hook: &H, stage: Stage) -> Self {
        let _ = hook;
        HookFuture(Inner::Default(DefaultMethod {
            stage,
            type_of: TypeId::of::<H>,
        }))
    }

    /// The answer of a hook of type `W` that forwards every stage to the hook inside it
    /// (`Box<H>`, `Arc<H>`, `Option<H>`), when the inner hook, of type `inner`, answered
    /// `self`. The inner hook's own default names `W` instead, since `W` keeps its default
    /// exactly when the inner hook does; any other default's answer is made plain, so that
    /// a forwarded answer names no hook it did not come from (an inner hook whose method
    /// hands back a third hook's answer must not make `W` look as if it kept its default).
    #[inline]
    pub(crate) fn forwarded<W: Hook + ?Sized>(self, inner: impl Fn() -> TypeId) -> Self {
        match self.0 {
            Inner::Default(made) if (made.type_of)() == inner() => {
                HookFuture(Inner::Default(DefaultMethod {
                    stage: made.stage,
                    type_of: TypeId::of::<W>,
                }))
            }
            Inner::Default(_) => HookFuture::ok(),
            Inner::Next(next, ctx, Some(made)) => {
                let kept = made() == inner();
                HookFuture(Inner::Next(next, ctx, kept.then_some(TypeId::of::<W>)))
            }
            inner => HookFuture(inner),
        }
    }

    /// Whether this future is what the trait's default method of `stage` returns on a
    /// hook of type `type_id`: proof that such a hook keeps that default.
    #[inline]
    pub(crate) fn is_default_method(&self, stage: Stage, type_id: TypeId) -> bool {
        match &self.0 {
            Inner::Default(made) => made.stage == stage && (made.type_of)() == type_id,
            Inner::Next(_, _, Some(made)) => stage == Stage::AroundExecute && made() == type_id,
            _ => false,
        }
    }

    /// A future that is already done with `Ok(())`: let the pipeline continue.
    pub fn ok() -> Self {
        HookFuture(Inner::Ready(Ok(())))
    }

    /// A future that is already done with `result`.
    pub fn ready(result: HookResult) -> Self {
        HookFuture(Inner::Ready(result))
    }

    /// Wraps async work.
    pub fn new(future: impl Future<Output = HookResult> + Send + 'a) -> Self {
        HookFuture(Inner::Boxed(Box::pin(future)))
    }

    /// The rest of the execution chain from `next`, not started yet.
    #[inline]
    pub(crate) fn next(next: Next<'a>, ctx: &'a mut ToolInvokeContext) -> Self {
        HookFuture(Inner::Next(next, ctx, None))
    }

    /// What the trait's default `around_execute` returns on `hook`: the rest of the chain
    /// from `next`, unstarted, naming the hook's type — proof, as for
    /// [`default_method`](Self::default_method), that the hook keeps that default, which
    /// hands the rest of the chain back on every call.
    #[inline]
    pub(crate) fn default_next<H: Hook + ?Sized>(
        hook: &H,
        next: Next<'a>,
        ctx: &'a mut ToolInvokeContext,
    ) -> Self {
        let _ = hook;
        HookFuture(Inner::Next(next, ctx, Some(TypeId::of::<H>)))
    }

    /// The chain and the context, when this future is the rest of an execution chain not
    /// yet started; the future back otherwise.
    #[inline]
    pub(crate) fn into_next(self) -> Result<(Next<'a>, &'a mut ToolInvokeContext), Self> {
        match self.0 {
            Inner::Next(next, ctx, _) => Ok((next, ctx)),
            inner => Err(HookFuture(inner)),
        }
    }

    /// Whether this future is already done with `Ok(())`: the common answer of a
    /// synchronous hook and of the trait's default methods, which the pipeline takes
    /// without moving the result out.
    #[inline]
    pub(crate) fn is_ready_ok(&self) -> bool {
        matches!(self.0, Inner::Ready(Ok(())) | Inner::Default(_))
    }

    /// The result, when the future is already done (a synchronous hook); the future back
    /// otherwise. The pipeline takes a ready result without polling.
    #[inline]
    pub(crate) fn into_ready(self) -> Result<HookResult, Self> {
        match self.0 {
            Inner::Ready(result) => Ok(result),
            Inner::Default(_) => Ok(Ok(())),
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
        loop {
            if let Inner::Boxed(future) = &mut self.0 {
                return future.as_mut().poll(cx);
            }
            let unstarted = match std::mem::replace(&mut self.0, Inner::Taken) {
                Inner::Ready(result) => return Poll::Ready(result),
                Inner::Default(_) => return Poll::Ready(Ok(())),
                Inner::Taken => panic!("a HookFuture must not be polled after it completed"),
                other => other,
            };
            // Started now: the next wrapper, or the attempt, takes this place.
            if let Inner::Next(next, ctx, _) = unstarted {
                self.0 = next.start(ctx).0;
            }
        }
    }
}

/// The rest of the execution chain, handed to [`Hook::around_execute`].
///
/// Call [`run`](Next::run) zero times to short-circuit, once to wrap, or several times to
/// retry: each call runs the inner `around_execute` wrappers, then `on_retry` (from the
/// second attempt on), `will_execute`, the tool and `did_execute`.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    chain: &'a dyn ExecutionChain,
    /// The index of the next wrapper to consider.
    next: usize,
}

/// The `around_execute` wrappers of one tool, outermost first, and the attempt they wrap.
/// The engine implements it; [`Next`] walks it.
pub(crate) trait ExecutionChain: Sync {
    /// The wrapper at `index` and whether its filter is asked per call (its interest in
    /// the tool was `sometimes`), or `None` past the innermost.
    fn wrapper(&self, index: usize) -> Option<(&dyn Hook, bool)>;

    /// One attempt: `on_retry` (from the second on), `will_execute`, the tool,
    /// `did_execute`.
    fn attempt<'c>(&'c self, ctx: &'c mut ToolInvokeContext) -> HookFuture<'c>;
}

impl<'a> Next<'a> {
    /// The whole chain of `chain`, from its outermost wrapper.
    pub(crate) fn new(chain: &'a dyn ExecutionChain) -> Self {
        Next { chain, next: 0 }
    }

    /// Runs the rest of the chain: the next wrapper whose filter lets this call through,
    /// or the attempt when none is left.
    ///
    /// Nothing starts before the future is first polled, and nothing is allocated for it
    /// until then: a wrapper that hands it back as it is (the trait's default) allocates
    /// nothing, and the pipeline runs the attempt inside its own future.
    pub fn run<'b>(self, ctx: &'b mut ToolInvokeContext) -> HookFuture<'b>
    where
        'a: 'b,
    {
        HookFuture::next(self, ctx)
    }

    /// Starts the rest of the chain: the next wrapper's future, or, past the innermost,
    /// the attempt's (boxed: its work awaits the tool).
    pub(crate) fn start<'b>(self, ctx: &'b mut ToolInvokeContext) -> HookFuture<'b>
    where
        'a: 'b,
    {
        match self.step(ctx) {
            Step::Wrapper(future) => future,
            Step::Attempt(ctx) => self.chain.attempt(ctx),
        }
    }

    /// One step down the chain: the next wrapper whose filter lets this call through is
    /// called, or, past the innermost, the context comes back for the attempt.
    pub(crate) fn step<'b>(self, ctx: &'b mut ToolInvokeContext) -> Step<'b>
    where
        'a: 'b,
    {
        let mut index = self.next;
        while let Some((wrapper, filtered)) = self.chain.wrapper(index) {
            index += 1;
            if !filtered || wrapper.filter(ctx) {
                let next = Next {
                    chain: self.chain,
                    next: index,
                };
                return Step::Wrapper(wrapper.around_execute(ctx, next));
            }
        }
        Step::Attempt(ctx)
    }
}

/// Where [`Next::step`] led.
pub(crate) enum Step<'b> {
    /// A wrapper was called: its future.
    Wrapper(HookFuture<'b>),
    /// No wrapper is left: the attempt is to run with this context.
    Attempt(&'b mut ToolInvokeContext),
}
