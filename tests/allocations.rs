//! Heap allocations per invocation, counted with a counting global allocator over the
//! scenarios that `benches/pipeline.rs` times. Unlike timings, the counts are
//! deterministic, so they are asserted: a change that makes the pipeline allocate more
//! per call fails here. `cargo test --test allocations -- --nocapture` prints the table
//! that `docs/performance.md` quotes.

use std::alloc::System;
use std::future::Future;

use serde_json::Value;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::runtime::Runtime;

#[path = "../benches/scenarios/mod.rs"]
mod scenarios;

use scenarios::{Scenarios, add_input, call_tower, invoke};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Invocations per count: the total must divide evenly, or a call allocates a varying
/// amount.
const CALLS: usize = 100;

/// Counts per scenario. The allocator counts every thread of the process, so another
/// thread's allocation can only add to a count: the smallest of a few counts is the call's
/// own.
const ATTEMPTS: usize = 3;

/// Allocations (including reallocations) made while `run` runs.
async fn allocations_in<T>(run: impl Future<Output = T>) -> (usize, T) {
    let region = Region::new(GLOBAL);
    let out = run.await;
    let change = region.change();
    (change.allocations + change.reallocations, out)
}

/// Allocations per call of a JSON-in scenario. The inputs are built before counting and
/// the outputs dropped after, as in the benchmark.
fn per_json_call<F, Fut>(runtime: &Runtime, name: &str, mut call: F) -> usize
where
    F: FnMut(Value) -> Fut,
    Fut: Future<Output = Result<Value, toolgate::core::ToolError>>,
{
    runtime.block_on(async {
        // The first call fills lazily initialized statics (tracing callsites and the like).
        call(add_input()).await.expect("the warm-up call succeeds");
        let mut least = usize::MAX;
        for _ in 0..ATTEMPTS {
            let inputs: Vec<Value> = (0..CALLS).map(|_| add_input()).collect();
            let mut outputs = Vec::with_capacity(CALLS);
            let (total, ()) = allocations_in(async {
                for input in inputs {
                    outputs.push(call(input).await.expect("the call succeeds"));
                }
            })
            .await;
            least = least.min(total);
        }
        per_call(name, least)
    })
}

/// Allocations per direct call, from a harness that repeats it: the harness's own
/// invocation is the same in both counts and cancels out.
fn per_direct_call<F, Fut>(runtime: &Runtime, name: &str, harness: F) -> usize
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = std::time::Duration>,
{
    runtime.block_on(async {
        harness(1).await;
        let mut least = usize::MAX;
        for _ in 0..ATTEMPTS {
            let (once, _) = allocations_in(harness(1)).await;
            let (many, _) = allocations_in(harness(CALLS as u64 + 1)).await;
            least = least.min(many.saturating_sub(once));
        }
        per_call(name, least)
    })
}

/// The allocations of one call, from the total of [`CALLS`] calls.
fn per_call(name: &str, total: usize) -> usize {
    assert_eq!(
        total % CALLS,
        0,
        "{name}: every call should allocate the same, yet {total} allocations for {CALLS} calls"
    );
    total / CALLS
}

#[test]
fn pipeline_allocations_per_invocation_stay_within_bounds() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    let s = &Scenarios::new();

    let direct_typed = per_direct_call(&runtime, "direct_typed", |n| s.direct_typed(n));
    let direct_erased = per_direct_call(&runtime, "direct_erased_json", |n| s.direct_erased(n));
    let pipeline_0 = per_json_call(&runtime, "pipeline_0_hooks", |input| {
        invoke(&s.pipeline_0_hooks, input)
    });
    let pipeline_10 = per_json_call(&runtime, "pipeline_10_hooks", |input| {
        invoke(&s.pipeline_10_hooks, input)
    });
    let pipeline_10_written = per_json_call(&runtime, "pipeline_10_written_hooks", |input| {
        invoke(&s.pipeline_10_written_hooks, input)
    });
    let pipeline_10_hand_written =
        per_json_call(&runtime, "pipeline_10_hand_written_hooks", |input| {
            invoke(&s.pipeline_10_hand_written_hooks, input)
        });
    let pipeline_all = per_json_call(&runtime, "pipeline_hook_on_every_stage", |input| {
        invoke(&s.pipeline_every_stage, input)
    });
    let pipeline_uninterested = per_json_call(&runtime, "pipeline_uninterested_hooks", |input| {
        invoke(&s.pipeline_uninterested_hooks, input)
    });
    let tower_boxed = per_json_call(&runtime, "tower_10_layers_boxed_each", |input| {
        call_tower(&s.tower_10_boxed, input)
    });
    let tower_static = per_json_call(&runtime, "tower_10_layers_static", |input| {
        call_tower(&s.tower_10_static, input)
    });

    println!("| scenario | allocations per invocation |");
    println!("|---|---:|");
    for (name, count) in [
        ("direct_typed", direct_typed),
        ("direct_erased_json", direct_erased),
        ("pipeline_0_hooks", pipeline_0),
        ("pipeline_10_hooks", pipeline_10),
        ("pipeline_10_written_hooks", pipeline_10_written),
        ("pipeline_10_hand_written_hooks", pipeline_10_hand_written),
        ("pipeline_hook_on_every_stage", pipeline_all),
        ("pipeline_uninterested_hooks", pipeline_uninterested),
        ("tower_10_layers_boxed_each", tower_boxed),
        ("tower_10_layers_static", tower_static),
    ] {
        println!("| {name} | {count} |");
    }

    // The pipeline's own share: none. The JSON call itself allocates `direct_erased` times
    // (the box of the parsed input, the tool's boxed future, the output map and its key);
    // the pipeline's context lives inside the invocation future, not in a box of its own.
    // Hooks that return a ready future allocate nothing, and stage durations are recorded
    // only when asked for.
    assert!(
        pipeline_0 <= direct_erased,
        "no hooks: {pipeline_0} allocations, the direct JSON call makes {direct_erased}"
    );
    // Policies that do not apply to the tool (retry, a timeout and consent for others) are
    // not in its plan: no `around_execute` chain is boxed for wrappers that would only let
    // the call through.
    assert!(
        pipeline_uninterested <= pipeline_0,
        "policies for other tools: {pipeline_uninterested} allocations, {pipeline_0} with none"
    );
    assert!(
        pipeline_10 <= pipeline_0,
        "ten no-op hooks: {pipeline_10} allocations, {pipeline_0} with none"
    );
    // A stage method written as a plain `fn` under `#[hook]` is ready at once: nothing is
    // allocated for it, as for the trait's own ready form.
    assert!(
        pipeline_10_written <= pipeline_0,
        "ten no-op hooks written as plain fns: {pipeline_10_written} allocations, {pipeline_0} with none"
    );
    // A hand-written hook that declares no synchronous stage still allocates nothing when
    // its methods return a ready future.
    assert!(
        pipeline_10_hand_written <= pipeline_0,
        "ten hand-written no-op hooks: {pipeline_10_hand_written} allocations, {pipeline_0} with none"
    );
    // A wrapper that keeps the trait's `around_execute` hands back the rest of the chain
    // unstarted, and the attempt runs inside the invocation's future: nothing more.
    assert!(
        pipeline_all <= pipeline_0,
        "a hook at every stage: {pipeline_all} allocations, {pipeline_0} with none"
    );
}
