//! Keeping personal data and secrets in: redaction of input and output, a secret
//! injected for one tool and scrubbed when the tool echoes it, and an audit record that
//! holds neither.
//!
//! Run with `cargo run --example redaction`.

use futures::future::BoxFuture;
use serde_json::json;
use toolgate::hooks::audit::{Audit, MemorySink};
use toolgate::hooks::redaction::{Detector, Redaction, RedactionMode};
use toolgate::hooks::secrets::{InMemorySecrets, SecretInjection};
use toolgate::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A CRM lookup that needs an API key, and is careless with what it returns.
    let mut lookup = JsonTool::new(
        "crm_lookup",
        "Looks a customer up by a free-text query.",
        json!({ "type": "object", "properties": { "query": { "type": "string" } }, "required": ["query"] }),
        |input: &serde_json::Value,
         ctx: &ToolInvokeContext|
         -> BoxFuture<'_, Result<serde_json::Value, ToolError>> {
            let key = ctx
                .secrets()
                .get("crm-key")
                .map(|s| s.expose().to_owned())
                .unwrap_or_default();
            let query = input["query"].clone();
            Box::pin(async move {
                Ok(json!({
                    "query_seen": query,
                    "customer": "Ann Lee, ann.lee@example.com, +44 20 7946 0958",
                    "card_on_file": "4111 1111 1111 1111",
                    "debug": format!("called CRM with key {key}"),
                }))
            })
        },
    );
    lookup.definition_mut().tags = vec!["secret:crm-key".into()];

    let audit = MemorySink::new();
    let pipeline = Pipeline::builder()
        .tool(lookup)
        .hook(
            SecretInjection::builder()
                .source(InMemorySecrets::new().with("crm-key", "crm-live-9b8c7d"))
                .build(),
        )
        .hook(
            Redaction::builder()
                .mode_for("card", RedactionMode::Mask)
                .detect(Detector::pattern("customer_id", r"\bCUST-\d{6}\b")?)
                .build(),
        )
        .hook(Audit::builder().sink(audit.clone()).build())
        .build()?;

    let output = pipeline
        .invoke(
            "crm_lookup",
            json!({ "query": "customer CUST-004211, email bo@example.org" }),
            InvokeOptions::new().user(User::new("agent-7")),
        )
        .await?;
    println!("{}", serde_json::to_string_pretty(&output)?);

    let text = output.to_string();
    assert!(!text.contains("ann.lee@example.com") && !text.contains("crm-live-9b8c7d"));
    assert!(text.contains("***************1111"));

    let record = &audit.records()[0];
    println!(
        "audit: input {} / redactions {}",
        record.input_hash, record.metadata["redactions"]
    );
    Ok(())
}
