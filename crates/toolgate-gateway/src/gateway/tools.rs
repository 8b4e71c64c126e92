//! Tools from the configuration: built-in and imported, labelled, and every tool name a
//! policy mentions checked.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::error::shown_text;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::secret::Secret;
use toolgate_core::tool::ErasedTool;
use toolgate_mcp::{
    PROMPT_PREFIX, PerCaller, RESOURCES_PREFIX, StaticCallerCredentials, Upstream, UpstreamBounds,
};

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
/// changed is held back. Each upstream's bound on its requests in flight is kept in
/// `bounds`, shared with the same upstream of the configuration before.
pub(super) async fn register_tools(
    config: &Config,
    bounds: &UpstreamBounds,
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
        let mut upstream_config = (entry.upstream_config(i)?)
            .scrub_also(held.iter().cloned())
            .bounds(bounds);
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

/// A tool a policy that does not protect (a rate limit, a timeout, …) names that no tool
/// has, in the namespace of an upstream that does not list it now: a warning, not an
/// error (see [`check_tool_names`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnlistedTool {
    /// The policy field that names it (`policies.approval.tools[0]`).
    pub field: String,
    /// The tool's name, shown safely: control characters and the like escaped, cut after
    /// 100 characters.
    pub tool: String,
    /// The upstreams whose namespace holds the name (one, unless prefixes overlap).
    pub upstreams: Vec<String>,
}

impl fmt::Display for UnlistedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            field,
            tool,
            upstreams,
        } = self;
        let upstreams: Vec<String> = upstreams.iter().map(|u| format!("`{u}`")).collect();
        let (who, again) = match upstreams.as_slice() {
            [one] => (format!("the upstream {one} does not"), "it lists"),
            more => (
                format!("none of the upstreams {}", more.join(", ")),
                "one of them lists",
            ),
        };
        write!(
            f,
            "`{field}` names the tool `{tool}`, but {who} list a tool `{tool}` now; the policy takes effect if {again} it again (remove the name from `{field}` if the tool is gone for good)"
        )
    }
}

/// How much of a policy's tool name a warning repeats.
const SHOWN_NAME_CHARS: usize = 100;

/// The upstreams whose namespace holds the tool name `tool`, attributed by a fact of the
/// configuration, never by a guess: the name starts with the upstream's `prefix` (a tool
/// `PREFIXname`, or a prompt `prompt.PREFIXname`), or it is the upstream's resources tool
/// (`resources.NAME`). An upstream without a `prefix` has no namespace beyond its
/// resources tool: its tools' names are whatever it lists, and a name it no longer lists
/// cannot be told from a typo.
fn namespace_of<'a>(config: &'a Config, tool: &str) -> Vec<&'a str> {
    let prompt = tool.strip_prefix(PROMPT_PREFIX);
    (config.upstreams.iter())
        .filter(|upstream| {
            let prefixed = (upstream.prefix.as_deref())
                .filter(|prefix| !prefix.is_empty())
                .is_some_and(|prefix| {
                    tool.starts_with(prefix) || prompt.is_some_and(|p| p.starts_with(prefix))
                });
            prefixed
                || tool
                    .strip_prefix(RESOURCES_PREFIX)
                    .is_some_and(|name| name == upstream.name)
        })
        .map(|upstream| upstream.name.as_str())
        .collect()
}

/// Every tool name a policy mentions must exist: a typo would otherwise silently leave a
/// tool unprotected, so a name no tool has stops the gateway from starting or reloading.
///
/// What an upstream lists should not stop the gateway, though: an upstream's tool that was
/// skipped (two upstreams offer it, say) is known and not served, and a name in an
/// upstream's namespace ([`namespace_of`]: it carries the upstream's `prefix`) that the
/// upstream does not list now may be a tool a new version of it dropped or renamed. Each is
/// logged as a warning instead, and the names of the latter are returned, for `toolgate
/// check` to say — except in a policy that protects ([`Protects`]): there such a name may
/// as well be a typo of a tool that is served (`side.transfer` for `sidetransfer`), which
/// would run unprotected, so it is refused like any other name no tool has.
///
/// # Errors
///
/// A name that no tool has, not skipped, and either in a policy that protects or in no
/// upstream's namespace, against the field that names it.
pub(super) fn check_tool_names(
    config: &Config,
    names: &BTreeSet<String>,
    skipped: &[SkippedTool],
) -> Result<Vec<UnlistedTool>, ConfigError> {
    let p = &config.policies;
    let list = |field: String, tools: &[String]| -> Vec<(String, String)> {
        tools
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("{field}[{i}]"), t.clone()))
            .collect()
    };
    // The policies that protect a tool: who may call it, whether a person approves the
    // call, which scopes a token needs.
    let mut protecting: Vec<(String, String)> = Vec::new();
    if let Some(a) = &p.authorization {
        for (i, rule) in a.rules.iter().enumerate() {
            protecting.extend(list(
                format!("policies.authorization.rules[{i}].tools"),
                &rule.tools,
            ));
        }
    }
    if let Some(a) = &p.approval {
        protecting.extend(list("policies.approval.tools".into(), &a.tools));
    }
    if let Some(oauth) = &config.identity.oauth {
        protecting.extend(oauth.required_scopes.tools.keys().map(|k| {
            (
                format!("identity.oauth.required_scopes.tools.{k}"),
                k.clone(),
            )
        }));
    }
    let mut all: Vec<(String, String)> = Vec::new();
    for name in config.tools.labels.keys() {
        all.push((format!("tools.labels.{name}"), name.clone()));
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
    let protecting = protecting.into_iter().map(|(f, t)| (f, t, Protects::Yes));
    let all = all.into_iter().map(|(f, t)| (f, t, Protects::No));
    let mut unlisted = Vec::new();
    for (field, tool, protects) in protecting.chain(all) {
        // An upstream's tool skipped (two upstreams offer it, say) is known, not a typo:
        // what an upstream lists must not stop the gateway.
        if let Some(skip) = skipped.iter().find(|skip| skip.tool == tool) {
            tracing::warn!(%field, tool = ?skip.tool, upstream = %skip.upstream, "a policy names a tool that is not served: {}", skip.reason);
            continue;
        }
        if names.contains(&tool) {
            continue;
        }
        let upstreams = namespace_of(config, &tool);
        if protects == Protects::Yes {
            return Err(ConfigError::invalid(
                field,
                unknown_protected_tool(names, &tool, &upstreams),
            ));
        }
        if !upstreams.is_empty() {
            let unlisted_tool = UnlistedTool {
                field,
                tool: shown_text(&tool, SHOWN_NAME_CHARS).into_owned(),
                upstreams: upstreams.into_iter().map(str::to_owned).collect(),
            };
            tracing::warn!(
                field = %unlisted_tool.field,
                tool = ?unlisted_tool.tool,
                upstream = %unlisted_tool.upstreams.join(", "),
                "a policy names a tool its upstream does not list now: {unlisted_tool}"
            );
            unlisted.push(unlisted_tool);
            continue;
        }
        return Err(ConfigError::invalid(
            field,
            unknown_tool(config, names, &tool),
        ));
    }
    Ok(unlisted)
}

/// `config` with the policies that attach a hook to each tool they list — rate limits and
/// concurrency caps — cut to the tools served (`names`). A policy may name a tool that is
/// not served: one an upstream lists but that was skipped, or one its upstream does not
/// list now ([`check_tool_names`] lets both through with a warning), and the pipeline
/// refuses a hook for a tool it does not have. An entry none of whose tools is served
/// applies to no call now, so it is left out: cut to no tools, it would apply to every one.
pub(super) fn served_policies<'a>(config: &'a Config, names: &BTreeSet<String>) -> Cow<'a, Config> {
    let served = |tools: &[String]| tools.iter().all(|tool| names.contains(tool));
    let p = &config.policies;
    if p.rate_limits.iter().all(|r| served(&r.tools))
        && p.concurrency.iter().all(|c| served(&c.tools))
    {
        return Cow::Borrowed(config);
    }
    let mut cut = config.clone();
    let listed = |tools: &mut Vec<String>| {
        let some = !tools.is_empty();
        tools.retain(|tool| names.contains(tool));
        !some || !tools.is_empty()
    };
    cut.policies
        .rate_limits
        .retain_mut(|r| listed(&mut r.tools));
    cut.policies
        .concurrency
        .retain_mut(|c| listed(&mut c.tools));
    Cow::Owned(cut)
}

/// Whether a policy field protects the tools it names (authorization, approval, required
/// scopes) — a name there that no tool has is refused, whatever upstream's namespace holds
/// it — or shapes their calls (limits, timeouts, the cache, labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protects {
    /// Authorization rules' `tools`, `policies.approval.tools`, required scopes: fail closed.
    Yes,
    /// Everything else: a name its upstream does not list now is a warning.
    No,
}

/// That no tool is named `tool`, and the tools there are (`names`): how both refusals of
/// a name start.
fn no_such_tool(names: &BTreeSet<String>, tool: &str) -> String {
    let known: Vec<&str> = names.iter().map(String::as_str).collect();
    format!(
        "no tool is named `{}`; the tools are: {}",
        shown_text(tool, SHOWN_NAME_CHARS),
        known.join(", ")
    )
}

/// Why no tool named `tool` is refused from a policy that protects, and what to do.
/// `upstreams` are those whose namespace holds the name ([`namespace_of`]).
fn unknown_protected_tool(names: &BTreeSet<String>, tool: &str, upstreams: &[&str]) -> String {
    let mut message = no_such_tool(names, tool);
    let whose = match upstreams {
        [] => String::new(),
        [one] => format!(" (even one carrying the prefix of the upstream `{one}`)"),
        more => format!(
            " (even one carrying the prefix of the upstreams {})",
            (more.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>()).join(", ")
        ),
    };
    message.push_str(&format!(
        ". This policy protects the tools it names, so a name no tool has is refused{whose}: a typo would leave the tool it meant unprotected. Fix the name if it is a typo; if an upstream no longer lists the tool, remove the name from the policy — until then the gateway does not start, and a reload is refused and the previous configuration keeps serving"
    ));
    message
}

/// Why no tool named `tool` is refused, and what to do: the tools there are, and — when an
/// upstream has no `prefix`, so that its tools' names cannot be told from a typo — how to
/// make a tool that upstream stops listing not stop the gateway.
fn unknown_tool(config: &Config, names: &BTreeSet<String>, tool: &str) -> String {
    let mut message = no_such_tool(names, tool);
    let unprefixed: Vec<String> = (config.upstreams.iter().enumerate())
        .filter(|(_, upstream)| upstream.prefix.as_deref().is_none_or(str::is_empty))
        .map(|(i, upstream)| format!("`{}` (`upstreams[{i}].prefix`)", upstream.name))
        .collect();
    if !unprefixed.is_empty() {
        message.push_str(&format!(
            ". Fix the name if it is a typo. If it is a tool an upstream without a `prefix` no longer lists ({}), its name cannot be told from a typo, so it stops the gateway from starting and reloading: remove it from the policy, or give that upstream a `prefix` and name its tools with it — a name carrying an upstream's prefix that the upstream stops listing is a warning, not an error",
            unprefixed.join(", ")
        ));
    }
    message
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
