//! The engine's cost per call in instructions: the scenarios of `benches/pipeline.rs`, each
//! run [`CALLS`] times inside one function that callgrind collects. Instruction counts are
//! deterministic, so they can be compared across trees on a shared, loaded machine where
//! timings cannot. `benches/engine_instructions.sh` runs every scenario under callgrind and
//! prints the table `docs/performance.md` quotes ("The engine").
//!
//! `instructions SCENARIO` runs one scenario (one of [`SCENARIOS`]) in a function
//! whose name starts with `collected_`, which the script collects; the inputs are built before it is
//! entered and the outputs dropped inside it, as the direct call's harness drops its own.
//! Without a scenario (`cargo bench --bench instructions`) every scenario runs once, as a
//! check that they all work.

use std::hint::black_box;

use serde_json::Value;
use tokio::runtime::Runtime;
use toolgate::core::ToolError;

// The timed direct calls (`direct_typed`, `direct_erased`) are `benches/pipeline.rs`'s.
#[allow(dead_code)]
mod scenarios;

use scenarios::{Scenarios, add_input, call_tower, invoke};

/// Calls per collected run.
const CALLS: usize = 10_000;

/// The scenarios, by the name the script passes.
const SCENARIOS: [&str; 9] = [
    "direct_erased_json",
    "pipeline_0_hooks",
    "pipeline_10_hooks",
    "pipeline_10_written_hooks",
    "pipeline_10_hand_written_hooks",
    "pipeline_hook_on_every_stage",
    "pipeline_uninterested_hooks",
    "tower_10_layers_boxed_each",
    "tower_10_layers_static",
];

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    let s = Scenarios::new();
    let chosen = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let Some(chosen) = chosen else {
        for name in SCENARIOS {
            run(&runtime, &s, name, 100, false);
        }
        println!("every scenario ran; `benches/engine_instructions.sh` counts their instructions");
        return;
    };
    assert!(
        SCENARIOS.contains(&chosen.as_str()),
        "unknown scenario `{chosen}`: pick one of {SCENARIOS:?}"
    );
    // The first calls fill lazily initialized statics (tracing callsites and the like).
    run(&runtime, &s, &chosen, 100, false);
    run(&runtime, &s, &chosen, CALLS, true);
}

/// Runs `calls` calls of scenario `name`, the inputs built first; in a collected function
/// when `collect`.
fn run(runtime: &Runtime, s: &Scenarios, name: &str, calls: usize, collect: bool) {
    let inputs: Vec<Value> = (0..calls).map(|_| add_input()).collect();
    match name {
        "direct_erased_json" if collect => collected_direct(runtime, s, inputs),
        "direct_erased_json" => direct(runtime, s, inputs),
        "pipeline_0_hooks" => measure(runtime, inputs, collect, |i| invoke(&s.pipeline_0_hooks, i)),
        "pipeline_10_hooks" => measure(runtime, inputs, collect, |i| {
            invoke(&s.pipeline_10_hooks, i)
        }),
        "pipeline_10_written_hooks" => measure(runtime, inputs, collect, |i| {
            invoke(&s.pipeline_10_written_hooks, i)
        }),
        "pipeline_10_hand_written_hooks" => measure(runtime, inputs, collect, |i| {
            invoke(&s.pipeline_10_hand_written_hooks, i)
        }),
        "pipeline_hook_on_every_stage" => measure(runtime, inputs, collect, |i| {
            invoke(&s.pipeline_every_stage, i)
        }),
        "pipeline_uninterested_hooks" => measure(runtime, inputs, collect, |i| {
            invoke(&s.pipeline_uninterested_hooks, i)
        }),
        "tower_10_layers_boxed_each" => measure(runtime, inputs, collect, |i| {
            call_tower(&s.tower_10_boxed, i)
        }),
        _ => measure(runtime, inputs, collect, |i| {
            call_tower(&s.tower_10_static, i)
        }),
    }
}

/// The direct calls callgrind counts.
#[inline(never)]
fn collected_direct(runtime: &Runtime, s: &Scenarios, inputs: Vec<Value>) {
    direct(runtime, s, inputs);
}

/// The direct calls: the harness tool's body calls the tool once per input and drops the
/// outputs. The harness's own invocation (one pipeline call for all of them) adds about
/// one instruction per call.
#[inline(never)]
fn direct(runtime: &Runtime, s: &Scenarios, inputs: Vec<Value>) {
    black_box(runtime.block_on(s.direct_erased_with(inputs)));
}

/// [`calls`], in the function callgrind counts when `collect`.
fn measure<F, Fut>(runtime: &Runtime, inputs: Vec<Value>, collect: bool, call: F)
where
    F: FnMut(Value) -> Fut,
    Fut: Future<Output = Result<Value, ToolError>>,
{
    if collect {
        collected_calls(runtime, inputs, call);
    } else {
        calls(runtime, inputs, call);
    }
}

/// The calls callgrind counts.
#[inline(never)]
fn collected_calls<F, Fut>(runtime: &Runtime, inputs: Vec<Value>, call: F)
where
    F: FnMut(Value) -> Fut,
    Fut: Future<Output = Result<Value, ToolError>>,
{
    calls(runtime, inputs, call);
}

/// `call` once per input, the outputs dropped here.
#[inline(never)]
fn calls<F, Fut>(runtime: &Runtime, inputs: Vec<Value>, mut call: F)
where
    F: FnMut(Value) -> Fut,
    Fut: Future<Output = Result<Value, ToolError>>,
{
    let mut outputs = Vec::with_capacity(inputs.len());
    runtime.block_on(async {
        for input in inputs {
            outputs.push(call(input).await.expect("the call succeeds"));
        }
    });
    drop(black_box(outputs));
}
