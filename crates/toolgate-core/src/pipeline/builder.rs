//! [`PipelineBuilder`]: tools, hooks and global providers, checked and compiled into a
//! [`Pipeline`].

use std::any::TypeId;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use typemap_rev::TypeMapKey;

use super::{Pipeline, Shared, ToolEntry};
use crate::plan::{Registration, ToolPlan};
use crate::provider::SessionStore;
use crate::{
    BuildError, ErasedTool, Hook, HookOptions, InMemorySuspensionStore, InputLimits,
    ProviderRequirement, Providers, RegistryError, SessionConfig, SuspensionStore, Tool, ToolRef,
    ToolRegistry,
};

/// Builds a [`Pipeline`]. Methods take `&mut self` and chain; [`build`](Self::build)
/// checks the wiring and compiles a plan per tool.
///
/// ```
/// use toolgate_core::{tool_fn, FailureMode, HookOptions, Pipeline, ToolError, TypeMapKey};
/// # use toolgate_core::Hook;
/// # struct Audit;
/// # #[toolgate_core::hook] impl Hook for Audit {}
///
/// struct Region;
/// impl TypeMapKey for Region { type Value = String; }
///
/// let mut builder = Pipeline::builder();
/// let ping = builder.tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))?;
/// let pipeline = builder
///     .provide::<Region>("eu-west".to_owned())
///     .hook_with(Audit, HookOptions::failure(FailureMode::Ignore))
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PipelineBuilder {
    registry: ToolRegistry,
    registrations: Vec<Registration>,
    globals: Providers,
    global_keys: HashSet<TypeId>,
    sessions: SessionConfig,
    limits: InputLimits,
    suspensions: Option<Arc<dyn SuspensionStore>>,
    record_hook_timings: bool,
    record_stage_durations: bool,
    tail_hook_timeout: Duration,
}

impl Default for PipelineBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PipelineBuilder {
    /// A builder with no tools and no hooks.
    pub fn new() -> Self {
        PipelineBuilder {
            registry: ToolRegistry::new(),
            registrations: Vec::new(),
            globals: Providers::new(),
            global_keys: HashSet::new(),
            sessions: SessionConfig::default(),
            limits: InputLimits::default(),
            suspensions: None,
            record_hook_timings: false,
            record_stage_durations: false,
            tail_hook_timeout: Duration::from_secs(30),
        }
    }

    /// Starts from an existing registry (replacing the tools registered so far).
    pub fn registry(&mut self, registry: ToolRegistry) -> &mut Self {
        self.registry = registry;
        self
    }

    /// Registers a typed tool and returns a typed handle for
    /// [`Pipeline::invoke_typed`].
    ///
    /// # Errors
    ///
    /// [`RegistryError`] when the name is taken or invalid.
    pub fn tool<T: Tool>(
        &mut self,
        tool: T,
    ) -> Result<ToolRef<T::Input, T::Output>, RegistryError> {
        self.registry.register(tool)
    }

    /// Registers a type-erased tool.
    ///
    /// # Errors
    ///
    /// [`RegistryError`] when the name is taken or invalid.
    pub fn erased_tool(&mut self, tool: Arc<dyn ErasedTool>) -> Result<&mut Self, RegistryError> {
        self.registry.register_erased(tool)?;
        Ok(self)
    }

    /// Adds a hook for every tool.
    pub fn hook(&mut self, hook: impl Hook) -> &mut Self {
        self.hook_with(hook, HookOptions::default())
    }

    /// Adds a hook for every tool, with options.
    pub fn hook_with(&mut self, hook: impl Hook, options: HookOptions) -> &mut Self {
        self.push(Arc::new(hook), options, None)
    }

    /// Adds a hook for one tool.
    pub fn tool_hook(&mut self, tool: &str, hook: impl Hook) -> &mut Self {
        self.tool_hook_with(tool, hook, HookOptions::default())
    }

    /// Adds a hook for one tool, with options.
    pub fn tool_hook_with(
        &mut self,
        tool: &str,
        hook: impl Hook,
        options: HookOptions,
    ) -> &mut Self {
        self.push(Arc::new(hook), options, Some(tool.to_owned()))
    }

    /// Adds an already shared hook instance (for every tool, or for one).
    pub fn shared_hook(
        &mut self,
        hook: Arc<dyn Hook>,
        options: HookOptions,
        tool: Option<&str>,
    ) -> &mut Self {
        self.push(hook, options, tool.map(str::to_owned))
    }

    fn push(
        &mut self,
        hook: Arc<dyn Hook>,
        options: HookOptions,
        tool: Option<String>,
    ) -> &mut Self {
        let order = self.registrations.len();
        self.registrations.push(Registration {
            hook,
            options,
            tool,
            order,
        });
        self
    }

    /// Binds a global provider: built once, read-only at invoke time.
    pub fn provide<K: TypeMapKey>(&mut self, value: K::Value) -> &mut Self {
        self.globals.insert::<K>(value);
        self.global_keys.insert(TypeId::of::<K>());
        self
    }

    /// Sets the session scope's bounds.
    pub fn sessions(&mut self, config: SessionConfig) -> &mut Self {
        self.sessions = config;
        self
    }

    /// Sets the input size and depth limits.
    pub fn input_limits(&mut self, limits: InputLimits) -> &mut Self {
        self.limits = limits;
        self
    }

    /// Sets where suspended calls wait (in memory by default).
    pub fn suspension_store(&mut self, store: Arc<dyn SuspensionStore>) -> &mut Self {
        self.suspensions = Some(store);
        self
    }

    /// Records how long each hook takes at each stage, in
    /// [`ToolInvokeContext::hook_timings`](crate::ToolInvokeContext::hook_timings). Off by
    /// default: it reads the clock twice per hook call.
    pub fn record_hook_timings(&mut self, on: bool) -> &mut Self {
        self.record_hook_timings = on;
        self
    }

    /// Records how long each stage with hooks takes, in
    /// [`ToolInvokeContext::stage_durations`](crate::ToolInvokeContext::stage_durations),
    /// for every tool. Off by default: it reads the clock twice per stage with hooks. A
    /// hook that reads stage durations turns them on for the tools it serves by itself
    /// ([`Hook::wants_stage_durations`](crate::Hook::wants_stage_durations)).
    pub fn record_stage_durations(&mut self, on: bool) -> &mut Self {
        self.record_stage_durations = on;
        self
    }

    /// How long one hook may take at a tail stage (`on_error`, `will_audit`, `did_audit`,
    /// `on_metrics`, the release stages, `will_finalize_invoke`); 30 s by default. Those
    /// stages run on every path and outside the call's deadline, so a hook that never
    /// finishes there would hang the call: past this timeout it is abandoned (its future
    /// dropped, an error logged), the outcome is kept and the next hook runs. Needs tokio's
    /// timer for hooks that do not finish at once.
    pub fn tail_hook_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.tail_hook_timeout = timeout;
        self
    }

    /// Checks the wiring and compiles the plans. The builder's tools, hooks and providers
    /// move into the pipeline; the builder is left empty.
    ///
    /// # Errors
    ///
    /// [`BuildError::UnknownTool`] when hooks were attached to a tool that is not
    /// registered; [`BuildError::MissingProvider`] when a hook requires a provider that is
    /// neither bound globally nor bound per call by a hook that says so.
    pub fn build(&mut self) -> Result<Pipeline, BuildError> {
        crate::context::warm_clock();
        for r in &self.registrations {
            if let Some(tool) = &r.tool
                && self.registry.get(tool).is_none()
            {
                return Err(BuildError::UnknownTool { tool: tool.clone() });
            }
        }
        let provided: HashSet<TypeId> = self
            .registrations
            .iter()
            .flat_map(|r| r.hook.provided_providers())
            .map(|p| p.type_id())
            .chain(self.global_keys.iter().copied())
            .collect();
        for r in &self.registrations {
            let missing = r
                .hook
                .required_providers()
                .into_iter()
                .find(|p: &ProviderRequirement| !provided.contains(&p.type_id()));
            if let Some(p) = missing {
                return Err(BuildError::MissingProvider {
                    hook: r.hook.name().to_owned(),
                    key: p.key(),
                });
            }
        }

        let shared = Arc::new(Shared {
            globals: std::mem::take(&mut self.globals),
            sessions: SessionStore::new(self.sessions),
            suspensions: self
                .suspensions
                .clone()
                .unwrap_or_else(|| Arc::new(InMemorySuspensionStore::default())),
            tail_hook_timeout: self.tail_hook_timeout,
        });
        self.global_keys.clear();
        let registry = std::mem::take(&mut self.registry);
        let entries = registry
            .iter()
            .map(|t| {
                Arc::new(ToolEntry {
                    wants_object: t.definition.wants_object_input(),
                    plan: ToolPlan::compile(
                        &t.definition.name,
                        &self.registrations,
                        self.record_stage_durations,
                        self.record_hook_timings,
                    ),
                    definition: t.definition.clone(),
                    tool: Arc::clone(&t.tool),
                    shared: Arc::clone(&shared),
                })
            })
            .collect();
        self.registrations.clear();
        Ok(Pipeline::from_parts(registry, entries, shared, self.limits))
    }
}
