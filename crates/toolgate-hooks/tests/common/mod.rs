//! Helpers shared by the tests of the input/output policies.
#![allow(dead_code)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_core::tool::{ErasedTool, ToolAnnotations};
use toolgate_core::{JsonTool, ToolError};
use toolgate_hooks::audit::{Audit, AuditRecord, MemorySink};

/// A JSON-Schema tool that returns its input.
pub fn echo(name: &str, schema: Value) -> Arc<dyn ErasedTool> {
    Arc::new(JsonTool::new(
        name,
        "Returns its input.",
        schema,
        |input, _| {
            let out = input.clone();
            Box::pin(async move { Ok::<_, ToolError>(out) })
        },
    ))
}

/// A read-only JSON-Schema tool that returns what `f` makes of its input.
pub fn read_only<F>(name: &str, f: F) -> Arc<dyn ErasedTool>
where
    F: Fn(&Value) -> Result<Value, ToolError> + Send + Sync + 'static,
{
    let mut tool = JsonTool::new(
        name,
        "A read-only tool.",
        json!({"type": "object"}),
        move |input, _| {
            let out = f(input);
            Box::pin(async move { out })
        },
    );
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    Arc::new(tool)
}

/// An audit hook recording into memory, and the sink to read the records from.
pub fn memory_audit() -> (Audit, MemorySink) {
    let sink = MemorySink::new();
    (
        Audit::builder()
            .sink(sink.clone())
            .hash_key(AUDIT_KEY)
            .build(),
        sink,
    )
}

/// The key [`memory_audit`] fingerprints under.
pub const AUDIT_KEY: &[u8] = b"test deployment key";

/// The only record of a sink.
pub fn only_record(sink: &MemorySink) -> AuditRecord {
    let records = sink.records();
    assert_eq!(
        records.len(),
        1,
        "expected one audit record, got {records:?}"
    );
    records.into_iter().next().unwrap()
}
