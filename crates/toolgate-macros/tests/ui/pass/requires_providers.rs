//! `#[requires]` on the impl block and on a method fills `required_providers`.
use toolgate_core::external::TypeMapKey;
use toolgate_core::provider::ProviderRequirement;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

struct Region;
impl TypeMapKey for Region {
    type Value = String;
}

struct Clock;
impl TypeMapKey for Clock {
    type Value = u64;
}

struct Regional;

#[hook]
#[requires(Region)]
impl Hook for Regional {
    #[requires(Clock)]
    async fn will_execute(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let _region = ctx.get::<Region>()?;
        let _now = ctx.get::<Clock>()?;
        Ok(())
    }
}

fn main() {
    assert_eq!(
        Regional.required_providers(),
        vec![
            ProviderRequirement::of::<Region>(),
            ProviderRequirement::of::<Clock>()
        ]
    );
}
