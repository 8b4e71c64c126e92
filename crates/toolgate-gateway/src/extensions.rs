//! [`Extensions`]: your own hooks in the `toolgate` binary.
//!
//! The gateway's policies come from its configuration file. A hook the file cannot
//! describe — a check against your own directory, a rule only your code knows — is added
//! in a `main.rs` of your own that runs the same command line with extensions:
//!
//! ```no_run
//! use toolgate_core::{hook, Hook, HookResult, ToolInvokeContext};
//! use toolgate_gateway::Extensions;
//!
//! struct NoWeekendDeploys;
//!
//! #[hook]
//! impl Hook for NoWeekendDeploys {
//!     fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
//!         if ctx.tool_name() == "deploy" && ctx.user().has_role("intern") {
//!             return ctx.abort("interns may not deploy", "forbidden", 403);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     toolgate_gateway::cli::main_with(Extensions::new().hook(NoWeekendDeploys))
//! }
//! ```
//!
//! Every subcommand of that binary (`serve`, `mcp`, `check`, `tools`) builds its pipeline
//! with the extra hooks, `check` lists them in its plans, and a reload on SIGHUP keeps
//! them. They are registered after the configured policies: their
//! [`priority`](toolgate_core::Hook::priority) places them among those.

use std::fmt;

use toolgate_core::PipelineBuilder;
use toolgate_core::hook::{HookRegistration, IntoHook};

/// Hooks added to every pipeline a gateway builds, beside the configured policies.
#[derive(Clone, Default)]
pub struct Extensions {
    hooks: Vec<HookRegistration>,
}

impl Extensions {
    /// No extensions: the binary as shipped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hook, as [`PipelineBuilder::hook`] does: any hook, for every tool with
    /// default options, or a [`HookRegistration`] that names a tool (one the configuration
    /// does not define fails the build with an error naming it), a failure mode or a
    /// priority.
    #[must_use]
    pub fn hook(mut self, hook: impl IntoHook) -> Self {
        self.hooks.push(hook.into_registration());
        self
    }

    /// Whether there is no extension.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Registers the hooks on `builder` (the same instances on every build, so a reload
    /// keeps their state).
    pub(crate) fn install(&self, builder: PipelineBuilder) -> PipelineBuilder {
        builder.hooks(self.hooks.iter().cloned())
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.hooks.iter().map(|r| r.hook().name()))
            .finish()
    }
}
