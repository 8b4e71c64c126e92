use toolgate_core::{Hook, ToolInvokeContext, hook};

struct Forgetful;

#[hook]
impl Hook for Forgetful {
    fn will_audit(&self, _ctx: &mut ToolInvokeContext) {}
}

fn main() {}
