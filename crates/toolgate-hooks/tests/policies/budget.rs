use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolgate_core::hook::hook_fn_sync;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::tool::ErasedTool;
use toolgate_core::{JsonTool, Pipeline, PipelineBuilder, Stage, ToolError};
use toolgate_hooks::authorize::{Authorize, Effect, Rule, Rules};
use toolgate_hooks::budget::{
    Budget, BudgetBackend, BudgetDecision, BudgetRequest, Cost, InMemoryBudget, LimitReport,
    LimitState, Window,
};
use toolgate_hooks::cache::ResultCache;
use toolgate_hooks::output_limit::OutputLimit;
use toolgate_hooks::repair::ArgumentRepair;

use crate::support::as_user;

/// 2026-11-28 23:00:00 UTC.
const LATE: u64 = 1_795_906_800;

fn clock_at(seconds: Arc<AtomicU64>) -> impl Fn() -> SystemTime + Send + Sync + 'static {
    move || UNIX_EPOCH + Duration::from_secs(seconds.load(Ordering::SeqCst))
}

/// Tools `search` (echoes its arguments) and `llm` (answers the usage its caller asked to
/// report), under `budget`.
fn priced(budget: Budget) -> Pipeline {
    priced_tools().hook(budget).build().unwrap()
}

/// The tools of [`priced`], without a hook.
fn priced_tools() -> PipelineBuilder {
    Pipeline::builder()
        .tool(JsonTool::new(
            "search",
            "Searches.",
            json!({}),
            |input, _| {
                let out = input.clone();
                Box::pin(async move { Ok::<_, ToolError>(out) })
            },
        ))
        .tool(JsonTool::new("llm", "Completes.", json!({}), |input, _| {
            let out = json!({"text": "…", "usage": {"units": input["used"]}});
            Box::pin(async move { Ok::<_, ToolError>(out) })
        }))
}

/// What `user` has spent of the default budget (`budget`) today, in `store`.
async fn spent(store: &InMemoryBudget, user: &str) -> Option<u64> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let end = Window::day().end_after(now.as_millis() as u64);
    let key = format!("budget\u{1f}u\u{1f}{user}");
    store.adjust(&key, end, 0).await.unwrap().map(|s| s.used)
}

/// `search` costs 4 and `llm` is charged what it reports (estimate 2), out of 10 a day,
/// both behind a result cache.
fn cached(store: &InMemoryBudget) -> Pipeline {
    priced_tools()
        .hook(
            Budget::builder(10, Window::day())
                .tool_cost("search", Cost::Fixed(4))
                .tool_cost(
                    "llm",
                    Cost::Reported {
                        pointer: "/usage/units".into(),
                        estimate: 2,
                    },
                )
                .backend(Arc::new(store.clone()))
                .build(),
        )
        .hook(
            ResultCache::builder()
                .include("search")
                .include("llm")
                .build(),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_cached_answer_costs_nothing() {
    let store = InMemoryBudget::default();
    let pipeline = cached(&store);
    // 4 units for the call that runs; the hits after it are free, so all fit in 10.
    for _ in 0..5 {
        pipeline
            .invoke("search", json!({"q": "rust"}), as_user("ann"))
            .await
            .unwrap();
    }
    assert_eq!(spent(&store, "ann").await, Some(4));
    // A stored output that reports a cost is not charged that cost again.
    for _ in 0..3 {
        pipeline
            .invoke("llm", json!({"used": 6}), as_user("bob"))
            .await
            .unwrap();
    }
    assert_eq!(spent(&store, "bob").await, Some(6));
}

fn suspension_id(err: ToolError) -> String {
    match err {
        ToolError::Suspended { suspension_id, .. } => suspension_id,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

/// `search` (4 units of 10) waits for approval; on resume, a call by `eve` is refused at
/// `will_authorize` (her access was revoked while it waited).
fn approved(store: &InMemoryBudget) -> Pipeline {
    priced_tools()
        .hook(hook_fn_sync(Stage::WillCheckConsent, |ctx| {
            ctx.suspend("a person approves searches")
        }))
        .hook(hook_fn_sync(Stage::WillAuthorize, |ctx| {
            if ctx.resumed().is_some() && ctx.user().id == "eve" {
                return ctx.abort("eve's access was revoked", "revoked", 403);
            }
            Ok(())
        }))
        .hook(
            Budget::builder(10, Window::day())
                .tool_cost("search", Cost::Fixed(4))
                .backend(Arc::new(store.clone()))
                .build(),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_call_refused_on_resume_is_given_its_charge_back() {
    let store = InMemoryBudget::default();
    let pipeline = approved(&store);
    let wait = |user: &'static str| {
        let pipeline = pipeline.clone();
        async move {
            suspension_id(
                pipeline
                    .invoke("search", json!({}), as_user(user))
                    .await
                    .unwrap_err(),
            )
        }
    };
    // Rejected by the approver: the tool never ran.
    let id = wait("ann").await;
    let reject = ResumeDecision::Reject {
        reason: "no".into(),
    };
    let err = pipeline
        .resume(&id, reject, as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "rejected");
    assert_eq!(spent(&store, "ann").await.unwrap_or(0), 0);
    // Approved, then refused by a policy as it resumes.
    let id = wait("eve").await;
    let err = pipeline
        .resume(&id, ResumeDecision::Approve, as_user("eve"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "revoked");
    assert_eq!(spent(&store, "eve").await.unwrap_or(0), 0);
    // Completed by a person: the tool never ran either.
    let id = wait("bob").await;
    let done = ResumeDecision::Complete {
        output: json!("by hand"),
    };
    pipeline.resume(&id, done, as_user("bob")).await.unwrap();
    assert_eq!(spent(&store, "bob").await.unwrap_or(0), 0);
    // Approved and run: charged once.
    let id = wait("bob").await;
    pipeline
        .resume(&id, ResumeDecision::Approve, as_user("bob"))
        .await
        .unwrap();
    assert_eq!(spent(&store, "bob").await, Some(4));
}

#[tokio::test]
async fn a_call_that_costs_more_than_the_whole_budget_is_not_told_to_retry() {
    let pipeline = priced(
        Budget::builder(100, Window::day())
            .name("team")
            .tool_cost("search", Cost::Fixed(494))
            .build(),
    );
    let err = pipeline
        .invoke("search", json!({}), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("budget_exhausted", 429));
    assert_eq!(err.retry_after_delay(), None, "{err}");
    assert!(err.to_string().contains("it can never run"), "{err}");
}

#[tokio::test]
async fn a_spent_budget_refuses_with_what_is_left_until_when() {
    let seconds = Arc::new(AtomicU64::new(LATE));
    let store = InMemoryBudget::default().with_clock(clock_at(seconds.clone()));
    let pipeline = priced(
        Budget::builder(1000, Window::day())
            .name("team")
            .tool_cost("search", Cost::Fixed(494))
            .backend(Arc::new(store))
            .build(),
    );
    for _ in 0..2 {
        pipeline
            .invoke("search", json!({}), as_user("ann"))
            .await
            .unwrap();
    }
    let err = pipeline
        .invoke("search", json!({}), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("budget_exhausted", 429));
    assert_eq!(
        err.to_string(),
        "budget `team`: 12 of 1,000 units left until 00:00 UTC for this user; this call costs 494; make a cheaper call, retry after 3600000 ms"
    );
    // The store's clock says 23:00: an hour to go.
    assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(3600)));
    // Another user has a budget of their own.
    pipeline
        .invoke("search", json!({}), as_user("bob"))
        .await
        .unwrap();
    // At midnight the allowance is whole again.
    seconds.fetch_add(3600, Ordering::SeqCst);
    pipeline
        .invoke("search", json!({}), as_user("ann"))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_argument_prices_the_call_and_a_bad_one_is_refused() {
    let pipeline = priced(
        Budget::builder(100, Window::hour())
            .tool_cost(
                "search",
                Cost::Argument {
                    pointer: "/rows".into(),
                    per_unit: 1,
                    base: 1,
                },
            )
            .build(),
    );
    pipeline
        .invoke("search", json!({"rows": 89}), as_user("ann"))
        .await
        .unwrap();
    // 90 spent: 10 left, and 10 rows cost 11.
    let err = pipeline
        .invoke("search", json!({"rows": 10}), as_user("ann"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("10 of 100 units left"), "{err}");
    assert!(err.to_string().contains("this call costs 11"), "{err}");
    pipeline
        .invoke("search", json!({"rows": 9}), as_user("ann"))
        .await
        .unwrap();
    let err = pipeline
        .invoke("search", json!({"rows": "0"}), as_user("bob"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("invalid_cost_argument", 422));
    assert!(err.to_string().contains("argument `/rows`"), "{err}");
}

#[tokio::test]
async fn a_reported_cost_is_reconciled_after_the_call() {
    let store = InMemoryBudget::default();
    let pipeline = priced(
        Budget::builder(100, Window::day())
            .tool_cost(
                "llm",
                Cost::Reported {
                    pointer: "/usage/units".into(),
                    estimate: 30,
                },
            )
            .backend(Arc::new(store.clone()))
            .build(),
    );
    let report = LimitReport::default();
    let options = as_user("ann").provide::<LimitReport>(report.clone());
    // The estimate of 30 is charged, then 20 of it given back.
    pipeline
        .invoke("llm", json!({"used": 10}), options)
        .await
        .unwrap();
    assert_eq!(report.states()[0].remaining, Some(90));
    // Over the estimate: 30 charged first, 60 in the end.
    pipeline
        .invoke("llm", json!({"used": 60}), as_user("ann"))
        .await
        .unwrap();
    // 70 spent, 30 left: one estimate still fits, reported as 50, past the limit.
    pipeline
        .invoke("llm", json!({"used": 50}), as_user("ann"))
        .await
        .unwrap();
    let err = pipeline
        .invoke("llm", json!({"used": 1}), as_user("ann"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0 of 100 units left"), "{err}");
    // An output without a cost keeps the estimate.
    pipeline
        .invoke("llm", json!({}), as_user("bob"))
        .await
        .unwrap();
    let key = "budget\u{1f}u\u{1f}bob";
    let window_end = Window::day().end_after(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    );
    assert_eq!(
        store
            .adjust(key, window_end, 0)
            .await
            .unwrap()
            .map(|s| s.used),
        Some(30)
    );
}

#[tokio::test]
async fn a_reported_cost_is_read_from_what_the_tool_returned_not_what_a_limit_made_of_it() {
    // A caller who makes the output long (here by sending a long text the tool repeats)
    // gets it truncated into text by the output limit, where no cost can be read: the call
    // must still be charged what the tool reported, not only its estimate.
    let store = InMemoryBudget::default();
    let pipeline = Pipeline::builder()
        .tool(JsonTool::new("llm", "Completes.", json!({}), |input, _| {
            let out = json!({"text": input["text"], "usage": {"units": input["used"]}});
            Box::pin(async move { Ok::<_, ToolError>(out) })
        }))
        .hook(
            Budget::builder(1000, Window::day())
                .tool_cost(
                    "llm",
                    Cost::Reported {
                        pointer: "/usage/units".into(),
                        estimate: 10,
                    },
                )
                .backend(Arc::new(store.clone()))
                .build(),
        )
        .hook(OutputLimit::new().max_bytes(1024))
        .build()
        .unwrap();
    let long = "x".repeat(4096);
    let out = pipeline
        .invoke("llm", json!({"text": long, "used": 500}), as_user("ann"))
        .await
        .unwrap();
    assert!(
        out.as_str().is_some_and(|t| t.contains("[truncated")),
        "{out}"
    );
    let window_end = Window::day().end_after(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    );
    let key = "budget\u{1f}u\u{1f}ann";
    assert_eq!(
        store
            .adjust(key, window_end, 0)
            .await
            .unwrap()
            .map(|s| s.used),
        Some(500)
    );
}

#[tokio::test]
async fn only_an_authorized_call_is_charged() {
    let store = InMemoryBudget::default();
    let pipeline = Pipeline::builder()
        .tool(JsonTool::new("search", "Searches.", json!({}), |_, _| {
            Box::pin(async { Ok::<_, ToolError>(json!("ok")) })
        }))
        .hook(Authorize::new(
            Rules::new(Effect::Deny).rule(Rule::allow().user("ann")),
        ))
        .hook(
            Budget::builder(1, Window::day())
                .backend(Arc::new(store.clone()))
                .build(),
        )
        .build()
        .unwrap();
    let err = pipeline
        .invoke("search", json!({}), as_user("eve"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    let end = Window::day().end_after(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    );
    assert_eq!(
        store
            .adjust("budget\u{1f}u\u{1f}eve", end, 0)
            .await
            .unwrap(),
        None
    );
    pipeline
        .invoke("search", json!({}), as_user("ann"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_spend_exactly_the_budget() {
    let pipeline = priced(
        Budget::builder(1000, Window::day())
            .tool_cost("search", Cost::Fixed(7))
            .build(),
    );
    let admitted = Arc::new(Mutex::new(0u64));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (pipeline, admitted) = (pipeline.clone(), admitted.clone());
        calls.spawn(async move {
            if pipeline
                .invoke("search", json!({}), as_user("ann"))
                .await
                .is_ok()
            {
                *admitted.lock().unwrap() += 7;
            }
        });
    }
    while calls.join_next().await.is_some() {}
    // 142 calls of 7 fit in 1,000 (994); the 143rd would not.
    assert_eq!(*admitted.lock().unwrap(), 994);
}

#[tokio::test]
async fn the_report_carries_each_limit_for_the_ratelimit_fields() {
    let pipeline = priced(Budget::builder(10, Window::hour()).name("hourly").build());
    let report = LimitReport::default();
    pipeline
        .invoke(
            "search",
            json!({}),
            as_user("ann").provide::<LimitReport>(report.clone()),
        )
        .await
        .unwrap();
    let [state] = &report.states()[..] else {
        panic!("one limit: {:?}", report.states());
    };
    let LimitState {
        policy,
        quota,
        window,
        remaining,
        resets_in,
    } = state.clone();
    assert_eq!(
        (policy.as_str(), quota, window),
        ("hourly", 10, Duration::from_secs(3600))
    );
    assert_eq!(remaining, Some(9));
    assert!(resets_in.unwrap() <= Duration::from_secs(3600));
}

/// A tool that records the count at `pointer` in each input it runs with.
fn recording(
    name: &str,
    schema: Value,
    pointer: &'static str,
    ran: &Arc<Mutex<Vec<u64>>>,
) -> Arc<dyn ErasedTool> {
    let ran = Arc::clone(ran);
    Arc::new(JsonTool::new(name, "Exports.", schema, move |input, _| {
        ran.lock()
            .unwrap()
            .extend(input.pointer(pointer).and_then(Value::as_u64));
        Box::pin(async { Ok::<_, ToolError>(json!("done")) })
    }))
}

fn per_unit_of(pointer: &str) -> Cost {
    Cost::Argument {
        pointer: pointer.into(),
        per_unit: 1,
        base: 1,
    }
}

/// Tools `export` (priced by `/options/pages`) and `flat` (priced by `/rows`) with input
/// schemas, behind `ArgumentRepair` and a budget of 100 units a day; the counts they ran
/// with.
fn repaired_and_priced() -> (Pipeline, Arc<Mutex<Vec<u64>>>) {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let export = json!({
        "type": "object",
        "properties": {
            "options": { "type": "object", "properties": { "pages": { "type": "integer" } } }
        }
    });
    let flat = json!({ "type": "object", "properties": { "rows": { "type": "integer" } } });
    let pipeline = Pipeline::builder()
        .tool(recording("export", export, "/options/pages", &ran))
        .tool(recording("flat", flat, "/rows", &ran))
        .hook(ArgumentRepair::new())
        .hook(
            Budget::builder(100, Window::day())
                .name("exports")
                .tool_cost("export", per_unit_of("/options/pages"))
                .tool_cost("flat", per_unit_of("/rows"))
                .build(),
        )
        .build()
        .unwrap();
    (pipeline, ran)
}
#[tokio::test]
async fn a_priced_argument_sent_inside_a_json_string_is_charged_what_the_tool_gets() {
    let (pipeline, ran) = repaired_and_priced();
    let over = [
        ("export", json!({"options": {"pages": 500}})),
        ("export", json!({"options": "{\"pages\": 500}"})),
        ("flat", json!({"rows": 500})),
        ("flat", json!("{\"rows\": 500}")),
    ];
    for (tool, input) in over {
        let err = pipeline
            .invoke(tool, input.clone(), as_user("ann"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "budget_exhausted", "{input}: {err}");
        assert!(
            err.to_string().contains("this call costs 501"),
            "{input}: {err}"
        );
    }
    assert!(ran.lock().unwrap().is_empty(), "{:?}", ran.lock().unwrap());

    // Within the budget the repaired call runs, charged what it ran with: 41, then 31.
    pipeline
        .invoke(
            "export",
            json!({"options": "{\"pages\": 40}"}),
            as_user("ann"),
        )
        .await
        .unwrap();
    pipeline
        .invoke("flat", json!("{\"rows\": 30}"), as_user("ann"))
        .await
        .unwrap();
    assert_eq!(*ran.lock().unwrap(), [40, 30]);
    let err = pipeline
        .invoke("flat", json!({"rows": 28}), as_user("ann"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("28 of 100 units left"), "{err}");
}

#[tokio::test]
async fn a_priced_argument_left_out_is_charged_the_default_the_tool_gets() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let schema = json!({
        "type": "object",
        "properties": { "rows": { "type": "integer", "default": 60 } }
    });
    let pipeline = Pipeline::builder()
        .tool(recording("flat", schema, "/rows", &ran))
        .hook(ArgumentRepair::new())
        .hook(
            Budget::builder(100, Window::day())
                .tool_cost("flat", per_unit_of("/rows"))
                .build(),
        )
        .build()
        .unwrap();
    pipeline
        .invoke("flat", json!({}), as_user("ann"))
        .await
        .unwrap();
    assert_eq!(*ran.lock().unwrap(), [60], "the tool got the default");
    // 61 spent: a second call left without the argument costs 61 again, more than is left.
    let err = pipeline
        .invoke("flat", json!({}), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "budget_exhausted", "{err}");
    assert!(err.to_string().contains("this call costs 61"), "{err}");
    // Sent, the argument is priced as sent.
    pipeline
        .invoke("flat", json!({"rows": 5}), as_user("ann"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_count_sent_as_a_string_is_charged_as_the_number_it_becomes() {
    let (pipeline, ran) = repaired_and_priced();
    let err = pipeline
        .invoke("flat", json!({"rows": "500"}), as_user("ann"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("this call costs 501"), "{err}");
    let err = pipeline
        .invoke(
            "export",
            json!({"options": "{\"pages\": \"500\"}"}),
            as_user("ann"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("this call costs 501"), "{err}");
    pipeline
        .invoke("flat", json!({"rows": "30"}), as_user("ann"))
        .await
        .unwrap();
    assert_eq!(*ran.lock().unwrap(), [30]);
    // What the tool would get is still checked: a negative count is refused.
    let err = pipeline
        .invoke(
            "export",
            json!({"options": "{\"pages\": -5}"}),
            as_user("ann"),
        )
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("invalid_cost_argument", 422));
}

#[tokio::test]
async fn a_single_item_sent_without_its_array_is_charged_as_the_array_it_becomes() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let schema = json!({
        "type": "object",
        "properties": {
            "batches": {
                "type": "array",
                "items": { "type": "object", "properties": { "rows": { "type": "integer" } } }
            }
        }
    });
    let pipeline = Pipeline::builder()
        .tool(recording("batch", schema, "/batches/0/rows", &ran))
        .hook(ArgumentRepair::new())
        .hook(
            Budget::builder(100, Window::day())
                .tool_cost("batch", per_unit_of("/batches/0/rows"))
                .build(),
        )
        .build()
        .unwrap();
    for input in [
        json!({"batches": [{"rows": 500}]}),
        json!({"batches": {"rows": 500}}),
        json!({"batches": "{\"rows\": 500}"}),
    ] {
        let err = pipeline
            .invoke("batch", input.clone(), as_user("ann"))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("this call costs 501"),
            "{input}: {err}"
        );
    }
    assert!(ran.lock().unwrap().is_empty(), "{:?}", ran.lock().unwrap());
}

/// A clock stepped back into the window before (an NTP correction) does not give a caller
/// that window's allowance afresh: the charge goes on against the window already spent.
/// A clock set far ahead, then corrected, leaves no budget refused for longer than a
/// window.
#[tokio::test]
async fn a_clock_stepped_back_gives_no_fresh_allowance_and_a_wrong_future_does_not_stick() {
    // 00:30 of a day: an hourly window.
    let start = 30 * 60;
    let seconds = Arc::new(AtomicU64::new(start));
    let store = InMemoryBudget::default().with_clock(clock_at(seconds.clone()));
    let pipeline = priced(
        Budget::builder(10, Window::hour())
            .tool_cost("search", Cost::Fixed(10))
            .backend(Arc::new(store))
            .build(),
    );
    let call = || pipeline.invoke("search", json!({}), as_user("ann"));
    call().await.unwrap();
    // 01:10: a new window, spent at once.
    seconds.store(start + 40 * 60, Ordering::SeqCst);
    call().await.unwrap();
    // The clock is stepped back to 00:50: the hour before is not whole again.
    seconds.store(start + 20 * 60, Ordering::SeqCst);
    let err = call().await.unwrap_err();
    assert_eq!(err.code(), "budget_exhausted", "{err}");

    // A clock set a year ahead charges a window of then, and is corrected to 02:10.
    seconds.store(start + 365 * 24 * 3600, Ordering::SeqCst);
    call().await.unwrap();
    seconds.store(start + 100 * 60, Ordering::SeqCst);
    call()
        .await
        .expect("the present window's allowance, not the wrong year's");
}

/// A reload that changes a budget's window keeps what was spent in the present window: a
/// used-up hourly budget made a two-hour one stays used up until the new window ends (not
/// when the old hour would have), and only a window that ended before the present one
/// began starts afresh.
#[tokio::test]
async fn a_reload_that_changes_the_window_keeps_the_spending() {
    let hour = 3600;
    // 10:30 of a day.
    let day = 20_000 * 86_400;
    let seconds = Arc::new(AtomicU64::new(day + 10 * hour + 30 * 60));
    let store = InMemoryBudget::default().with_clock(clock_at(seconds.clone()));
    let two_hours = Window::new(Duration::from_secs(2 * hour)).unwrap();
    let charge = |cost, window| {
        let store = store.clone();
        async move {
            let request = BudgetRequest {
                key: "ann",
                cost,
                limit: 20,
                window,
            };
            store.charge(request).await.unwrap()
        }
    };
    assert!(matches!(
        charge(20, Window::hour()).await,
        BudgetDecision::Charged(_)
    ));
    // 10:40, reloaded with a window of two hours (10:00 to 12:00): still used up.
    seconds.store(day + 10 * hour + 40 * 60, Ordering::SeqCst);
    let refused = charge(2, two_hours).await;
    let BudgetDecision::Refused(state) = refused else {
        panic!("a reload gave a fresh allowance: {refused:?}");
    };
    assert_eq!(state.used, 20);
    assert_eq!(state.window_end_ms, (day + 12 * hour) * 1000);
    // 11:10: the old hour is over, the two-hour window is not.
    seconds.store(day + 11 * hour + 10 * 60, Ordering::SeqCst);
    assert!(matches!(charge(2, two_hours).await, BudgetDecision::Refused(s) if s.used == 20));
    // Back to an hour at 11:20 (11:00 to 12:00): the spending carries (erring on refusing).
    seconds.store(day + 11 * hour + 20 * 60, Ordering::SeqCst);
    assert!(matches!(charge(2, Window::hour()).await, BudgetDecision::Refused(s) if s.used == 20));
    // 12:10: a window that began after the spent one ended starts afresh.
    seconds.store(day + 12 * hour + 10 * 60, Ordering::SeqCst);
    assert!(matches!(charge(2, two_hours).await, BudgetDecision::Charged(s) if s.used == 2));
}

/// A call charged under a daily budget, whose config is reloaded with an hourly one while
/// it runs (another call charges the hour), reports its reconciled cost against the
/// present hour: the report (the `RateLimit` fields) says the budget resets when the hour
/// ends, not when the day the call was charged in would have.
#[tokio::test]
async fn after_a_reload_carried_the_spending_a_reconciled_call_reports_the_present_window() {
    let hour = 3600;
    // 10:40 of a day.
    let day = 20_000 * 86_400;
    let seconds = Arc::new(AtomicU64::new(day + 10 * hour + 40 * 60));
    let store = InMemoryBudget::default().with_clock(clock_at(seconds.clone()));
    let reloaded = store.clone();
    let pipeline = Pipeline::builder()
        .tool(JsonTool::new(
            "llm",
            "Completes.",
            json!({}),
            move |_, _| {
                let reloaded = reloaded.clone();
                Box::pin(async move {
                    // While the tool runs, the config is reloaded and a call of ann's is
                    // charged 1 unit under the hourly budget: the day's spending is carried
                    // into the present hour (10:00 to 11:00).
                    let request = BudgetRequest {
                        key: "budget\u{1f}u\u{1f}ann",
                        cost: 1,
                        limit: 100,
                        window: Window::hour(),
                    };
                    let carried = reloaded.charge(request).await.unwrap();
                    assert!(
                        matches!(carried, BudgetDecision::Charged(s) if s.used == 31),
                        "{carried:?}"
                    );
                    Ok::<_, ToolError>(json!({"usage": {"units": 10}}))
                })
            },
        ))
        .hook(
            Budget::builder(100, Window::day())
                .tool_cost(
                    "llm",
                    Cost::Reported {
                        pointer: "/usage/units".into(),
                        estimate: 30,
                    },
                )
                .backend(Arc::new(store))
                .build(),
        )
        .build()
        .unwrap();
    let report = LimitReport::default();
    pipeline
        .invoke(
            "llm",
            json!({}),
            as_user("ann").provide::<LimitReport>(report.clone()),
        )
        .await
        .unwrap();
    // 30 charged, 1 by the reloaded budget, 20 given back: 11 spent, in the present hour.
    let [state] = &report.states()[..] else {
        panic!("one limit: {:?}", report.states());
    };
    assert_eq!(state.remaining, Some(89));
    assert_eq!(state.resets_in, Some(Duration::from_secs(20 * 60)));
}
