//! What the pipeline costs per invocation, next to calling the tool directly and next to
//! an equivalent tower stack. Run with `cargo bench --bench pipeline`; the figures and
//! how to read them are in `docs/performance.md`.
//!
//! Every scenario calls the same tool (add two numbers) on a current-thread tokio
//! runtime. JSON scenarios take an input built outside the timed loop (criterion's
//! `iter_batched`) and return JSON; the direct calls run in a harness tool, timed inside
//! its body (see `scenarios::Scenarios::direct_typed`). Heap allocations per invocation
//! are counted by `tests/allocations.rs` over the same scenarios, so that the counting
//! allocator does not slow down the figures timed here.

use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

mod scenarios;

use scenarios::{Scenarios, add_input, call_tower, invoke};

fn pipeline_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    let s = &Scenarios::new();
    let mut group = c.benchmark_group("invoke");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("direct_typed", |b| {
        b.to_async(&runtime)
            .iter_custom(|iterations| s.direct_typed(iterations));
    });
    group.bench_function("direct_erased_json", |b| {
        b.to_async(&runtime)
            .iter_custom(|iterations| s.direct_erased(iterations));
    });
    group.bench_function("pipeline_0_hooks", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| invoke(&s.pipeline_0_hooks, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("pipeline_10_hooks", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| invoke(&s.pipeline_10_hooks, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("pipeline_10_written_hooks", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| invoke(&s.pipeline_10_written_hooks, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("pipeline_10_hand_written_hooks", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| invoke(&s.pipeline_10_hand_written_hooks, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("pipeline_hook_on_every_stage", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| invoke(&s.pipeline_every_stage, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("pipeline_uninterested_hooks", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| invoke(&s.pipeline_uninterested_hooks, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("tower_10_layers_boxed_each", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| call_tower(&s.tower_10_boxed, input),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("tower_10_layers_static", |b| {
        b.to_async(&runtime).iter_batched(
            add_input,
            |input| call_tower(&s.tower_10_static, input),
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, pipeline_overhead);
criterion_main!(benches);
