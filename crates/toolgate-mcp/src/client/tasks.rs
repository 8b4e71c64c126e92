//! An upstream's tasks (SEP-2663) as a pipeline tool, so that a caller's `tasks/get`,
//! `tasks/update` and `tasks/cancel` of a task its upstream created pass the same hooks
//! as its calls (authorization, rate limits, audit, output redaction).
//!
//! The tool `tasks.NAME` (the upstream's configured name), tagged [`TASKS_TAG`], takes
//! `{"get": HANDLE}`, `{"cancel": HANDLE}` or `{"update": HANDLE, "inputResponses": {…}}`
//! — `HANDLE` the caller's own id of the task — and relays the request to the upstream
//! on the caller's connection (its own credential, for an upstream called as each
//! caller). Which upstream task a handle stands for is for the MCP server to find among
//! the caller's own ([`CallerRequest::relayed_task`]); called any other way (over the HTTP
//! API, say) the tool refuses, so that no caller reaches a task by guessing its upstream
//! id.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::InputResponses;
use serde_json::{Value, json};
use toolgate_core::error::InputViolations;
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolDefinition};
use toolgate_core::{ToolError, ToolInvokeContext};

use super::features::{TASKS_PREFIX, TASKS_TAG, deadline_for, definition, feature_tool_name};
use super::link::Link;
use crate::caller::CallerKey;

/// An upstream's tasks, reached through the pipeline.
pub struct ImportedTasks {
    link: Arc<Link>,
    definition: ToolDefinition,
}

impl ImportedTasks {
    /// The tasks tool of `link`'s upstream (`None` when its name cannot be part of a tool
    /// name); its connections hand the tasks of callers that take them over to the
    /// server from then on.
    pub(crate) fn new(link: Arc<Link>) -> Option<ImportedTasks> {
        let name = feature_tool_name(
            TASKS_PREFIX,
            &link,
            "its tasks are polled by toolgate, not relayed",
        )?;
        let schema = json!({
            "type": "object",
            "properties": {
                "get": { "type": "string", "description": "The task whose state to get." },
                "cancel": { "type": "string", "description": "The task to cancel." },
                "update": { "type": "string", "description": "The task to send answers to." },
                "inputResponses": { "type": "object", "description": "With `update`: the answers, by the keys of the task's requests." },
            },
        });
        let description = format!("The tasks of MCP server `{}`.", link.config.name);
        let mut definition = definition(&link, name.clone(), description, schema, TASKS_TAG);
        // Cancelling changes the task: not a read.
        definition.annotations.read_only = false;
        let _ = link.tasks_tool.set(name);
        Some(ImportedTasks { link, definition })
    }
}

/// What a tasks tool is asked.
enum Request {
    Get,
    Cancel,
    Update(InputResponses),
}

impl Request {
    fn of(input: &Value) -> Result<Request, ToolError> {
        let map = input.as_object();
        let has = |key: &str| map.is_some_and(|m| m.get(key).is_some_and(Value::is_string));
        let keys = map.map_or(0, |m| m.len());
        if has("get") && keys == 1 {
            return Ok(Request::Get);
        }
        if has("cancel") && keys == 1 {
            return Ok(Request::Cancel);
        }
        if has("update") && keys == 2 {
            let responses = map
                .and_then(|m| m.get("inputResponses"))
                .cloned()
                .ok_or_else(|| {
                    ToolError::InvalidInput(InputViolations::one(
                        "inputResponses",
                        "`update` needs the answers, as `inputResponses`",
                    ))
                })?;
            return serde_json::from_value(responses)
                .map(Request::Update)
                .map_err(|e| {
                    ToolError::InvalidInput(InputViolations::one(
                        "inputResponses",
                        format!("answers as MCP `tasks/update` sends them: {e}"),
                    ))
                });
        }
        Err(ToolError::InvalidInput(InputViolations::one(
            "",
            "give exactly one of `get` or `cancel` (a task id), or `update` (a task id) with `inputResponses`",
        )))
    }
}

impl ErasedTool for ImportedTasks {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        Request::of(input).map(|_| None)
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let request = Request::of(ctx.input())?;
            let Some(id) = ctx
                .try_get::<CallerKey>()
                .and_then(|caller| caller.relayed_task.clone())
            else {
                return Err(ToolError::abort(
                    "an upstream's tasks are reached over MCP, with `tasks/get`, `tasks/update` and `tasks/cancel` of the task id the call answered",
                    "not_relayed",
                    400,
                ));
            };
            let deadline = deadline_for(&self.link, ctx);
            let link = self.link.as_caller(ctx).await?;
            let user = Some(ctx.user());
            let answer = match request {
                Request::Get => link.get_task(&id, user, deadline).await.and_then(|task| {
                    serde_json::to_value(task).map_err(|e| ToolError::internal(e.to_string()))
                }),
                Request::Cancel => link
                    .cancel_task(&id, user, deadline)
                    .await
                    .map(|()| json!({})),
                Request::Update(responses) => link
                    .update_task(&id, responses, user, deadline)
                    .await
                    .map(|()| json!({})),
            };
            link.scrub(answer)
        })
    }
}
