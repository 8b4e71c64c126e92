//! Observations: what is recorded, and that recording never blocks or fails a call.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{
    Concurrency, ExecuteOptions, Observation, ObservationSink, ResumeDecision, ResumeOptions,
    ToolCall,
};

#[derive(Default)]
struct Collect(Mutex<Vec<Observation>>);

impl ObservationSink for Collect {
    fn record(&self, observation: &Observation) {
        self.0.lock().unwrap().push(observation.clone());
    }
}

struct Explodes(AtomicUsize);

impl ObservationSink for Explodes {
    fn record(&self, _: &Observation) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("sink failure");
    }
}

#[tokio::test]
async fn executions_suspensions_and_resumes_are_observed_with_full_results() {
    let runs = Arc::new(Runs::default());
    let sink = Arc::new(Collect::default());
    let system = system(&runs, state()).sink(sink.clone()).build().unwrap();
    let calls = vec![
        ToolCall::new("a", "echo", json!({ "text": "hi" })),
        ToolCall::new("b", "transfer", json!({ "text": "5" })),
    ];
    let results = system
        .execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new()
                .trace_id("tr")
                .concurrency(Concurrency::Sequential),
        )
        .await;
    system
        .resume(
            results[1].suspension_id().unwrap(),
            ResumeDecision::Approve,
            ResumeOptions::new(),
        )
        .await
        .unwrap();

    let seen = sink.0.lock().unwrap();
    assert_eq!(seen.len(), 3);
    match &seen[0] {
        Observation::ToolExecution {
            thread_id,
            trace_id,
            result,
            display,
            ..
        } => {
            assert_eq!(
                (thread_id.as_str(), trace_id.as_str(), *display),
                (THREAD, "tr", false)
            );
            assert_eq!(result, &results[0]);
        }
        other => panic!("expected a tool execution, got {other:?}"),
    }
    assert!(matches!(&seen[1], Observation::Suspended { result, .. } if result == &results[1]));
    match &seen[2] {
        Observation::Resumed {
            decision,
            result,
            thread_id,
            ..
        } => {
            assert_eq!((decision.as_str(), thread_id.as_str()), ("approve", THREAD));
            assert_eq!(result.output, Some(json!("transferred 5")));
        }
        other => panic!("expected a resume, got {other:?}"),
    }
}

#[tokio::test]
async fn a_panicking_sink_neither_fails_the_call_nor_starves_other_sinks() {
    let runs = Arc::new(Runs::default());
    let bad = Arc::new(Explodes(AtomicUsize::new(0)));
    let good = Arc::new(Collect::default());
    let system = system(&runs, state())
        .sink(bad.clone())
        .sink(good.clone())
        .build()
        .unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("a", "echo", json!({ "text": "ok" }))],
            ExecuteOptions::new(),
        )
        .await;
    assert_eq!(results[0].output, Some(json!("ok")));
    assert_eq!(bad.0.load(Ordering::SeqCst), 1);
    assert_eq!(good.0.lock().unwrap().len(), 1);
    assert_eq!(system.observer().dropped(), 1);
}

#[tokio::test]
async fn a_lagging_subscriber_loses_the_oldest_events_and_the_loss_is_counted() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .observation_buffer(2)
        .build()
        .unwrap();
    let mut slow = system.subscribe();
    let calls: Vec<ToolCall> = (0..5)
        .map(|i| ToolCall::new(format!("c{i}"), "echo", json!({ "text": format!("{i}") })))
        .collect();
    let results = system
        .execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new().concurrency(Concurrency::Sequential),
        )
        .await;
    assert_eq!(
        results.len(),
        5,
        "the batch finished although nobody read the stream"
    );

    let mut received = Vec::new();
    while let Some(observation) = slow.try_recv() {
        if let Observation::ToolExecution { result, .. } = &*observation {
            received.push(result.call_id.clone());
        }
    }
    assert_eq!(received, ["c3", "c4"]);
    assert_eq!(system.observer().dropped(), 3);
}

#[tokio::test]
async fn observations_without_subscribers_are_not_counted_as_dropped() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("a", "echo", json!({ "text": "x" }))],
            ExecuteOptions::new(),
        )
        .await;
    assert_eq!(system.observer().dropped(), 0);
}
