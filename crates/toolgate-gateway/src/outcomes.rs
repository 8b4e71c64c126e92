//! The outcomes of calls that waited for approval, kept for the callers who made them.
//!
//! A call that needs approval answers its caller at once — with its suspension id — and
//! is decided later by an approver. The approver gets the result of the resumed call; the
//! caller fetches it from here, with `GET /v1/suspensions/{id}` or, over MCP, the tool
//! [`OUTCOME_TOOL`]. An outcome is kept for the suspension expiry of `policies.approval`
//! (24 h by default), at most [`MAX_OUTCOMES`] of them (the oldest go first), and only its
//! caller (or an approver) may read it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use moka::sync::Cache;
use serde_json::{Value, json};
use toolgate_core::error::InputViolations;
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolAnnotations, ToolDefinition, ToolSource};
use toolgate_core::{ToolError, ToolInvokeContext};
use toolgate_hooks::cache::NO_CACHE_TAG;

/// How many outcomes are kept at most.
pub const MAX_OUTCOMES: u64 = 10_000;

/// The name of the tool that fetches an outcome over MCP (and `/v1`).
pub const OUTCOME_TOOL: &str = "toolgate.outcome";

/// One decided call.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Who made the call.
    pub user: Arc<str>,
    /// Its result (a `ToolResult`: status, output or error, metadata).
    pub result: Value,
}

/// The outcomes, by suspension id. Cheap to clone.
#[derive(Clone)]
pub struct Outcomes {
    kept: Cache<String, Arc<Outcome>>,
}

impl std::fmt::Debug for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Outcomes({} kept)", self.kept.entry_count())
    }
}

impl Outcomes {
    /// A store keeping each outcome for `keep`.
    pub fn new(keep: Duration) -> Self {
        Outcomes {
            kept: Cache::builder()
                .max_capacity(MAX_OUTCOMES)
                .time_to_live(keep)
                .build(),
        }
    }

    /// Keeps the outcome of the call suspended under `id`.
    pub fn keep(&self, id: &str, outcome: Outcome) {
        self.kept.insert(id.to_owned(), Arc::new(outcome));
    }

    /// The outcome of `id`, when there is one.
    pub fn get(&self, id: &str) -> Option<Arc<Outcome>> {
        self.kept.get(id)
    }
}

/// `toolgate.outcome`: the outcome of one of the caller's calls that waited for approval.
pub(crate) struct OutcomeTool {
    outcomes: Outcomes,
    suspensions: Arc<dyn toolgate_core::suspension::SuspensionStore>,
}

impl OutcomeTool {
    pub(crate) fn new(
        outcomes: Outcomes,
        suspensions: Arc<dyn toolgate_core::suspension::SuspensionStore>,
    ) -> Self {
        OutcomeTool {
            outcomes,
            suspensions,
        }
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
            if let Some(outcome) = self.outcomes.get(id) {
                if *outcome.user != ctx.user().id {
                    return Err(unknown());
                }
                return Ok(json!({ "status": "decided", "result": outcome.result }));
            }
            let waiting = self
                .suspensions
                .get(id)
                .await
                .map_err(|e| ToolError::internal(e.to_string()))?;
            match waiting {
                Some(waiting) if waiting.user.id == ctx.user().id => {
                    Ok(json!({ "status": "waiting", "reason": waiting.reason }))
                }
                _ => Err(unknown()),
            }
        })
    }
}
