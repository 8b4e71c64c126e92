//! Stage methods written by a macro inside the block: `#[hook]` cannot see them, so it
//! claims as synchronous only the plain `fn`s it sees.
use toolgate_core::hook::HookFuture;
use toolgate_core::stage::StageSet;
use toolgate_core::{Hook, HookResult, Stage, ToolInvokeContext, hook};

macro_rules! waiting_stage {
    ($method:ident) => {
        fn $method<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            HookFuture::new(async {
                tokio::task::yield_now().await;
                Ok(())
            })
        }
    };
}

struct Hidden;

#[hook]
impl Hook for Hidden {
    fn stages(&self) -> StageSet {
        StageSet::of(&[Stage::WillAudit, Stage::WillAuthorize])
    }

    fn will_authorize(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }

    waiting_stage!(will_audit);
}

fn main() {
    assert_eq!(
        Hidden.synchronous_stages(),
        StageSet::of(&[Stage::WillAuthorize]),
        "the macro-written `will_audit` may wait: it is not claimed synchronous"
    );
}
