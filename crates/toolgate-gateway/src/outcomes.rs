//! The outcomes of calls that waited for approval, kept for the callers who made them.
//!
//! A call that needs approval answers its caller at once — with its suspension id — and
//! is decided later by an approver. The approver gets the result of the resumed call; the
//! caller fetches it with `GET /v1/suspensions/{id}` or, over MCP, the tool
//! [`OUTCOME_TOOL`]. Outcomes live in the suspension store
//! ([`SuspensionStore::keep_outcome`]), so that with `state:` on Redis any replica answers
//! for a call decided on another: each is kept for the suspension expiry of
//! `policies.approval` (24 h by default), at most `max_pending` of them (the oldest go
//! first), and only its caller (or an approver) may read it.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use toolgate_core::error::InputViolations;
use toolgate_core::suspension::{SuspensionStore, SuspensionStoreError};
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolAnnotations, ToolDefinition, ToolSource};
use toolgate_core::{ToolError, ToolInvokeContext};
use toolgate_hooks::cache::NO_CACHE_TAG;

/// The name of the tool that fetches an outcome over MCP (and `/v1`).
pub const OUTCOME_TOOL: &str = "toolgate.outcome";

/// `toolgate.outcome`: the outcome of one of the caller's calls that waited for approval.
pub(crate) struct OutcomeTool {
    suspensions: Arc<dyn SuspensionStore>,
}

impl OutcomeTool {
    pub(crate) fn new(suspensions: Arc<dyn SuspensionStore>) -> Self {
        OutcomeTool { suspensions }
    }
}

impl ErasedTool for OutcomeTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: OUTCOME_TOOL.to_owned(),
            title: Some("Outcome of a call that waited for approval".to_owned()),
            description: "The outcome of one of your calls that waited for a person's approval, by the suspension id it answered with: `waiting` while nobody has decided, else the call's result.".to_owned(),
            version: "1".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "id": { "type": "string", "description": "The suspension id." } },
                "required": ["id"],
                "additionalProperties": false,
            }),
            output_schema: None,
            annotations: ToolAnnotations::READ_ONLY,
            // Read-only, yet what it answers changes when an approver decides: a cached
            // `waiting` would hide the outcome for the whole TTL.
            tags: vec!["toolgate".to_owned(), NO_CACHE_TAG.to_owned()],
            source: ToolSource::Local,
        }
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        match input.get("id") {
            Some(Value::String(_)) => Ok(None),
            _ => Err(ToolError::InvalidInput(InputViolations::one(
                "id",
                "the suspension id, a string, is required",
            ))),
        }
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let id = ctx.input()["id"].as_str().unwrap_or_default();
            let unknown = || ToolError::UnknownSuspension { id: id.to_owned() };
            let decided = self.suspensions.outcome(id).await?;
            if let Some(outcome) = decided {
                if !outcome.is_for(ctx.user()) {
                    return Err(unknown());
                }
                return Ok(json!({ "status": "decided", "result": outcome.result }));
            }
            let waiting = match self.suspensions.get(id).await {
                Ok(waiting) => waiting,
                // Only the caller who made it learns that a call expired: to anyone else
                // an expired id is as unknown as one never issued.
                Err(expired @ SuspensionStoreError::Expired { .. }) => {
                    return match self.suspensions.expired_owner(id).await {
                        Ok(Some(owner)) if owner.is_same_caller(ctx.user()) => Err(expired.into()),
                        _ => Err(unknown()),
                    };
                }
                Err(other) => return Err(other.into()),
            };
            match waiting {
                Some(waiting) if waiting.user.is_same_caller(ctx.user()) => Ok(json!({
                    "status": "waiting",
                    "reason": waiting.reason,
                    "suspended_at": humantime::format_rfc3339_seconds(waiting.suspended_at)
                        .to_string(),
                })),
                _ => Err(unknown()),
            }
        })
    }
}
