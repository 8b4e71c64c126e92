use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

struct ReadOnly;

#[hook]
impl Hook for ReadOnly {
    fn will_audit(&self, _ctx: &ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

fn main() {}
