//! The policies of the configuration, installed as hooks.

use std::sync::Arc;
use std::time::Duration;

use toolgate_core::PipelineBuilder;
use toolgate_hooks::audit::JsonLinesSink;
use toolgate_hooks::authorize::{Effect, Rule, Rules};
use toolgate_hooks::output_limit::Overflow;
use toolgate_hooks::redaction::{Detector, RedactionMode};
use toolgate_hooks::timeout::TimeoutScope;
use toolgate_hooks::{
    Audit, Authorize, Concurrency, Consent, Metrics, OnBackendError, OutputLimit, Partition, Quota,
    Redaction, ResultCache, Retry, Timeout,
};

use super::GatewayError;
use crate::config::{
    AuditConfig, Config, ConfigError, EffectName, OnBackendErrorName, OverflowName, PartitionName,
    RedactionModeName,
};
use crate::state::SharedState;

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
pub(super) struct Installed {
    pub(super) authorize: Option<Arc<Authorize>>,
    pub(super) audit: Option<Arc<Audit>>,
}

pub(super) fn install_policies(
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

    let mut redactor = None;
    if let Some(r) = &p.redaction {
        let hook = redaction(r)?;
        redactor = Some(hook.redactor().clone());
        builder.hook(hook);
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
    if let Some(audit_config) = &config.audit {
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
                ..
            } => {
                let every = flush_every.unwrap_or(Duration::from_secs(1));
                let sink = if every.is_zero() {
                    JsonLinesSink::open(&path.0)
                } else {
                    JsonLinesSink::open_buffered(&path.0, every)
                }
                .map_err(|e| GatewayError::Io(format!("audit.path: {e}")))?;
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
        if let Some(redactor) = &redactor {
            hook = hook.redact_with(redactor);
        }
        if let Some(sink) = sink {
            hook = hook.sink(sink);
        }
        let hook = hook.build();
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
