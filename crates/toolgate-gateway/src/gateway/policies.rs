//! The policies of the configuration, installed as hooks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::hook::HookRegistration;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{Hook, PipelineBuilder};
use toolgate_hooks::audit::{ChainOptions, CheckpointKey, JsonLinesSink, Rotation};
use toolgate_hooks::authorize::{Effect, Rule, Rules};
use toolgate_hooks::output_limit::Overflow;
use toolgate_hooks::redaction::{Detector, RedactionMode, Redactor};
use toolgate_hooks::timeout::TimeoutScope;
use toolgate_hooks::{
    Audit, Authorize, Concurrency, Consent, Metrics, OnBackendError, OutputLimit, Partition, Quota,
    Redaction, ResultCache, Retry, Timeout,
};

use super::GatewayError;
use crate::config::{
    ApprovalPolicy, AuditConfig, AuthorizationPolicy, CachePolicy, Config, ConfigError, EffectName,
    OnBackendErrorName, OutputLimitPolicy, OverflowName, PartitionName, Policies,
    RedactionModeName, RetryPolicy, TimeoutPolicy,
};
use crate::identity::scopes::ToolScopes;
use crate::identity::waiting::CallerTokenCannotWait;
use crate::state::SharedState;

impl From<PartitionName> for Partition {
    fn from(name: PartitionName) -> Self {
        match name {
            PartitionName::Global => Partition::Global,
            PartitionName::User => Partition::User,
            PartitionName::Tool => Partition::Tool,
            PartitionName::UserTool => Partition::UserTool,
        }
    }
}

impl From<OnBackendErrorName> for OnBackendError {
    fn from(name: OnBackendErrorName) -> Self {
        match name {
            OnBackendErrorName::FailOpen => OnBackendError::FailOpen,
            // A local fallback decides in the backend; if even that fails, refuse.
            OnBackendErrorName::FailClosed | OnBackendErrorName::LocalFallback => {
                OnBackendError::FailClosed
            }
        }
    }
}

impl From<EffectName> for Effect {
    fn from(name: EffectName) -> Self {
        match name {
            EffectName::Allow => Effect::Allow,
            EffectName::Deny => Effect::Deny,
        }
    }
}

impl From<OverflowName> for Overflow {
    fn from(name: OverflowName) -> Self {
        match name {
            OverflowName::Truncate => Overflow::Truncate,
            OverflowName::Fail => Overflow::Fail,
        }
    }
}

/// The hooks the gateway talks to after building: authorization and tool scopes for
/// listings, audit to flush at shutdown.
pub(super) struct Installed {
    pub(super) authorize: Option<Arc<Authorize>>,
    pub(super) tool_scopes: Option<Arc<ToolScopes>>,
    pub(super) audit: Option<Arc<Audit>>,
}

/// Adds the configured policies to `builder` and gives it back with the hooks the gateway
/// keeps. Each policy section makes its hooks, or none when it is not configured; they are
/// registered in the order below — stage order, which is also their order at equal priority.
///
/// The calls of the tools of `refused_waiting` (tool → upstream) are refused before
/// consent would make them wait ([`refused_waiting`]).
pub(super) fn install_policies(
    config: &Config,
    shared: &SharedState,
    builder: PipelineBuilder,
    refused_waiting: &BTreeMap<String, String>,
) -> Result<(PipelineBuilder, Installed), GatewayError> {
    let p = &config.policies;
    let authorize = p.authorization.as_ref().map(authorization).map(Arc::new);
    let tool_scopes = config
        .identity
        .oauth
        .as_ref()
        .filter(|o| !o.required_scopes.tools.is_empty())
        .map(|o| Arc::new(ToolScopes::new(o.required_scopes.tools.clone())));
    let redaction = p.redaction.as_ref().map(redaction).transpose()?;
    let audit = config
        .audit
        .as_ref()
        .map(|a| audit(config, a, redaction.as_ref().map(Redaction::redactor)))
        .transpose()?
        .map(Arc::new);
    let sections: [Vec<HookRegistration>; 13] = [
        one(Some(Metrics::new())),
        shared_one(&authorize),
        shared_one(&tool_scopes),
        CallerTokenCannotWait::registrations(refused_waiting),
        one(p.approval.as_ref().map(|a| approval(a, shared))),
        rate_limits(p, shared)?,
        concurrency(p, shared)?,
        one(redaction),
        one(p.cache.as_ref().map(|c| cache(c, shared))),
        one(p.timeouts.as_ref().map(timeouts)),
        one(p.retry.as_ref().map(retry).transpose()?),
        one(p.output_limit.as_ref().map(output_limit)),
        shared_one(&audit),
    ];
    let builder = builder.hooks(sections.into_iter().flatten());
    Ok((
        builder,
        Installed {
            authorize,
            tool_scopes,
            audit,
        },
    ))
}

/// The registration of `hook`, if there is one.
fn one<H: Hook>(hook: Option<H>) -> Vec<HookRegistration> {
    hook.into_iter().map(HookRegistration::new).collect()
}

/// The registration of a hook the gateway keeps a handle on, if there is one.
fn shared_one<H: Hook>(hook: &Option<Arc<H>>) -> Vec<HookRegistration> {
    hook.iter()
        .map(|hook| HookRegistration::shared(hook.clone()))
        .collect()
}

/// `hook` for every tool, or once shared by the listed tools (so that they share its
/// budgets).
fn for_tools(hook: Arc<dyn Hook>, tools: &[String]) -> Vec<HookRegistration> {
    if tools.is_empty() {
        return vec![HookRegistration::shared(hook)];
    }
    tools
        .iter()
        .map(|tool| HookRegistration::shared(hook.clone()).for_tool(tool.clone()))
        .collect()
}

fn authorization(a: &AuthorizationPolicy) -> Authorize {
    let rules = a
        .rules
        .iter()
        .fold(Rules::new(a.default.into()), |rules, entry| {
            let mut rule = match entry.effect {
                EffectName::Allow => Rule::allow(),
                EffectName::Deny => Rule::deny(),
            };
            rule = entry.users.iter().fold(rule, |r, u| r.user(u.clone()));
            rule = entry
                .roles
                .iter()
                .fold(rule, |r, role| r.role(role.clone()));
            rule = entry.tools.iter().fold(rule, |r, t| r.tool(t.clone()));
            rule = entry.tags.iter().fold(rule, |r, t| r.tag(t.clone()));
            rules.rule(rule)
        });
    Authorize::new(rules)
}

/// The tools of `needs_caller_token` (tool → upstream) that approval makes wait, whose
/// calls a `caller_token_cannot_wait` hook refuses instead ([`CallerTokenCannotWait`]).
pub(super) fn refused_waiting(
    config: &Config,
    shared: &SharedState,
    registry: &ToolRegistry,
    needs_caller_token: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    match &config.policies.approval {
        Some(a) if !needs_caller_token.is_empty() => {
            CallerTokenCannotWait::refused(needs_caller_token, registry, &approval(a, shared))
        }
        _ => BTreeMap::new(),
    }
}

fn approval(a: &ApprovalPolicy, shared: &SharedState) -> Consent {
    let consent = Consent::builder()
        .destructive_tools(a.destructive_tools)
        .store(shared.approvals.clone());
    let consent = a.tools.iter().fold(consent, |c, t| c.tool(t.clone()));
    a.tags.iter().fold(consent, |c, t| c.tag(t.clone())).build()
}

fn rate_limits(p: &Policies, shared: &SharedState) -> Result<Vec<HookRegistration>, ConfigError> {
    let mut hooks = Vec::new();
    for (i, r) in p.rate_limits.iter().enumerate() {
        let rate = r.rate.to_rate(r.burst).map_err(|e| {
            ConfigError::invalid(format!("policies.rate_limits[{i}].rate"), e.to_string())
        })?;
        let quota = Quota::builder(rate)
            .name(r.name.clone())
            .partition(r.partition.into())
            .backend(
                shared
                    .backends
                    .quota(r.on_backend_error, rate, r.redis_deadline),
            )
            .on_backend_error(r.on_backend_error.into())
            .build();
        hooks.extend(for_tools(Arc::new(quota), &r.tools));
    }
    Ok(hooks)
}

fn concurrency(p: &Policies, shared: &SharedState) -> Result<Vec<HookRegistration>, ConfigError> {
    let mut hooks = Vec::new();
    for (i, c) in p.concurrency.iter().enumerate() {
        let cap = Concurrency::builder(c.limit)
            .map_err(|e| {
                ConfigError::invalid(format!("policies.concurrency[{i}].limit"), e.to_string())
            })?
            .name(c.name.clone())
            .partition(c.partition.into())
            .wait(c.wait.unwrap_or_default())
            .backend(
                shared
                    .backends
                    .concurrency(c.on_backend_error, c.limit, c.redis_deadline),
            )
            .on_backend_error(c.on_backend_error.into())
            .build();
        hooks.extend(for_tools(Arc::new(cap), &c.tools));
    }
    Ok(hooks)
}

fn cache(c: &CachePolicy, shared: &SharedState) -> ResultCache {
    // Imported tools read these per-call providers while they run, to route an upstream's
    // messages back to their caller and to get the caller's upstream credential; their
    // results do not depend on them beyond the user, whom the key holds already.
    let cache = ResultCache::builder()
        .shared_backend(shared.backends.cache(c.redis_deadline))
        .ttl(c.ttl.unwrap_or(Duration::from_secs(60)))
        .independent_of::<toolgate_mcp::CallerKey>()
        .independent_of::<toolgate_mcp::CallerAccessToken>();
    let cache = c
        .tools
        .iter()
        .fold(cache, |b, (tool, ttl)| b.tool_ttl(tool.clone(), *ttl));
    let cache = c
        .exclude
        .iter()
        .fold(cache, |b, tool| b.exclude(tool.clone()));
    c.public
        .iter()
        .fold(cache, |b, tool| b.public(tool.clone()))
        .build()
}

fn timeouts(t: &TimeoutPolicy) -> Timeout {
    let scope = if t.per_attempt {
        TimeoutScope::Attempt
    } else {
        TimeoutScope::Call
    };
    let timeout = match (t.default, scope) {
        (Some(limit), TimeoutScope::Call) => Timeout::per_call(limit),
        (Some(limit), TimeoutScope::Attempt) => Timeout::per_attempt(limit),
        (None, scope) => Timeout::only_listed(scope),
    };
    t.tools
        .iter()
        .fold(timeout, |b, (tool, limit)| b.tool(tool.clone(), *limit))
}

fn retry(r: &RetryPolicy) -> Result<Retry, ConfigError> {
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
    let retry = r
        .idempotent_tools
        .iter()
        .fold(retry, |b, tool| b.idempotent_tool(tool.clone()));
    retry
        .build()
        .map_err(|e| ConfigError::invalid("policies.retry", e.to_string()))
}

fn output_limit(o: &OutputLimitPolicy) -> OutputLimit {
    let limit = OutputLimit::builder()
        .max_bytes(o.max_bytes.0)
        .on_overflow(o.on_overflow.into());
    o.tools
        .iter()
        .fold(limit, |b, (tool, size)| {
            b.tool_max_bytes(tool.clone(), size.0)
        })
        .build()
}

fn audit(
    config: &Config,
    audit_config: &AuditConfig,
    redactor: Option<&Redactor>,
) -> Result<Audit, GatewayError> {
    let (sink, include_values, stage_timings) = match audit_config {
        AuditConfig::Log {
            include_values,
            stage_timings,
            ..
        } => (None, include_values, stage_timings),
        AuditConfig::File {
            path,
            include_values,
            flush_every,
            stage_timings,
            signing_key,
            checkpoint_every,
            checkpoint_after,
            rotate_bytes,
            rotate_after,
            ..
        } => {
            let every = flush_every.unwrap_or(Duration::from_secs(1));
            let mut chain = ChainOptions::default();
            if let Some(key) = signing_key {
                // Checked when the file was loaded.
                let key = CheckpointKey::from_base64(&key.0)
                    .map_err(|e| GatewayError::Io(format!("audit.signing_key: {e}")))?;
                chain = chain.signing_key(key);
            }
            if let Some(records) = checkpoint_every {
                chain = chain.checkpoint_every(*records);
            }
            if let Some(after) = checkpoint_after {
                chain = chain.checkpoint_after(*after);
            }
            let sink = if every.is_zero() {
                JsonLinesSink::open(&path.0)
            } else {
                JsonLinesSink::open_buffered(&path.0, every)
            }
            .map_err(|e| GatewayError::Io(format!("audit.path: {e}")))?
            .chained(chain);
            let mut rotation = Rotation::new();
            if let Some(size) = rotate_bytes {
                rotation = rotation.max_bytes(size.0 as u64);
            }
            if let Some(age) = rotate_after {
                rotation = rotation.max_age(*age);
            }
            let sink = if rotation == Rotation::new() {
                sink
            } else {
                sink.rotated(rotation)
            };
            (Some(sink), include_values, stage_timings)
        }
    };
    let mut hook = Audit::builder()
        .include_values(*include_values)
        .stage_timings(*stage_timings)
        .scrub(crate::secrets::scrubber(config))
        .hash_key(match audit_config.hash_key() {
            Some(key) => key.0.as_bytes(),
            None => crate::secrets::process_audit_key().as_slice(),
        });
    if let Some(redactor) = redactor {
        hook = hook.redact_with(redactor);
    }
    if let Some(sink) = sink {
        hook = hook.sink(sink);
    }
    Ok(hook.build())
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
