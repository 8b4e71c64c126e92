//! What trace export costs per invocation, in one run: the pipeline of ten no-op hooks
//! (ten stages with hooks) with no subscriber, with the gateway's log subscriber and no
//! exporter (`telemetry:` absent), and with the OpenTelemetry layer exporting every span
//! (`telemetry:` present, sampling everything) to an exporter that drops the batches, so
//! the figure is the spans' cost, not a collector's. Run with
//! `cargo bench -p toolgate-gateway --bench telemetry`; the figures are in
//! `docs/performance.md`.

use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use garde::Validate;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_core::hook::hook_fn_sync;
use toolgate_core::{InvokeOptions, Pipeline, Stage, ToolError, tool_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct Add {
    #[garde(skip)]
    a: i64,
    #[garde(skip)]
    b: i64,
}

/// Ten stages a realistic policy set uses.
const TEN_STAGES: [Stage; 10] = [
    Stage::WillAuthorize,
    Stage::WillAcquireQuota,
    Stage::WillAcquireSemaphore,
    Stage::WillValidateInput,
    Stage::WillReadCache,
    Stage::WillExecute,
    Stage::DidExecute,
    Stage::WillRedactOutput,
    Stage::WillAudit,
    Stage::OnMetrics,
];

fn pipeline() -> Pipeline {
    let mut builder = Pipeline::builder().tool(tool_fn("add", "Adds.", |input: Add| async move {
        Ok::<_, ToolError>(input.a + input.b)
    }));
    for stage in TEN_STAGES {
        builder = builder.hook(hook_fn_sync(stage, |_| Ok(())));
    }
    builder.build().expect("the pipeline builds")
}

/// Takes every batch and drops it.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// The gateway's log layer at `info`, writing nowhere.
fn log_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(EnvFilter::new("info"))
}

fn telemetry(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    let pipeline = pipeline();
    let input = || json!({"a": 1, "b": 2});
    let call = |input: Value| pipeline.invoke("add", input, InvokeOptions::new());
    let mut group = c.benchmark_group("telemetry");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("no_subscriber", |b| {
        b.to_async(&runtime)
            .iter_batched(input, call, BatchSize::SmallInput);
    });

    let logs = tracing_subscriber::registry().with(log_layer());
    tracing::subscriber::with_default(logs, || {
        group.bench_function("logs_telemetry_off", |b| {
            b.to_async(&runtime)
                .iter_batched(input, call, BatchSize::SmallInput);
        });
    });

    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("bench"))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            !meta.is_event() && meta.target() == toolgate_core::SPAN_TARGET
        }));
    let both = tracing_subscriber::registry().with(log_layer()).with(otel);
    tracing::subscriber::with_default(both, || {
        group.bench_function("logs_telemetry_on", |b| {
            b.to_async(&runtime)
                .iter_batched(input, call, BatchSize::SmallInput);
        });
    });
    group.finish();
    let _ = provider.shutdown();
}

criterion_group!(benches, telemetry);
criterion_main!(benches);
