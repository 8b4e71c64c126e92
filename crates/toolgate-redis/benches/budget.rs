//! The cost of one budget charge, next to one rate-limit decision in the same run. Run with
//! `cargo bench -p toolgate-redis --bench budget`; `REDIS_URL` picks the Redis (default
//! `redis://127.0.0.1:6379`). Without a reachable Redis only the in-memory rows run.
//!
//! * `budget/backend`: one charge (`BudgetBackend::charge`) against one decision
//!   (`QuotaBackend::acquire`), one caller at a time, in memory and on Redis.
//! * `budget/pipeline`: a whole call through a pipeline with no hook, with a `Quota` hook,
//!   and with a `Budget` hook, in memory.
//!
//! Limits are high enough that every charge is granted: the figures are the cost of
//! charging, not of refusing.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use serde_json::json;
use toolgate_core::{InvokeOptions, Pipeline, PipelineBuilder, ToolError, User, tool_fn};
use toolgate_hooks::budget::{Budget, BudgetBackend, BudgetRequest, InMemoryBudget, Window};
use toolgate_hooks::quota::{InMemoryQuota, Quota, QuotaBackend, QuotaRequest, Rate};
use toolgate_redis::{RedisConfig, RedisState};

fn rate() -> Rate {
    Rate::per_second(1_000_000_000).expect("a valid rate")
}

const LIMIT: u64 = 1_000_000_000_000_000;

fn charge_request() -> BudgetRequest<'static> {
    BudgetRequest {
        key: "bench",
        cost: 1,
        limit: LIMIT,
        window: Window::day(),
    }
}

fn backends(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    quota: &dyn QuotaBackend,
    budget: &dyn BudgetBackend,
) {
    let mut group = c.benchmark_group("budget/backend");
    group.bench_function(BenchmarkId::new("quota_decision", name), |b| {
        b.to_async(runtime).iter(|| async {
            let request = QuotaRequest {
                key: "bench",
                rate: rate(),
            };
            std::hint::black_box(quota.acquire(request).await.expect("decided"));
        });
    });
    group.bench_function(BenchmarkId::new("budget_charge", name), |b| {
        b.to_async(runtime).iter(|| async {
            std::hint::black_box(budget.charge(charge_request()).await.expect("charged"));
        });
    });
    group.finish();
}

fn pipeline(with: impl FnOnce(PipelineBuilder) -> PipelineBuilder) -> Pipeline {
    let builder = Pipeline::builder().tool(tool_fn("ping", "Answers pong.", |_: ()| async {
        Ok::<_, ToolError>("pong")
    }));
    with(builder).build().expect("a pipeline")
}

fn pipelines(c: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let user = Arc::new(User::new("ann"));
    let cases = [
        ("no_hooks", pipeline(|b| b)),
        (
            "quota",
            pipeline(|b| b.hook(Quota::builder(rate()).build())),
        ),
        (
            "budget",
            pipeline(|b| b.hook(Budget::builder(LIMIT, Window::day()).build())),
        ),
    ];
    let mut group = c.benchmark_group("budget/pipeline");
    for (name, pipeline) in &cases {
        group.bench_function(*name, |b| {
            b.to_async(runtime).iter(|| async {
                let options = InvokeOptions::new().user(user.clone());
                std::hint::black_box(pipeline.invoke("ping", json!(null), options).await)
                    .expect("granted");
            });
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");

    backends(
        &mut criterion,
        &runtime,
        "in_memory",
        &InMemoryQuota::default(),
        &InMemoryBudget::default(),
    );
    pipelines(&mut criterion, &runtime);

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let config = RedisConfig::builder()
        .key_prefix(format!("toolgate-bench-{}", std::process::id()))
        .deadline(Duration::from_secs(1))
        .build();
    match runtime.block_on(RedisState::connect(&url, config)) {
        Ok(state) => backends(
            &mut criterion,
            &runtime,
            "redis",
            &state.quota(),
            &state.budget(),
        ),
        Err(error) => eprintln!("skipping the Redis benchmarks: {error}"),
    }
    criterion.final_summary();
}
