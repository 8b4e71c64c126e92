//! The shared budget: exact across replicas on one Redis and on a Redis Cluster (the
//! admitted cost equals the budget), reconciled reported costs, and keys that expire with
//! their window.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use serde_json::json;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_hooks::budget::{Budget, BudgetBackend, BudgetDecision, BudgetRequest, Cost, Window};
use toolgate_redis::{RedisConfig, RedisState};

use common::cluster::Cluster;
use common::{
    Proxy, assert_every_key_expires, config, connect, inspect, namespace, redis_or_skip,
    remove_keys_under,
};

/// Charges `cost` to budget `key` of 10 units an hour, straight on the backend.
async fn charge_ten_an_hour(budget: &impl BudgetBackend, key: &str, cost: u64) -> BudgetDecision {
    let request = BudgetRequest {
        key,
        cost,
        limit: 10,
        window: Window::hour(),
    };
    budget.charge(request).await.unwrap()
}

fn as_user(id: &str) -> InvokeOptions {
    InvokeOptions::new().user(User::new(id))
}

/// `flat` costs 5; `rows` costs one unit per row (callers send 5); `llm` charges 10 up
/// front and is reconciled to the `used` it is asked to report.
fn replica(state: &RedisState, limit: u64) -> Pipeline {
    let echo = |name: &'static str| {
        JsonTool::new(name, "Answers.", json!({}), |input, _| {
            let out = json!({"usage": {"units": input["used"]}});
            Box::pin(async move { Ok::<_, ToolError>(out) })
        })
    };
    Pipeline::builder()
        .tool(echo("flat"))
        .tool(echo("rows"))
        .tool(echo("llm"))
        .hook(
            Budget::builder(limit, Window::day())
                .name("daily")
                .tool_cost("flat", Cost::Fixed(5))
                .tool_cost(
                    "rows",
                    Cost::Argument {
                        pointer: "/rows".into(),
                        per_unit: 1,
                        base: 0,
                    },
                )
                .tool_cost(
                    "llm",
                    Cost::Reported {
                        pointer: "/usage/units".into(),
                        estimate: 10,
                    },
                )
                .backend(Arc::new(state.budget().deadline(Duration::from_secs(10))))
                .build(),
        )
        .build()
        .unwrap()
}

/// Every user of `users` calls `flat` and `rows` 60 times on each of four replicas at
/// once: 480 calls of 5 units per user against a budget of 1,000. Answers the cost
/// admitted per user.
async fn spend_at_once(replicas: &[Pipeline], users: &[&'static str]) -> BTreeMap<String, u64> {
    let mut calls = tokio::task::JoinSet::new();
    for pipeline in replicas {
        for &user in users {
            for i in 0..120 {
                let pipeline = pipeline.clone();
                calls.spawn(async move {
                    let tool = if i % 2 == 0 { "flat" } else { "rows" };
                    let outcome = pipeline
                        .invoke(tool, json!({"rows": 5}), as_user(user))
                        .await;
                    (user, outcome)
                });
            }
        }
    }
    let mut admitted = BTreeMap::new();
    while let Some(joined) = calls.join_next().await {
        let (user, outcome) = joined.unwrap();
        match outcome {
            Ok(_) => *admitted.entry(user.to_owned()).or_default() += 5,
            Err(error) => assert_eq!(error.code(), "budget_exhausted", "{error}"),
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_on_redis_admit_exactly_the_budget() {
    let Some(url) = redis_or_skip("four_replicas_on_redis_admit_exactly_the_budget").await else {
        return;
    };
    let prefix = namespace();
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(replica(&connect(&url, config(&prefix)).await, 1000));
    }
    let admitted = spend_at_once(&replicas, &["ann", "bob"]).await;
    for user in ["ann", "bob"] {
        assert_eq!(
            admitted[user], 1000,
            "`{user}`: exactly the budget, across 4 replicas"
        );
    }
    // Not even one unit is left, on any replica.
    let err = replicas[3]
        .invoke("rows", json!({"rows": 1}), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("budget_exhausted", 429));
    assert!(
        err.to_string()
            .contains("0 of 1,000 units left until 00:00 UTC"),
        "{err}"
    );
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test]
async fn a_reported_cost_is_reconciled_on_redis_in_the_charged_window() {
    let Some(url) =
        redis_or_skip("a_reported_cost_is_reconciled_on_redis_in_the_charged_window").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let pipeline = replica(&state, 100);
    // 10 charged, 3 reported: 7 given back. Then 10 charged, 60 reported: 50 more.
    pipeline
        .invoke("llm", json!({"used": 3}), as_user("ann"))
        .await
        .unwrap();
    pipeline
        .invoke("llm", json!({"used": 60}), as_user("ann"))
        .await
        .unwrap();
    let key = state.budget().redis_key("daily\u{1f}u\u{1f}ann");
    let mut redis = inspect(&url).await;
    let used: u64 = redis.hget(&key, "used").await.unwrap();
    assert_eq!(used, 63);
    // The key lives a day past the window's end (for a reload to a longer window), and no
    // longer.
    let pttl: i64 = redis.pttl(&key).await.unwrap();
    assert!(pttl > 86_400_000 && pttl <= 2 * 86_400_000, "{pttl}");
    // A reconciliation that arrives after its window ended changes nothing.
    let budget = state.budget();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let earlier_window = Window::day().end_after(now) - 86_400_000;
    assert_eq!(
        budget
            .adjust("daily\u{1f}u\u{1f}ann", earlier_window, -60)
            .await,
        Ok(None)
    );
    // 37 left: a 10-unit estimate fits, and a refund never goes below zero.
    assert_eq!(
        budget
            .adjust("daily\u{1f}u\u{1f}ann", Window::day().end_after(now), -1000)
            .await
            .map(|s| s.map(|s| s.used)),
        Ok(Some(0))
    );
    let charged = budget
        .charge(BudgetRequest {
            key: "daily\u{1f}u\u{1f}ann",
            cost: 100,
            limit: 100,
            window: Window::day(),
        })
        .await
        .unwrap();
    assert!(matches!(charged, toolgate_hooks::budget::BudgetDecision::Charged(s) if s.used == 100));
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test]
async fn a_reported_cost_past_any_count_uses_the_budget_up_and_does_not_wrap_it() {
    let test = "a_reported_cost_past_any_count_uses_the_budget_up_and_does_not_wrap_it";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let pipeline = replica(&state, 100);
    let mut redis = inspect(&url).await;
    for (user, huge) in [
        ("ann", json!(1e30)),
        ("bob", json!(9.3e18)),
        ("cy", json!(u64::MAX)),
    ] {
        pipeline
            .invoke("llm", json!({"used": huge}), as_user(user))
            .await
            .unwrap();
        let err = pipeline
            .invoke("llm", json!({"used": 1}), as_user(user))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "budget_exhausted", "after {huge}: {err}");
        let key = state
            .budget()
            .redis_key(&format!("daily\u{1f}u\u{1f}{user}"));
        let used: u64 = redis.hget(&key, "used").await.unwrap();
        assert!((100..1 << 53).contains(&used), "{user}: {used}");
    }
}

/// A count of units spent that no replica writes — below zero, not a number, past any
/// count — must not lift the budget for the rest of its window: below zero or not a number
/// reads as nothing spent (as text that is not a number always did), past any count as the
/// budget used up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_no_replica_writes_never_lifts_the_budget_for_its_window() {
    let test = "a_count_no_replica_writes_never_lifts_the_budget_for_its_window";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let mut redis = inspect(&url).await;
    for (key, stored) in [("a", "-5"), ("b", "nan"), ("c", "-inf"), ("d", "-1e300")] {
        assert!(matches!(
            charge_ten_an_hour(&budget, key, 1).await,
            BudgetDecision::Charged(_)
        ));
        let _: () = redis
            .hset(budget.redis_key(key), "used", stored)
            .await
            .unwrap();
        match charge_ten_an_hour(&budget, key, 10).await {
            BudgetDecision::Charged(spent) => assert_eq!(spent.used, 10, "{stored}"),
            refused => panic!("{stored}: {refused:?}"),
        }
        let refused = charge_ten_an_hour(&budget, key, 1).await;
        assert!(
            matches!(refused, BudgetDecision::Refused(s) if s.used == 10),
            "{stored}: {refused:?}"
        );
    }
    for (key, stored) in [("e", "inf"), ("f", "1e300")] {
        assert!(matches!(
            charge_ten_an_hour(&budget, key, 1).await,
            BudgetDecision::Charged(_)
        ));
        let _: () = redis
            .hset(budget.redis_key(key), "used", stored)
            .await
            .unwrap();
        let refused = charge_ten_an_hour(&budget, key, 1).await;
        assert!(
            matches!(refused, BudgetDecision::Refused(s) if (10..1 << 53).contains(&s.used)),
            "{stored}: {refused:?}"
        );
    }
    assert_every_key_expires(&url, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_on_a_cluster_admit_exactly_the_budget() {
    let Some(cluster) =
        Cluster::start_or_skip("four_replicas_on_a_cluster_admit_exactly_the_budget")
    else {
        return;
    };
    let prefix = namespace();
    let mut replicas = Vec::new();
    let mut first = None;
    for _ in 0..4 {
        let state = RedisState::connect(
            &cluster.url(),
            RedisConfig::builder().key_prefix(&prefix).build(),
        )
        .await
        .expect("the cluster is up");
        assert!(state.is_cluster());
        replicas.push(replica(&state, 1000));
        first.get_or_insert(state);
    }
    // Users whose budgets land on different primaries, braces included.
    let users = ["ann", "bob", "cy", "d{e}f", "}{"];
    let budget = first.unwrap().budget();
    let primaries: std::collections::BTreeSet<u16> = users
        .iter()
        .map(|user| cluster.primary_of(&budget.redis_key(&format!("daily\u{1f}u\u{1f}{user}"))))
        .collect();
    assert!(primaries.len() > 1, "the budgets are spread over primaries");
    let admitted = spend_at_once(&replicas, &users).await;
    for user in users {
        assert_eq!(
            admitted[user], 1000,
            "`{user}`: exactly the budget, across 4 replicas"
        );
    }
    cluster.assert_every_key_expires(&prefix);
}

#[tokio::test]
async fn a_call_whose_tool_never_ran_costs_nothing_on_redis() {
    let Some(url) = redis_or_skip("a_call_whose_tool_never_ran_costs_nothing_on_redis").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let echo = JsonTool::new("flat", "Answers.", json!({}), |input, _| {
        let out = json!({ "echo": input });
        Box::pin(async move { Ok::<_, ToolError>(out) })
    });
    let pipeline = Pipeline::builder()
        .tool(echo)
        .hook(toolgate_core::hook::hook_fn_sync(
            toolgate_core::Stage::WillCheckConsent,
            |ctx| match ctx.input()["wait"].as_bool() {
                Some(true) => ctx.suspend("a person approves this"),
                _ => Ok(()),
            },
        ))
        .hook(
            Budget::builder(100, Window::day())
                .name("daily")
                .tool_cost("flat", Cost::Fixed(5))
                .backend(Arc::new(state.budget().deadline(Duration::from_secs(10))))
                .build(),
        )
        .hook(
            toolgate_hooks::cache::ResultCache::builder()
                .include("flat")
                .build(),
        )
        .build()
        .unwrap();
    // One run, then answers from the cache: 5 units.
    for _ in 0..3 {
        pipeline
            .invoke("flat", json!({"q": 1}), as_user("ann"))
            .await
            .unwrap();
    }
    // A call that waits and is rejected: nothing more.
    let waiting = pipeline
        .invoke("flat", json!({"wait": true}), as_user("ann"))
        .await
        .unwrap_err();
    let ToolError::Suspended { suspension_id, .. } = waiting else {
        panic!("{waiting}")
    };
    let reject = toolgate_core::suspension::ResumeDecision::Reject {
        reason: "no".into(),
    };
    let err = pipeline
        .resume(&suspension_id, reject, as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "rejected");
    let key = state.budget().redis_key("daily\u{1f}u\u{1f}ann");
    let used: u64 = inspect(&url).await.hget(&key, "used").await.unwrap();
    assert_eq!(used, 5);
}

/// The Redis server's clock stepped back into the window before (the stored count names
/// the next window, as a step back finds it) does not give the caller that window's
/// allowance afresh; a count stored for a window far ahead (a clock set wrong, then
/// corrected) is not trusted, and the present window begins whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_stepped_back_on_redis_gives_no_fresh_allowance_and_a_wrong_future_does_not_stick()
{
    let test =
        "a_clock_stepped_back_on_redis_gives_no_fresh_allowance_and_a_wrong_future_does_not_stick";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let mut redis = inspect(&url).await;
    let hour = 3_600_000;
    for (key, ahead, refused) in [("next", hour, true), ("far", 24 * hour, false)] {
        let BudgetDecision::Charged(first) = charge_ten_an_hour(&budget, key, 1).await else {
            panic!("{key}: the first charge");
        };
        // The count as the server would find it had its clock been ahead by `ahead`:
        // the window then, spent.
        let end = first.window_end_ms + ahead;
        let _: () = redis
            .hset_multiple(
                budget.redis_key(key),
                &[("end", end.to_string()), ("used", "10".to_owned())],
            )
            .await
            .unwrap();
        let decision = charge_ten_an_hour(&budget, key, 1).await;
        if refused {
            assert!(
                matches!(decision, BudgetDecision::Refused(ref s) if s.window_end_ms == end),
                "{key}: {decision:?}"
            );
        } else {
            assert!(
                matches!(decision, BudgetDecision::Charged(ref s) if s.used == 1 && s.window_end_ms == first.window_end_ms),
                "{key}: {decision:?}"
            );
        }
    }
    assert_every_key_expires(&url, &prefix).await;
}

/// The budget script itself, to run a cancel and a charge in the order a slow Redis may.
static BUDGET_SCRIPT: &str = include_str!("../src/budget/budget.lua");

/// A charge whose answer misses the deadline is refused to the caller ("the call was not
/// run"), so it must cost nothing: once Redis answers again the charge it made late is
/// given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_that_misses_its_deadline_costs_nothing_once_redis_answers() {
    let test = "a_charge_that_misses_its_deadline_costs_nothing_once_redis_answers";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let proxy = Proxy::start(&url).await;
    let prefix = namespace();
    let state = connect(&proxy.url(), config(&prefix)).await;
    let budget = state.budget().deadline(Duration::from_millis(50));
    // Redis knows the script before it is held up (a charge held up while Redis does not
    // know it would never run at all).
    assert!(matches!(
        charge_ten_an_hour(&budget, "warm-up", 1).await,
        BudgetDecision::Charged(_)
    ));
    // Redis is held up: the charge gets no answer in time, and runs once it is let go.
    proxy.stall();
    let request = BudgetRequest {
        key: "ann",
        cost: 4,
        limit: 10,
        window: Window::hour(),
    };
    let missed = budget.charge(request).await;
    assert!(
        matches!(
            missed,
            Err(toolgate_hooks::budget::BudgetBackendError::Unavailable(_))
        ),
        "{missed:?}"
    );
    proxy.heal();
    spent_comes_back_to_zero(&url, &budget.redis_key("ann"))
        .await
        .expect("the late charge is given back: nothing stays spent");
    // The whole budget is there.
    assert!(matches!(
        charge_ten_an_hour(&budget, "ann", 10).await,
        BudgetDecision::Charged(s) if s.used == 10
    ));
    assert_every_key_expires(&url, &prefix).await;
}

/// A charge that Redis runs after its cancel (it came late, or it was sent again) charges
/// nothing and answers refused; a cancel after a charge gives its cost back, once.
#[tokio::test]
async fn a_charge_that_runs_after_its_cancel_charges_nothing() {
    let Some(url) = redis_or_skip("a_charge_that_runs_after_its_cancel_charges_nothing").await
    else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let key = state.budget().redis_key("ann");
    let script = redis::Script::new(BUDGET_SCRIPT);
    let mut redis = inspect(&url).await;
    let record = |id: &str| format!("{key}:c:{id}");
    let cancel = |id: &str| {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&key)
            .key(record(id))
            .arg("cancel")
            .arg(30_000);
        invocation
    };
    let charge = |id: &str, cost: u64| {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&key)
            .key(record(id))
            .arg("charge")
            .arg(cost)
            .arg(10)
            .arg(3_600_000)
            .arg(30_000);
        invocation
    };
    // Cancelled before it ran: the charge charges nothing, and says so.
    let cancelled: Vec<u64> = cancel("late").invoke_async(&mut redis).await.unwrap();
    assert_eq!(cancelled, [0]);
    let (charged, used, _, _): (u8, u64, u64, u64) =
        charge("late", 4).invoke_async(&mut redis).await.unwrap();
    assert_eq!((charged, used), (0, 0), "refused, nothing charged");
    let stored: Option<u64> = redis.hget(&key, "used").await.unwrap();
    assert_eq!(stored.unwrap_or(0), 0);

    // Charged, then cancelled: the cost is given back, and a cancel sent again (or the
    // charge sent again) changes nothing more.
    let (charged, used, _, _): (u8, u64, u64, u64) =
        charge("other", 3).invoke_async(&mut redis).await.unwrap();
    assert_eq!((charged, used), (1, 3));
    let (charged, used, _, _): (u8, u64, u64, u64) =
        charge("slow", 4).invoke_async(&mut redis).await.unwrap();
    assert_eq!((charged, used), (1, 7));
    let (charged, used, _, _): (u8, u64, u64, u64) =
        charge("slow", 4).invoke_async(&mut redis).await.unwrap();
    assert_eq!((charged, used), (1, 7), "a charge sent again is made once");
    for expected in [[1], [0]] {
        let cancelled: Vec<u64> = cancel("slow").invoke_async(&mut redis).await.unwrap();
        assert_eq!(cancelled, expected);
        let used: u64 = redis.hget(&key, "used").await.unwrap();
        assert_eq!(used, 3, "the cancelled charge given back once");
    }
    let (charged, _, _, _): (u8, u64, u64, u64) =
        charge("slow", 4).invoke_async(&mut redis).await.unwrap();
    assert_eq!(charged, 0, "a cancelled charge sent again is refused");
    // Every record expires soon.
    for id in ["late", "other", "slow"] {
        let pttl: i64 = redis.pttl(record(id)).await.unwrap();
        assert!(pttl > 0 && pttl <= 30_000, "{id}: {pttl}");
    }
    assert_every_key_expires(&url, &prefix).await;
}

/// A reload that makes a budget's window longer keeps what was spent: a used-up hourly
/// budget made a 30-day one is still used up, and its spending now lasts as long as the
/// new window (the key's end and expiry move with it).
#[tokio::test]
async fn a_window_made_longer_on_redis_keeps_the_spending() {
    let Some(url) = redis_or_skip("a_window_made_longer_on_redis_keeps_the_spending").await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    // 30 days, a whole number of hours: its window ends with an hour's, or after it.
    let month = Window::new(Duration::from_secs(30 * 86_400)).unwrap();
    let BudgetDecision::Charged(spent) = charge_ten_an_hour(&budget, "ann", 10).await else {
        panic!("the first charge");
    };
    let request = BudgetRequest {
        key: "ann",
        cost: 1,
        limit: 10,
        window: month,
    };
    let after_reload = budget.charge(request).await.unwrap();
    let BudgetDecision::Refused(state) = after_reload else {
        panic!("a reload gave a fresh allowance: {after_reload:?}");
    };
    assert_eq!(state.used, 10);
    assert!(state.window_end_ms >= spent.window_end_ms);
    let key = budget.redis_key("ann");
    let mut redis = inspect(&url).await;
    let end: u64 = redis.hget(&key, "end").await.unwrap();
    assert_eq!(
        end, state.window_end_ms,
        "the spending counts in the new window"
    );
    let pttl: u64 = redis.pttl(&key).await.unwrap();
    assert!(
        pttl + 1000 >= state.resets_in.as_millis() as u64,
        "the key lasts as long as the new window: {pttl} ms"
    );
    // The key lives up to 30 days: not in a shared Redis after the test.
    remove_keys_under(&url, &prefix).await;
}

/// Charges `cost` to budget `key` of 10 units per `window`, straight on the backend.
async fn charge_ten(
    budget: &impl BudgetBackend,
    key: &str,
    cost: u64,
    window: Window,
) -> BudgetDecision {
    let request = BudgetRequest {
        key,
        cost,
        limit: 10,
        window,
    };
    budget.charge(request).await.unwrap()
}

/// A reload that makes a budget's window much shorter keeps what was spent: a used-up
/// daily budget made an hourly one stays used up until the present hour ends (the spending
/// was made during a day that holds this hour), and the key's end and expiry move to the
/// hour's end, so the next hour begins afresh.
#[tokio::test]
async fn a_window_made_shorter_on_redis_keeps_the_spending_until_the_present_window_ends() {
    let test = "a_window_made_shorter_on_redis_keeps_the_spending_until_the_present_window_ends";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let BudgetDecision::Charged(day) = charge_ten(&budget, "ann", 10, Window::day()).await else {
        panic!("the first charge");
    };
    let after_reload = charge_ten(&budget, "ann", 1, Window::hour()).await;
    let BudgetDecision::Refused(hour) = after_reload else {
        panic!("a reload gave a fresh allowance: {after_reload:?}");
    };
    assert_eq!(hour.used, 10);
    assert_eq!(hour.window_end_ms % 3_600_000, 0, "an hour's end");
    assert!(hour.window_end_ms <= day.window_end_ms);
    assert!(hour.resets_in <= Duration::from_secs(3600), "{hour:?}");
    let key = budget.redis_key("ann");
    let mut redis = inspect(&url).await;
    let (end, len, from): (u64, u64, Option<u64>) = redis::cmd("HMGET")
        .arg(&key)
        .arg(&["end", "len", "from"])
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(end, hour.window_end_ms, "the spending counts in the hour");
    assert_eq!(len, 3_600_000);
    // (In the last hour of a day, the day and the hour end together: nothing moved.)
    let moved = (day.window_end_ms != hour.window_end_ms).then_some(day.window_end_ms);
    assert_eq!(from, moved, "the day it was carried from");
    // The key lasts as long as it did: a day past the day's end (a replica still on the
    // day, during a rolling reload, keeps counting the spending).
    let pttl: u64 = redis.pttl(&key).await.unwrap();
    let day_kept = day.resets_in.as_millis() as u64 + 86_400_000;
    assert!(
        pttl <= day_kept && pttl + 60_000 >= day_kept,
        "the key lasts a day past the day's end, not the hour's: {pttl} ms"
    );
    assert_every_key_expires(&url, &prefix).await;
    remove_keys_under(&url, &prefix).await;
}

/// Waits until the window `state` names has ended, on the Redis server's clock (with a
/// margin for the clocks of this process and of Redis).
async fn until_it_ends(state: &toolgate_hooks::budget::BudgetState) {
    tokio::time::sleep(state.resets_in + Duration::from_millis(100)).await;
}

/// A reload that makes a window longer after the shorter window ended still counts what was
/// spent in it: a used-up budget of a second made one of a century stays used up (the
/// second lies in the present century), as in memory. The key outlived its window.
#[tokio::test]
async fn a_window_made_longer_after_the_shorter_one_ended_on_redis_keeps_the_spending() {
    let test = "a_window_made_longer_after_the_shorter_one_ended_on_redis_keeps_the_spending";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let second = Window::new(Duration::from_secs(1)).unwrap();
    let (century, _) = centuries();
    let BudgetDecision::Charged(spent) = charge_ten(&budget, "ann", 10, second).await else {
        panic!("the first charge");
    };
    until_it_ends(&spent).await;

    let after_reload = charge_ten(&budget, "ann", 1, century).await;

    let BudgetDecision::Refused(refused) = after_reload else {
        panic!("a reload after the window ended gave a fresh allowance: {after_reload:?}");
    };
    assert_eq!(refused.used, 10);
    remove_keys_under(&url, &prefix).await;
}

/// During a rolling reload, a replica of a shorter window carries a longer window's spending
/// into its own, even for a call it refuses; when that shorter window ends, a replica of the
/// longer one still counts the spending: the key is never made to expire sooner.
#[tokio::test]
async fn a_refused_call_on_a_replica_of_a_shorter_window_does_not_cut_the_spending_short() {
    let test = "a_refused_call_on_a_replica_of_a_shorter_window_does_not_cut_the_spending_short";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let second = Window::new(Duration::from_secs(1)).unwrap();
    let (century, _) = centuries();
    assert!(matches!(
        charge_ten(&budget, "ann", 10, century).await,
        BudgetDecision::Charged(_)
    ));
    let on_the_other_replica = charge_ten(&budget, "ann", 1, second).await;
    let BudgetDecision::Refused(carried) = on_the_other_replica else {
        panic!("the spending was not carried: {on_the_other_replica:?}");
    };
    until_it_ends(&carried).await;

    let again = charge_ten(&budget, "ann", 1, century).await;

    let BudgetDecision::Refused(refused) = again else {
        panic!("the century's spending was cut short: {again:?}");
    };
    assert_eq!(refused.used, 10);
    remove_keys_under(&url, &prefix).await;
}

/// A correction or a cancel of a charge made before a reload carried its window into the
/// present one names the window it was charged in: that spending now counts in the present
/// window, so the correction applies there.
#[tokio::test]
async fn a_correction_of_a_charge_a_reload_carried_applies_on_redis() {
    let test = "a_correction_of_a_charge_a_reload_carried_applies_on_redis";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let key = budget.redis_key("ann");
    let script = redis::Script::new(BUDGET_SCRIPT);
    let mut redis = inspect(&url).await;
    // 3 units charged by id (to be cancelled), then 4 and 3 more: the day is used up.
    let (charged, _, _, _): (u8, u64, u64, u64) = script
        .prepare_invoke()
        .key(&key)
        .key(format!("{key}:c:slow"))
        .arg("charge")
        .arg(3)
        .arg(10)
        .arg(86_400_000)
        .arg(30_000)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(charged, 1);
    let BudgetDecision::Charged(day) = charge_ten(&budget, "ann", 4, Window::day()).await else {
        panic!("the second charge");
    };
    assert!(matches!(
        charge_ten(&budget, "ann", 3, Window::day()).await,
        BudgetDecision::Charged(s) if s.used == 10
    ));
    // Reloaded as an hourly budget: still used up.
    assert!(matches!(
        charge_ten(&budget, "ann", 1, Window::hour()).await,
        BudgetDecision::Refused(s) if s.used == 10
    ));
    // The second call reports 1 unit of its 4: 3 come back, in the present hour.
    assert_eq!(
        budget
            .adjust("ann", day.window_end_ms, -3)
            .await
            .map(|s| s.map(|s| s.used)),
        Ok(Some(7))
    );
    // The first charge is cancelled: its 3 units come back too.
    let cancelled: Vec<u64> = script
        .prepare_invoke()
        .key(&key)
        .key(format!("{key}:c:slow"))
        .arg("cancel")
        .arg(30_000)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(cancelled, [1]);
    assert!(matches!(
        charge_ten(&budget, "ann", 6, Window::hour()).await,
        BudgetDecision::Charged(s) if s.used == 10
    ));
    assert_every_key_expires(&url, &prefix).await;
}

/// Windows of 100 and 99 years: their ends (in 2069 and 2068) differ from a day's and from
/// each other's whatever the hour a test runs, so a reload between them always moves a
/// budget's window.
fn centuries() -> (Window, Window) {
    let year = 365 * 86_400;
    (
        Window::new(Duration::from_secs(100 * year)).unwrap(),
        Window::new(Duration::from_secs(99 * year)).unwrap(),
    )
}

/// A correction of a charge a reload carried answers the window the spending counts in
/// now: the present window's end and the time until then, not the charged window's.
#[tokio::test]
async fn a_correction_of_a_carried_charge_on_redis_names_the_present_window() {
    let test = "a_correction_of_a_carried_charge_on_redis_names_the_present_window";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let (long, _) = centuries();
    let BudgetDecision::Charged(day) = charge_ten(&budget, "ann", 4, Window::day()).await else {
        panic!("the charge in the day");
    };
    let BudgetDecision::Charged(present) = charge_ten(&budget, "ann", 1, long).await else {
        panic!("the charge after the reload");
    };
    assert_eq!(present.used, 5, "the day's spending is carried");
    let corrected = budget.adjust("ann", day.window_end_ms, -4).await.unwrap();
    let Some(corrected) = corrected else {
        panic!("the correction of a carried charge was ignored");
    };
    assert_eq!(corrected.used, 1);
    assert_eq!(corrected.window_end_ms, present.window_end_ms);
    assert!(
        corrected.resets_in <= present.resets_in
            && present.resets_in - corrected.resets_in < Duration::from_secs(60),
        "{corrected:?} after {present:?}"
    );
    // The key lives until 2069: not in a shared Redis after the test.
    remove_keys_under(&url, &prefix).await;
}

/// A budget carried twice by reloads (a day, then 100 years, then 99) still takes the
/// correction and the cancel of a charge made in its first window, in the present window;
/// the correction of a charge made in a window that was over before (the day before) is
/// still ignored.
#[tokio::test]
async fn a_budget_carried_twice_on_redis_takes_corrections_of_charges_made_in_its_first_window() {
    let test =
        "a_budget_carried_twice_on_redis_takes_corrections_of_charges_made_in_its_first_window";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let key = budget.redis_key("ann");
    let script = redis::Script::new(BUDGET_SCRIPT);
    let mut redis = inspect(&url).await;
    let (longer, long) = centuries();
    // In the day: 3 units charged by id (to be cancelled), then 4.
    let (charged, _, _, _): (u8, u64, u64, u64) = script
        .prepare_invoke()
        .key(&key)
        .key(format!("{key}:c:slow"))
        .arg("charge")
        .arg(3)
        .arg(10)
        .arg(86_400_000)
        .arg(30_000)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(charged, 1);
    let BudgetDecision::Charged(day) = charge_ten(&budget, "ann", 4, Window::day()).await else {
        panic!("the charge in the day");
    };
    // Reloaded twice: carried into 100 years, then into 99. In the 100 years, 2 units
    // charged by id (to be cancelled) and 1 more: the 99 years are used up.
    let (charged, _, in_longer, _): (u8, u64, u64, u64) = script
        .prepare_invoke()
        .key(&key)
        .key(format!("{key}:c:middle"))
        .arg("charge")
        .arg(2)
        .arg(10)
        .arg(longer.millis())
        .arg(30_000)
        .invoke_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(charged, 1);
    assert!(matches!(
        charge_ten(&budget, "ann", 1, longer).await,
        BudgetDecision::Charged(s) if s.used == 10
    ));
    let refused = charge_ten(&budget, "ann", 1, long).await;
    let BudgetDecision::Refused(present) = refused else {
        panic!("the spending of both windows is carried: {refused:?}");
    };
    assert_eq!(present.used, 10);
    // The day's second call reports 1 of its 4: 3 come back, in the present window.
    let corrected = budget.adjust("ann", day.window_end_ms, -3).await.unwrap();
    assert!(
        matches!(corrected, Some(s) if s.used == 7 && s.window_end_ms == present.window_end_ms),
        "the correction of a charge made in the first window: {corrected:?}"
    );
    // The charges by id, in the day and in the 100 years, are cancelled: 3 and 2 come back.
    for id in ["slow", "middle"] {
        let cancelled: Vec<u64> = script
            .prepare_invoke()
            .key(&key)
            .key(format!("{key}:c:{id}"))
            .arg("cancel")
            .arg(30_000)
            .invoke_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(cancelled, [1], "the cancel of charge `{id}`");
    }
    // The 100 years' other charge still counts as well: 1 comes back.
    let corrected = budget.adjust("ann", in_longer, -1).await.unwrap();
    assert!(matches!(corrected, Some(s) if s.used == 1), "{corrected:?}");
    // The day before was over before this spending began: its correction is ignored.
    let day_before = day.window_end_ms - 86_400_000;
    assert_eq!(budget.adjust("ann", day_before, -2).await, Ok(None));
    let from: u64 = redis.hget(&key, "from").await.unwrap();
    assert_eq!(from, day.window_end_ms, "the earliest end carried from");
    // The key lives until 2068: not in a shared Redis after the test.
    remove_keys_under(&url, &prefix).await;
}

/// A hash an older version wrote (`end` and `used`, no length) is read by the rules it was
/// written under: the present window counts it, the next one (a clock stepped back) is
/// charged, one ended after the present one began is carried into it, and one further
/// ahead than the next (a clock set far ahead, then corrected) is not trusted. Each
/// charge then writes the window's length, so that a later reload is told apart.
#[tokio::test]
async fn a_budget_an_older_version_wrote_on_redis_reads_as_before() {
    let test = "a_budget_an_older_version_wrote_on_redis_reads_as_before";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let mut redis = inspect(&url).await;
    let hour = 3_600_000;
    let BudgetDecision::Charged(probe) = charge_ten_an_hour(&budget, "probe", 1).await else {
        panic!("the probe");
    };
    let now_end = probe.window_end_ms;
    // (key, stored end, whether refused, the end it is charged in)
    let cases = [
        ("present", now_end, true, now_end),
        ("next", now_end + hour, true, now_end + hour),
        ("inside", now_end - hour / 2, true, now_end),
        ("far", now_end + 24 * hour, false, now_end),
    ];
    for (key, stored, refused, charged_end) in cases {
        let redis_key = budget.redis_key(key);
        let _: () = redis
            .hset_multiple(
                &redis_key,
                &[("end", stored.to_string()), ("used", "10".to_owned())],
            )
            .await
            .unwrap();
        let _: () = redis.pexpire(&redis_key, 48 * hour as i64).await.unwrap();
        let decision = charge_ten_an_hour(&budget, key, 1).await;
        if refused {
            assert!(
                matches!(decision, BudgetDecision::Refused(s) if s.used == 10 && s.window_end_ms == charged_end),
                "{key}: {decision:?}"
            );
        } else {
            assert!(
                matches!(decision, BudgetDecision::Charged(s) if s.used == 1 && s.window_end_ms == charged_end),
                "{key}: {decision:?}"
            );
        }
    }
    // Where the script wrote (a charge, or a refusal that moved the window), the length
    // is stored with the end.
    for key in ["inside", "far"] {
        let len: Option<u64> = redis.hget(budget.redis_key(key), "len").await.unwrap();
        assert_eq!(len, Some(hour), "{key}");
    }
    remove_keys_under(&url, &prefix).await;
}

/// A correction (here the refund of a call whose tool never ran) whose answer is lost is
/// sent again in the background once Redis can be reached: the charge is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_whose_answer_is_lost_is_sent_again_once_redis_answers() {
    let test = "a_refund_whose_answer_is_lost_is_sent_again_once_redis_answers";
    let Some(url) = redis_or_skip(test).await else {
        return;
    };
    let proxy = Proxy::start(&url).await;
    let prefix = namespace();
    let state = connect(&proxy.url(), config(&prefix)).await;
    let budget = state.budget().deadline(Duration::from_millis(200));
    let BudgetDecision::Charged(spent) = charge_ten_an_hour(&budget, "ann", 5).await else {
        panic!("the first charge");
    };
    // The way to Redis is cut: the refund is lost on the way.
    proxy.cut();
    let lost = budget.adjust("ann", spent.window_end_ms, -5).await;
    assert!(lost.is_err(), "{lost:?}");
    proxy.heal();
    spent_comes_back_to_zero(&url, &budget.redis_key("ann"))
        .await
        .expect("the refund is sent again and made");
    assert_every_key_expires(&url, &prefix).await;
}

/// An adjust that arrives twice (sent again after a late answer) changes the budget once.
#[tokio::test]
async fn an_adjust_sent_again_changes_the_budget_once() {
    let Some(url) = redis_or_skip("an_adjust_sent_again_changes_the_budget_once").await else {
        return;
    };
    let prefix = namespace();
    let state = connect(&url, config(&prefix)).await;
    let budget = state.budget();
    let BudgetDecision::Charged(spent) = charge_ten_an_hour(&budget, "ann", 8).await else {
        panic!("the first charge");
    };
    let key = budget.redis_key("ann");
    let script = redis::Script::new(BUDGET_SCRIPT);
    let mut redis = inspect(&url).await;
    for _ in 0..2 {
        let answer: Vec<u64> = script
            .prepare_invoke()
            .key(&key)
            .key(format!("{key}:a:refund"))
            .arg("adjust")
            .arg(spent.window_end_ms)
            .arg(-3)
            .arg(30_000)
            .invoke_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(answer[..2], [1, 5], "given back once");
        assert_eq!(answer[2], spent.window_end_ms, "the window it counts in");
    }
    assert_every_key_expires(&url, &prefix).await;
}

/// Waits (10 s at most) until the budget at `key` has nothing spent: what a replica's
/// background cancel or correction does once Redis answers again. Polled every 10 ms.
async fn spent_comes_back_to_zero(url: &str, key: &str) -> Result<(), tokio::time::error::Elapsed> {
    let mut redis = inspect(url).await;
    let zero = async {
        loop {
            let used: Option<u64> = redis.hget(key, "used").await.unwrap();
            if used == Some(0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), zero).await
}
