use toolgate_core::{Hook, HookResult, ToolInvokeContext};

struct Audit;

// `#[hook]` forgotten: rustc cannot be told to suggest it here (a missing or mismatched
// trait item is not a trait bound, which is all `#[diagnostic::on_unimplemented]` reaches);
// this case records what it says.
impl Hook for Audit {
    fn will_authorize(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

fn main() {}
