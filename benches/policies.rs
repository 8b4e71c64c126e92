//! What the built-in policies cost per invocation: the "who may call and how much" stack
//! (authorize + quota + concurrency + timeout + retry), the full stack a gateway runs
//! (those, plus a cache hit, redaction, audit and metrics), and each policy alone, next to
//! the pipeline with no hooks. Run with `cargo bench --bench policies`.
//!
//! Every scenario calls the same tool (add two numbers) on a current-thread tokio runtime,
//! with limits high enough that no call is refused: the figures are the cost of the checks
//! on the success path. The tool is read-only, so with the cache every call after the first
//! is a hit (the tool, and the execution hooks, do not run). Audit records go to `tracing`
//! and metrics to the `metrics` facade, with no subscriber and no recorder installed: the
//! figures are the hooks' own work, not a sink's.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::hooks::audit::Audit;
use toolgate::hooks::authorize::{Authorize, Effect, Rule, Rules};
use toolgate::hooks::cache::ResultCache;
use toolgate::hooks::concurrency::Concurrency;
use toolgate::hooks::metrics::Metrics;
use toolgate::hooks::partition::Partition;
use toolgate::hooks::quota::{Quota, Rate};
use toolgate::hooks::redaction::Redaction;
use toolgate::hooks::retry::{Retry, RetryBudget};
use toolgate::hooks::timeout::Timeout;
use toolgate::prelude::*;

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct AddInput {
    #[garde(range(min = -1000, max = 1000))]
    a: i64,
    #[garde(range(min = -1000, max = 1000))]
    b: i64,
}

fn authorize() -> Authorize {
    Authorize::new(
        Rules::new(Effect::Deny)
            .rule(Rule::allow().role("staff"))
            .rule(Rule::deny().tag("destructive").role("intern")),
    )
}

fn quota() -> Quota {
    let rate = Rate::per_second(1_000_000_000).expect("a valid rate");
    Quota::builder(rate).partition(Partition::User).build()
}

fn concurrency() -> Concurrency {
    Concurrency::builder(1024)
        .expect("a valid limit")
        .partition(Partition::Tool)
        .build()
}

fn retry() -> Retry {
    Retry::builder()
        .budget(RetryBudget::unlimited())
        .build()
        .expect("a valid policy")
}

fn pipeline(hooks: &[&str]) -> Pipeline {
    let mut builder = Pipeline::builder().tool(
        tool_fn("add", "Adds two numbers.", |i: AddInput| async move {
            Ok::<_, ToolError>(i.a + i.b)
        })
        .annotations(ToolAnnotations::READ_ONLY),
    );
    for hook in hooks {
        builder = match *hook {
            "authorize" => builder.hook(authorize()),
            "quota" => builder.hook(quota()),
            "concurrency" => builder.hook(concurrency()),
            "timeout" => builder.hook(Timeout::per_attempt(Duration::from_secs(5))),
            "retry" => builder.hook(retry()),
            "cache" => builder.hook(ResultCache::builder().build()),
            "redaction" => builder.hook(Redaction::default()),
            "audit" => builder.hook(Audit::new()),
            "metrics" => builder.hook(Metrics::new()),
            other => unreachable!("no hook named {other}"),
        };
    }
    builder.build().expect("the pipeline builds")
}

async fn invoke(pipeline: &Pipeline, user: &Arc<User>, input: Value) -> Value {
    pipeline
        .invoke("add", input, InvokeOptions::new().user(Arc::clone(user)))
        .await
        .expect("no call is refused in this benchmark")
}

fn policies(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    let user = Arc::new(User::new("ann").with_roles(["staff"]));
    let scenarios = [
        ("pipeline_0_hooks", pipeline(&[])),
        ("authorize", pipeline(&["authorize"])),
        ("quota", pipeline(&["quota"])),
        ("concurrency", pipeline(&["concurrency"])),
        ("timeout", pipeline(&["timeout"])),
        ("retry", pipeline(&["retry"])),
        ("cache_hit", pipeline(&["cache"])),
        ("redaction", pipeline(&["redaction"])),
        ("audit", pipeline(&["audit"])),
        ("metrics", pipeline(&["metrics"])),
        (
            "stack_authorize_quota_concurrency_timeout_retry",
            pipeline(&["authorize", "quota", "concurrency", "timeout", "retry"]),
        ),
        (
            "full_stack_with_cache_hit_redaction_audit_metrics",
            pipeline(&[
                "authorize",
                "quota",
                "concurrency",
                "timeout",
                "retry",
                "cache",
                "redaction",
                "audit",
                "metrics",
            ]),
        ),
    ];
    let mut group = c.benchmark_group("policies");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, pipeline) in &scenarios {
        group.bench_function(*name, |b| {
            b.to_async(&runtime).iter_batched(
                || json!({ "a": 2, "b": 3 }),
                |input| invoke(pipeline, &user, input),
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, policies);
criterion_main!(benches);
