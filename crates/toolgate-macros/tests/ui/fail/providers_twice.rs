use toolgate_core::external::TypeMapKey;
use toolgate_core::provider::ProviderRequirement;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

struct Region;
impl TypeMapKey for Region {
    type Value = String;
}

struct Twice;

#[hook]
#[requires(Region)]
impl Hook for Twice {
    fn required_providers(&self) -> Vec<ProviderRequirement> {
        vec![ProviderRequirement::of::<Region>()]
    }

    fn will_execute(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

fn main() {}
