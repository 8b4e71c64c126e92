//! Labels from the configuration applied to a tool's definition.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolDefinition};
use toolgate_core::{ToolError, ToolInvokeContext};

use crate::config::ToolLabels;

/// A tool whose definition carries the operator's labels: `category`, `speed` and `safety`
/// as `key:value` tags, extra tags, and annotations that replace the tool's own.
pub struct Labelled {
    tool: Arc<dyn ErasedTool>,
    definition: ToolDefinition,
}

impl Labelled {
    /// `tool` with `labels` applied.
    pub fn new(tool: Arc<dyn ErasedTool>, labels: &ToolLabels) -> Self {
        let mut definition = tool.definition();
        let keyed = [
            ("category", &labels.category),
            ("speed", &labels.speed),
            ("safety", &labels.safety),
        ];
        for (key, value) in keyed {
            if let Some(value) = value {
                definition.tags.push(format!("{key}:{value}"));
            }
        }
        definition.tags.extend(labels.tags.iter().cloned());
        if let Some(a) = labels.annotations {
            definition.annotations = toolgate_core::tool::ToolAnnotations {
                read_only: a.read_only,
                idempotent: a.idempotent,
                destructive: a.destructive,
                open_world: a.open_world,
            };
        }
        Labelled { tool, definition }
    }
}

impl ErasedTool for Labelled {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        self.tool.check_input(input)
    }

    fn call<'a>(
        &'a self,
        prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        self.tool.call(prepared, ctx)
    }
}
