//! A [`Gateway`]: one configuration compiled into a tool system with its hooks, API keys and
//! MCP endpoint. A reload builds a new one next to the old; calls in flight finish on the
//! one they started on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use toolgate_agent::{Concurrency as BatchConcurrency, ThreadConfig, ToolSystem};
use toolgate_core::{ErasedTool, Pipeline, PipelineBuilder, ToolDefinition, User};
use toolgate_hooks::audit::JsonLinesSink;
use toolgate_hooks::authorize::{Effect, Rule, Rules};
use toolgate_hooks::output_limit::Overflow;
use toolgate_hooks::redaction::{Detector, RedactionMode};
use toolgate_hooks::timeout::TimeoutScope;
use toolgate_hooks::{
    Audit, Authorize, Concurrency, Consent, Metrics, OnBackendError, OutputLimit, Partition, Quota,
    Redaction, ResultCache, Retry, Timeout,
};
use toolgate_mcp::{ListFilter, McpHttpService, McpServer, Upstream, UpstreamConfig};

use crate::auth::ApiKeys;
use crate::builtin;
use crate::config::{
    AuditConfig, Config, ConfigError, EffectName, OnBackendErrorName, OverflowName, PartitionName,
    RedactionModeName, UpstreamEntry,
};
use crate::labels::Labelled;
use crate::state::SharedState;
use crate::tools_state::AllTools;

/// The gateway could not be built from a configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An upstream MCP server could not be imported.
    #[error("upstream `{name}`: {source}; fix its entry under `upstreams` or start it first")]
    Upstream {
        /// The upstream's name.
        name: String,
        /// What went wrong.
        source: toolgate_mcp::McpError,
    },
    /// The state backend (Redis) could not be reached.
    #[error("state backend: {0}")]
    State(String),
    /// A file the configuration names could not be opened.
    #[error("{0}")]
    Io(String),
    /// The hooks do not fit together (a bug in the gateway if it happens).
    #[error("the pipeline could not be built: {0}")]
    Pipeline(String),
}

impl GatewayError {
    /// The same error, with configuration errors reported against `file`.
    #[must_use]
    pub fn in_file(self, file: &std::path::Path) -> Self {
        match self {
            GatewayError::Config(e) => GatewayError::Config(e.in_file(file)),
            other => other,
        }
    }
}

/// One configuration, compiled.
pub struct Gateway {
    /// The configuration it was built from.
    pub config: Arc<Config>,
    /// The tool system (pipeline, batches, suspensions).
    pub system: ToolSystem,
    /// The API keys.
    pub keys: ApiKeys,
    /// The MCP endpoint, when enabled.
    pub mcp: Option<McpHttpService>,
    authorize: Option<Arc<Authorize>>,
    audit: Option<Arc<Audit>>,
    approver_roles: Vec<String>,
    _upstreams: Vec<Upstream>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("tools", &self.system.pipeline().registry().len())
            .field("users", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Compiles `config`: starts its upstreams, registers its tools with their labels,
    /// checks every tool name a policy mentions, and installs the policies in stage order.
    ///
    /// # Errors
    ///
    /// [`GatewayError`] saying which part of the configuration could not be used.
    pub async fn build(config: Config, shared: &SharedState) -> Result<Gateway, GatewayError> {
        let config = Arc::new(config);
        let mut builder = Pipeline::builder();
        let (upstreams, names) = register_tools(&config, &mut builder).await?;
        check_tool_names(&config, &names)?;

        let Installed { authorize, audit } = install_policies(&config, shared, &mut builder)?;
        builder.suspension_store(shared.suspensions.clone());
        builder.tail_hook_timeout(Duration::from_secs(10));

        let state = Arc::new(AllTools::new(ThreadConfig::enabling(names.iter().cloned())));
        let mut system = ToolSystem::builder(builder, state)
            .concurrency(BatchConcurrency::Parallel(config.server.batch_concurrency))
            .timeout(config.server.request_timeout);
        if let Some(stats) = &shared.stats {
            system = system.stats(stats.clone());
        }
        let system = system
            .build()
            .map_err(|e| GatewayError::Pipeline(e.to_string()))?;

        let mcp = config.server.mcp.then(|| {
            let filter_by = authorize.clone();
            let mut server = McpServer::new(system.pipeline().clone())
                .server_info("toolgate", env!("CARGO_PKG_VERSION"))
                .call_timeout(config.server.request_timeout);
            if let Some(authorize) = filter_by {
                server = server.list_filter(ListFilter::new(move |tool, user| {
                    authorize.can_call(user, tool)
                }));
            }
            server.http_service(Default::default())
        });

        Ok(Gateway {
            keys: ApiKeys::new(&config.users),
            approver_roles: config
                .policies
                .approval
                .as_ref()
                .map(|a| a.approver_roles.clone())
                .unwrap_or_else(|| vec!["admin".to_owned()]),
            config,
            system,
            mcp,
            authorize,
            audit,
            _upstreams: upstreams,
        })
    }

    /// The pipeline calls run through.
    pub fn pipeline(&self) -> &Pipeline {
        self.system.pipeline()
    }

    /// The tools `user` may call (all of them without an authorization policy).
    pub fn visible_tools(&self, user: &User) -> Vec<ToolDefinition> {
        self.pipeline()
            .definitions()
            .filter(|tool| {
                self.authorize
                    .as_ref()
                    .is_none_or(|a| a.can_call(user, tool))
            })
            .cloned()
            .collect()
    }

    /// Writes out buffered audit records (at shutdown).
    pub async fn flush_audit(&self) {
        if let Some(audit) = &self.audit
            && let Err(e) = audit.flush().await
        {
            tracing::error!(error = %e, "audit records could not be written at shutdown");
        }
    }

    /// Whether `user` may resume suspended calls.
    pub fn may_approve(&self, user: &User) -> bool {
        self.approver_roles.iter().any(|role| user.has_role(role))
    }

    /// Which hooks run at which stage, in order, for every tool: what `toolgate check`
    /// prints.
    pub fn plans(&self) -> Vec<(String, StagePlan)> {
        self.pipeline()
            .definitions()
            .map(|d| {
                (
                    d.name.clone(),
                    self.pipeline().plan(&d.name).unwrap_or_default(),
                )
            })
            .collect()
    }
}

/// The hooks of one tool by stage, in the order they run.
pub type StagePlan = Vec<(toolgate_core::Stage, Vec<String>)>;

/// Registers the built-in and upstream tools; returns the upstreams (to keep them
/// connected) and every tool's name.
async fn register_tools(
    config: &Config,
    builder: &mut PipelineBuilder,
) -> Result<(Vec<Upstream>, BTreeSet<String>), GatewayError> {
    let mut names = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (i, which) in config.tools.builtin.iter().enumerate() {
        if !seen.insert(*which) {
            return Err(ConfigError::invalid(
                format!("tools.builtin[{i}]"),
                "this built-in tool is listed twice",
            )
            .into());
        }
        names.insert(add_tool(
            config,
            builder,
            builtin::tool(*which),
            &format!("tools.builtin[{i}]"),
        )?);
    }
    let mut upstreams = Vec::new();
    for (i, entry) in config.upstreams.iter().enumerate() {
        let upstream = Upstream::connect(upstream_config(entry, i)?)
            .await
            .map_err(|source| GatewayError::Upstream {
                name: entry.name.clone(),
                source,
            })?;
        for tool in upstream.tools() {
            names.insert(add_tool(
                config,
                builder,
                Arc::new(tool),
                &format!("upstreams[{i}]"),
            )?);
        }
        upstreams.push(upstream);
    }
    Ok((upstreams, names))
}

fn add_tool(
    config: &Config,
    builder: &mut PipelineBuilder,
    tool: Arc<dyn ErasedTool>,
    field: &str,
) -> Result<String, GatewayError> {
    let name = tool.definition().name;
    let tool = match config.tools.labels.get(&name) {
        Some(labels) => Arc::new(Labelled::new(tool, labels)) as Arc<dyn ErasedTool>,
        None => tool,
    };
    builder.erased_tool(tool).map_err(|e| {
        GatewayError::Config(ConfigError::invalid(
            field,
            format!("{e}: give the upstream a `prefix` so its tools get distinct names"),
        ))
    })?;
    Ok(name)
}

fn upstream_config(entry: &UpstreamEntry, index: usize) -> Result<UpstreamConfig, ConfigError> {
    let mut config = match (&entry.command, &entry.url) {
        (Some(command), None) => {
            UpstreamConfig::stdio(entry.name.clone(), command.clone(), entry.args.clone())
        }
        (None, Some(url)) => UpstreamConfig::http(entry.name.clone(), url.0.clone()),
        _ => {
            return Err(ConfigError::invalid(
                format!("upstreams[{index}]"),
                "set exactly one of `command` (a stdio MCP server) or `url` (a streamable HTTP MCP server)",
            ));
        }
    };
    for (key, value) in &entry.env {
        config = config.env(key.clone(), value.0.clone());
    }
    if let Some(var) = &entry.credential_env {
        config = config.credential_env(var.clone());
    }
    if let Some(prefix) = &entry.prefix {
        config = config.prefix(prefix.clone());
    }
    if let Some(timeout) = entry.call_timeout {
        config = config.call_timeout(timeout);
    }
    if let Some(timeout) = entry.connect_timeout {
        config = config.connect_timeout(timeout);
    }
    Ok(config)
}

/// Every tool name a policy mentions must exist: a typo would otherwise silently leave a
/// tool unprotected.
fn check_tool_names(config: &Config, names: &BTreeSet<String>) -> Result<(), ConfigError> {
    let p = &config.policies;
    let list = |field: String, tools: &[String]| -> Vec<(String, String)> {
        tools
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("{field}[{i}]"), t.clone()))
            .collect()
    };
    let mut all: Vec<(String, String)> = Vec::new();
    for name in config.tools.labels.keys() {
        all.push((format!("tools.labels.{name}"), name.clone()));
    }
    if let Some(a) = &p.authorization {
        for (i, rule) in a.rules.iter().enumerate() {
            all.extend(list(
                format!("policies.authorization.rules[{i}].tools"),
                &rule.tools,
            ));
        }
    }
    if let Some(a) = &p.approval {
        all.extend(list("policies.approval.tools".into(), &a.tools));
    }
    for (i, r) in p.rate_limits.iter().enumerate() {
        all.extend(list(format!("policies.rate_limits[{i}].tools"), &r.tools));
    }
    for (i, c) in p.concurrency.iter().enumerate() {
        all.extend(list(format!("policies.concurrency[{i}].tools"), &c.tools));
    }
    if let Some(t) = &p.timeouts {
        all.extend(
            t.tools
                .keys()
                .map(|k| (format!("policies.timeouts.tools.{k}"), k.clone())),
        );
    }
    if let Some(r) = &p.retry {
        all.extend(list(
            "policies.retry.idempotent_tools".into(),
            &r.idempotent_tools,
        ));
    }
    if let Some(c) = &p.cache {
        all.extend(
            c.tools
                .keys()
                .map(|k| (format!("policies.cache.tools.{k}"), k.clone())),
        );
        all.extend(list("policies.cache.exclude".into(), &c.exclude));
        all.extend(list("policies.cache.public".into(), &c.public));
    }
    if let Some(o) = &p.output_limit {
        all.extend(
            o.tools
                .keys()
                .map(|k| (format!("policies.output_limit.tools.{k}"), k.clone())),
        );
    }
    for (field, tool) in all {
        if !names.contains(&tool) {
            let known: Vec<&str> = names.iter().map(String::as_str).collect();
            return Err(ConfigError::invalid(
                field,
                format!(
                    "no tool is named `{tool}`; the tools are: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn partition(name: PartitionName) -> Partition {
    match name {
        PartitionName::Global => Partition::Global,
        PartitionName::User => Partition::User,
        PartitionName::Tool => Partition::Tool,
        PartitionName::UserTool => Partition::UserTool,
    }
}

fn on_backend_error(name: OnBackendErrorName) -> OnBackendError {
    match name {
        OnBackendErrorName::FailOpen => OnBackendError::FailOpen,
        // A local fallback decides in the backend; if even that fails, refuse.
        OnBackendErrorName::FailClosed | OnBackendErrorName::LocalFallback => {
            OnBackendError::FailClosed
        }
    }
}

/// Adds `hook` for every tool, or once shared by the listed tools (so that they share its
/// budgets).
fn add_for(builder: &mut PipelineBuilder, hook: Arc<dyn toolgate_core::Hook>, tools: &[String]) {
    if tools.is_empty() {
        builder.shared_hook(hook, Default::default(), None);
    } else {
        for tool in tools {
            builder.shared_hook(hook.clone(), Default::default(), Some(tool));
        }
    }
}

/// The hooks the gateway talks to after building: authorization for listings, audit to
/// flush at shutdown.
struct Installed {
    authorize: Option<Arc<Authorize>>,
    audit: Option<Arc<Audit>>,
}

fn install_policies(
    config: &Config,
    shared: &SharedState,
    builder: &mut PipelineBuilder,
) -> Result<Installed, GatewayError> {
    let p = &config.policies;
    builder.hook(Metrics::new());

    let authorize = p.authorization.as_ref().map(|a| {
        let effect = |e: EffectName| match e {
            EffectName::Allow => Effect::Allow,
            EffectName::Deny => Effect::Deny,
        };
        let mut rules = Rules::new(effect(a.default));
        for entry in &a.rules {
            let mut rule = match entry.effect {
                EffectName::Allow => Rule::allow(),
                EffectName::Deny => Rule::deny(),
            };
            for u in &entry.users {
                rule = rule.user(u.clone());
            }
            for r in &entry.roles {
                rule = rule.role(r.clone());
            }
            for t in &entry.tools {
                rule = rule.tool(t.clone());
            }
            for t in &entry.tags {
                rule = rule.tag(t.clone());
            }
            rules = rules.rule(rule);
        }
        Arc::new(Authorize::new(rules))
    });
    if let Some(authorize) = &authorize {
        builder.shared_hook(authorize.clone(), Default::default(), None);
    }

    if let Some(a) = &p.approval {
        let mut consent = Consent::builder()
            .destructive_tools(a.destructive_tools)
            .store(shared.approvals.clone());
        for t in &a.tools {
            consent = consent.tool(t.clone());
        }
        for t in &a.tags {
            consent = consent.tag(t.clone());
        }
        builder.hook(consent.build());
    }

    for (i, r) in p.rate_limits.iter().enumerate() {
        let rate = r.rate.to_rate(r.burst).map_err(|e| {
            ConfigError::invalid(format!("policies.rate_limits[{i}].rate"), e.to_string())
        })?;
        let quota = Quota::builder(rate)
            .name(r.name.clone())
            .partition(partition(r.partition))
            .backend(shared.backends.quota(r.on_backend_error, rate))
            .on_backend_error(on_backend_error(r.on_backend_error))
            .build();
        add_for(builder, Arc::new(quota), &r.tools);
    }

    for (i, c) in p.concurrency.iter().enumerate() {
        let cap = Concurrency::builder(c.limit)
            .map_err(|e| {
                ConfigError::invalid(format!("policies.concurrency[{i}].limit"), e.to_string())
            })?
            .name(c.name.clone())
            .partition(partition(c.partition))
            .wait(c.wait.unwrap_or_default())
            .backend(shared.backends.concurrency(c.on_backend_error, c.limit))
            .on_backend_error(on_backend_error(c.on_backend_error))
            .build();
        add_for(builder, Arc::new(cap), &c.tools);
    }

    if let Some(r) = &p.redaction {
        builder.hook(redaction(r)?);
    }

    if let Some(c) = &p.cache {
        let mut cache = ResultCache::builder()
            .shared_backend(shared.backends.cache())
            .ttl(c.ttl.unwrap_or(Duration::from_secs(60)));
        for (tool, ttl) in &c.tools {
            cache = cache.tool_ttl(tool.clone(), *ttl);
        }
        for tool in &c.exclude {
            cache = cache.exclude(tool.clone());
        }
        for tool in &c.public {
            cache = cache.public(tool.clone());
        }
        builder.hook(cache.build());
    }

    if let Some(t) = &p.timeouts {
        let scope = if t.per_attempt {
            TimeoutScope::Attempt
        } else {
            TimeoutScope::Call
        };
        let mut timeout = match (t.default, scope) {
            (Some(limit), TimeoutScope::Call) => Timeout::per_call(limit),
            (Some(limit), TimeoutScope::Attempt) => Timeout::per_attempt(limit),
            (None, scope) => Timeout::only_listed(scope),
        };
        for (tool, limit) in &t.tools {
            timeout = timeout.tool(tool.clone(), *limit);
        }
        builder.hook(timeout);
    }

    if let Some(r) = &p.retry {
        let mut retry = Retry::builder();
        if let Some(n) = r.max_attempts {
            retry = retry.max_attempts(n);
        }
        if let Some(d) = r.base_delay {
            retry = retry.base_delay(d);
        }
        if let Some(d) = r.max_delay {
            retry = retry.max_delay(d);
        }
        for tool in &r.idempotent_tools {
            retry = retry.idempotent_tool(tool.clone());
        }
        builder.hook(
            retry
                .build()
                .map_err(|e| ConfigError::invalid("policies.retry", e.to_string()))?,
        );
    }

    if let Some(o) = &p.output_limit {
        let mut limit =
            OutputLimit::builder()
                .max_bytes(o.max_bytes.0)
                .on_overflow(match o.on_overflow {
                    OverflowName::Truncate => Overflow::Truncate,
                    OverflowName::Fail => Overflow::Fail,
                });
        for (tool, size) in &o.tools {
            limit = limit.tool_max_bytes(tool.clone(), size.0);
        }
        builder.hook(limit.build());
    }

    let mut audit = None;
    if let Some(config) = &config.audit {
        let hook = match config {
            AuditConfig::Log { include_values } => {
                Audit::builder().include_values(*include_values).build()
            }
            AuditConfig::File {
                path,
                include_values,
                flush_every,
            } => {
                let every = flush_every.unwrap_or(Duration::from_secs(1));
                let sink = if every.is_zero() {
                    JsonLinesSink::open(&path.0)
                } else {
                    JsonLinesSink::open_buffered(&path.0, every)
                }
                .map_err(|e| GatewayError::Io(format!("audit.path: {e}")))?;
                Audit::builder()
                    .sink(sink)
                    .include_values(*include_values)
                    .build()
            }
        };
        let hook = Arc::new(hook);
        builder.shared_hook(hook.clone(), Default::default(), None);
        audit = Some(hook);
    }
    Ok(Installed { authorize, audit })
}

fn redaction(r: &crate::config::RedactionPolicy) -> Result<Redaction, ConfigError> {
    let mut detectors = Vec::new();
    match &r.detectors {
        None => detectors = Detector::builtins(),
        Some(names) => {
            let builtins = Detector::builtins();
            for (i, name) in names.iter().enumerate() {
                let found = builtins.iter().find(|d| d.name() == name).ok_or_else(|| {
                    let known: Vec<&str> = builtins.iter().map(Detector::name).collect();
                    ConfigError::invalid(
                        format!("policies.redaction.detectors[{i}]"),
                        format!(
                            "unknown detector `{name}`; the built-in ones are: {}",
                            known.join(", ")
                        ),
                    )
                })?;
                detectors.push(found.clone());
            }
        }
    }
    for (i, pattern) in r.patterns.iter().enumerate() {
        detectors.push(
            Detector::pattern(pattern.name.clone(), &pattern.regex).map_err(|e| {
                ConfigError::invalid(
                    format!("policies.redaction.patterns[{i}].regex"),
                    e.to_string(),
                )
            })?,
        );
    }
    let mode = match r.mode {
        RedactionModeName::Redact => RedactionMode::Redact,
        RedactionModeName::Mask => RedactionMode::Mask,
        RedactionModeName::Block => RedactionMode::Block,
        RedactionModeName::Hash => RedactionMode::Hash {
            salt: r.salt.as_ref().map(|s| s.0.clone()).unwrap_or_default(),
        },
    };
    Ok(Redaction::builder()
        .detectors(detectors)
        .mode(mode)
        .input(r.input)
        .output(r.output)
        .build())
}
