//! A [`Gateway`]: one configuration compiled into a tool system with its hooks, API keys and
//! MCP endpoint. A reload builds a new one next to the old; calls in flight finish on the
//! one they started on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use toolgate_agent::{Concurrency as BatchConcurrency, ThreadConfig, ToolSystem};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::suspension::SuspensionStore;
use toolgate_core::tool::{ToolDefinition, ToolSource};
use toolgate_core::{Pipeline, SpanValues, User};

use crate::outcomes::{OUTCOME_TOOL, OutcomeTool};
use toolgate_hooks::{Audit, Authorize};
use toolgate_mcp::rmcp::transport::StreamableHttpServerConfig;
use toolgate_mcp::rmcp::transport::streamable_http_server::session::local::SessionConfig as RmcpSessionConfig;
use toolgate_mcp::{ListFilter, McpHttpService, McpServer, RESOURCES_PREFIX, Upstream};

use crate::extensions::Extensions;

use crate::auth::ApiKeys;
use crate::config::{ApprovalPolicy, Config, ConfigError};
use crate::http::McpSessions;
use crate::identity::Identity;
use crate::identity::scopes::ToolScopes;
use crate::state::SharedState;
use crate::tools_state::AllTools;
use crate::webhooks::{Notifications, Notifier, NotifyingStore};

mod policies;
mod tools;

pub(crate) use tools::upstream_config;

use policies::{Installed, install_policies, refused_waiting};
use tools::{Registered, check_tool_names, register_tools};

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
    /// The pin file could not be used.
    #[error(transparent)]
    Pins(#[from] crate::pins::PinError),
    /// The OAuth side of `identity:` could not be set up.
    #[error("identity.oauth: {0}")]
    Identity(#[from] crate::identity::JwksError),
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
    /// How callers are told apart on each route: API keys, OAuth tokens, or both.
    pub identity: Identity,
    /// Whether an upstream trades callers' tokens for its own (callers' tokens are then
    /// kept for their invocations).
    pub(crate) exchanges_tokens: bool,
    /// The tools that need approval and are called with the caller's token exchanged,
    /// each with its upstream: their calls are refused instead of waiting.
    pub(crate) refused_waiting: BTreeMap<String, String>,
    /// The MCP endpoint, when enabled.
    pub mcp: Option<McpHttpService>,
    /// Who opened each session of the MCP endpoint.
    pub(crate) mcp_sessions: Arc<McpSessions>,
    /// Where calls wait for approval, and the outcomes of decided ones are kept.
    pub(crate) suspensions: Arc<dyn SuspensionStore>,
    /// Where decisions on waiting calls are told.
    pub(crate) notifications: Notifications,
    authorize: Option<Arc<Authorize>>,
    tool_scopes: Option<Arc<ToolScopes>>,
    audit: Option<Arc<Audit>>,
    approver_roles: Vec<String>,
    four_eyes: bool,
    extensions: Extensions,
    upstreams: Vec<Upstream>,
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
    /// Once built, its approval webhooks (`policies.approval.webhooks`) are the ones
    /// `shared`'s events go to: those of the gateway built before from `shared` wind down.
    ///
    /// # Errors
    ///
    /// [`GatewayError`] saying which part of the configuration could not be used.
    pub async fn build(config: Config, shared: &SharedState) -> Result<Gateway, GatewayError> {
        Self::build_with(config, shared, &Extensions::default()).await
    }

    /// [`build`](Self::build), with hooks of your own beside the configured policies.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build); a hook for a tool the configuration does not define
    /// fails it too.
    pub async fn build_with(
        config: Config,
        shared: &SharedState,
        extensions: &Extensions,
    ) -> Result<Gateway, GatewayError> {
        let config = Arc::new(config);
        let mut registry = ToolRegistry::new();
        let identity = Identity::new(&config)?;
        let Registered {
            upstreams,
            mut names,
            needs_caller_token,
        } = register_tools(&config, identity.key_store(), &mut registry).await?;
        if config.policies.approval.is_some() {
            // Callers whose calls wait for approval fetch their outcomes with it.
            let tool = OutcomeTool::new(shared.suspensions.store());
            registry
                .register_erased(Arc::new(tool))
                .map_err(|e| GatewayError::Pipeline(e.to_string()))?;
            names.insert(OUTCOME_TOOL.to_owned());
        }
        check_tool_names(&config, &names)?;
        let refused_waiting = refused_waiting(&config, shared, &registry, &needs_caller_token);

        let builder = Pipeline::builder().registry(registry);
        let (
            builder,
            Installed {
                authorize,
                tool_scopes,
                audit,
            },
        ) = install_policies(&config, shared, builder, &refused_waiting)?;
        let builder = extensions
            .install(builder)
            .suspension_store(Arc::new(NotifyingStore::new(
                shared.suspensions.store(),
                shared.notifications.clone(),
                crate::state::suspension_limits(&config).max_total,
            )))
            .generation(config.generation.clone())
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
            let scoped_by = tool_scopes.clone();
            let mut server = McpServer::new(system.pipeline().clone())
                .server_info("toolgate", env!("CARGO_PKG_VERSION"))
                .call_timeout(config.server.request_timeout)
                .request_state_key(&crate::secrets::mcp_state_key(&config))
                .map_err(|e| ConfigError::invalid("server.mcp_state_key", e.to_string()))?;
            if config.policies.approval.is_some() {
                server = server.outcome_tool(OUTCOME_TOOL).instructions(format!(
                    "Some calls wait for a person's approval: they answer at once with a suspension id. Call `{OUTCOME_TOOL}` with that id to learn whether the call was decided, and its result."
                ));
            }
            server = server.list_filter(ListFilter::new(move |tool, user| {
                serves(filter_by.as_deref(), scoped_by.as_deref(), user, tool)
            }));
            // rmcp's own expiry is only a net under the gateway's (see `McpSessions`): it
            // closes sessions that exchanged no message, open streams included.
            let mut sessions = RmcpSessionConfig::default();
            sessions.keep_alive = Some(
                RmcpSessionConfig::DEFAULT_KEEP_ALIVE
                    .max(config.server.mcp_sessions.idle_timeout),
            );
            // Bodies over the limit are answered 413 by the endpoint, as on `/v1`.
            Ok(server.http_service_with_sessions(
                StreamableHttpServerConfig::default()
                    .with_max_request_body_bytes(config.server.body_limit.0),
                sessions,
            ))
        });
        let mcp = mcp.transpose()?;
        let mcp_sessions = McpSessions::start(config.server.mcp_sessions, mcp.clone());
        // Last, once nothing can fail: from here on, events go to this configuration's
        // webhooks (or nowhere), and the notifier of the previous one winds down.
        let webhooks = config.policies.approval.as_ref().map(|a| &a.webhooks);
        let notifier = match webhooks.filter(|w| !w.is_empty()) {
            Some(webhooks) => Some(
                Notifier::start(webhooks, &shared.notifications, shared.suspensions.store())
                    .map_err(GatewayError::Io)?,
            ),
            None => None,
        };
        shared.notifications.install(notifier);

        Ok(Gateway {
            keys: ApiKeys::new(&config.users),
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
            mcp_sessions,
            suspensions: shared.suspensions.store(),
            notifications: shared.notifications.clone(),
            authorize,
            tool_scopes,
            audit,
            extensions: extensions.clone(),
            upstreams,
        })
    }

    /// The hooks of your own it was built with.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The pipeline calls run through.
    pub fn pipeline(&self) -> &Pipeline {
        self.system.pipeline()
    }

    /// The scopes a token needs to call `tool` (none when not configured).
    pub fn tool_scopes(&self, tool: &str) -> &[String] {
        self.tool_scopes.as_ref().map_or(&[], |s| s.required(tool))
    }

    /// The scopes of `tool` that `user`'s token lacks (none for an API-key caller, or a
    /// tool without required scopes).
    pub fn missing_tool_scopes(&self, user: &User, tool: &str) -> Vec<&str> {
        self.tool_scopes
            .as_ref()
            .map_or_else(Vec::new, |s| s.missing(user, tool))
    }

    /// The tools `user` may call (all of them without an authorization policy); an
    /// upstream's prompts and resources, which MCP serves as such, are not listed.
    pub fn visible_tools(&self, user: &User) -> Vec<ToolDefinition> {
        self.pipeline()
            .definitions()
            .filter(|tool| toolgate_mcp::is_tool(tool) && crate::pins::is_served(tool))
            .filter(|tool| {
                self.authorize
                    .as_ref()
                    .is_none_or(|a| a.can_call(user, tool))
                    && self
                        .tool_scopes
                        .as_ref()
                        .is_none_or(|s| s.allows(user, tool))
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

    /// Whether an approver is refused when approving or completing their own call
    /// (`policies.approval.four_eyes`, on by default).
    pub fn four_eyes(&self) -> bool {
        self.four_eyes
    }

    /// Keeps the MCP sessions of `old`, the gateway this one replaces on a reload: `old`'s
    /// endpoint, with its sessions and who owns each, serves this configuration from now
    /// on, so that clients do not have to initialize again.
    pub(crate) fn keep_mcp_sessions(&mut self, old: &Gateway) {
        if let (Some(new), Some(kept)) = (&self.mcp, &old.mcp) {
            kept.serve_as(new);
            self.mcp = Some(kept.clone());
            old.mcp_sessions.set_limits(self.config.server.mcp_sessions);
            self.mcp_sessions = Arc::clone(&old.mcp_sessions);
        }
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

    /// Keeps the identity provider's keys that `old` cached (when the issuer is the same),
    /// so that a reload while the issuer is down locks no token holder out.
    pub(crate) fn keep_identity_keys(&self, old: &Gateway) {
        self.identity.keep_keys_of(&old.identity);
    }

    /// For a tool imported from an upstream MCP server, whether its arguments are checked
    /// against its input schema before a call leaves; `None` for any other tool.
    pub fn checks_arguments(&self, tool: &str) -> Option<bool> {
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

/// Whether `user` is served `tool` over MCP — listed, called, subscribed to: tools held
/// back for a changed definition are served to nobody, others per the authorization
/// policy and the token's scopes.
fn serves(
    authorize: Option<&Authorize>,
    tool_scopes: Option<&ToolScopes>,
    user: &User,
    tool: &ToolDefinition,
) -> bool {
    crate::pins::is_served(tool)
        && authorize.is_none_or(|a| a.can_call(user, tool))
        && tool_scopes.is_none_or(|s| s.allows(user, tool))
}

/// The hooks of one tool by stage, in the order they run.
pub type StagePlan = Vec<(toolgate_core::Stage, Vec<String>)>;
