//! The policies of the configuration, installed as hooks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::hook::HookRegistration;
use toolgate_core::provider::Scope;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{Hook, HookResult, PipelineBuilder, ToolInvokeContext, hook};
use toolgate_hooks::audit::{ChainOptions, CheckpointKey, JsonLinesSink, Rotation};
use toolgate_hooks::budget::{BudgetBuilder, Cost};
use toolgate_hooks::cache::ResultCacheBuilder;
use toolgate_hooks::concurrency::ConcurrencyBuilder;
use toolgate_hooks::consent::ConsentBuilder;
use toolgate_hooks::policy::{CallTransport, CedarPolicies};
use toolgate_hooks::quota::QuotaBuilder;
use toolgate_hooks::redaction::Redactor;
use toolgate_hooks::{
    Audit, Authorize, Consent, Metrics, OutputLimit, Redaction, ResultCache, Retry, Timeout,
};

use super::GatewayError;
use crate::config::{ApprovalPolicy, AuditConfig, CachePolicy, Config, ConfigError, Policies};
use crate::identity::scopes::ToolScopes;
use crate::identity::waiting::CallerTokenCannotWait;
use crate::outcomes::OUTCOME_TOOL;
use crate::state::SharedState;
use crate::telemetry::audit_logs::AuditLogs;

/// The hooks the gateway talks to after building: authorization and tool scopes for
/// listings, audit to flush at shutdown.
pub(super) struct Installed {
    pub(super) authorize: Option<Arc<Authorize>>,
    pub(super) tool_scopes: Option<Arc<ToolScopes>>,
    pub(super) audit: Option<Arc<Audit>>,
}

/// Adds the configured policies to `builder` and gives it back with the hooks the gateway
/// keeps. Each policy section makes its hooks (its module of [`crate::config`] converts it;
/// here the hooks get the backends of `shared`), or none when it is not configured; they are
/// registered in the order below — stage order, which is also their order at equal priority.
///
/// The calls of the tools of `refused_waiting` (tool → upstream) are refused before
/// consent would make them wait ([`refused_waiting`]).
pub(super) fn install_policies(
    config: &Config,
    shared: &SharedState,
    builder: PipelineBuilder,
    refused_waiting: &BTreeMap<String, String>,
    cedar: Option<&Arc<CedarPolicies>>,
) -> Result<(PipelineBuilder, Installed), GatewayError> {
    let p = &config.policies;
    let authorize = (p.authorization.as_ref()).map(|a| Arc::new(Authorize::from(a)));
    let tool_scopes = config
        .identity
        .oauth
        .as_ref()
        .filter(|o| !o.required_scopes.tools.is_empty())
        .map(|o| Arc::new(ToolScopes::new(o.required_scopes.tools.clone())));
    let redaction = (p.redaction.as_ref())
        .map(|r| Redaction::try_from(r).map_err(|e| e.within("policies.redaction")))
        .transpose()?;
    let audit = config
        .audit
        .as_ref()
        .map(|a| audit(config, a, redaction.as_ref().map(Redaction::redactor)))
        .transpose()?
        .map(Arc::new);
    let cedar = cedar.cloned();
    let sections: [Vec<HookRegistration>; 17] = [
        one(Some(Metrics::new())),
        shared_one(&Some(shared.counters.clone())),
        shared_one(&authorize),
        shared_one(&cedar),
        one(cedar.as_ref().map(|_| CallTransportOf)),
        shared_one(&tool_scopes),
        CallerTokenCannotWait::registrations(refused_waiting),
        one(p.approval.as_ref().map(|a| approval(a, shared))),
        rate_limits(p, shared)?,
        budgets(p, shared)?,
        concurrency(p, shared),
        one(redaction),
        one(p.cache.as_ref().map(|c| cache(c, shared))),
        one(p.timeouts.as_ref().map(Timeout::from)),
        one(p.retry.as_ref().map(retry).transpose()?),
        one(p.output_limit.as_ref().map(OutputLimit::from)),
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

/// Tells Cedar policies how a call came in (`context.transport`): `mcp` for a call made
/// through the MCP endpoint, `http` for one made through `/v1` (a single call, a batch).
///
/// A call that waits for approval is resumed through `/v1` by an approver, yet it is still
/// the call its caller made: its transport is kept with it, in its metadata under
/// [`KEPT_TRANSPORT`] (saved with the waiting call, restored on resume), and a resumed call
/// is decided again with the transport it was made with. The key is dropped again at
/// `will_audit`, before any result, audit record or metric reads the metadata: callers and
/// approvers never see it. A call that waited under an earlier version, which kept no
/// transport, resumes as `http`.
struct CallTransportOf;

/// The metadata key under which a call keeps its transport while it waits.
const KEPT_TRANSPORT: &str = "toolgate.call_transport";

#[hook]
impl Hook for CallTransportOf {
    fn name(&self) -> &str {
        "call_transport"
    }

    fn will_bind_providers(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let kept = ctx
            .resumed()
            .and_then(|_| ctx.metadata().get(KEPT_TRANSPORT))
            .and_then(|t| t.as_str())
            .map(str::to_owned);
        let transport = match (kept, ctx.try_get::<CallTransport>()) {
            (Some(kept), _) => kept,
            (None, Some(bound)) => bound.as_str().to_owned(),
            (None, None) => {
                let mcp = ctx.try_get::<toolgate_mcp::CallerKey>().is_some();
                (if mcp { "mcp" } else { "http" }).to_owned()
            }
        };
        (ctx.metadata_mut()).insert(KEPT_TRANSPORT.to_owned(), transport.clone().into());
        // Binding in the request scope cannot fail.
        let _ = ctx.provide::<CallTransport>(transport, Scope::Request);
        Ok(())
    }

    /// The first stage of the tail, after the waiting call was saved with the key and
    /// before anything shows the metadata.
    fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.metadata_mut().remove(KEPT_TRANSPORT);
        Ok(())
    }
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
    ConsentBuilder::from(a)
        .store(shared.approvals.clone())
        .build()
}

fn rate_limits(p: &Policies, shared: &SharedState) -> Result<Vec<HookRegistration>, ConfigError> {
    let mut hooks = Vec::new();
    for (i, r) in p.rate_limits.iter().enumerate() {
        let quota = QuotaBuilder::try_from(r)
            .map_err(|e| e.within(&format!("policies.rate_limits[{i}]")))?;
        let backend = (shared.backends).quota(r.on_backend_error, quota.rate(), r.redis_deadline);
        hooks.extend(for_tools(
            Arc::new(quota.backend(backend).build()),
            &r.tools,
        ));
    }
    Ok(hooks)
}

/// A budget hook for every budget of `p`, each on every tool — but the outcome tool
/// ([`OUTCOME_TOOL`]), which costs nothing in every budget: it reads the state of a call
/// that waits (MCP `tasks/get` and asking again with `requestState` read through it) and
/// spends nothing, and a caller polling a waiting call must not use up their budget — or
/// their tenant's — and then be refused the reading of their own call.
fn budgets(p: &Policies, shared: &SharedState) -> Result<Vec<HookRegistration>, ConfigError> {
    (p.budgets.iter().enumerate())
        .map(|(i, b)| {
            let budget = BudgetBuilder::try_from(b)
                .map_err(|e| e.within(&format!("policies.budgets[{i}]")))?
                .tool_cost(OUTCOME_TOOL, Cost::Fixed(0))
                .backend(shared.backends.budget(b.redis_deadline))
                .build();
            Ok(HookRegistration::shared(Arc::new(budget)))
        })
        .collect()
}

fn concurrency(p: &Policies, shared: &SharedState) -> Vec<HookRegistration> {
    let mut hooks = Vec::new();
    for c in &p.concurrency {
        let backend =
            (shared.backends).concurrency(c.on_backend_error, c.limit.get(), c.redis_deadline);
        let cap = ConcurrencyBuilder::from(c).backend(backend).build();
        hooks.extend(for_tools(Arc::new(cap), &c.tools));
    }
    hooks
}

fn cache(c: &CachePolicy, shared: &SharedState) -> ResultCache {
    // Imported tools read these per-call providers while they run, to route an upstream's
    // messages back to their caller and to get the caller's upstream credential; their
    // results do not depend on them beyond the user, whom the key holds already.
    ResultCacheBuilder::from(c)
        .shared_backend(shared.backends.cache(c.redis_deadline))
        .independent_of::<toolgate_mcp::CallerKey>()
        .independent_of::<toolgate_mcp::CallerAccessToken>()
        .build()
}

fn retry(r: &crate::config::RetryPolicy) -> Result<Retry, ConfigError> {
    Retry::try_from(r).map_err(|e| e.within("policies.retry"))
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
            // A directory, a socket or a pipe nothing reads is refused before the sink
            // opens (and waits on) it; the pipe's writing end opened to see it is read is
            // held until the sink has its own, so that its reader never sees it end.
            let pipe = crate::config::paths::audit_path(&path.0)?;
            let sink = if every.is_zero() {
                JsonLinesSink::open(&path.0)
            } else {
                JsonLinesSink::open_buffered(&path.0, every)
            };
            drop(pipe);
            crate::config::paths::release_audit_pipe(&path.0);
            let sink = sink
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
            // `telemetry.logs.audit`: every line also goes to the OTLP log exporter that
            // the process started with its telemetry (none in `toolgate check`).
            let exported = (config.telemetry.as_ref())
                .and_then(|t| t.logs.as_ref())
                .is_some_and(|l| l.audit);
            let sink = if exported && AuditLogs::running() {
                sink.tapped(AuditLogs::export)
            } else {
                sink
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
