use toolgate_core::{Hook, HookResult, Next, ToolInvokeContext, hook};

struct Wrap;

#[hook]
impl Hook for Wrap {
    fn around_execute(&self, _ctx: &mut ToolInvokeContext, _next: Next<'_>) -> HookResult {
        Ok(())
    }
}

fn main() {}
