//! A [`Gateway`]: one configuration compiled into a tool system with its hooks, API keys and
//! MCP server — the per-configuration layer, built from a configuration and the
//! [`Process`](crate::process::Process). A reload builds a new one next to the old and
//! swaps it in; calls in flight finish on the one they started on.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use toolgate_agent::{Concurrency as BatchConcurrency, ThreadConfig, ToolSystem};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::suspension::SuspensionStore;
use toolgate_core::tool::{ToolDefinition, ToolSource};
use toolgate_core::{Pipeline, SpanValues, User};
use toolgate_hooks::audit::ClientAddress;
use toolgate_hooks::policy::{CedarPolicies, PolicyLoadError};
use toolgate_hooks::{Audit, Authorize};
use toolgate_mcp::{ListFilter, McpServer, RESOURCES_PREFIX, Upstream, Withdrawal};
use toolgate_redis::{CountersUnavailable, RedisCounters};

use crate::auth::ApiKeys;
use crate::config::{ApprovalPolicy, Config, ConfigError};
use crate::console::counters::ToolCounters;
use crate::console::history::DecisionHistory;
use crate::console::sessions::ConsoleSessions;
use crate::extensions::Extensions;
use crate::identity::Identity;
use crate::identity::KeyCache;
use crate::identity::address::client_address;
use crate::identity::failures::CredentialLimit;
use crate::identity::scopes::ToolScopes;
use crate::outcomes::{OUTCOME_TOOL, OutcomeTool};
use crate::pins::PinStore;
use crate::state::SharedState;
use crate::tools_state::AllTools;
use crate::webhooks::{Notifications, NotifyingStore};

mod cedar;
mod imported_names;
mod outcome_readers;
mod policies;
mod reported_costs;
mod tools;

pub(crate) use imported_names::SkippedTool;
pub(crate) use outcome_readers::unreadable_outcomes_warning;

pub(crate) use crate::config::describe_budgets;

use policies::{Installed, install_policies, refused_waiting};
use reported_costs::{UnreadableCost, unreadable_costs};
use tools::{Registered, UnlistedTool, check_tool_names, register_tools, served_policies};

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
    /// The state backend (Redis) or the statistics file could not be opened.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A file the configuration names could not be opened.
    #[error("{0}")]
    Io(String),
    /// The hooks do not fit together (a bug in the gateway if it happens).
    #[error("the pipeline could not be built: {0}")]
    Pipeline(String),
    /// The pin file could not be used.
    #[error(transparent)]
    Pins(#[from] crate::pins::PinError),
    /// The OAuth side of `identity:` could not be set up.
    #[error("identity.oauth: {0}")]
    Identity(#[from] crate::identity::JwksError),
    /// The Cedar policies of `policies.cedar` could not be loaded: each problem at its
    /// file, line and column.
    #[error("{0}")]
    Policies(#[from] PolicyLoadError),
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

/// What a gateway is built on besides its configuration: the parts of the
/// [`Process`](crate::process::Process) a configuration's policies and identity use.
pub(crate) struct BuildOn<'a> {
    /// The policy state.
    pub shared: &'a SharedState,
    /// The identity provider's keys.
    pub keys: &'a KeyCache,
    /// Hooks of your own.
    pub extensions: &'a Extensions,
}

/// One configuration, compiled.
pub struct Gateway {
    /// The configuration it was built from.
    pub config: Arc<Config>,
    /// The tool system (pipeline, batches, suspensions).
    pub(crate) system: ToolSystem,
    /// The API keys.
    pub(crate) keys: ApiKeys,
    /// How callers are told apart on each route: API keys, OAuth tokens, or both.
    pub(crate) identity: Identity,
    /// How many wrong credentials a client address may present.
    pub(crate) credential_limit: CredentialLimit,
    /// Whether an upstream trades callers' tokens for its own (callers' tokens are then
    /// kept for their invocations).
    pub(crate) exchanges_tokens: bool,
    /// The tools that need approval and are called with the caller's token exchanged,
    /// each with its upstream: their calls are refused instead of waiting.
    pub(crate) refused_waiting: BTreeMap<String, String>,
    /// The MCP server of this configuration, when `/mcp` is on; the process's endpoint
    /// serves it.
    pub(crate) mcp: Option<McpServer>,
    /// Where calls wait for approval, and the outcomes of decided ones are kept.
    pub(crate) suspensions: Arc<dyn SuspensionStore>,
    /// Where decisions on waiting calls are told.
    pub(crate) notifications: Notifications,
    /// The sessions of the operator console.
    pub(crate) console_sessions: Arc<ConsoleSessions>,
    /// The per-tool counters of `GET /v1/admin/stats`.
    pub(crate) counters: Arc<ToolCounters>,
    /// Where every replica adds up its counters, with the state on Redis.
    pub(crate) shared_counters: Option<RedisCounters>,
    /// The last decisions on waiting calls.
    pub(crate) history: Arc<DecisionHistory>,
    /// Where the pins of imported tools are kept, with `pins:`.
    pub(crate) pins: Option<PinStore>,
    authorize: Option<Arc<Authorize>>,
    cedar: Option<Arc<CedarPolicies>>,
    tool_scopes: Option<Arc<ToolScopes>>,
    audit: Option<Arc<Audit>>,
    approver_roles: Vec<String>,
    four_eyes: bool,
    upstreams: Vec<Upstream>,
    skipped_tools: Vec<SkippedTool>,
    unlisted_tools: Vec<UnlistedTool>,
    unreadable_costs: Vec<UnreadableCost>,
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
    /// Compiles `config` on the process `on`: starts its upstreams, registers its tools
    /// with their labels, checks every tool name a policy mentions, and installs the
    /// policies in stage order, with the hooks of your own beside them. Once built, its
    /// approval webhooks (`policies.approval.webhooks`) are the ones the process's events
    /// go to: those of the gateway built before wind down.
    ///
    /// # Errors
    ///
    /// [`GatewayError`] saying which part of the configuration could not be used; a
    /// hook of your own for a tool the configuration does not define fails it too.
    pub(crate) async fn build(config: Config, on: &BuildOn<'_>) -> Result<Gateway, GatewayError> {
        let BuildOn {
            shared,
            keys,
            extensions,
        } = *on;
        let config = Arc::new(config);
        let mut registry = ToolRegistry::new();
        let identity = Identity::with_keys(&config, keys)?;
        let pins = (config.pins.as_ref())
            .map(|p| shared.backends.pin_store(p))
            .transpose()?;
        // The outcome tool is registered after the upstreams' (keeping its place in
        // listings), but its name is the gateway's from the start: no upstream takes it.
        let reserved: &[&str] = if config.policies.approval.is_some() {
            &[OUTCOME_TOOL]
        } else {
            &[]
        };
        let Registered {
            upstreams,
            mut names,
            needs_caller_token,
            skipped_tools,
        } = register_tools(
            &config,
            &shared.upstream_bounds,
            identity.key_store(),
            pins.as_ref(),
            reserved,
            &mut registry,
        )
        .await?;
        if config.policies.approval.is_some() {
            // Callers whose calls wait for approval fetch their outcomes with it.
            let tool = OutcomeTool::new(shared.suspensions.store());
            registry
                .register_erased(Arc::new(tool))
                .map_err(|e| GatewayError::Pipeline(e.to_string()))?;
            names.insert(OUTCOME_TOOL.to_owned());
        }
        let unlisted_tools = check_tool_names(&config, &names, &skipped_tools)?;
        let unreadable_costs = unreadable_costs(&config.policies.budgets, &registry);
        for unreadable in &unreadable_costs {
            tracing::warn!("{unreadable}");
        }
        let refused_waiting = refused_waiting(&config, shared, &registry, &needs_caller_token);
        let (cedar, generation) = cedar::cedar_policies(&config, &registry).await?;

        let builder = Pipeline::builder().registry(registry);
        let (
            builder,
            Installed {
                authorize,
                tool_scopes,
                audit,
            },
        ) = install_policies(
            &served_policies(&config, &names),
            shared,
            builder,
            &refused_waiting,
            cedar.as_ref(),
        )?;
        // The most calls the store keeps waiting: the bound of those watched for expiry.
        let max_waiting = crate::state::suspension_limits(&config).max_total;
        let builder = extensions
            .install(builder)
            .suspension_store(Arc::new(NotifyingStore::new(
                shared.suspensions.store(),
                shared.notifications.clone(),
                max_waiting,
            )))
            .generation(generation)
            .approval_run_within(
                config
                    .policies
                    .approval
                    .as_ref()
                    .map_or_else(|| ApprovalPolicy::default().run_within, |a| a.run_within),
            )
            .tail_hook_timeout(Duration::from_secs(10))
            .span_values(
                config
                    .telemetry
                    .as_ref()
                    .map_or_else(SpanValues::default, |t| SpanValues {
                        arguments: t.capture_arguments,
                        results: t.capture_results,
                    }),
            )
            .stage_spans(config.telemetry.as_ref().is_none_or(|t| t.stage_spans));

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

        let mcp = config.server.mcp.then(|| -> Result<_, GatewayError> {
            let filter_by = authorize.clone();
            let cedar_by = cedar.clone();
            let scoped_by = tool_scopes.clone();
            let listens = config.server.mcp_sessions.listens_per_user;
            let listens = std::num::NonZeroUsize::new(listens).ok_or_else(|| {
                let field = "server.mcp_sessions.listens_per_user";
                ConfigError::invalid(field, "must be at least 1")
            })?;
            let mut server = McpServer::new(system.pipeline().clone())
                .server_info("toolgate", env!("CARGO_PKG_VERSION"))
                .call_timeout(config.server.request_timeout)
                .listens_per_user(listens)
                .relayed_tasks(shared.relayed_tasks.clone())
                .request_state_key(&crate::secrets::mcp_state_key(&config))
                .map_err(|e| ConfigError::invalid("server.mcp_state_key", e.to_string()))?;
            if config.policies.approval.is_some() {
                let notifications = shared.notifications.clone();
                server = server.on_withdrawal(move |withdrawal, user, reason| match withdrawal {
                    Withdrawal::Waiting(call) => {
                        tracing::info!(suspension_id = %call.id, tool = %call.tool, user = %call.user.id, approver = %user.id, decision = "reject", reason, "a waiting call was decided");
                        notifications.decided(call, crate::webhooks::DecisionSummary::by(
                            "reject",
                            user,
                            Some(reason.to_owned()),
                        ));
                    }
                    Withdrawal::Running(record) => {
                        tracing::info!(suspension_id = %record.id, user = %user.id, "a caller withdrew its call while it ran");
                        notifications.withdrawn(record, user, reason);
                    }
                });
                server = server.outcome_tool(OUTCOME_TOOL).instructions(format!(
                    "Some calls wait for a person's approval: they answer at once with a suspension id. Call `{OUTCOME_TOOL}` with that id to learn whether the call was decided, and its result."
                ));
            }
            server = server.list_filter(ListFilter::new(move |tool, user| {
                serves(
                    filter_by.as_deref(),
                    cedar_by.as_deref(),
                    scoped_by.as_deref(),
                    user,
                    tool,
                )
            }));
            Ok(server)
        });
        let mcp = mcp.transpose()?;
        // Last, once nothing can fail: from here on, events go to this configuration's
        // webhooks (or nowhere), and the notifier of the previous one winds down.
        let webhooks = config.policies.approval.as_ref().map(|a| &a.webhooks);
        let notifier = match webhooks.filter(|w| !w.is_empty()) {
            Some(webhooks) => Some(
                shared
                    .notifications
                    .start_notifier(webhooks, shared.suspensions.store(), max_waiting)
                    .map_err(GatewayError::Io)?,
            ),
            None => None,
        };
        shared.notifications.install(notifier);

        Ok(Gateway {
            keys: ApiKeys::new(&config.users),
            credential_limit: CredentialLimit::new(
                shared.failed_credentials.clone(),
                shared.backends.shared_counts(),
                &config,
            ),
            identity,
            exchanges_tokens: config.upstreams.iter().any(|u| {
                u.as_caller
                    .as_ref()
                    .is_some_and(|a| a.token_exchange.is_some())
            }),
            refused_waiting,
            approver_roles: config
                .policies
                .approval
                .as_ref()
                .map(|a| a.approver_roles.clone())
                .unwrap_or_else(|| vec!["admin".to_owned()]),
            four_eyes: config
                .policies
                .approval
                .as_ref()
                .is_none_or(|a| a.four_eyes),
            config,
            system,
            mcp,
            suspensions: shared.suspensions.store(),
            notifications: shared.notifications.clone(),
            console_sessions: shared.console_sessions.clone(),
            counters: shared.counters.clone(),
            shared_counters: shared.backends.shared_counters(),
            history: shared.history.clone(),
            pins,
            authorize,
            cedar,
            tool_scopes,
            audit,
            upstreams,
            skipped_tools,
            unlisted_tools,
            unreadable_costs,
        })
    }

    /// What `toolgate check` and `toolgate tools` warn of about the upstreams' tools: those
    /// the upstreams list that are not served, each with the reason (an invalid name, one
    /// listed twice, a built-in tool's, one two upstreams offer), then the tools a policy
    /// names in an upstream's namespace (its `prefix`) that the upstream does not list now,
    /// then the budgets that read a tool's cost where its output never has one.
    pub(crate) fn tool_warnings(&self) -> impl Iterator<Item = &dyn std::fmt::Display> + '_ {
        let skipped = (self.skipped_tools.iter()).map(|s| s as &dyn std::fmt::Display);
        (skipped.chain((self.unlisted_tools.iter()).map(|u| u as &dyn std::fmt::Display)))
            .chain((self.unreadable_costs.iter()).map(|u| u as &dyn std::fmt::Display))
    }

    /// The address a request came from: the connection's `peer`, or the client its trusted
    /// proxies name in `headers` (`server.trusted_proxies`). `None` when the peer is not
    /// known.
    pub(crate) fn client_address(
        &self,
        peer: Option<&ConnectInfo<SocketAddr>>,
        headers: &axum::http::HeaderMap,
    ) -> Option<IpAddr> {
        client_address(peer, headers, &self.config.server.trusted_proxies)
    }

    /// The address a request came from ([`Self::client_address`]), for the audit records
    /// of its calls. `None` when nothing is audited, or the peer is not known.
    pub(crate) fn audited_client(
        &self,
        extensions: &axum::http::Extensions,
        headers: &axum::http::HeaderMap,
    ) -> Option<ClientAddress> {
        self.audit.as_ref()?;
        self.client_address(extensions.get(), headers)
            .map(ClientAddress)
    }

    /// The pipeline calls run through.
    pub fn pipeline(&self) -> &Pipeline {
        self.system.pipeline()
    }

    /// The Cedar policies of `policies.cedar`, when configured.
    pub fn cedar_policies(&self) -> Option<&CedarPolicies> {
        self.cedar.as_deref()
    }

    /// The scopes a token needs to call `tool` (none when not configured).
    pub(crate) fn tool_scopes(&self, tool: &str) -> &[String] {
        self.tool_scopes.as_ref().map_or(&[], |s| s.required(tool))
    }

    /// The scopes of `tool` that `user`'s token lacks (none for an API-key caller, or a
    /// tool without required scopes).
    pub(crate) fn missing_tool_scopes(&self, user: &User, tool: &str) -> Vec<&str> {
        self.tool_scopes
            .as_ref()
            .map_or_else(Vec::new, |s| s.missing(user, tool))
    }

    /// The tools `user` may call (all of them without an authorization policy; with Cedar
    /// policies, those some policy could permit, whatever the arguments); an upstream's
    /// prompts and resources, which MCP serves as such, are not listed.
    pub(crate) fn visible_tools(&self, user: &User) -> Vec<ToolDefinition> {
        self.pipeline()
            .definitions()
            .filter(|tool| toolgate_mcp::is_tool(tool))
            .filter(|tool| {
                serves(
                    self.authorize.as_deref(),
                    self.cedar.as_deref(),
                    self.tool_scopes.as_deref(),
                    user,
                    tool,
                )
            })
            .cloned()
            .collect()
    }

    /// Writes out buffered audit records (at shutdown).
    pub(crate) async fn flush_audit(&self) {
        if let Some(audit) = &self.audit
            && let Err(e) = audit.flush().await
        {
            tracing::error!(error = %e, "audit records could not be written at shutdown");
        }
    }

    /// Whether `user` may resume suspended calls.
    /// The per-tool statistics of `GET /v1/admin/stats`: every replica's with the state on
    /// Redis, this replica's (and saying so) when Redis does not answer or the state is in
    /// memory.
    pub(crate) async fn tool_statistics(&self) -> serde_json::Value {
        let Some(shared) = &self.shared_counters else {
            return self.counters.snapshot();
        };
        match self.counters.shared_snapshot(shared).await {
            Ok(every) => every,
            Err(e) => {
                tracing::warn!(error = %e, "the per-tool statistics of every replica cannot be read; answering with this replica's");
                self.counters.snapshot()
            }
        }
    }

    /// Starts the per-tool statistics over (`DELETE /v1/admin/stats`): every replica's with
    /// the state on Redis, and answers them as they now are.
    ///
    /// # Errors
    ///
    /// [`CountersUnavailable`] when Redis does not answer: nothing of this replica's was
    /// forgotten.
    pub(crate) async fn reset_tool_statistics(
        &self,
    ) -> Result<serde_json::Value, CountersUnavailable> {
        self.counters.reset(self.shared_counters.as_ref()).await?;
        Ok(self.tool_statistics().await)
    }

    /// Adds this replica's per-tool counters to every replica's, with the state on Redis
    /// (every [`FLUSH_EVERY`](crate::console::counters::FLUSH_EVERY), and at shutdown).
    pub(crate) async fn share_counters(&self) {
        if let Some(shared) = &self.shared_counters
            && let Err(e) = self.counters.share(shared).await
        {
            // Kept, and added the next time: no need to say so every two seconds.
            tracing::debug!(error = %e, "the per-tool counters were not added to every replica's");
        }
    }

    /// The user who made a waiting call, as this configuration knows them now: the user of
    /// `users:` with the saved caller's id in the saved caller's tenant, with their roles of
    /// now; `None` when `users:` no longer has that id in that tenant (a user moved to
    /// another tenant is another caller, and `ann` of `globex` never resumes the call of
    /// `ann` of `acme`). A caller who came with an OAuth token is as the token made them
    /// when the call waited: the token is not kept, so it cannot be read again.
    pub(crate) fn caller_now(&self, saved: &User) -> Option<Arc<User>> {
        if saved.attributes.get("auth").and_then(|a| a.as_str()) == Some("oauth") {
            return Some(Arc::new(saved.clone()));
        }
        self.keys.by_caller(saved)
    }

    pub(crate) fn may_approve(&self, user: &User) -> bool {
        self.approver_roles.iter().any(|role| user.has_role(role))
    }

    /// Whether `approver` may see and decide the calls of callers in `tenant`: an approver
    /// with a tenant approves within it, one without (an operator) in every tenant.
    pub(crate) fn may_approve_in(&self, approver: &User, tenant: &Option<String>) -> bool {
        self.may_approve(approver)
            && approver
                .tenant
                .as_ref()
                .is_none_or(|own| Some(own) == tenant.as_ref())
    }

    /// Whether an approver is refused when approving or completing their own call
    /// (`policies.approval.four_eyes`, on by default).
    pub(crate) fn four_eyes(&self) -> bool {
        self.four_eyes
    }

    /// Authorizes the resource subscriptions made through `old`'s upstreams again, against
    /// this configuration (the one replacing `old` on a reload), and moves them to this
    /// configuration's upstreams: a subscriber who may no longer read an upstream's
    /// resources — its resources tool is gone, denied to her, held back, or out of her
    /// token's scopes — has her subscription ended; `old`'s upstreams are unsubscribed.
    pub(crate) async fn hand_over_subscriptions(&self, old: &Gateway) {
        for upstream in &old.upstreams {
            let name = format!("{RESOURCES_PREFIX}{}", upstream.name());
            let tool = self
                .pipeline()
                .registry()
                .get(&name)
                .map(|t| t.definition.clone());
            let may_read = |user: &User| {
                tool.as_ref().is_some_and(|tool| {
                    serves(
                        self.authorize.as_deref(),
                        self.cedar.as_deref(),
                        self.tool_scopes.as_deref(),
                        user,
                        tool,
                    )
                })
            };
            let next = self.upstreams.iter().find(|u| u.name() == upstream.name());
            let (moved, ended) = upstream.hand_over_subscriptions(next, may_read).await;
            if moved + ended > 0 {
                tracing::info!(upstream = %upstream.name(), moved, ended, "resource subscriptions authorized again for the new configuration: those whose subscribers lost access ended");
            }
        }
    }

    /// For a tool imported from an upstream MCP server, whether its arguments are checked
    /// against its input schema before a call leaves; `None` for any other tool.
    pub(crate) fn checks_arguments(&self, tool: &str) -> Option<bool> {
        let definition = self.pipeline().registry().get(tool)?.definition.clone();
        let ToolSource::Mcp { server } = &definition.source else {
            return None;
        };
        let upstream = self.upstreams.iter().find(|u| u.name() == server)?;
        Some(upstream.validates_arguments(tool))
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

/// Whether `user` is served `tool` — listed, called, subscribed to: tools held back for a
/// changed definition are served to nobody, others per the authorization rules, the Cedar
/// policies (some policy could permit it) and the token's scopes.
fn serves(
    authorize: Option<&Authorize>,
    cedar: Option<&CedarPolicies>,
    tool_scopes: Option<&ToolScopes>,
    user: &User,
    tool: &ToolDefinition,
) -> bool {
    crate::pins::is_served(tool)
        && authorize.is_none_or(|a| a.can_call(user, tool))
        && cedar.is_none_or(|c| c.could_allow(user, tool))
        && tool_scopes.is_none_or(|s| s.allows(user, tool))
}

/// The hooks of one tool by stage, in the order they run.
pub type StagePlan = Vec<(toolgate_core::Stage, Vec<String>)>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::hash_key;

    /// The gateway of `users`, a `users:` list in YAML.
    async fn gateway(users: &str) -> Gateway {
        let config = crate::config::parse(&format!("users:\n{users}")).expect("the configuration");
        let shared = SharedState::new(&config).await.expect("the state");
        let keys = KeyCache::default();
        let extensions = Extensions::default();
        let on = BuildOn {
            shared: &shared,
            keys: &keys,
            extensions: &extensions,
        };
        Gateway::build(config, &on).await.expect("the gateway")
    }

    fn user(id: &str, tenant: &str, roles: &str) -> String {
        format!(
            "  - {{id: {id}, key_sha256: \"{}\", tenant: {tenant}, roles: [{roles}]}}\n",
            hash_key(&format!("tg_{id}_{tenant}"))
        )
    }

    #[tokio::test]
    async fn a_saved_caller_is_found_now_in_their_own_tenant_only() {
        let both = gateway(&format!(
            "{}{}",
            user("ann", "globex", "intern"),
            user("ann", "acme", "analyst")
        ))
        .await;
        let now = both
            .caller_now(&User::new("ann").with_tenant("acme"))
            .expect("ann of acme");
        assert_eq!(now.tenant.as_deref(), Some("acme"));
        assert_eq!(now.roles, ["analyst"]);
    }

    #[tokio::test]
    async fn a_saved_caller_whose_tenant_no_longer_has_their_id_is_found_no_more() {
        // Moved to another tenant at a reload: another caller, who does not resume her
        // calls.
        let moved = gateway(&user("ann", "globex", "analyst")).await;
        assert!(
            moved
                .caller_now(&User::new("ann").with_tenant("acme"))
                .is_none()
        );
        assert!(moved.caller_now(&User::new("ann")).is_none());
    }
}
