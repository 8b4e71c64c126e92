//! A generic hook, and the facade's path: `#[hook(crate = …)]` for a renamed dependency.
use std::marker::PhantomData;

use toolgate_core as renamed;
use renamed::{Hook, HookResult, Stage, ToolInvokeContext, hook};

struct Tagged<T>(PhantomData<T>);

#[hook(crate = renamed)]
impl<T: Send + Sync + 'static> Hook for Tagged<T> {
    fn on_metrics(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

fn main() {
    assert_eq!(Tagged::<u8>(PhantomData).stages(), Stage::OnMetrics.into());
}
