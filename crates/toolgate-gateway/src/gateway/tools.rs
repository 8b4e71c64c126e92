//! Tools from the configuration: built-in and imported, labelled, and every tool name a
//! policy mentions checked.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::registry::ToolRegistry;
use toolgate_core::secret::Secret;
use toolgate_core::tool::ErasedTool;
use toolgate_mcp::{PerCaller, StaticCallerCredentials, Upstream};

use super::GatewayError;
use super::imported_names::{SkippedTool, TakenNames, invalid_prefix};
use crate::builtin;
use crate::config::{AsCallerConfig, Config, ConfigError};
use crate::identity::exchange::{ExchangeSettings, ExchangedCredentials};
use crate::identity::jwks::KeyStore;
use crate::labels::Labelled;
use crate::pins::{HeldBack, PinStore, Verdict};

/// What [`register_tools`] registered.
pub(super) struct Registered {
    /// The upstreams, to keep them connected.
    pub(super) upstreams: Vec<Upstream>,
    /// Every tool's name.
    pub(super) names: BTreeSet<String>,
    /// The tools called with a credential that needs the caller's own token
    /// ([`toolgate_mcp::CallerCredentials::needs_caller_token`]), each with its upstream's
    /// name.
    pub(super) needs_caller_token: BTreeMap<String, String>,
    /// The upstreams' tools that could not be registered, and why.
    pub(super) skipped_tools: Vec<SkippedTool>,
}

/// Registers the built-in and upstream tools in `registry`. A built-in tool listed twice is
/// refused; a tool an upstream lists that cannot be registered — a name two upstreams
/// offer too — is skipped with a warning ([`TakenNames`]). `reserved` names the
/// gateway's own tools registered after these, which no upstream may take either. With
/// `pins`, every imported tool is checked against its pin first, and one whose definition
/// changed is held back.
pub(super) async fn register_tools(
    config: &Config,
    keys: Option<&Arc<KeyStore>>,
    pins: Option<&PinStore>,
    reserved: &[&str],
    registry: &mut ToolRegistry,
) -> Result<Registered, GatewayError> {
    let mut names = BTreeSet::new();
    let mut needs_caller_token = BTreeMap::new();
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
            registry,
            builtin::tool(*which),
            &format!("tools.builtin[{i}]"),
        )?);
    }
    for (i, entry) in config.upstreams.iter().enumerate() {
        if let Some(why) = entry.prefix.as_deref().and_then(invalid_prefix) {
            return Err(ConfigError::invalid(format!("upstreams[{i}].prefix"), why).into());
        }
    }
    let mut upstreams = Vec::new();
    let mut imported = Vec::new();
    // Whatever an upstream came by — another upstream's credential from the environment a
    // stdio program inherits, another caller's from their calls — it cannot hand on.
    let held = crate::secrets::held(config);
    for (i, entry) in config.upstreams.iter().enumerate() {
        let mut upstream_config = entry.upstream_config(i)?.scrub_also(held.iter().cloned());
        let mut with_caller_token = false;
        if let Some(as_caller) = &entry.as_caller {
            let per_caller = per_caller(&entry.name, as_caller, keys);
            with_caller_token = per_caller.source.needs_caller_token();
            upstream_config = upstream_config.per_caller(per_caller);
        }
        let upstream =
            Upstream::connect(upstream_config)
                .await
                .map_err(|source| GatewayError::Upstream {
                    name: entry.name.clone(),
                    source,
                })?;
        let tools = upstream
            .tools()
            .into_iter()
            .map(|tool| Arc::new(tool) as Arc<dyn ErasedTool>)
            .chain(upstream.features().iter().cloned());
        imported.extend(tools.map(|tool| (i, with_caller_token, tool)));
        upstreams.push(upstream);
    }
    // Before pins are checked: a tool skipped is neither pinned nor held back.
    let offered: Vec<(usize, String)> = (imported.iter())
        .map(|(i, _, tool)| (*i, tool.definition().name))
        .collect();
    let mut taken = TakenNames::new(
        (names.iter().cloned()).chain(reserved.iter().map(|name| (*name).to_owned())),
        offered.iter().map(|(i, name)| (*i, name.as_str())),
    );
    let mut skipped = Vec::new();
    let mut admitted = Vec::with_capacity(imported.len());
    for ((i, with_caller_token, tool), (_, name)) in imported.into_iter().zip(&offered) {
        match taken.take(config, i, name) {
            Some(skip) => skipped.push(skip),
            None => admitted.push((i, with_caller_token, tool)),
        }
    }
    let imported = admitted;
    // Every imported tool checked against its pin at once: one read and write of a pin
    // file, whatever the number of tools.
    let verdicts = match pins {
        Some(pins) => {
            let definitions: Vec<_> = imported.iter().map(|(.., t)| t.definition()).collect();
            pins.check(&definitions).await?
        }
        None => vec![Verdict::Serve; imported.len()],
    };
    for ((i, with_caller_token, tool), verdict) in imported.into_iter().zip(verdicts) {
        let tool = match verdict {
            Verdict::Serve => tool,
            Verdict::HoldBack => Arc::new(HeldBack::new(&tool)),
        };
        let name = add_tool(config, registry, tool, &format!("upstreams[{i}]"))?;
        if with_caller_token {
            needs_caller_token.insert(name.clone(), config.upstreams[i].name.clone());
        }
        names.insert(name);
    }
    Ok(Registered {
        upstreams,
        names,
        needs_caller_token,
        skipped_tools: skipped,
    })
}

/// Registers `tool` (labelled, when `tools.labels` names it); a name the registry refuses
/// is an error against `field`. Every upstream tool passed [`TakenNames`] before it comes
/// here, so only a built-in one can be refused.
fn add_tool(
    config: &Config,
    registry: &mut ToolRegistry,
    tool: Arc<dyn ErasedTool>,
    field: &str,
) -> Result<String, GatewayError> {
    let name = tool.definition().name;
    let tool = match config.tools.labels.get(&name) {
        Some(labels) => Arc::new(Labelled::new(tool, labels)) as Arc<dyn ErasedTool>,
        None => tool,
    };
    registry
        .register_erased(tool)
        .map_err(|e| GatewayError::Config(ConfigError::invalid(field, e.to_string())))?;
    Ok(name)
}

/// Every tool name a policy mentions must exist: a typo would otherwise silently leave a
/// tool unprotected.
pub(super) fn check_tool_names(
    config: &Config,
    names: &BTreeSet<String>,
    skipped: &[SkippedTool],
) -> Result<(), ConfigError> {
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
    if let Some(oauth) = &config.identity.oauth {
        all.extend(oauth.required_scopes.tools.keys().map(|k| {
            (
                format!("identity.oauth.required_scopes.tools.{k}"),
                k.clone(),
            )
        }));
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
        // An upstream's tool skipped (two upstreams offer it, say) is known, not a typo:
        // what an upstream lists must not stop the gateway.
        if let Some(skip) = skipped.iter().find(|skip| skip.tool == tool) {
            tracing::warn!(%field, tool = ?skip.tool, upstream = %skip.upstream, "a policy names a tool that is not served: {}", skip.reason);
            continue;
        }
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

/// Where the upstream `name`, called as each caller, gets each caller's credential.
fn per_caller(name: &str, config: &AsCallerConfig, keys: Option<&Arc<KeyStore>>) -> PerCaller {
    let mut per_caller = PerCaller::new(match &config.token_exchange {
        Some(exchange) => Arc::new(ExchangedCredentials::new(
            name,
            ExchangeSettings {
                token_endpoint: exchange
                    .token_endpoint
                    .as_ref()
                    .map(|e| e.0.clone())
                    .unwrap_or_default(),
                client_id: exchange.client_id.0.clone(),
                client_secret: exchange.client_secret.0.clone(),
                audience: exchange.audience.0.clone(),
                scope: exchange.scope.clone(),
                timeout: exchange.timeout.unwrap_or(Duration::from_secs(5)),
                refresh_before: exchange.refresh_before.unwrap_or(Duration::from_secs(30)),
                max_entries: config
                    .max_sessions
                    .unwrap_or(toolgate_mcp::per_caller::DEFAULT_MAX_CALLER_SESSIONS),
            },
            keys.cloned(),
        )),
        None => {
            // Each caller gets the entry of its own tenant only (`credentials`: callers
            // without a tenant).
            let secret = |credential: &crate::config::EnvString| Secret::new(credential.0.clone());
            let untenanted = config.credentials.iter().flatten();
            let mut fixed = StaticCallerCredentials::new(
                untenanted.map(|(user, credential)| (user.clone(), secret(credential))),
            );
            for (tenant, users) in config.tenant_credentials.iter().flatten() {
                fixed = fixed.tenant(
                    tenant.clone(),
                    users
                        .iter()
                        .map(|(user, credential)| (user.clone(), secret(credential))),
                );
            }
            Arc::new(fixed)
        }
    });
    if let Some(max) = config.max_sessions {
        per_caller.max_sessions = max;
    }
    if let Some(idle) = config.idle {
        per_caller.idle = idle;
    }
    // Zero is refused at load.
    if let Some(max) = config.max_sessions_per_caller.and_then(NonZeroUsize::new) {
        per_caller.max_sessions_per_caller = max;
    }
    per_caller
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-caller settings of `upstreams[0]`, whose `as_caller` is `as_caller`.
    fn per_caller_of(as_caller: &str) -> PerCaller {
        let text = format!(
            "upstreams:\n  - {{ name: crm, url: \"http://127.0.0.1:9/mcp\", as_caller: {as_caller} }}\n"
        );
        let config = crate::config::parse(&text).expect("a valid configuration");
        let as_caller = config.upstreams[0].as_caller.as_ref().expect("as_caller");
        per_caller("crm", as_caller, None)
    }

    #[test]
    fn an_upstreams_bound_per_caller_is_the_one_its_connections_get() {
        let bound = per_caller_of("{ credentials: { ann: t }, max_sessions_per_caller: 2 }");
        assert_eq!(bound.max_sessions_per_caller.get(), 2);
        let default = per_caller_of("{ credentials: { ann: t } }");
        assert_eq!(default.max_sessions_per_caller.get(), 4, "unless set");
    }
}
