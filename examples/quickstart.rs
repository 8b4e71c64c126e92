//! Quickstart: one typed tool, two hooks, four calls through the pipeline.
//!
//! Run with `cargo run --example quickstart`.

use std::sync::atomic::{AtomicU64, Ordering};

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolgate::prelude::*;

/// The input of the `search` tool. The garde bounds are checked at run time and show up
/// in the advertised JSON Schema.
#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct SearchInput {
    /// What to look for.
    #[garde(length(min = 1, max = 100))]
    query: String,
    /// How many results to return.
    #[garde(range(min = 1, max = 50))]
    limit: u32,
}

/// Refuses callers without the `reader` role.
struct ReadersOnly;

#[hook]
impl Hook for ReadersOnly {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !ctx.user().has_role("reader") {
            return ctx.abort("only readers may search", "forbidden", 403);
        }
        Ok(())
    }
}

/// Counts finished calls and logs each one's outcome at the end of the pipeline.
#[derive(Default)]
struct CallLog {
    calls: AtomicU64,
}

#[hook]
impl Hook for CallLog {
    fn will_finalize_invoke(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let outcome = ctx.error().map_or("ok", ToolError::code);
        println!(
            "  [call {n}] tool={} user={} outcome={outcome} in {:?}",
            ctx.tool_name(),
            ctx.user().id,
            ctx.elapsed()
        );
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pipeline = Pipeline::builder()
        .tool(
            tool_fn(
                "search",
                "Searches the catalogue.",
                |input: SearchInput| async move {
                    let hits: Vec<String> = (1..=input.limit.min(3))
                        .map(|i| format!("{} #{i}", input.query))
                        .collect();
                    Ok::<_, ToolError>(json!({ "hits": hits }))
                },
            )
            .annotations(ToolAnnotations::READ_ONLY),
        )
        .hook(ReadersOnly)
        .hook(CallLog::default())
        .build()?;

    let schema = &pipeline
        .definitions()
        .next()
        .expect("one tool")
        .input_schema;
    println!("advertised input schema: {schema}");

    let reader = || InvokeOptions::new().user(User::new("ann").with_roles(["reader"]));

    println!("\n1. a valid call");
    let out = pipeline
        .invoke("search", json!({"query": "rust", "limit": 2}), reader())
        .await?;
    println!("  -> {out}");

    println!("\n2. bad arguments: the error names every failing field");
    let err = pipeline
        .invoke("search", json!({"query": "", "limit": 99}), reader())
        .await
        .unwrap_err();
    println!("  -> {} (code {}, HTTP {})", err, err.code(), err.status());

    println!("\n3. a caller the policy refuses");
    let guest = InvokeOptions::new().user(User::new("guy"));
    let err = pipeline
        .invoke("search", json!({"query": "rust", "limit": 2}), guest)
        .await
        .unwrap_err();
    println!("  -> {} (code {}, HTTP {})", err, err.code(), err.status());

    println!("\n4. a tool that does not exist");
    let err = pipeline
        .invoke("delete_everything", json!({}), reader())
        .await
        .unwrap_err();
    println!("  -> {} (code {})", err, err.code());
    Ok(())
}
