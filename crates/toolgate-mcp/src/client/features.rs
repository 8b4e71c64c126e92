//! An upstream's prompts and resources as pipeline tools, so that every policy applies to
//! them as to its tools: authorization (rules name them like tools), rate limits,
//! concurrency caps, audit, output redaction.
//!
//! * Each prompt `P` is a tool `prompt.P` (with the upstream's prefix: `prompt.gh.P`),
//!   tagged [`PROMPT_TAG`]: its arguments are the prompt's, its output the upstream's
//!   `GetPromptResult`.
//! * An upstream's resources are one tool `resources.NAME` (its configured name), tagged
//!   [`RESOURCES_TAG`]: `{"uri": "…"}` reads a resource (the upstream's
//!   `ReadResourceResult`); `{"list": "resources"}` and `{"list": "templates"}` list them;
//!   `{"subscribe": "…"}` and `{"unsubscribe": "…"}` manage the caller's MCP session's
//!   subscription (updates are relayed to every subscribed session).
//! * Completing an argument (`completion/complete`) is a call of the tool the argument
//!   belongs to — the prompt's tool, or for a resource template the upstream's resources
//!   tool — with the input `{"complete": PARAMS}`, `PARAMS` the MCP request's parameters
//!   (the prompt named as served); its output is the upstream's `CompleteResult`. So a
//!   rate limit, an authorization rule or an audit trail that names the prompt covers
//!   its completions too.
//!
//! They are not tools to a model: MCP serves them as prompts and resources, and listings
//! of tools leave them out ([`is_tool`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{CompleteRequestParams, Prompt, Reference};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use toolgate_core::error::InputViolations;
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolAnnotations, ToolDefinition, ToolSource};
use toolgate_core::{ToolError, ToolInvokeContext, User};

use super::link::Link;
use crate::caller::CallerKey;

/// The tag of a tool that is an upstream's prompt.
pub const PROMPT_TAG: &str = "mcp-prompt";
/// The tag of a tool that is an upstream's resources.
pub const RESOURCES_TAG: &str = "mcp-resources";
/// The name prefix of a prompt's tool.
pub const PROMPT_PREFIX: &str = "prompt.";
/// The name prefix of an upstream's resources tool.
pub const RESOURCES_PREFIX: &str = "resources.";
/// The tag of a tool that relays `tasks/*` requests to an upstream.
pub const TASKS_TAG: &str = "mcp-tasks";
/// The name prefix of an upstream's tasks tool.
pub const TASKS_PREFIX: &str = "tasks.";

/// Whether `definition` is a tool proper, not an upstream's prompt, resources or tasks.
pub fn is_tool(definition: &ToolDefinition) -> bool {
    !definition
        .tags
        .iter()
        .any(|t| t == PROMPT_TAG || t == RESOURCES_TAG || t == TASKS_TAG)
}

/// The key of an input that asks for completions instead of the tool's usual request.
const COMPLETE: &str = "complete";

/// The completion request `input` makes (`{"complete": PARAMS}`), if it makes one: `None`
/// for any other input, an error for a completion request MCP cannot read.
fn completion(input: &Value) -> Option<Result<CompleteRequestParams, ToolError>> {
    let map = input.as_object()?;
    let params = map
        .get(COMPLETE)
        .filter(|p| p.is_object() && map.len() == 1)?;
    Some(serde_json::from_value(params.clone()).map_err(|e| {
        ToolError::InvalidInput(InputViolations::one(
            COMPLETE,
            format!("a completion request as MCP `completion/complete` sends it: {e}"),
        ))
    }))
}

pub(super) fn deadline_for(link: &Link, ctx: &ToolInvokeContext) -> Instant {
    let deadline = Instant::now() + link.config.call_timeout;
    ctx.deadline().map_or(deadline, |d| deadline.min(d))
}

/// The name of the tool through which one of the upstream's features is reached:
/// `prefix` and the server's name. `None`, with a warning that ends in `instead` (what
/// happens to the feature), when the server's name cannot be part of a tool name.
pub(super) fn feature_tool_name(prefix: &str, link: &Link, instead: &str) -> Option<String> {
    let name = format!("{prefix}{}", link.config.name);
    if toolgate_core::registry::ToolRegistry::is_valid_name(&name) {
        return Some(name);
    }
    tracing::warn!(server = %link.config.name, "the server's name cannot be part of a tool name: {instead}");
    None
}

pub(super) fn definition(
    link: &Link,
    name: String,
    description: String,
    input_schema: Value,
    tag: &str,
) -> ToolDefinition {
    ToolDefinition {
        name,
        title: None,
        description,
        version: "mcp".to_owned(),
        input_schema,
        output_schema: None,
        annotations: ToolAnnotations {
            read_only: true,
            idempotent: true,
            destructive: false,
            open_world: true,
        },
        tags: vec!["mcp".to_owned(), tag.to_owned()],
        source: ToolSource::Mcp {
            server: link.config.name.clone(),
        },
    }
}

fn to_output<T: serde::Serialize>(answer: T) -> Result<Value, ToolError> {
    let mut output = serde_json::to_value(answer)
        .map_err(|e| ToolError::internal(format!("an upstream answer could not be read: {e}")))?;
    if let Value::Object(map) = &mut output {
        map.remove("resultType");
        crate::result::remove_hop_meta(map);
    }
    Ok(output)
}

/// An upstream's prompt, called through the pipeline.
pub struct ImportedPrompt {
    link: Arc<Link>,
    definition: ToolDefinition,
    remote_name: String,
}

impl ImportedPrompt {
    /// The prompt as a tool, or `None` when its name cannot be a tool name.
    pub(crate) fn new(link: Arc<Link>, prompt: &Prompt, prefix: &str) -> Option<ImportedPrompt> {
        let name = format!("{PROMPT_PREFIX}{prefix}{}", prompt.name);
        let mut properties = Map::new();
        let mut required = Vec::new();
        for argument in prompt.arguments.iter().flatten() {
            let mut schema = json!({ "type": "string" });
            if let Some(description) = &argument.description {
                schema["description"] = json!(description);
            }
            properties.insert(argument.name.clone(), schema);
            if argument.required == Some(true) {
                required.push(json!(argument.name));
            }
        }
        let schema = json!({ "type": "object", "properties": properties, "required": required });
        let mut definition = definition(
            &link,
            name,
            prompt.description.clone().unwrap_or_default(),
            schema,
            PROMPT_TAG,
        );
        definition.title = prompt.title.clone();
        let valid = toolgate_core::registry::ToolRegistry::is_valid_name(&definition.name);
        if !valid {
            tracing::warn!(server = %link.config.name, prompt = %prompt.name, "the prompt's name cannot be a tool name (letters, digits, `_`, `-`, `.`; 64 at most): it is not imported");
            return None;
        }
        Some(ImportedPrompt {
            definition: link.scrub_definition(definition),
            link,
            remote_name: prompt.name.clone(),
        })
    }

    /// The prompt's name at its upstream.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }

    /// The prompt's name as MCP lists it (without [`PROMPT_PREFIX`]).
    pub fn prompt_name(&self) -> &str {
        self.definition
            .name
            .strip_prefix(PROMPT_PREFIX)
            .unwrap_or(&self.definition.name)
    }
}

impl ErasedTool for ImportedPrompt {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        // A prompt's arguments are strings: an object under `complete` is no argument.
        if let Some(request) = completion(input) {
            return request.map(|_| None);
        }
        match input {
            Value::Object(map) if map.values().all(Value::is_string) => Ok(None),
            Value::Object(_) => Err(ToolError::InvalidInput(InputViolations::one(
                "",
                "the arguments of a prompt are strings",
            ))),
            Value::Null => Ok(None),
            _ => Err(ToolError::InvalidInput(InputViolations::one(
                "",
                "the arguments of a prompt must be a JSON object",
            ))),
        }
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let deadline = deadline_for(&self.link, ctx);
            let link = self.link.as_caller(ctx).await?;
            if let Some(request) = completion(ctx.input()) {
                let answer = self.complete(&link, request?, ctx.user(), deadline).await;
                return link.scrub(answer);
            }
            let arguments = ctx.input().as_object().cloned().unwrap_or_default();
            let answer = link
                .get_prompt(&self.remote_name, arguments, deadline, ctx)
                .await
                .and_then(to_output);
            link.scrub(answer)
        })
    }
}

impl ImportedPrompt {
    /// Completions of an argument of this prompt, asked of the upstream by its name there.
    async fn complete(
        &self,
        link: &Link,
        mut request: CompleteRequestParams,
        user: &User,
        deadline: Instant,
    ) -> Result<Value, ToolError> {
        let Reference::Prompt(prompt) = &mut request.r#ref else {
            return Err(ToolError::InvalidInput(InputViolations::one(
                "complete.ref",
                "a prompt's completions are asked with a `ref/prompt` reference",
            )));
        };
        prompt.name = self.remote_name.clone();
        link.complete(request, Some(user), deadline)
            .await
            .and_then(to_output)
    }
}

/// An upstream's resources, read and listed through the pipeline.
pub struct ImportedResources {
    link: Arc<Link>,
    definition: ToolDefinition,
}

impl ImportedResources {
    pub(crate) fn new(link: Arc<Link>) -> Option<ImportedResources> {
        let name = feature_tool_name(RESOURCES_PREFIX, &link, "its resources are not imported")?;
        let schema = json!({
            "type": "object",
            "properties": {
                "uri": { "type": "string", "description": "The resource to read." },
                "list": { "enum": ["resources", "templates"], "description": "What to list instead." },
                "subscribe": { "type": "string", "description": "A resource to subscribe to." },
                "unsubscribe": { "type": "string", "description": "A resource to unsubscribe from." },
                "complete": { "type": "object", "description": "A `completion/complete` request for an argument of a resource template." },
            },
        });
        let description = format!("The resources of MCP server `{}`.", link.config.name);
        Some(ImportedResources {
            definition: definition(&link, name, description, schema, RESOURCES_TAG),
            link,
        })
    }
}

impl ErasedTool for ImportedResources {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        match Request::of(input) {
            Some(Request::Complete(request)) => request.map(|_| None),
            Some(_) => Ok(None),
            None => Err(ToolError::InvalidInput(InputViolations::one(
                "",
                "give exactly one of `uri` (a resource to read), `subscribe` or `unsubscribe` (a resource URI), `list` (`resources` or `templates`), or `complete` (a completion request)",
            ))),
        }
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let deadline = deadline_for(&self.link, ctx);
            let link = &self.link.as_caller(ctx).await?;
            let caller = ctx.try_get::<CallerKey>();
            let caller = caller.as_deref();
            let user = ctx.user();
            let answer = match Request::of(ctx.input()) {
                Some(Request::Read(uri)) => link
                    .read_resource(uri, caller, Some(user), deadline)
                    .await
                    .and_then(to_output),
                Some(Request::ListTemplates) => link
                    .list_resource_templates(caller, Some(user), deadline)
                    .await
                    .and_then(|t| to_output(json!({ "resourceTemplates": t }))),
                Some(Request::List) => link
                    .list_resources(caller, Some(user), deadline)
                    .await
                    .and_then(|r| to_output(json!({ "resources": r }))),
                Some(Request::Subscribe(uri)) => match caller {
                    Some(caller) => link
                        .subscribe(uri, caller, Arc::new(user.clone()), deadline)
                        .await
                        .map(|()| json!({})),
                    None => Err(no_session()),
                },
                Some(Request::Unsubscribe(uri)) => match caller {
                    Some(caller) => link
                        .unsubscribe(uri, caller, user, deadline)
                        .await
                        .map(|()| json!({})),
                    None => Err(no_session()),
                },
                Some(Request::Complete(request)) => {
                    complete_template(link, request?, user, deadline).await
                }
                None => Err(ToolError::internal("the input was checked")),
            };
            link.scrub(answer)
        })
    }
}

/// Completions of an argument of one of the upstream's resource templates. An upstream
/// that does not complete arguments has none to offer: it is not asked.
async fn complete_template(
    link: &Link,
    request: CompleteRequestParams,
    user: &User,
    deadline: Instant,
) -> Result<Value, ToolError> {
    if !matches!(request.r#ref, Reference::Resource(_)) {
        return Err(ToolError::InvalidInput(InputViolations::one(
            "complete.ref",
            "a resource template's completions are asked with a `ref/resource` reference",
        )));
    }
    let completes = link
        .capabilities(deadline)
        .await
        .is_some_and(|c| c.completions.is_some());
    if !completes {
        return Ok(json!({ "completion": { "values": [] } }));
    }
    link.complete(request, Some(user), deadline)
        .await
        .and_then(to_output)
}

/// What a call of a resources tool asks for.
// Made and matched once per call, never stored: its size is no concern (serde_json's
// `preserve_order`, on when the gateway has Cedar policies, makes the map inside larger).
#[allow(clippy::large_enum_variant)]
enum Request<'a> {
    Read(&'a str),
    List,
    ListTemplates,
    Subscribe(&'a str),
    Unsubscribe(&'a str),
    Complete(Result<CompleteRequestParams, ToolError>),
}

impl<'a> Request<'a> {
    /// The request `input` makes, when it makes exactly one.
    fn of(input: &'a Value) -> Option<Request<'a>> {
        if let Some(request) = completion(input) {
            return Some(Request::Complete(request));
        }
        let map = input.as_object()?;
        if map.len() != 1 {
            return None;
        }
        let (key, value) = map.iter().next()?;
        match (key.as_str(), value.as_str()?) {
            ("uri", uri) => Some(Request::Read(uri)),
            ("subscribe", uri) => Some(Request::Subscribe(uri)),
            ("unsubscribe", uri) => Some(Request::Unsubscribe(uri)),
            ("list", "resources") => Some(Request::List),
            ("list", "templates") => Some(Request::ListTemplates),
            _ => None,
        }
    }
}

fn no_session() -> ToolError {
    ToolError::InvalidInput(InputViolations::one(
        "",
        "subscriptions belong to an MCP session: subscribe over MCP (resources/subscribe)",
    ))
}
