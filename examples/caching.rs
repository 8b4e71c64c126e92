//! Caching tool results: a read-only tool served from cache on repeated calls, never
//! across users, with concurrent identical calls coalesced into one execution.
//!
//! Run with `cargo run --example caching`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use garde::Validate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolgate::hooks::audit::{Audit, MemorySink};
use toolgate::hooks::cache::ResultCache;
use toolgate::prelude::*;

#[derive(Deserialize, Validate, JsonSchema)]
struct Forecast {
    #[garde(length(min = 1, max = 80))]
    city: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&runs);

    let audit = MemorySink::new();
    let pipeline = Pipeline::builder()
        .tool(
            tool_fn(
                "forecast",
                "Tomorrow's weather for a city.",
                move |f: Forecast| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async move {
                        tokio::time::sleep(Duration::from_millis(50)).await; // a slow upstream
                        Ok::<_, ToolError>(json!({ "city": f.city, "sky": "clear" }))
                    }
                },
            )
            // Only read-only tools are cached unless you say otherwise.
            .annotations(ToolAnnotations::READ_ONLY),
        )
        .hook(
            ResultCache::builder()
                .tool_ttl("forecast", Duration::from_secs(600))
                .build(),
        )
        .hook(Audit::builder().sink(audit.clone()).build())
        .build()?;

    let ann = || InvokeOptions::new().user(User::new("ann"));
    let first = pipeline
        .invoke("forecast", json!({ "city": "Oslo" }), ann())
        .await?;
    let again = pipeline
        .invoke("forecast", json!({ "city": "Oslo" }), ann())
        .await?;
    assert_eq!(first, again);
    println!("ann twice: {} execution(s)", runs.load(Ordering::SeqCst));

    // Another user never gets ann's entry: the key includes the caller.
    pipeline
        .invoke(
            "forecast",
            json!({ "city": "Oslo" }),
            InvokeOptions::new().user(User::new("bo")),
        )
        .await?;
    println!("after bo: {} execution(s)", runs.load(Ordering::SeqCst));

    // Twenty identical calls at once, for a city nobody asked about yet: one execution.
    let calls = (0..20).map(|_| pipeline.invoke("forecast", json!({ "city": "Lima" }), ann()));
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok));
    println!(
        "after 20 concurrent calls: {} execution(s)",
        runs.load(Ordering::SeqCst)
    );

    let outcomes: Vec<String> = audit
        .records()
        .iter()
        .map(|r| {
            r.metadata
                .get("cache")
                .map_or("-".to_owned(), ToString::to_string)
        })
        .collect();
    println!("cache results in the audit trail: {}", outcomes.join(" "));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    Ok(())
}
