//! What the input/output policies cost: a cache-hit invocation with redaction, audit and
//! metrics, and a call of a tool given two secrets (fetched, injected, scrubbed from its
//! output), next to the pipeline with no hooks. Run with `cargo bench --bench
//! io_policies`; the figures are in `docs/performance.md`.
//!
//! The tool returns a small object with a sentence of text (about 120 bytes of JSON), so
//! redaction has strings to scan. Audit records go to a sink that drops them (building
//! the record is measured, writing it is not); metrics go through the `metrics` facade
//! with no recorder installed (the facade's own cost; a Prometheus recorder adds its
//! own).

use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolgate::core::tool::ErasedTool;
use toolgate::hooks::async_trait;
use toolgate::hooks::audit::{Audit, AuditError, AuditRecord, AuditSink};
use toolgate::hooks::cache::ResultCache;
use toolgate::hooks::metrics::Metrics;
use toolgate::hooks::redaction::Redaction;
use toolgate::hooks::secrets::{InMemorySecrets, SecretInjection};
use toolgate::prelude::*;

/// Takes records and drops them.
struct DropSink;

#[async_trait]
impl AuditSink for DropSink {
    fn name(&self) -> &str {
        "drop"
    }
    async fn write(&self, record: &AuditRecord) -> Result<(), AuditError> {
        std::hint::black_box(record);
        Ok(())
    }
}

fn forecast() -> Arc<dyn ErasedTool> {
    forecast_tagged(&[])
}

/// `forecast`, with these tags.
fn forecast_tagged(tags: &[&str]) -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new(
        "forecast",
        "Tomorrow's weather.",
        json!({ "type": "object", "properties": { "city": { "type": "string" } } }),
        |input, _| {
            let city = input["city"].clone();
            Box::pin(async move {
                Ok::<_, ToolError>(json!({
                    "city": city,
                    "summary": "Clear skies in the morning, light rain after 15:00, 21 degrees.",
                    "wind_kmh": 12
                }))
            })
        },
    );
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    tool.definition_mut().tags = tags.iter().map(|&tag| tag.to_owned()).collect();
    Arc::new(tool)
}

fn pipeline(configure: impl FnOnce(PipelineBuilder) -> PipelineBuilder) -> Pipeline {
    configure(Pipeline::builder().tool(forecast()))
        .build()
        .expect("the pipeline builds")
}

/// `forecast`, declaring two secrets: an API key and a database password.
fn forecast_with_secrets() -> Pipeline {
    let tool = forecast_tagged(&["secret:api-key", "secret:db-password"]);
    let secrets = InMemorySecrets::new()
        .with("api-key", "sk-live-4f1d9b7c2a8e6d3f0b5a9c1e")
        .with("db-password", "correct horse battery staple");
    Pipeline::builder()
        .tool(tool)
        .hook(SecretInjection::builder().source(secrets).build())
        .build()
        .expect("the pipeline builds")
}

fn input() -> Value {
    json!({ "city": "Oslo" })
}

async fn invoke(pipeline: &Pipeline, input: Value) -> Value {
    let options = InvokeOptions::new().user(User::new("ann"));
    pipeline
        .invoke("forecast", input, options)
        .await
        .expect("the call succeeds")
}

fn io_policies(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    let none = pipeline(|b| b);
    let cache_only = pipeline(|b| b.hook(ResultCache::new()));
    let policies = pipeline(|b| {
        b.hook(ResultCache::new())
            .hook(Redaction::new())
            .hook(Audit::builder().sink(DropSink).build())
            .hook(Metrics::new())
    });
    let policies_no_cache = pipeline(|b| {
        b.hook(Redaction::new())
            .hook(Audit::builder().sink(DropSink).build())
            .hook(Metrics::new())
    });
    let secrets = forecast_with_secrets();
    // Warm the caches so every timed call is a hit.
    runtime.block_on(async {
        invoke(&cache_only, input()).await;
        invoke(&policies, input()).await;
    });

    let mut group = c.benchmark_group("io_policies");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, p) in [
        ("pipeline_0_hooks", &none),
        ("cache_hit", &cache_only),
        ("cache_hit_redaction_audit_metrics", &policies),
        ("executed_redaction_audit_metrics", &policies_no_cache),
        ("two_secrets_injected_and_scrubbed", &secrets),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime)
                .iter_batched(input, |i| invoke(p, i), BatchSize::SmallInput);
        });
    }
    group.finish();
}

criterion_group!(benches, io_policies);
criterion_main!(benches);
