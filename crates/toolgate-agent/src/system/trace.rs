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

/// The provider key under which a call's id is bound when it could not be the call's
/// request id (see [`request_id_of`]).
pub(super) struct CallId;

impl TypeMapKey for CallId {
    type Value = String;
}

/// The metadata key that keeps a call's id, when it is not its request id, across a
/// suspension (removed before the metadata reaches a result).
pub(crate) const CALL_ID: &str = "toolgate_agent.call_id";

/// The provider key under which the batch's result size limit is bound, when the batch set
/// one ([`ExecuteOptions::result_max_chars`](crate::ExecuteOptions::result_max_chars)).
pub(super) struct ResultLimit;

impl TypeMapKey for ResultLimit {
    type Value = usize;
}

/// The metadata key that keeps the batch's result size limit across a suspension, so that
/// a call resumed later is cut to the limit it was made under (removed before the
/// metadata reaches a result).
pub(crate) const RESULT_MAX_CHARS: &str = "toolgate_agent.result_max_chars";

/// The request id a call runs under: its id when that is 1 to 128 visible ASCII
/// characters, a generated one otherwise (an id a model wrote may be long, or hold
/// newlines and terminal escapes, and a request id reaches logs, audit records and the
/// suspension store). `None` when the id is the request id.
pub(super) fn request_id_of(call_id: &str) -> Option<String> {
    let usable = !call_id.is_empty()
        && call_id.len() <= 128
        && call_id.bytes().all(|b| b.is_ascii_graphic());
    (!usable).then(|| toolgate_core::context::RequestId::generate().to_string())
}

/// Copies the call's [`TraceId`] (and its [`CallId`] and [`ResultLimit`], when bound) into
/// its metadata, so they are kept with a suspended call and hold again after a resume.
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
        if let Some(call_id) = ctx.try_get::<CallId>() {
            ctx.metadata_mut()
                .insert(CALL_ID.to_owned(), Value::String((*call_id).clone()));
        }
        if let Some(limit) = ctx.try_get::<ResultLimit>() {
            ctx.metadata_mut()
                .insert(RESULT_MAX_CHARS.to_owned(), Value::from(*limit));
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
