//! How a hook is registered: [`HookRegistration`], its [`HookOptions`] and
//! [`FailureMode`], and [`IntoHook`], what [`PipelineBuilder::hook`](crate::PipelineBuilder::hook)
//! takes.

use std::sync::Arc;

use super::Hook;

/// What a hook's own failure means for the call. Chosen by the hook's owner when it is
/// registered ([`HookOptions`]), so a new policy can be tried in shadow first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailureMode {
    /// Every outcome of the hook applies: a failure fails the call. The default.
    #[default]
    FailCall,
    /// A failure of the hook (an error that is not a decision, or a panic in its code) is
    /// logged and the call goes on; its decisions (respond, abort, retry-after, suspend)
    /// still apply. (A panic in an `around_execute` wrapper fails the call in every mode.)
    Ignore,
    /// Audit (shadow) mode: every outcome is recorded in the decision trace and logged, and
    /// none is applied; a panic in the hook's code is recorded as an `internal` failure.
    Audit,
}

/// How a hook is registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookOptions {
    /// What the hook's failure means.
    pub failure: FailureMode,
    /// Overrides [`Hook::priority`].
    pub priority: Option<i32>,
}

impl HookOptions {
    /// Options with this failure mode.
    pub fn failure(failure: FailureMode) -> Self {
        HookOptions {
            failure,
            priority: None,
        }
    }

    /// The same options with a priority override.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// A hook as it is registered: the hook, its [options](HookOptions), and the tool it is
/// for (every tool unless [`for_tool`](Self::for_tool) names one). What
/// [`PipelineBuilder::hook`](crate::pipeline::PipelineBuilder::hook) takes; any hook converts
/// into one with default options.
///
/// ```
/// use std::sync::Arc;
/// use toolgate_core::hook::{FailureMode, HookRegistration};
/// use toolgate_core::prelude::*;
///
/// struct Audit;
/// #[hook]
/// impl Hook for Audit {
///     fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult { Ok(()) }
/// }
///
/// let shared: Arc<dyn Hook> = Arc::new(Audit);
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     // Every tool, default options.
///     .hook(Audit)
///     // One tool, in shadow mode, before the others.
///     .hook(HookRegistration::new(Audit).for_tool("ping").failure(FailureMode::Audit).priority(100))
///     // One instance shared with other pipelines.
///     .hook(HookRegistration::shared(shared))
///     .build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
#[derive(Clone)]
#[must_use = "a registration does nothing until it is passed to `PipelineBuilder::hook`"]
pub struct HookRegistration {
    pub(crate) hook: Arc<dyn Hook>,
    pub(crate) options: HookOptions,
    pub(crate) tool: Option<String>,
}

impl HookRegistration {
    /// Registers `hook` for every tool with default options. An `Arc<dyn Hook>` passed here
    /// is kept as it is, not wrapped once more.
    pub fn new<H: Hook>(hook: H) -> Self {
        let mut slot = Some(hook);
        let any: &mut dyn std::any::Any = &mut slot;
        let hook = match any.downcast_mut::<Option<Arc<dyn Hook>>>() {
            Some(shared) => shared.take(),
            None => None,
        };
        HookRegistration::shared(hook.unwrap_or_else(|| {
            Arc::new(slot.expect("the hook is still in its slot unless it was shared"))
        }))
    }

    /// Registers an instance shared with other pipelines or registrations.
    pub fn shared(hook: Arc<dyn Hook>) -> Self {
        HookRegistration {
            hook,
            options: HookOptions::default(),
            tool: None,
        }
    }

    /// Only for the tool named `tool` (which [`build`](crate::pipeline::PipelineBuilder::build)
    /// checks is registered).
    pub fn for_tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// What the hook's failure means for the call.
    pub fn failure(mut self, failure: FailureMode) -> Self {
        self.options.failure = failure;
        self
    }

    /// Overrides [`Hook::priority`].
    pub fn priority(mut self, priority: i32) -> Self {
        self.options.priority = Some(priority);
        self
    }

    /// Sets every option at once.
    pub fn options(mut self, options: HookOptions) -> Self {
        self.options = options;
        self
    }

    /// The hook registered.
    pub fn hook(&self) -> &Arc<dyn Hook> {
        &self.hook
    }

    /// Its options.
    pub fn registered_options(&self) -> HookOptions {
        self.options
    }

    /// The tool it is for, or `None` for every tool.
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }
}

/// Anything [`PipelineBuilder::hook`](crate::pipeline::PipelineBuilder::hook) takes: a
/// [`Hook`] (for every tool, default options) or a [`HookRegistration`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a toolgate hook",
    label = "this needs `impl Hook for {Self}`",
    note = "write the stage methods under `#[hook] impl Hook for {Self} {{ … }}`, or use `hook_fn` for a hook of one stage; `HookRegistration::new(hook)` adds options"
)]
pub trait IntoHook {
    /// The hook as it is registered.
    fn into_registration(self) -> HookRegistration;
}

impl<H: Hook> IntoHook for H {
    fn into_registration(self) -> HookRegistration {
        HookRegistration::new(self)
    }
}

impl IntoHook for HookRegistration {
    fn into_registration(self) -> HookRegistration {
        self
    }
}

impl std::fmt::Debug for HookRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRegistration")
            .field("hook", &self.hook.name())
            .field("options", &self.options)
            .field("tool", &self.tool)
            .finish()
    }
}
