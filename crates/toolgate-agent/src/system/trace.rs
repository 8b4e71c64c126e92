//! Trace ids: one per batch, bound for hooks and tools, kept across a suspension.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use toolgate_core::external::TypeMapKey;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

/// The provider key under which each call's trace id is bound (request scope), so hooks
/// and tools can read it with `ctx.get::<TraceId>()`.
#[derive(Debug)]
pub struct TraceId;

impl TypeMapKey for TraceId {
    type Value = String;
}

/// Copies the call's [`TraceId`] into its metadata, so the trace id is kept with a
/// suspended call and comes back in the result after a resume.
pub(super) struct TraceMetadata;

#[hook]
impl Hook for TraceMetadata {
    fn name(&self) -> &str {
        "toolgate_agent::trace_id"
    }

    fn will_create_invoke_context(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if let Some(trace_id) = ctx.try_get::<TraceId>() {
            ctx.metadata_mut()
                .insert("trace_id".to_owned(), Value::String((*trace_id).clone()));
        }
        Ok(())
    }
}

/// A new trace id, unique in this process.
pub(super) fn new_trace_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("trace-{stamp:x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}
