//! Importing the tools of upstream MCP servers.

mod bounds;
mod cancelled;
mod config;
mod direct;
mod failure;
mod features;
mod frames;
mod http_pool;
mod input;
mod link;
mod message;
mod message_head;
pub mod per_caller;
mod places;
mod post;
mod process_group;
mod relay;
mod request_streams;
mod response_stream;
mod secrets;
mod stdio;
mod stdio_env;
mod stdio_input;
mod stdio_output;
mod streams;
mod tasks;
mod told;
mod tool;
mod unreadable;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use jsonschema::Validator;
use tokio::time::Instant;
use toolgate_core::User;
use toolgate_core::error::RegistryError;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::tool::{ErasedTool, ToolAnnotations, ToolDefinition, ToolSource};

pub use bounds::UpstreamBounds;
pub use config::{Backoff, DEFAULT_MAX_CONNECTIONS, UpstreamConfig, UpstreamTransport};
pub use features::{
    ImportedPrompt, ImportedResources, PROMPT_PREFIX, PROMPT_TAG, RESOURCES_PREFIX, RESOURCES_TAG,
    TASKS_PREFIX, TASKS_TAG, is_tool,
};
pub use per_caller::{CallerAccessToken, CallerCredentials, PerCaller, StaticCallerCredentials};
pub use places::{UPSTREAM_SHARE_WAITS, UPSTREAM_WAITS};
pub use relay::UNATTRIBUTED;
pub use secrets::{MIN_GUESSED_SECRET_LEN, is_credential_name};
pub use stdio_env::{STDIO_PASSED_ENV, is_env_name};
pub use tasks::ImportedTasks;
pub use tool::ImportedTool;

use crate::McpError;
use link::Link;
pub(crate) use link::{NOT_SUBSCRIBED, RESOURCE_NOT_FOUND, SUBSCRIPTIONS_UNSUPPORTED};

/// A connection to one upstream MCP server, and the tools imported from it.
///
/// [`Upstream::connect`] reads the credential, connects and discovers the tools;
/// [`register`](Upstream::register) adds them to a [`ToolRegistry`] as
/// [`ImportedTool`]s; a pipeline built over that registry
/// ([`PipelineBuilder::registry`](toolgate_core::PipelineBuilder::registry)) applies every
/// hook to them. The connection is
/// shared by the imported tools; when the upstream dies, the next call reconnects (a
/// stdio program is started again) with backoff.
///
/// # Examples
///
/// ```no_run
/// use toolgate_core::Pipeline;
/// use toolgate_core::registry::ToolRegistry;
/// use toolgate_mcp::{McpServer, Upstream, UpstreamConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let files = Upstream::connect(UpstreamConfig::stdio("files", "mcp-files", ["--root", "/srv"]).prefix("files.")).await?;
/// let mut tools = ToolRegistry::new();
/// files.register(&mut tools)?;
/// McpServer::new(Pipeline::builder().registry(tools).build()?).serve_stdio().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Upstream {
    link: Arc<Link>,
    tools: Vec<ToolDefinition>,
    /// For each of `tools`, its name upstream.
    remote_names: Vec<String>,
    /// For each of `tools`, its compiled input schema (`None`: arguments not checked).
    validators: Vec<Option<Arc<Validator>>>,
    /// The upstream's prompts and resources, as tools (see [`features`]).
    features: Vec<Arc<dyn ErasedTool>>,
}

impl Upstream {
    /// Connects to the upstream and discovers its tools (or takes the declared ones).
    ///
    /// # Errors
    ///
    /// [`McpError::MissingCredential`] when the credential's variable is not set;
    /// [`McpError::Connect`] / [`McpError::Discovery`] when the upstream cannot be
    /// reached or listed and no tools are declared; [`McpError::Config`] for an empty
    /// name, a [`max_connections`](UpstreamConfig::max_connections) of 0 or one set on a
    /// stdio server, a [`max_connections_per_caller`](UpstreamConfig::max_connections_per_caller)
    /// of 0, above the bound or set on a stdio server, for per-caller credentials on a stdio server, or for a name in
    /// [`inherit_env`](UpstreamConfig::inherit_env) or [`env`](UpstreamConfig::env), or
    /// a stdio server's [`credential_env`](UpstreamConfig::credential_env), that cannot be
    /// a variable's.
    pub async fn connect(config: UpstreamConfig) -> Result<Upstream, McpError> {
        if config.name.is_empty() {
            return Err(McpError::Config(
                "an upstream MCP server needs a name".to_owned(),
            ));
        }
        if config.per_caller.is_some()
            && matches!(config.transport, UpstreamTransport::Stdio { .. })
        {
            return Err(McpError::Config(format!(
                "MCP server `{}` is a program started over stdio: it cannot be called as each caller (that needs an HTTP server); remove the per-caller credentials or use its HTTP endpoint",
                config.name
            )));
        }
        if config.max_connections.is_some()
            && matches!(config.transport, UpstreamTransport::Stdio { .. })
        {
            return Err(McpError::Config(format!(
                "MCP server `{}` is a program started over stdio: `max_connections` bounds the requests in flight to a server over HTTP, and a stdio server is one pipe, which it cannot bound; remove `max_connections`",
                config.name
            )));
        }
        if config.max_connections == Some(0) {
            return Err(McpError::Config(format!(
                "MCP server `{}`: `max_connections` is 0, which would let no request reach it; set at least 1 (default {DEFAULT_MAX_CONNECTIONS})",
                config.name
            )));
        }
        if config.max_connections_per_caller.is_some()
            && matches!(config.transport, UpstreamTransport::Stdio { .. })
        {
            return Err(McpError::Config(format!(
                "MCP server `{}` is a program started over stdio: `max_connections_per_caller` shares out the requests in flight to a server over HTTP, and a stdio server is one pipe, which it cannot bound; remove `max_connections_per_caller`",
                config.name
            )));
        }
        match config.max_connections_per_caller {
            Some(0) => {
                return Err(McpError::Config(format!(
                    "MCP server `{}`: `max_connections_per_caller` is 0, which would let no caller's request reach it; set at least 1 (default: half of `max_connections`)",
                    config.name
                )));
            }
            Some(share) if share > config.max_in_flight() => {
                return Err(McpError::Config(format!(
                    "MCP server `{}`: `max_connections_per_caller` is {share}, more than the {} requests in flight its `max_connections` allows in all; set at most {} (a caller may then hold every place), or raise `max_connections`",
                    config.name,
                    config.max_in_flight(),
                    config.max_in_flight()
                )));
            }
            _ => {}
        }
        if let UpstreamTransport::Stdio {
            inherit_env, env, ..
        } = &config.transport
            && let Some(why) =
                stdio_env::refused_name(inherit_env, env, config.credential_env.as_deref())
        {
            return Err(McpError::Config(format!(
                "MCP server `{}`: {why}",
                config.name
            )));
        }
        let credential = match &config.credential_env {
            Some(var) => Some(std::env::var(var).map_err(|_| McpError::MissingCredential {
                server: config.name.clone(),
                var: var.clone(),
            })?),
            None => None,
        };
        let link = Arc::new(Link::new(config, credential));
        let config = &link.config;
        let deadline = Instant::now() + config.connect_timeout;
        let discovered = link.list_tools(deadline).await;

        let mut tools = Vec::new();
        let mut remote_names = Vec::new();
        if config.declared_tools.is_empty() {
            let discovered = match discovered {
                Ok(discovered) => discovered,
                Err(
                    e @ (toolgate_core::ToolError::RetryAfter { .. }
                    | toolgate_core::ToolError::Timeout { .. }),
                ) => {
                    // Why the connection failed says more than "unavailable, retry after".
                    let reason = match link.last_failure().await {
                        Some(why) => why,
                        None => link.scrubbed(e.bounded_message()),
                    };
                    return Err(McpError::Connect {
                        server: config.name.clone(),
                        reason,
                    });
                }
                Err(other) => {
                    return Err(McpError::Discovery {
                        server: config.name.clone(),
                        reason: link.scrubbed(other.bounded_message()),
                    });
                }
            };
            for tool in &discovered {
                remote_names.push(tool.name.to_string());
                tools.push(link.scrub_definition(definition_from_mcp(config, tool)));
            }
        } else {
            let discovered = match discovered {
                Ok(tools) => Some(tools),
                Err(e) => {
                    let error = link.scrubbed(e.bounded_message());
                    tracing::warn!(server = %config.name, %error, "MCP server not reachable at start-up; registering its declared tools");
                    None
                }
            };
            for declared in &config.declared_tools {
                let remote = discovered
                    .as_ref()
                    .and_then(|d| d.iter().find(|t| t.name == declared.name));
                match (remote, &discovered) {
                    (Some(remote), _) => warn_on_differences(config, declared, remote),
                    (None, Some(_)) => {
                        tracing::warn!(server = %config.name, tool = %declared.name, "declared tool is not offered by the MCP server; calls to it will fail");
                    }
                    (None, None) => {}
                }
                remote_names.push(declared.name.clone());
                let mut definition = declared.clone();
                definition.name = prefixed(config, &declared.name);
                definition.output_schema =
                    Some(crate::result::output_schema(declared.output_schema.clone()));
                definition.source = ToolSource::Mcp {
                    server: config.name.clone(),
                };
                tools.push(definition);
            }
        }
        let validators = tools
            .iter()
            .map(|definition| input_validator(config, definition))
            .collect();
        let (prompts, resources, tasks) = if config.declared_tools.is_empty() {
            discover_features(&link, deadline).await
        } else {
            (Vec::new(), None, None)
        };
        let mut features: Vec<Arc<dyn ErasedTool>> = Vec::new();
        features.extend(
            prompts
                .into_iter()
                .map(|p| Arc::new(p) as Arc<dyn ErasedTool>),
        );
        features.extend(resources.map(|r| Arc::new(r) as Arc<dyn ErasedTool>));
        features.extend(tasks.map(|t| Arc::new(t) as Arc<dyn ErasedTool>));
        // Imported: from now on its requests wait for their places, as every other's.
        link.importing.store(false, Ordering::Relaxed);
        Ok(Upstream {
            link,
            tools,
            remote_names,
            validators,
            features,
        })
    }

    /// How many connections of single callers are open, for an upstream called as each
    /// caller ([`UpstreamConfig::credentials_per_caller`]); 0 otherwise. At most
    /// [`PerCaller::max_sessions`].
    pub fn caller_connections(&self) -> u64 {
        self.link.caller_links()
    }

    /// Authorizes the resource subscriptions made through this upstream again as a new
    /// configuration replaces the one it belongs to, and moves them to `next` (the same
    /// upstream in the new configuration; `None` when it has none): `may_read` says
    /// whether a subscriber may still read the upstream's resources.
    ///
    /// The subscriptions of those it refuses end — no update reaches them any more, and
    /// a `subscriptions/listen` request among them ends with an error saying why
    /// (2025-11-25 has no message that ends a subscription: a session's updates stop).
    /// The others move to `next`, whose upstream is subscribed to what they watch; this
    /// upstream is unsubscribed. A caller's own connection (an upstream called as each
    /// caller) cannot move, its credential being the caller's: its subscriptions stay
    /// on it while it lives, and those refused end.
    ///
    /// Returns how many subscriptions moved, and how many ended.
    pub async fn hand_over_subscriptions(
        &self,
        next: Option<&Upstream>,
        may_read: impl Fn(&User) -> bool + Sync,
    ) -> (usize, usize) {
        let next = next.map(|n| &n.link);
        let (moved, mut ended) = self.link.hand_over_subscriptions(next, &may_read).await;
        for link in self.link.held_caller_links() {
            ended += link.end_subscriptions_unless(&may_read).await;
        }
        (moved, ended)
    }

    /// The upstream's configured name.
    pub fn name(&self) -> &str {
        &self.link.config.name
    }

    /// The definitions of the imported tools, as they will be registered.
    pub fn definitions(&self) -> &[ToolDefinition] {
        &self.tools
    }

    /// The imported tools, ready to register.
    pub fn tools(&self) -> Vec<ImportedTool> {
        self.tools
            .iter()
            .zip(&self.remote_names)
            .zip(&self.validators)
            .map(|((definition, remote), validator)| {
                ImportedTool::new(
                    Arc::clone(&self.link),
                    definition.clone(),
                    remote.clone(),
                    validator.clone(),
                )
            })
            .collect()
    }

    /// Whether arguments are checked against the input schema of the imported tool
    /// `name` before a call leaves (see [`UpstreamConfig::validate_arguments`]): `false`
    /// when checking is off or the upstream's schema is not a valid JSON Schema.
    pub fn validates_arguments(&self, name: &str) -> bool {
        self.tools
            .iter()
            .zip(&self.validators)
            .any(|(definition, validator)| definition.name == name && validator.is_some())
    }

    /// The upstream's prompts and resources as pipeline tools ([`ImportedPrompt`],
    /// [`ImportedResources`]): register them beside the tools so that policies apply.
    pub fn features(&self) -> &[Arc<dyn ErasedTool>] {
        &self.features
    }

    /// Registers every imported tool, prompt and resources tool in `registry`. Returns
    /// their names. Register the local tools in the same registry, before or after, and
    /// start the pipeline from it with
    /// [`PipelineBuilder::registry`](toolgate_core::PipelineBuilder::registry), which
    /// replaces the tools the builder has so far.
    ///
    /// # Errors
    ///
    /// [`McpError::Collision`] when a name is already taken (configure a
    /// [prefix](UpstreamConfig::prefix)); [`McpError::Registry`] for a name the registry
    /// refuses. Tools before the failing one stay registered: discard the registry.
    pub fn register(&self, registry: &mut ToolRegistry) -> Result<Vec<String>, McpError> {
        let mut names = Vec::new();
        let tools = self
            .tools()
            .into_iter()
            .map(|tool| Arc::new(tool) as Arc<dyn ErasedTool>)
            .chain(self.features.iter().cloned());
        for tool in tools {
            let name = tool.definition().name;
            registry.register_erased(tool).map_err(|e| match e {
                RegistryError::DuplicateTool { name } => McpError::Collision {
                    server: self.name().to_owned(),
                    tool: name,
                },
                source => McpError::Registry {
                    server: self.name().to_owned(),
                    source,
                },
            })?;
            names.push(name);
        }
        Ok(names)
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.link.config.name)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The upstream's prompts, resources and tasks, when it offers them (not for an upstream
/// whose tools are declared: configuration chose what to import). An upstream that fails
/// to list its prompts is imported without them, with a warning.
async fn discover_features(
    link: &Arc<Link>,
    deadline: Instant,
) -> (
    Vec<ImportedPrompt>,
    Option<ImportedResources>,
    Option<ImportedTasks>,
) {
    let config = &link.config;
    let Some(capabilities) = link.capabilities(deadline).await else {
        return (Vec::new(), None, None);
    };
    let mut prompts = Vec::new();
    if capabilities.prompts.is_some() {
        match link.list_prompts(deadline).await {
            Ok(listed) => {
                let prefix = config.prefix.as_deref().unwrap_or_default();
                prompts.extend(
                    listed
                        .iter()
                        .filter_map(|prompt| ImportedPrompt::new(Arc::clone(link), prompt, prefix)),
                );
            }
            Err(e) => {
                let error = link.scrubbed(e.bounded_message());
                tracing::warn!(server = %config.name, %error, "the MCP server's prompts could not be listed; they are not imported");
            }
        }
    }
    let resources = capabilities
        .resources
        .is_some()
        .then(|| ImportedResources::new(Arc::clone(link)))
        .flatten();
    let tasks = capabilities
        .supports_tasks()
        .then(|| ImportedTasks::new(Arc::clone(link)))
        .flatten();
    (prompts, resources, tasks)
}

/// The compiled input schema of an imported tool, when arguments are to be checked. A
/// schema that does not compile is reported once, here, and the tool's calls go
/// unchecked to the upstream (which checks them itself).
fn input_validator(config: &UpstreamConfig, definition: &ToolDefinition) -> Option<Arc<Validator>> {
    if !config.validate_arguments {
        return None;
    }
    match jsonschema::validator_for(&definition.input_schema) {
        Ok(validator) => Some(Arc::new(validator)),
        Err(e) => {
            tracing::warn!(server = %config.name, tool = %definition.name, error = %e, "the tool's input schema is not a valid JSON Schema; its arguments go to the MCP server unchecked");
            None
        }
    }
}

fn prefixed(config: &UpstreamConfig, name: &str) -> String {
    match &config.prefix {
        Some(prefix) => format!("{prefix}{name}"),
        None => name.to_owned(),
    }
}

/// A discovered tool as toolgate registers it. Its annotations are kept for listing, and
/// `source = mcp` marks them as untrusted for retry and cache defaults.
fn definition_from_mcp(config: &UpstreamConfig, tool: &rmcp::model::Tool) -> ToolDefinition {
    let hints = tool.annotations.clone().unwrap_or_default();
    ToolDefinition {
        name: prefixed(config, &tool.name),
        title: tool.title.clone().or(hints.title.clone()),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        version: "mcp".to_owned(),
        input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        output_schema: Some(crate::result::output_schema(
            tool.output_schema
                .as_ref()
                .map(|s| serde_json::Value::Object((**s).clone())),
        )),
        annotations: ToolAnnotations {
            read_only: hints.read_only_hint.unwrap_or(false),
            idempotent: hints.idempotent_hint.unwrap_or(false),
            destructive: hints.destructive_hint.unwrap_or(true),
            open_world: hints.open_world_hint.unwrap_or(true),
        },
        tags: vec!["mcp".to_owned()],
        source: ToolSource::Mcp {
            server: config.name.clone(),
        },
    }
}

fn warn_on_differences(
    config: &UpstreamConfig,
    declared: &ToolDefinition,
    remote: &rmcp::model::Tool,
) {
    let reported = definition_from_mcp(config, remote);
    if declared.input_schema != reported.input_schema {
        tracing::warn!(server = %config.name, tool = %declared.name, "declared input schema differs from the one the MCP server reports; using the declared one");
    }
    if declared.description != reported.description {
        tracing::warn!(server = %config.name, tool = %declared.name, "declared description differs from the one the MCP server reports; using the declared one");
    }
    if declared.output_schema.is_some()
        && Some(crate::result::output_schema(declared.output_schema.clone()))
            != reported.output_schema
    {
        tracing::warn!(server = %config.name, tool = %declared.name, "declared output schema differs from the one the MCP server reports; using the declared one");
    }
}
