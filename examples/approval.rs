//! Human approval: a destructive tool waits for a person, who approves once, approves for
//! good, or rejects.
//!
//! Run with `cargo run --example approval`.

use serde_json::json;
use toolgate::hooks::consent::Consent;
use toolgate::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let consent = Consent::builder().tag("destructive").build();
    // Keep the approval API: it is what the person (or the UI in front of them) calls.
    let approvals = consent.approvals();

    let pipeline = Pipeline::builder()
        .tool(
            tool_fn("delete_branch", "Deletes a git branch.", |_: ()| async {
                Ok::<_, ToolError>("branch deleted")
            })
            .tag("destructive"),
        )
        .tool(tool_fn(
            "list_branches",
            "Lists git branches.",
            |_: ()| async { Ok::<_, ToolError>(vec!["main", "feature"]) },
        ))
        .hook(consent)
        .build()?;
    let ann = || InvokeOptions::new().user(User::new("ann"));

    // Reading needs no approval.
    println!(
        "list_branches: {}",
        pipeline.invoke("list_branches", json!(null), ann()).await?
    );

    // The destructive call is suspended, not run.
    let id = suspended(pipeline.invoke("delete_branch", json!(null), ann()).await)?;
    let pending = approvals
        .pending(&pipeline, &id)
        .await?
        .ok_or("the call should wait")?;
    println!(
        "waiting for approval: {} — {}",
        pending.reason, pending.payload
    );

    // A person approves this one call.
    let out = approvals
        .approve(&pipeline, &id, false, InvokeOptions::new())
        .await?;
    println!("approved once: {out}");

    // The next call waits again; this time the person rejects it.
    let id = suspended(pipeline.invoke("delete_branch", json!(null), ann()).await)?;
    let err = approvals
        .reject(
            &pipeline,
            &id,
            "not during the release freeze",
            InvokeOptions::new(),
        )
        .await
        .expect_err("a rejected call fails");
    println!("rejected: {err} ({}, HTTP {})", err.code(), err.status());

    // Approved for good: later calls by ann run without asking.
    let id = suspended(pipeline.invoke("delete_branch", json!(null), ann()).await)?;
    approvals
        .approve(&pipeline, &id, true, InvokeOptions::new())
        .await?;
    println!(
        "always allowed: {}",
        pipeline.invoke("delete_branch", json!(null), ann()).await?
    );
    Ok(())
}

/// The suspension id of a call that waits for approval.
fn suspended(
    outcome: Result<serde_json::Value, ToolError>,
) -> Result<String, Box<dyn std::error::Error>> {
    match outcome {
        Err(ToolError::Suspended { suspension_id, .. }) => Ok(suspension_id),
        Err(other) => Err(other.into()),
        Ok(out) => Err(format!("expected the call to wait for approval, it returned {out}").into()),
    }
}
