//! A stage method written as a plain `fn`, with `?` and early returns, next to the other
//! methods of `Hook`, which are left as written.
use toolgate_core::stage::StageSet;
use toolgate_core::{Hook, HookResult, Stage, ToolInvokeContext, hook};

struct Limits {
    max_len: usize,
}

#[hook]
impl Hook for Limits {
    fn name(&self) -> &str {
        "limits"
    }

    fn priority(&self) -> i32 {
        10
    }

    /// Refuses long inputs.
    fn will_validate_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let len = ctx.input().to_string().len();
        if len > self.max_len {
            return ctx.abort("the input is too long", "invalid_input", 400);
        }
        Ok(())
    }

    fn did_release_quota(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

fn main() {
    let hook = Limits { max_len: 10 };
    assert_eq!(hook.name(), "limits");
    assert_eq!(
        hook.stages(),
        StageSet::of(&[Stage::WillValidateInput, Stage::DidReleaseQuota])
    );
    // Plain `fn`s finish at once: the pipeline calls them without a future of its own.
    assert_eq!(hook.synchronous_stages().intersection(hook.stages()), hook.stages());
}
