use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

struct DenyGuests;

#[hook]
impl Hook for DenyGuests {
    fn will_authorise(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.user().has_role("guest") {
            return ctx.abort("no guests", "forbidden", 403);
        }
        Ok(())
    }
}

fn main() {}
