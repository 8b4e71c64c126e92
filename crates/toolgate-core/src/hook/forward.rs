//! `Hook` for `Box<H>`, `Arc<H>` and `Option<H>`, and the call of one stage's method by
//! [`Stage`].

use std::any::Any;
use std::sync::Arc;

use super::{Hook, HookFuture, Interest, Next};
use crate::context::ToolInvokeContext;
use crate::definition::ToolDefinition;
use crate::provider::ProviderRequirement;
use crate::stage::{Stage, StageSet};

macro_rules! forward_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                let inner = &**self;
                inner.$method(ctx).forwarded::<Self>(|| Any::type_id(inner))
            }
        )*
    };
}

/// Calls one stage's method of a hook: what a planned hook holds for the stage whose list
/// it is in, so that calling it needs no `match` on the stage.
pub(crate) type StageMethod = for<'a> fn(&'a dyn Hook, &'a mut ToolInvokeContext) -> HookFuture<'a>;

macro_rules! dispatch_stage {
    ($($method:ident => $stage:ident,)*) => {
        /// The [`StageMethod`] of `stage`. `around_execute` has its own signature and is
        /// called through [`Next`]; its entry answers `Ok`.
        pub(crate) fn stage_method(stage: Stage) -> StageMethod {
            $(
                fn $method<'a>(hook: &'a dyn Hook, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                    hook.$method(ctx)
                }
            )*
            fn around_execute<'a>(_: &'a dyn Hook, _: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                HookFuture::ok()
            }
            match stage {
                $(Stage::$stage => $method,)*
                Stage::AroundExecute => around_execute,
            }
        }
    };
}

macro_rules! forward_hook {
    ($ty:ty) => {
        impl<H: Hook + ?Sized> Hook for $ty {
            fn stages(&self) -> StageSet {
                (**self).stages()
            }
            fn synchronous_stages(&self) -> StageSet {
                (**self).synchronous_stages()
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn priority(&self) -> i32 {
                (**self).priority()
            }
            fn interest(&self, tool: &ToolDefinition) -> Interest {
                (**self).interest(tool)
            }
            fn filter(&self, ctx: &ToolInvokeContext) -> bool {
                (**self).filter(ctx)
            }
            fn required_providers(&self) -> Vec<ProviderRequirement> {
                (**self).required_providers()
            }
            fn provided_providers(&self) -> Vec<ProviderRequirement> {
                (**self).provided_providers()
            }
            fn wants_stage_durations(&self) -> bool {
                (**self).wants_stage_durations()
            }
            fn around_execute<'a>(
                &'a self,
                ctx: &'a mut ToolInvokeContext,
                next: Next<'a>,
            ) -> HookFuture<'a> {
                let inner = &**self;
                inner
                    .around_execute(ctx, next)
                    .forwarded::<Self>(|| Any::type_id(inner))
            }
            toolgate_macros::__stage_methods!(forward_stage_methods);
        }
    };
}

forward_hook!(Box<H>);
forward_hook!(Arc<H>);

macro_rules! forward_option_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                match self {
                    Some(hook) => hook.$method(ctx).forwarded::<Self>(|| Any::type_id(hook)),
                    None => HookFuture::ok(),
                }
            }
        )*
    };
}

/// A hook that may be switched off: `None` takes part in no stage and costs nothing per
/// call, so a policy that configuration leaves out can still be registered in one line.
///
/// ```
/// use toolgate_core::{hook, Hook, HookResult, Pipeline, ToolInvokeContext};
///
/// struct Audit;
///
/// #[hook]
/// impl Hook for Audit {
///     fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
///         Ok(())
///     }
/// }
///
/// let audit_enabled = false;
/// let pipeline = Pipeline::builder().hook(audit_enabled.then_some(Audit)).build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
impl<H: Hook> Hook for Option<H> {
    fn stages(&self) -> StageSet {
        self.as_ref().map_or(StageSet::EMPTY, Hook::stages)
    }
    fn synchronous_stages(&self) -> StageSet {
        self.as_ref()
            .map_or(StageSet::EMPTY, Hook::synchronous_stages)
    }
    fn name(&self) -> &str {
        self.as_ref().map_or("switched-off hook", Hook::name)
    }
    fn priority(&self) -> i32 {
        self.as_ref().map_or(0, Hook::priority)
    }
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        self.as_ref()
            .map_or(Interest::never(), |hook| hook.interest(tool))
    }
    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        self.as_ref().is_some_and(|hook| hook.filter(ctx))
    }
    fn required_providers(&self) -> Vec<ProviderRequirement> {
        self.as_ref()
            .map_or_else(Vec::new, Hook::required_providers)
    }
    fn provided_providers(&self) -> Vec<ProviderRequirement> {
        self.as_ref()
            .map_or_else(Vec::new, Hook::provided_providers)
    }
    fn wants_stage_durations(&self) -> bool {
        self.as_ref().is_some_and(Hook::wants_stage_durations)
    }
    fn around_execute<'a>(
        &'a self,
        ctx: &'a mut ToolInvokeContext,
        next: Next<'a>,
    ) -> HookFuture<'a> {
        match self {
            Some(hook) => hook
                .around_execute(ctx, next)
                .forwarded::<Self>(|| Any::type_id(hook)),
            None => next.run(ctx),
        }
    }
    toolgate_macros::__stage_methods!(forward_option_stage_methods);
}

toolgate_macros::__stage_methods!(dispatch_stage);
