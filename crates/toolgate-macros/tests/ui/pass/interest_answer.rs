//! What `#[hook]` answers for `Hook::interest`: `always` for a hook that filters nothing,
//! the trait's `sometimes` when the block writes `filter` — or when a macro in it may
//! write `filter` unseen, so that a filter is never skipped.
use toolgate_core::hook::Interest;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

struct Plain;

#[hook]
impl Hook for Plain {
    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

struct Filtered;

#[hook]
impl Hook for Filtered {
    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        ctx.user().has_role("admin")
    }

    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

macro_rules! admins_only {
    () => {
        fn filter(&self, ctx: &ToolInvokeContext) -> bool {
            ctx.user().has_role("admin")
        }
    };
}

struct MacroFiltered;

#[hook]
impl Hook for MacroFiltered {
    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }

    admins_only!();
}

struct Chooses;

#[hook]
impl Hook for Chooses {
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(tool.name.starts_with("db_"))
    }

    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

fn main() {
    let tool: ToolDefinition = serde_json::from_value(serde_json::json!({
        "name": "db_query",
        "description": "Queries.",
        "version": "1",
        "input_schema": { "type": "object" },
    }))
    .unwrap();
    assert_eq!(Plain.interest(&tool), Interest::always());
    assert_eq!(Filtered.interest(&tool), Interest::sometimes());
    assert_eq!(MacroFiltered.interest(&tool), Interest::sometimes());
    assert_eq!(Chooses.interest(&tool), Interest::always());
}
