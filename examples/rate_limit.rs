//! Rate limiting and concurrency caps: a per-user quota, a per-tool cap on calls in flight,
//! and what a caller sees when it hits them.
//!
//! Run with `cargo run --example rate_limit`.

use std::time::Duration;

use serde_json::json;
use toolgate::hooks::concurrency::{Concurrency, WhenFull};
use toolgate::hooks::partition::Partition;
use toolgate::hooks::quota::{Quota, Rate};
use toolgate::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pipeline = Pipeline::builder()
        .tool(
            tool_fn("search", "Searches the catalogue.", |_: ()| async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, ToolError>(json!(["result"]))
            })
            .annotations(ToolAnnotations::READ_ONLY),
        )
        // Each user: 2 calls a second, at most 3 at once after a rest.
        .hook(
            Quota::builder(Rate::per_second(2)?.with_burst(3)?)
                .partition(Partition::User)
                .name("per-user")
                .build(),
        )
        // The tool: at most 2 calls in flight; a third waits up to 10 ms, then is refused.
        .hook(
            Concurrency::builder(2)?
                .partition(Partition::Tool)
                .wait(Duration::from_millis(10))
                .when_full(WhenFull::RetryAfter(Duration::from_millis(100)))
                .build(),
        )
        .build()?;

    let alice = || InvokeOptions::new().user(User::new("alice"));

    println!("alice calls four times in a row:");
    let mut wait = Duration::ZERO;
    for n in 1..=4 {
        match pipeline.invoke("search", json!(null), alice()).await {
            Ok(out) => println!("  call {n}: ok {out}"),
            Err(err) => {
                println!(
                    "  call {n}: {} ({}, HTTP {})",
                    err,
                    err.code(),
                    err.status()
                );
                wait = err.retry_after_delay().unwrap_or_default();
            }
        }
    }
    println!(
        "alice waits {} ms as told, and is let through:",
        wait.as_millis()
    );
    tokio::time::sleep(wait).await;
    let out = pipeline.invoke("search", json!(null), alice()).await?;
    println!("  ok {out}");

    println!("three users call at once; the tool takes two at a time:");
    let (a, b, c) = tokio::join!(
        pipeline.invoke(
            "search",
            json!(null),
            InvokeOptions::new().user(User::new("bob"))
        ),
        pipeline.invoke(
            "search",
            json!(null),
            InvokeOptions::new().user(User::new("carol"))
        ),
        pipeline.invoke(
            "search",
            json!(null),
            InvokeOptions::new().user(User::new("dave"))
        ),
    );
    for (who, outcome) in [("bob", a), ("carol", b), ("dave", c)] {
        match outcome {
            Ok(out) => println!("  {who}: ok {out}"),
            Err(err) => println!("  {who}: {} ({}, HTTP {})", err, err.code(), err.status()),
        }
    }
    Ok(())
}
