//! [`Next`]: the rest of the execution chain an `around_execute` wrapper calls.

use super::{Hook, HookFuture};
use crate::context::ToolInvokeContext;

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
    pub fn run<'b>(self, ctx: &'b mut ToolInvokeContext) -> HookFuture<'b>
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
                return wrapper.around_execute(ctx, next);
            }
        }
        self.chain.attempt(ctx)
    }
}
