use std::rc::Rc;

use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

struct Local;

#[hook]
impl Hook for Local {
    async fn will_execute(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        let shared = Rc::new(1);
        tokio::task::yield_now().await;
        drop(shared);
        Ok(())
    }
}

fn main() {}
