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
//!
//! Providers for those hooks come with them, in each scope
//! (see docs/providers.md):
//!
//! * **global** — [`Extensions::provide`]: one value for every call, kept across reloads;
//! * **session** and **request** — the gateway builds each call's options itself, so a
//!   value per session or per call is made from what the call carries (its user, its
//!   session id, its tool) by a binder:
//!   `Extensions::hook(bind_provider::<K, _>(Scope::Session, |ctx| …))`
//!   ([`bind_provider`](toolgate_core::provider::bind_provider)), which also satisfies a
//!   hook's `#[requires(K)]`.

use std::fmt;
use std::sync::Arc;

use toolgate_core::PipelineBuilder;
use toolgate_core::external::TypeMapKey;
use toolgate_core::hook::{HookRegistration, IntoHook};

/// Binds one global provider on a builder (the same shared value on every build).
type Provide = Arc<dyn Fn(PipelineBuilder) -> PipelineBuilder + Send + Sync>;

/// Hooks added to every pipeline a gateway builds, beside the configured policies, and
/// the global providers they read.
#[derive(Clone, Default)]
pub struct Extensions {
    hooks: Vec<HookRegistration>,
    providers: Vec<Provide>,
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

    /// Binds a global provider in every pipeline, as [`PipelineBuilder::provide`] does:
    /// one value, read by every call, shared by the pipelines that reloads build (so it is
    /// built once, when your `main` runs). A hook that `#[requires(K)]` passes the build
    /// check.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::AtomicU64;
    /// use toolgate_core::external::TypeMapKey;
    /// use toolgate_gateway::Extensions;
    ///
    /// struct CallCount;
    /// impl TypeMapKey for CallCount {
    ///     type Value = AtomicU64;
    /// }
    ///
    /// let extensions = Extensions::new().provide::<CallCount>(AtomicU64::new(0));
    /// assert!(!extensions.is_empty());
    /// ```
    #[must_use]
    pub fn provide<K: TypeMapKey>(self, value: K::Value) -> Self {
        self.provide_shared::<K>(Arc::new(value))
    }

    /// Binds an already shared global provider in every pipeline, as
    /// [`PipelineBuilder::provide_shared`] does: your `main` keeps a handle on the value
    /// (to read a counter, or to change what a lock guards).
    #[must_use]
    pub fn provide_shared<K: TypeMapKey>(mut self, value: Arc<K::Value>) -> Self {
        self.providers
            .push(Arc::new(move |builder: PipelineBuilder| {
                builder.provide_shared::<K>(Arc::clone(&value))
            }));
        self
    }

    /// Whether there is no extension.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.providers.is_empty()
    }

    /// Registers the hooks and binds the providers on `builder` (the same instances on
    /// every build, so a reload keeps their state).
    pub(crate) fn install(&self, builder: PipelineBuilder) -> PipelineBuilder {
        let builder = self
            .providers
            .iter()
            .fold(builder, |builder, provide| provide(builder));
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
