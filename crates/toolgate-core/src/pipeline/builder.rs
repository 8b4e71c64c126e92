//! [`PipelineBuilder`]: tools, hooks and global providers, checked and compiled into a
//! [`Pipeline`].

use std::any::TypeId;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use typemap_rev::TypeMapKey;

use super::{Pipeline, Shared, SpanValues, ToolEntry};
use crate::context::ToolScope;
use crate::error::{BuildError, RegistryError};
use crate::hook::{HookRegistration, IntoHook};
use crate::limits::InputLimits;
use crate::plan::{Registration, ToolPlan};
use crate::provider::{
    PerCall, ProviderRequirement, Providers, Scopes, SessionConfig, SessionStore,
};
use crate::registry::ToolRegistry;
use crate::suspension::{InMemorySuspensionStore, SuspensionStore};
use crate::tool::IntoTool;

/// How soon an approved call must start to run, unless the builder says otherwise.
const DEFAULT_RUN_WITHIN: Duration = Duration::from_secs(15 * 60);

/// Builds a [`Pipeline`]. Every method takes the builder and gives it back, so a pipeline
/// is one expression; whatever is wrong (a tool name taken twice, a hook for a tool that is
/// not there, a provider nobody binds) surfaces at [`build`](Self::build).
///
/// ```
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::hook::{FailureMode, HookRegistration};
/// use toolgate_core::prelude::*;
/// # struct Audit;
/// # #[hook] impl Hook for Audit {}
///
/// struct Region;
/// impl TypeMapKey for Region { type Value = String; }
///
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .provide::<Region>("eu-west".to_owned())
///     .hook(HookRegistration::new(Audit).failure(FailureMode::Ignore))
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct PipelineBuilder {
    registry: ToolRegistry,
    /// The first registration error, reported by `build`.
    registry_error: Option<RegistryError>,
    registrations: Vec<Registration>,
    globals: Providers,
    global_keys: HashSet<TypeId>,
    per_call: Vec<PerCall>,
    sessions: SessionConfig,
    limits: InputLimits,
    suspensions: Option<Arc<dyn SuspensionStore>>,
    record_hook_timings: bool,
    record_stage_durations: bool,
    tail_hook_timeout: Duration,
    span_values: SpanValues,
    stage_spans: bool,
    generation: Arc<str>,
    approval_run_within: Duration,
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
            registry_error: None,
            registrations: Vec::new(),
            globals: Providers::new(),
            global_keys: HashSet::new(),
            per_call: Vec::new(),
            sessions: SessionConfig::default(),
            limits: InputLimits::default(),
            suspensions: None,
            record_hook_timings: false,
            record_stage_durations: false,
            tail_hook_timeout: Duration::from_secs(30),
            span_values: SpanValues::default(),
            stage_spans: true,
            generation: Arc::from(""),
            approval_run_within: DEFAULT_RUN_WITHIN,
        }
    }

    /// Takes the tools of `registry`, in its order, before the tools registered so far: a
    /// library that checks names with its own wording (a [`ToolRegistry::register`] error
    /// names the tool) hands its registry over here. A name in both fails
    /// [`build`](Self::build).
    pub fn registry(mut self, registry: ToolRegistry) -> Self {
        let earlier = std::mem::replace(&mut self.registry, registry);
        for tool in earlier.iter() {
            self = self.tool(Arc::clone(&tool.tool));
        }
        self
    }

    /// Registers every tool of `tools`, as [`tool`](Self::tool) does.
    pub fn tools<T: IntoTool>(self, tools: impl IntoIterator<Item = T>) -> Self {
        tools.into_iter().fold(self, Self::tool)
    }

    /// Registers a tool: a typed [`Tool`](crate::tool::Tool) (a
    /// [`tool_fn`](crate::tool::tool_fn) too), a [`JsonTool`](crate::tool::JsonTool), or an
    /// `Arc` of an [`ErasedTool`](crate::tool::ErasedTool). A name that is taken or invalid
    /// fails [`build`](Self::build). For typed calls, take a
    /// [`ToolRef::of`](crate::registry::ToolRef::of) the tool before registering it.
    pub fn tool(mut self, tool: impl IntoTool) -> Self {
        if let Err(error) = self.registry.register_erased(tool.into_tool())
            && self.registry_error.is_none()
        {
            self.registry_error = Some(error);
        }
        self
    }

    /// Registers a hook: any [`Hook`](crate::hook::Hook), for every tool with default
    /// options, or a [`HookRegistration`] that says which tool, which failure mode and
    /// which priority.
    pub fn hook(mut self, hook: impl IntoHook) -> Self {
        let HookRegistration {
            hook,
            options,
            tool,
        } = hook.into_registration();
        let order = self.registrations.len();
        self.registrations.push(Registration {
            hook,
            options,
            tool,
            order,
        });
        self
    }

    /// Registers every hook of `hooks`, in order, as [`hook`](Self::hook) does.
    pub fn hooks<H: IntoHook>(self, hooks: impl IntoIterator<Item = H>) -> Self {
        hooks.into_iter().fold(self, Self::hook)
    }

    /// Binds a global provider: built once, read-only at invoke time.
    pub fn provide<K: TypeMapKey>(self, value: K::Value) -> Self {
        self.provide_shared::<K>(Arc::new(value))
    }

    /// Binds an already shared global provider (one value for several pipelines, such as
    /// each configuration a reloading server builds).
    pub fn provide_shared<K: TypeMapKey>(mut self, value: Arc<K::Value>) -> Self {
        self.globals.insert_arc::<K>(value);
        self.global_keys.insert(TypeId::of::<K>());
        self
    }

    /// Declares that the host supplies provider `K` with every call, in the call's request
    /// scope ([`InvokeOptions::provide`](crate::InvokeOptions::provide)) or its session's
    /// ([`Pipeline::session`](crate::Pipeline::session)`(id).provide`).
    ///
    /// A hook that `#[requires(K)]` then passes the build check, and each call is checked
    /// instead: one that comes without `K` is refused before any hook runs, with
    /// [`ProviderError::NotSupplied`](crate::provider::ProviderError::NotSupplied) naming
    /// the key and the ways to supply it — so a host that forgets it on one path finds out
    /// from its first call on that path, not from a hook deep in the pipeline. (A resumed
    /// call is not checked: it is made by whoever decides, who may not have the caller's
    /// request values.)
    ///
    /// # Examples
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_core::external::TypeMapKey;
    /// use toolgate_core::prelude::*;
    ///
    /// /// The address the request came from, which only the host knows.
    /// struct RemoteAddr;
    /// impl TypeMapKey for RemoteAddr {
    ///     type Value = std::net::IpAddr;
    /// }
    ///
    /// struct LogAddr;
    /// #[hook]
    /// #[requires(RemoteAddr)]
    /// impl Hook for LogAddr {
    ///     fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
    ///         let _addr = ctx.get::<RemoteAddr>()?;
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pipeline = Pipeline::builder()
    ///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
    ///     .hook(LogAddr)
    ///     .per_call_provider::<RemoteAddr>()
    ///     .build()?;
    ///
    /// let addr = "10.0.0.7".parse()?;
    /// let options = InvokeOptions::new().provide::<RemoteAddr>(addr);
    /// assert_eq!(pipeline.invoke("ping", json!(null), options).await?, json!("pong"));
    ///
    /// let err = pipeline.invoke("ping", json!(null), InvokeOptions::new()).await.unwrap_err();
    /// assert_eq!(err.code(), "provider_not_supplied");
    /// assert!(err.to_string().contains("RemoteAddr"));
    /// # Ok(()) }
    /// ```
    pub fn per_call_provider<K: TypeMapKey>(mut self) -> Self {
        let per_call = PerCall::of::<K>();
        if !self
            .per_call
            .iter()
            .any(|p| p.requirement == per_call.requirement)
        {
            self.per_call.push(per_call);
        }
        self
    }

    /// Sets the session scope's bounds.
    pub fn sessions(mut self, config: SessionConfig) -> Self {
        self.sessions = config;
        self
    }

    /// Sets the input size and depth limits.
    pub fn input_limits(mut self, limits: InputLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets where suspended calls wait (in memory by default).
    pub fn suspension_store(mut self, store: Arc<dyn SuspensionStore>) -> Self {
        self.suspensions = Some(store);
        self
    }

    /// The configuration generation of this pipeline: any text that changes when what the
    /// pipeline enforces changes (a configuration file's digest, a deploy id); empty by
    /// default. An approval for a retry is bound to the generation its call waited under
    /// ([`approval`](crate::approval)): a call under another generation does not use it,
    /// and waits for its own approval. (A resumed call is not refused for a new generation:
    /// it is authorized again by the hooks as they are now.)
    ///
    /// # Examples
    ///
    /// ```
    /// use toolgate_core::Pipeline;
    ///
    /// let pipeline = Pipeline::builder().generation("config-7f3a").build().unwrap();
    /// assert_eq!(pipeline.generation(), "config-7f3a");
    /// ```
    pub fn generation(mut self, generation: impl Into<String>) -> Self {
        self.generation = Arc::from(generation.into());
        self
    }

    /// How soon an approved call must start to run after the decision; 15 minutes by
    /// default. A resumed call that has not reached execution by then (it queued for a
    /// concurrency permit, say) is refused with `approval_expired` (410) instead of running
    /// on a stale approval; an approval for a retry
    /// ([`Pipeline::approve_retry`](crate::Pipeline::approve_retry)) is void past it.
    pub fn approval_run_within(mut self, within: Duration) -> Self {
        self.approval_run_within = within;
        self
    }

    /// Records how long each hook takes at each stage, in
    /// [`ToolInvokeContext::hook_timings`](crate::ToolInvokeContext::hook_timings). Off by
    /// default: it reads the clock twice per hook call.
    pub fn record_hook_timings(mut self, on: bool) -> Self {
        self.record_hook_timings = on;
        self
    }

    /// Records how long each stage with hooks takes, in
    /// [`ToolInvokeContext::stage_durations`](crate::ToolInvokeContext::stage_durations),
    /// for every tool. Off by default: it reads the clock twice per stage with hooks. A
    /// hook that reads stage durations turns them on for the tools it serves by itself
    /// ([`Hook::wants_stage_durations`](crate::Hook::wants_stage_durations)).
    pub fn record_stage_durations(mut self, on: bool) -> Self {
        self.record_stage_durations = on;
        self
    }

    /// How long one hook may take at a tail stage (`on_error`, `will_audit`, `did_audit`,
    /// `on_metrics`, the release stages, `will_finalize_invoke`); 30 s by default. Those
    /// stages run on every path and outside the call's deadline, so a hook that never
    /// finishes there would hang the call: past this timeout it is abandoned (its future
    /// dropped, an error logged), the outcome is kept and the next hook runs. Needs tokio's
    /// timer for hooks that do not finish at once.
    pub fn tail_hook_timeout(mut self, timeout: Duration) -> Self {
        self.tail_hook_timeout = timeout;
        self
    }

    /// Which values of a call its `execute_tool` span records, for an OpenTelemetry
    /// exporter (see [`SpanValues`]); none by default. The spans themselves cost nothing
    /// unless a subscriber enables the target [`SPAN_TARGET`](crate::SPAN_TARGET).
    pub fn span_values(mut self, values: SpanValues) -> Self {
        self.span_values = values;
        self
    }

    /// Whether a traced invocation's stages that have hooks get spans of their own, as
    /// children of its `execute_tool` span (on by default). Each is a span an exporter
    /// builds, which costs microseconds when traces are exported; with this off a trace
    /// keeps one span per call. Without a subscriber for the target
    /// [`SPAN_TARGET`](crate::SPAN_TARGET), no span is made either way.
    ///
    /// # Examples
    ///
    /// ```
    /// use toolgate_core::Pipeline;
    ///
    /// // One `execute_tool` span per call, no stage spans under it.
    /// let pipeline = Pipeline::builder().stage_spans(false).build().unwrap();
    /// ```
    pub fn stage_spans(mut self, on: bool) -> Self {
        self.stage_spans = on;
        self
    }

    /// Checks the wiring and compiles the plans.
    ///
    /// # Errors
    ///
    /// [`BuildError::Registry`] when a tool's name was taken or invalid;
    /// [`BuildError::UnknownTool`] when hooks were attached to a tool that is not
    /// registered; [`BuildError::MissingProvider`] when a hook requires a provider that is
    /// not bound globally, not bound per call by a hook that says so, and not declared
    /// supplied by the host with every call ([`per_call_provider`](Self::per_call_provider)).
    pub fn build(mut self) -> Result<Pipeline, BuildError> {
        crate::context::warm_clock();
        if let Some(error) = self.registry_error.take() {
            return Err(error.into());
        }
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
            .chain(self.per_call.iter().map(|p| p.requirement.type_id()))
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

        let scopes = Arc::new(Scopes {
            globals: self.globals,
            sessions: SessionStore::new(self.sessions),
        });
        let shared = Arc::new(Shared {
            suspensions: self
                .suspensions
                .unwrap_or_else(|| Arc::new(InMemorySuspensionStore::default())),
            tail_hook_timeout: self.tail_hook_timeout,
            span_values: self.span_values,
            stage_spans: self.stage_spans,
            generation: self.generation,
            approval_run_within: self.approval_run_within,
        });
        let registry = self.registry;
        let entries = registry
            .iter()
            .map(|t| {
                Arc::new(ToolEntry {
                    wants_object: t.definition.wants_object_input(),
                    plan: ToolPlan::compile(
                        &t.definition,
                        &self.registrations,
                        self.record_stage_durations,
                        self.record_hook_timings,
                    ),
                    scope: Arc::new(ToolScope {
                        definition: t.definition.clone(),
                        scopes: Arc::clone(&scopes),
                        limits: self.limits,
                    }),
                    tool: Arc::clone(&t.tool),
                    shared: Arc::clone(&shared),
                    definition_digest: OnceLock::new(),
                })
            })
            .collect();
        Ok(Pipeline::from_parts(
            registry,
            entries,
            scopes,
            shared,
            self.limits,
            self.per_call.into_boxed_slice(),
        ))
    }
}
