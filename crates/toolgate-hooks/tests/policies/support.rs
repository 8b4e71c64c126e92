//! Small tools and options shared by the policy tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{InvokeOptions, PipelineBuilder, ToolError, User, tool_fn};

/// Options for a call by `id`.
pub fn as_user(id: &str) -> InvokeOptions {
    InvokeOptions::new().user(User::new(id))
}

/// Options for a call by `id` of `tenant`.
pub fn as_caller(id: &str, tenant: &str) -> InvokeOptions {
    InvokeOptions::new().user(User::new(id).with_tenant(tenant))
}

/// Registers a tool named `name` that counts its runs and answers with `behaviour(run)`
/// (runs count from 0); returns the builder and the counter.
pub fn counting_tool(
    builder: PipelineBuilder,
    name: &str,
    annotations: ToolAnnotations,
    behaviour: impl Fn(u32) -> Result<Value, ToolError> + Send + Sync + 'static,
) -> (PipelineBuilder, Arc<AtomicU32>) {
    let runs = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&runs);
    let behaviour = Arc::new(behaviour);
    let builder = builder.tool(
        tool_fn(name, "A tool for tests.", move |_: ()| {
            let run = seen.fetch_add(1, Ordering::SeqCst);
            let answer = behaviour(run);
            async move { answer }
        })
        .annotations(annotations),
    );
    (builder, runs)
}

/// Registers a tool that always answers `"ok"`; returns the builder and the counter.
pub fn ok_tool(builder: PipelineBuilder, name: &str) -> (PipelineBuilder, Arc<AtomicU32>) {
    counting_tool(builder, name, ToolAnnotations::default(), |_| {
        Ok(json!("ok"))
    })
}

/// The number of runs so far.
pub fn runs(counter: &AtomicU32) -> u32 {
    counter.load(Ordering::SeqCst)
}

/// Idempotent, and from a trusted (local) source.
pub const IDEMPOTENT: ToolAnnotations = ToolAnnotations {
    read_only: false,
    idempotent: true,
    destructive: false,
    open_world: false,
};
