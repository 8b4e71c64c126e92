//! Batches: order, concurrency, and every way a single call can fail without costing the
//! others their results.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Runs, THREAD, state, system};
use serde_json::json;
use toolgate_agent::{
    Concurrency, ExecuteOptions, InMemoryStateManager, ResumeDecision, ResumeOptions, ThreadConfig,
    ToolCall, ToolStatus,
};
use toolgate_core::User;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_of_eight_keeps_every_result_when_one_panics_one_is_disabled_one_is_invalid_and_one_suspends()
 {
    let runs = Arc::new(Runs::default());
    let state = state();
    state.disable_tool(THREAD, "echo");
    let system = system(&runs, state).build().unwrap();

    let calls = vec![
        ToolCall::new("c0", "get_weather", json!({ "city": "Paris", "days": 2 })),
        ToolCall::new("c1", "boom", json!({ "text": "x" })),
        ToolCall::new("c2", "echo", json!({ "text": "hi" })),
        ToolCall::new("c3", "get_weather", json!({ "city": "", "days": 99 })),
        ToolCall::new("c4", "ask_user", json!({ "question": "Which account?" })),
        ToolCall::new("c5", "show_chart", json!({ "text": "bars" })),
        ToolCall::new("c6", "big", json!({ "chars": 3 })),
        ToolCall::new("c7", "get_weather", json!({ "city": "Oslo", "days": 1 })),
    ];
    let options = ExecuteOptions::new()
        .concurrency(Concurrency::Parallel(8))
        .user(User::new("ann"))
        .trace_id("trace-42");
    let results = system.execute_tools(THREAD, calls.clone(), options).await;

    assert_eq!(results.len(), 8);
    for (call, result) in calls.iter().zip(&results) {
        assert_eq!((&result.call_id, &result.tool_name), (&call.id, &call.name));
        assert_eq!(result.metadata.trace_id.as_deref(), Some("trace-42"));
    }
    assert_eq!(
        results[0].output,
        Some(json!({ "city": "Paris", "days": 2, "temp_c": 21 }))
    );
    assert_eq!(results[1].error_code(), Some("internal"));
    assert!(
        !results[1]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("exploded"),
        "no panic payload"
    );
    assert_eq!(results[2].error_code(), Some("tool_disabled"));
    assert_eq!(results[3].error_code(), Some("invalid_input"));
    let paths: Vec<&str> = results[3]
        .error
        .as_ref()
        .unwrap()
        .violations
        .iter()
        .map(|v| v.path.as_str())
        .collect();
    assert_eq!(paths, ["city", "days"]);
    assert_eq!(results[4].status, ToolStatus::Suspended);
    assert_eq!(results[5].output, Some(json!({ "chart": "bars" })));
    assert_eq!(results[6].output, Some(json!("ééé")));
    assert_eq!(
        results[7].output,
        Some(json!({ "city": "Oslo", "days": 1, "temp_c": 21 }))
    );

    let id = results[4].suspension_id().unwrap().to_owned();
    let resumed = system
        .resume(
            &id,
            ResumeDecision::Complete {
                output: json!("account 7"),
            },
            ResumeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        (resumed.call_id.as_str(), resumed.tool_name.as_str()),
        ("c4", "ask_user")
    );
    assert_eq!(resumed.status, ToolStatus::Success);
    assert_eq!(resumed.output, Some(json!("account 7")));
    assert_eq!(resumed.metadata.trace_id.as_deref(), Some("trace-42"));
    assert_eq!(
        Runs::of(&runs.ask_user),
        0,
        "a completed blocking call never runs its tool"
    );
}

#[tokio::test]
async fn sequential_batch_returns_results_in_call_order() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .concurrency(Concurrency::Sequential)
        .build()
        .unwrap();
    let calls: Vec<ToolCall> = (0..5)
        .map(|i| ToolCall::new(format!("c{i}"), "echo", json!({ "text": format!("n{i}") })))
        .collect();
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    let outputs: Vec<_> = results.iter().map(|r| r.output.clone().unwrap()).collect();
    assert_eq!(outputs, ["n0", "n1", "n2", "n3", "n4"]);
}

#[tokio::test(start_paused = true)]
async fn parallel_batch_runs_at_most_the_bound_at_once_and_keeps_call_order() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    // Longer calls first: finishing order differs from call order.
    let calls: Vec<ToolCall> = [400u64, 300, 200, 100, 50, 10]
        .iter()
        .enumerate()
        .map(|(i, ms)| ToolCall::new(format!("c{i}"), "sleep", json!({ "ms": ms })))
        .collect();
    let started = tokio::time::Instant::now();
    let results = system
        .execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new().concurrency(Concurrency::Parallel(2)),
        )
        .await;
    let outputs: Vec<_> = results.iter().map(|r| r.output.clone().unwrap()).collect();
    assert_eq!(
        outputs,
        [
            json!(400),
            json!(300),
            json!(200),
            json!(100),
            json!(50),
            json!(10)
        ]
    );
    // Two lanes: 400 | 300, then 200 after 300 (at 500), 100 after 400 (at 500), …
    // With a bound of 2 the batch cannot end before 560 ms; unbounded it would take 400.
    assert!(
        started.elapsed() >= Duration::from_millis(550),
        "{:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_millis(1_000));
}

#[tokio::test(start_paused = true)]
async fn parallel_batch_is_faster_than_sequential() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let calls: Vec<ToolCall> = (0..4)
        .map(|i| ToolCall::new(format!("c{i}"), "sleep", json!({ "ms": 100 })))
        .collect();
    let started = tokio::time::Instant::now();
    system
        .execute_tools(
            THREAD,
            calls.clone(),
            ExecuteOptions::new().concurrency(Concurrency::Parallel(4)),
        )
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    let started = tokio::time::Instant::now();
    system
        .execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new().concurrency(Concurrency::Sequential),
        )
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(400));
}

#[tokio::test]
async fn a_thread_nobody_configured_may_call_every_registered_tool() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, Arc::new(InMemoryStateManager::new()))
        .build()
        .unwrap();
    let calls = vec![
        ToolCall::new("a", "echo", json!({ "text": "x" })),
        ToolCall::new("b", "get_weather", json!({ "city": "Rome", "days": 1 })),
    ];
    let results = system
        .execute_tools("never-configured", calls, ExecuteOptions::new())
        .await;
    for result in &results {
        assert!(result.is_success(), "{result:?}");
    }
    let offered = system
        .enabled_definitions("never-configured")
        .await
        .unwrap();
    assert_eq!(offered.len(), system.definitions().len());
}

#[tokio::test]
async fn a_default_configuration_applies_to_threads_nobody_configured() {
    let runs = Arc::new(Runs::default());
    let state = InMemoryStateManager::new().default_config(ThreadConfig::enabling(["echo"]));
    let system = system(&runs, Arc::new(state)).build().unwrap();
    let results = system
        .execute_tools(
            "never-configured",
            vec![
                ToolCall::new("a", "echo", json!({ "text": "x" })),
                ToolCall::new("b", "get_weather", json!({ "city": "Rome", "days": 1 })),
            ],
            ExecuteOptions::new(),
        )
        .await;
    assert!(results[0].is_success(), "{:?}", results[0]);
    assert_eq!(results[1].error_code(), Some("tool_disabled"));
}

#[tokio::test]
async fn unknown_thread_gives_every_call_an_error_result_saying_so() {
    let runs = Arc::new(Runs::default());
    let system = system(
        &runs,
        Arc::new(InMemoryStateManager::new().refusing_unknown_threads()),
    )
    .build()
    .unwrap();
    let calls = vec![
        ToolCall::new("a", "echo", json!({ "text": "x" })),
        ToolCall::new("b", "get_weather", json!({ "city": "Rome", "days": 1 })),
    ];
    let results = system
        .execute_tools("nobody", calls, ExecuteOptions::new())
        .await;
    assert_eq!(results.len(), 2);
    for (result, id) in results.iter().zip(["a", "b"]) {
        assert_eq!(result.call_id, id);
        assert_eq!(result.error_code(), Some("thread_config_unavailable"));
        assert!(
            result
                .error
                .as_ref()
                .unwrap()
                .message
                .contains("thread `nobody` has no tool configuration")
        );
    }
}

#[tokio::test]
async fn unknown_tool_is_an_error_result_naming_it() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("c1", "get_wether", json!({}))],
            ExecuteOptions::new(),
        )
        .await;
    assert_eq!(results[0].tool_name, "get_wether");
    assert_eq!(results[0].error_code(), Some("unknown_tool"));
    assert!(
        results[0]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("`get_wether`")
    );
}

#[tokio::test]
async fn disabled_tool_error_lists_the_enabled_tools() {
    let runs = Arc::new(Runs::default());
    let state = Arc::new(InMemoryStateManager::new());
    state.set_config(THREAD, ThreadConfig::enabling(["echo"]));
    let system = system(&runs, state).build().unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("c1", "transfer", json!({ "text": "5" }))],
            ExecuteOptions::new(),
        )
        .await;
    let error = results[0].error.as_ref().unwrap();
    assert_eq!(error.code, "tool_disabled");
    assert!(
        error.message.contains("enabled tools (echo)"),
        "{}",
        error.message
    );
    assert_eq!(Runs::of(&runs.transfer), 0);
}

#[tokio::test]
async fn unparseable_arguments_are_kept_raw_and_answered_with_an_error() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let call = ToolCall::from_json_str("c1", "echo", r#"{"text": "unterminated"#);
    let results = system
        .execute_tools(THREAD, vec![call], ExecuteOptions::new())
        .await;
    assert_eq!(results[0].error_code(), Some("invalid_input"));
    assert!(
        results[0]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("not valid JSON")
    );
    assert_eq!(
        results[0].metadata.raw_arguments.as_deref(),
        Some(r#"{"text": "unterminated"#)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_past_its_timeout_is_a_timeout_error_and_others_finish() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state())
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let calls = vec![
        ToolCall::new("slow", "sleep", json!({ "ms": 10_000 })),
        ToolCall::new("fast", "sleep", json!({ "ms": 10 })),
    ];
    let results = system
        .execute_tools(THREAD, calls, ExecuteOptions::new())
        .await;
    assert_eq!(results[0].error_code(), Some("timeout"));
    assert_eq!(results[1].output, Some(json!(10)));
    let per_call = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("slow", "sleep", json!({ "ms": 1_000 }))],
            ExecuteOptions::new().timeout(Duration::from_secs(5)),
        )
        .await;
    assert_eq!(
        per_call[0].output,
        Some(json!(1_000)),
        "the batch's timeout wins over the system's"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_ends_at_its_deadline_and_calls_that_never_started_time_out_unrun() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    // Eight calls of 10 s each, two at a time, each allowed 8 s: without a deadline for the
    // whole batch this would last four rounds of 8 s.
    let calls: Vec<ToolCall> = (0..8)
        .map(|i| ToolCall::new(format!("c{i}"), "sleep", json!({ "ms": 10_000 })))
        .collect();
    let started = tokio::time::Instant::now();
    let results = system
        .execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new()
                .concurrency(Concurrency::Parallel(2))
                .timeout(Duration::from_secs(8))
                .deadline(started + Duration::from_secs(20)),
        )
        .await;
    assert_eq!(started.elapsed(), Duration::from_secs(20));
    assert_eq!(results.len(), 8);
    assert!(
        results.iter().all(|r| r.error_code() == Some("timeout")),
        "{results:?}"
    );
    // Rounds at 0 s and 8 s run their own 8 s; the third starts at 16 s and has the 4 s the
    // batch has left; the last never starts.
    assert_eq!(Runs::of(&runs.sleep), 6);
    let unrun: Vec<_> = results
        .iter()
        .filter(|r| {
            r.error
                .as_ref()
                .is_some_and(|e| e.message.contains("the batch's time ran out"))
        })
        .collect();
    assert_eq!(unrun.len(), 2, "{results:?}");
    assert_eq!(unrun[0].error.as_ref().unwrap().status, Some(504));
}

#[tokio::test(start_paused = true)]
async fn a_sequential_batch_past_its_deadline_runs_no_more_calls() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let started = tokio::time::Instant::now();
    let results = system
        .execute_tools(
            THREAD,
            vec![
                ToolCall::new("first", "sleep", json!({ "ms": 10_000 })),
                ToolCall::new("second", "sleep", json!({ "ms": 10 })),
            ],
            ExecuteOptions::new()
                .concurrency(Concurrency::Sequential)
                .deadline(started + Duration::from_secs(1)),
        )
        .await;
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert_eq!(results[0].error_code(), Some("timeout"));
    assert_eq!(results[1].error_code(), Some("timeout"));
    assert_eq!(Runs::of(&runs.sleep), 1, "the second call never ran");
}

#[tokio::test]
async fn an_unknown_tool_name_longer_than_any_tool_name_is_echoed_only_up_to_that_length() {
    let runs = Arc::new(Runs::default());
    let system = system(&runs, state()).build().unwrap();
    let results = system
        .execute_tools(
            THREAD,
            vec![ToolCall::new("c1", "n".repeat(100_000), json!({}))],
            ExecuteOptions::new(),
        )
        .await;
    assert_eq!(results[0].error_code(), Some("unknown_tool"));
    assert_eq!(results[0].tool_name, format!("{}…", "n".repeat(64)));
    assert!(results[0].error.as_ref().unwrap().message.len() < 300);
}

#[tokio::test]
async fn calls_run_with_the_thread_as_session_and_the_call_id_as_request_id() {
    use toolgate_core::tool::tool_fn_with_context;
    use toolgate_core::{Pipeline, ToolError, ToolInvokeContext};
    let pipeline = Pipeline::builder().tool(tool_fn_with_context(
        "whoami",
        "Names the call.",
        |_: common::NoArgs, ctx: &ToolInvokeContext| {
            Box::pin(async move {
                let trace = ctx
                    .get::<toolgate_agent::TraceId>()
                    .map(|t| (*t).clone())
                    .unwrap_or_default();
                Ok::<_, ToolError>(json!({
                    "session": ctx.session_id(),
                    "request": ctx.request_id().to_string(),
                    "user": ctx.user().id,
                    "trace": trace,
                }))
            })
        },
    ));
    let state = Arc::new(InMemoryStateManager::new());
    state.set_config("t-9", ThreadConfig::enabling(["whoami"]));
    let system = toolgate_agent::ToolSystem::builder(pipeline, state)
        .build()
        .unwrap();
    let results = system
        .execute_tools(
            "t-9",
            vec![ToolCall::new("call_abc", "whoami", json!({}))],
            ExecuteOptions::new()
                .user(User::new("bob"))
                .trace_id("tr-1"),
        )
        .await;
    assert_eq!(
        results[0].output,
        Some(json!({ "session": "t-9", "request": "call_abc", "user": "bob", "trace": "tr-1" }))
    );
}

/// What a host knows from the request, bound to every call of a batch; a secret in the
/// host, so its options must never print it.
struct CallerToken;

impl toolgate_core::external::TypeMapKey for CallerToken {
    type Value = String;
}

/// Records, per call, the `CallerToken` its hook saw (or that it saw none).
struct RecordCallerToken(std::sync::Mutex<Vec<(String, Option<String>)>>);

#[toolgate_core::hook]
impl toolgate_core::Hook for RecordCallerToken {
    fn will_authorize(
        &self,
        ctx: &mut toolgate_core::ToolInvokeContext,
    ) -> toolgate_core::HookResult {
        let seen = ctx.try_get::<CallerToken>().map(|t| (*t).clone());
        self.0
            .lock()
            .unwrap()
            .push((ctx.request_id().to_string(), seen));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_bound_on_the_batch_reaches_every_call_of_a_parallel_batch() {
    use toolgate_core::tool::tool_fn_with_context;
    use toolgate_core::{Pipeline, ToolError, ToolInvokeContext};
    const CALLS: usize = 4;
    // The tool waits until every call of the batch is in it: they run at once, or the
    // test times out.
    let together = Arc::new(tokio::sync::Barrier::new(CALLS));
    let hook = Arc::new(RecordCallerToken(std::sync::Mutex::new(Vec::new())));
    let pipeline = Pipeline::builder()
        .hook(Arc::clone(&hook))
        .tool(tool_fn_with_context(
            "token",
            "Answers with the caller's token.",
            move |_: common::NoArgs, ctx: &ToolInvokeContext| {
                let token = ctx.get::<CallerToken>().map(|t| (*t).clone());
                let together = Arc::clone(&together);
                Box::pin(async move {
                    together.wait().await;
                    token.map_err(|e| ToolError::internal(e.to_string()))
                })
            },
        ));
    let state = Arc::new(InMemoryStateManager::new());
    state.set_config(THREAD, ThreadConfig::enabling(["token"]));
    let system = toolgate_agent::ToolSystem::builder(pipeline, state)
        .build()
        .unwrap();

    let options = ExecuteOptions::new()
        .concurrency(Concurrency::Parallel(CALLS))
        .provide::<CallerToken>("an earlier token".to_owned())
        .provide::<CallerToken>("the caller's token".to_owned());
    let printed = format!("{options:?}");
    assert!(
        !printed.contains("caller's token") && !printed.contains("earlier"),
        "a provider's value was printed: {printed}"
    );
    assert!(printed.contains("len: 1"), "{printed}");
    let calls = (0..CALLS)
        .map(|i| ToolCall::new(format!("c{i}"), "token", json!({})))
        .collect();
    let results = tokio::time::timeout(
        Duration::from_secs(10),
        system.execute_tools(THREAD, calls, options.clone()),
    )
    .await
    .expect("the calls ran at once");
    for result in &results {
        assert_eq!(
            result.output,
            Some(json!("the caller's token")),
            "{result:?}"
        );
    }
    let mut seen = hook.0.lock().unwrap().clone();
    seen.sort();
    let expected: Vec<_> = (0..CALLS)
        .map(|i| (format!("c{i}"), Some("the caller's token".to_owned())))
        .collect();
    assert_eq!(seen, expected, "every call's hook saw the provider");

    // Bound on the batch, not on the system: a batch without it has none.
    hook.0.lock().unwrap().clear();
    let calls = (0..CALLS)
        .map(|i| ToolCall::new(format!("d{i}"), "token", json!({})))
        .collect();
    let results = tokio::time::timeout(
        Duration::from_secs(10),
        system.execute_tools(
            THREAD,
            calls,
            ExecuteOptions::new().concurrency(Concurrency::Parallel(CALLS)),
        ),
    )
    .await
    .expect("the calls ran at once");
    for result in &results {
        assert_eq!(result.error_code(), Some("internal"), "{result:?}");
    }
    assert!(
        hook.0
            .lock()
            .unwrap()
            .iter()
            .all(|(_, token)| token.is_none())
    );
}

/// Records the request id of every call as it enters the pipeline: the first stage.
struct RecordArrival(std::sync::Mutex<Vec<String>>);

#[toolgate_core::hook]
impl toolgate_core::Hook for RecordArrival {
    fn will_create_invoke_context(
        &self,
        ctx: &mut toolgate_core::ToolInvokeContext,
    ) -> toolgate_core::HookResult {
        self.0.lock().unwrap().push(ctx.request_id().to_string());
        Ok(())
    }
}

/// Runs six calls with at most `bound` at once, from a task on a worker as a server's
/// handler does, and answers with the order they entered the pipeline in. The tool waits
/// until `bound` calls are in it: the calls run at once, or the batch never ends.
async fn arrival_order(bound: usize) -> Vec<String> {
    use toolgate_core::{Pipeline, ToolError, tool_fn};
    const CALLS: usize = 6;
    let together = Arc::new(tokio::sync::Barrier::new(bound));
    let arrival = Arc::new(RecordArrival(std::sync::Mutex::new(Vec::new())));
    let pipeline = Pipeline::builder().hook(Arc::clone(&arrival)).tool(tool_fn(
        "meet",
        "Waits for the others.",
        move |_: common::NoArgs| {
            let together = Arc::clone(&together);
            async move {
                together.wait().await;
                Ok::<_, ToolError>("met")
            }
        },
    ));
    let state = Arc::new(InMemoryStateManager::new());
    state.set_config(THREAD, ThreadConfig::enabling(["meet"]));
    let system = toolgate_agent::ToolSystem::builder(pipeline, state)
        .build()
        .unwrap();
    let calls: Vec<ToolCall> = (0..CALLS)
        .map(|i| ToolCall::new(format!("c{i}"), "meet", json!({})))
        .collect();
    let batch = tokio::spawn(async move {
        system
            .execute_tools(
                THREAD,
                calls,
                ExecuteOptions::new().concurrency(Concurrency::Parallel(bound)),
            )
            .await
    });
    let results = tokio::time::timeout(Duration::from_secs(10), batch)
        .await
        .expect("the calls ran at once")
        .unwrap();
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(
        ids,
        ["c0", "c1", "c2", "c3", "c4", "c5"],
        "answers in order"
    );
    assert!(
        results.iter().all(|r| r.output == Some(json!("met"))),
        "{results:?}"
    );
    arrival.0.lock().unwrap().clone()
}

// The runtime starts the task a worker spawned last before those it spawned earlier (its
// "LIFO slot"): calls each spawned at once onto a task would enter the pipeline last-first.
// One worker makes that certain rather than likely.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn parallel_calls_enter_the_pipeline_in_batch_order_and_still_run_at_once() {
    assert_eq!(
        arrival_order(6).await,
        ["c0", "c1", "c2", "c3", "c4", "c5"],
        "calls entered the pipeline out of batch order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn calls_waiting_for_their_turn_enter_the_pipeline_in_batch_order() {
    assert_eq!(
        arrival_order(2).await,
        ["c0", "c1", "c2", "c3", "c4", "c5"],
        "calls entered the pipeline out of batch order"
    );
}
