//! A method in the trait's own form is kept and counted; a hand-written `stages` (a set
//! chosen by configuration) is kept as written.
use toolgate_core::hook::HookFuture;
use toolgate_core::stage::StageSet;
use toolgate_core::{Hook, HookResult, Stage, ToolInvokeContext, hook};

struct Cache {
    enabled: bool,
}

#[hook]
impl Hook for Cache {
    fn stages(&self) -> StageSet {
        if self.enabled {
            StageSet::of(&[Stage::WillReadCache, Stage::WillWriteCache])
        } else {
            StageSet::EMPTY
        }
    }

    fn will_read_cache<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        if ctx.input().is_null() {
            return HookFuture::ok();
        }
        HookFuture::new(async move { Ok(()) })
    }

    fn will_write_cache(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

struct Plain;

#[hook]
impl Hook for Plain {
    fn will_audit<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        HookFuture::ok()
    }
}

fn main() {
    assert!(Cache { enabled: false }.stages().is_empty());
    assert_eq!(Cache { enabled: true }.stages().iter().count(), 2);
    assert_eq!(Plain.stages(), Stage::WillAudit.into());
}
