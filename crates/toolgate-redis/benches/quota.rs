//! Quota decisions per second against the local Redis, next to the in-memory GCRA in the
//! same run. Run with `cargo bench -p toolgate-redis --bench quota`; `REDIS_URL` picks the
//! Redis (default `redis://127.0.0.1:6379`). Without a reachable Redis only the in-memory
//! baseline runs. With `REDIS_CLUSTER_URL` (`redis+cluster://host:port,…`) the same runs
//! against a Redis Cluster too (`redis_cluster`): 64 keys spread over its primaries.
//!
//! * `sequential`: one caller, one decision at a time: the latency of a decision.
//! * `concurrent_64`: 64 decisions in flight at once on one connection: throughput.
//!
//! Limits are high enough that every decision is a grant: the figures are the cost of
//! deciding, not of refusing.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use futures::future::join_all;
use toolgate_hooks::quota::{InMemoryQuota, QuotaBackend, QuotaRequest, Rate};
use toolgate_redis::{RedisConfig, RedisState};

const CONCURRENT: usize = 64;

fn rate() -> Rate {
    Rate::per_second(1_000_000_000).expect("a valid rate")
}

async fn decide(backend: &dyn QuotaBackend, key: &str) {
    let request = QuotaRequest { key, rate: rate() };
    let decision = backend.acquire(request).await.expect("Redis answers");
    std::hint::black_box(decision);
}

fn bench_backend(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    backend: &dyn QuotaBackend,
) {
    let keys: Vec<String> = (0..CONCURRENT).map(|i| format!("bench-{i}")).collect();

    let mut sequential = c.benchmark_group("quota/sequential");
    sequential.throughput(Throughput::Elements(1));
    sequential.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.to_async(runtime).iter(|| decide(backend, "bench"));
    });
    sequential.finish();

    let mut concurrent = c.benchmark_group("quota/concurrent_64");
    concurrent.throughput(Throughput::Elements(CONCURRENT as u64));
    concurrent.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.to_async(runtime)
            .iter(|| join_all(keys.iter().map(|key| decide(backend, key))));
    });
    concurrent.finish();
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

    bench_backend(
        &mut criterion,
        &runtime,
        "in_memory",
        &InMemoryQuota::default(),
    );

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("toolgate-bench-{}", std::process::id());
    let config = RedisConfig::builder()
        .key_prefix(prefix)
        .deadline(Duration::from_secs(1))
        .build();
    match runtime.block_on(RedisState::connect(&url, config.clone())) {
        Ok(state) => bench_backend(&mut criterion, &runtime, "redis", &state.quota()),
        Err(error) => eprintln!("skipping the Redis benchmarks: {error}"),
    }
    // A Redis Cluster, when one is given: `redis+cluster://127.0.0.1:7000,…`.
    if let Ok(cluster) = std::env::var("REDIS_CLUSTER_URL") {
        match runtime.block_on(RedisState::connect(&cluster, config)) {
            Ok(state) => bench_backend(&mut criterion, &runtime, "redis_cluster", &state.quota()),
            Err(error) => eprintln!("skipping the Redis Cluster benchmarks: {error}"),
        }
    }
    criterion.final_summary();
}
