//! Budgets through the gateway: the 429 an agent can act on, the `RateLimit` and
//! `RateLimit-Policy` fields on `/v1` for budgets and rate limits alike, the refusal on
//! `/mcp`, bad configurations refused with the field and the fix, and `toolgate check`
//! listing each tool's budgets.

mod common;

use serde_json::json;

use common::{
    Gateway, check, invoke, mcp_rpc, open_session, python, python_mcp_available, user_yaml,
};

fn config(budgets: &str) -> String {
    format!(
        "tools:\n  builtin: [calculator, sleep]\nusers:\n{}{}\
policies:\n  rate_limits:\n    - {{ name: per-minute, rate: 100/minute }}\n  budgets:\n{budgets}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["admin"]),
    )
}

const DAILY: &str = "    - name: daily\n      limit: 1000\n      window: 1d\n      cost: 0\n      tools:\n        calculator: 494\n        sleep: { argument: /ms, per_unit: 1 }\n";

#[tokio::test]
async fn a_spent_budget_answers_429_with_what_is_left_and_the_ratelimit_fields() {
    let gateway = Gateway::start(&config(DAILY));
    let sum = json!({"expression": "1+1"});
    let first = invoke(&gateway, "alice", "calculator", sum.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-minute\";q=100;w=60, \"daily\";q=1000;w=86400")
    );
    let current = first.header("ratelimit").expect("RateLimit");
    assert!(current.starts_with("\"daily\";r=506;t="), "{current}");
    let t: u64 = current.rsplit("t=").next().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&t), "{current}");

    invoke(&gateway, "alice", "calculator", sum.clone()).await;
    let refused = invoke(&gateway, "alice", "calculator", sum.clone()).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.error_code(), "budget_exhausted");
    assert!(
        refused
            .error_message()
            .starts_with("budget `daily`: 12 of 1,000 units left until 00:00 UTC for this user; this call costs 494"),
        "{}",
        refused.body
    );
    assert!(refused.header("retry-after").is_some());
    assert!(
        refused
            .header("ratelimit")
            .unwrap()
            .starts_with("\"daily\";r=12;t="),
        "{:?}",
        refused.header("ratelimit")
    );
    // 12 units still buy a sleep of 12 ms, priced by its argument.
    let sleep = invoke(&gateway, "alice", "sleep", json!({"ms": 12})).await;
    assert_eq!(sleep.status, 200, "{}", sleep.body);
    let over = invoke(&gateway, "alice", "sleep", json!({"ms": 1})).await;
    assert_eq!(over.status, 429, "{}", over.body);
    // Bob has a budget of his own.
    let bob = invoke(&gateway, "bob", "calculator", sum).await;
    assert_eq!(bob.status, 200, "{}", bob.body);
}

#[tokio::test]
async fn a_rate_limit_refusal_carries_the_ratelimit_fields() {
    let config = format!(
        "tools:\n  builtin: [calculator]\nusers:\n{}policies:\n  rate_limits:\n    - {{ name: slow, rate: 1/minute }}\n",
        user_yaml("alice", &["admin"])
    );
    let gateway = Gateway::start(&config);
    let sum = json!({"expression": "1+1"});
    let first = invoke(&gateway, "alice", "calculator", sum.clone()).await;
    assert_eq!(first.header("ratelimit-policy"), Some("\"slow\";q=1;w=60"));
    // A GCRA grant does not say what is left.
    assert_eq!(first.header("ratelimit"), None);
    let second = invoke(&gateway, "alice", "calculator", sum).await;
    assert_eq!(second.status, 429);
    let current = second.header("ratelimit").expect("RateLimit");
    assert!(current.starts_with("\"slow\";r=0;t="), "{current}");
}

#[tokio::test]
async fn a_call_a_cedar_policy_refuses_for_its_arguments_costs_nothing() {
    // The budget is charged before the input stages, where a policy on the arguments
    // decides: a call it refuses never runs and must not spend the tenant's budget.
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("sleep.cedar");
    std::fs::write(
        &policies,
        "permit(principal, action, resource);\n\
@id(\"short-naps\")\n\
forbid(principal, action == Action::\"sleep\", resource)\n\
when { context.arguments.ms > 100 };\n",
    )
    .unwrap();
    let budget = "    - name: daily\n      limit: 1000\n      partition: tenant\n      cost: 0\n      tools:\n        sleep: { argument: /ms, per_unit: 1 }\n";
    let yaml = config(budget)
        .replace("roles: [admin] }", "roles: [admin], tenant: acme }")
        .replace(
            "policies:\n",
            &format!("policies:\n  cedar:\n    files: [{}]\n", policies.display()),
        );
    let gateway = Gateway::start(&yaml);
    // Bob may not sleep 990 ms; had the refusal been charged, it would leave acme 10 units.
    let refused = invoke(&gateway, "bob", "sleep", json!({"ms": 990})).await;
    assert_eq!(
        (refused.status, refused.error_code()),
        (403, "forbidden"),
        "{}",
        refused.body
    );
    let nap = invoke(&gateway, "alice", "sleep", json!({"ms": 100})).await;
    assert_eq!(nap.status, 200, "{}", nap.body);
    let left = nap.header("ratelimit").expect("RateLimit");
    assert!(left.starts_with("\"daily\";r=900;"), "{left}");
}

#[tokio::test]
async fn a_tenant_budget_spent_on_mcp_refuses_the_tenant_everywhere() {
    let yaml = config("    - name: daily\n      limit: 1\n      partition: tenant\n")
        .replace("roles: [admin] }", "roles: [admin], tenant: acme }");
    let gateway = Gateway::start(&yaml);
    let session = open_session(&gateway, "alice").await;
    let call = json!({"name": "calculator", "arguments": {"expression": "1+1"}});
    let first = mcp_rpc(&gateway, "alice", &session, "tools/call", call.clone()).await;
    assert_ne!(first["isError"], json!(true), "{first}");
    let second = mcp_rpc(&gateway, "alice", &session, "tools/call", call).await;
    assert_eq!(second["isError"], json!(true), "{second}");
    assert!(
        second
            .to_string()
            .contains("0 of 1 units left until 00:00 UTC for this tenant"),
        "{second}"
    );
    // Bob is of the same tenant: its budget is spent for him too, on `/v1`.
    let bob = invoke(&gateway, "bob", "calculator", json!({"expression": "1+1"})).await;
    assert_eq!(
        (bob.status, bob.error_code()),
        (429, "budget_exhausted"),
        "{}",
        bob.body
    );
}

/// The `_meta` of a 2026-07-28 request whose client declares the tasks extension.
fn takes_tasks() -> serde_json::Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
        "io.modelcontextprotocol/clientInfo": {"name": "toolgate-tests", "version": "0"},
    })
}

#[tokio::test]
async fn polling_a_waiting_call_costs_nothing_and_leaves_the_budget_whole() {
    // Every tool costs 1 of 2 units; `sleep` waits for approval.
    let yaml = format!(
        "tools:\n  builtin: [calculator, sleep]\nusers:\n{}\
policies:\n  approval:\n    tools: [sleep]\n  budgets:\n    - {{ name: calls, limit: 2, cost: 1 }}\n",
        user_yaml("bob", &["analyst"]),
    );
    let gateway = Gateway::start(&yaml);
    let params = json!({"name": "sleep", "arguments": {"ms": 1}, "_meta": takes_tasks()});
    let (status, created) =
        common::mcp_2026(&gateway, "bob", "tools/call", Some("sleep"), params).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().expect("a task id");

    for _ in 0..5 {
        let params = json!({"taskId": id, "_meta": takes_tasks()});
        let (status, read) = common::mcp_2026(&gateway, "bob", "tasks/get", Some(id), params).await;
        assert_eq!(status, 200, "{read}");
        assert_eq!(read["result"]["status"], "working", "{read}");
    }
    for _ in 0..5 {
        let read = invoke(&gateway, "bob", "toolgate.outcome", json!({"id": id})).await;
        assert_eq!(read.status, 200, "{}", read.body);
        assert_eq!(read.body["output"]["status"], "waiting", "{}", read.body);
        assert!(
            read.header("ratelimit").is_none(),
            "{:?}",
            read.header("ratelimit")
        );
    }

    // The budget is whole: two calls, and the third is refused.
    let sum = json!({"expression": "1+1"});
    for _ in 0..2 {
        let charged = invoke(&gateway, "bob", "calculator", sum.clone()).await;
        assert_eq!(charged.status, 200, "{}", charged.body);
    }
    let over = invoke(&gateway, "bob", "calculator", sum).await;
    assert_eq!(
        (over.status, over.error_code()),
        (429, "budget_exhausted"),
        "{}",
        over.body
    );
    // Still read once the budget is spent.
    let read = invoke(&gateway, "bob", "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(read.status, 200, "{}", read.body);
}

#[tokio::test]
async fn a_caller_without_a_tenant_is_told_the_budget_is_their_own() {
    // Only alice has a tenant: bob, without one, has a budget of his own, and the refusal
    // says so instead of naming a tenant he does not have.
    let yaml = config("    - name: daily\n      limit: 1\n      partition: tenant\n").replacen(
        "roles: [admin] }",
        "roles: [admin], tenant: acme }",
        1,
    );
    let gateway = Gateway::start(&yaml);
    let sum = json!({"expression": "1+1"});
    assert_eq!(
        invoke(&gateway, "bob", "calculator", sum.clone())
            .await
            .status,
        200
    );
    let refused = invoke(&gateway, "bob", "calculator", sum.clone()).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused
            .error_message()
            .contains("0 of 1 units left until 00:00 UTC for this user, who has no tenant;"),
        "{}",
        refused.body
    );
    // Alice's tenant has its own unit, and its refusal names the tenant.
    assert_eq!(
        invoke(&gateway, "alice", "calculator", sum.clone())
            .await
            .status,
        200
    );
    let tenant = invoke(&gateway, "alice", "calculator", sum).await;
    assert!(
        tenant.error_message().contains("for this tenant;"),
        "{}",
        tenant.body
    );
}

fn check_output(yaml: &str) -> (bool, String, String) {
    let (status, stdout, stderr) = check(yaml);
    (status.success(), stdout, stderr)
}

#[test]
fn check_lists_each_tools_budgets() {
    let (ok, stdout, stderr) = check_output(&config(DAILY));
    assert!(ok, "{stderr}");
    let section = |tool: &str| {
        stdout
            .split("\n\n")
            .find(|s| s.starts_with(tool))
            .unwrap_or_else(|| panic!("no {tool} in {stdout}"))
            .to_owned()
    };
    assert!(
        section("calculator").contains("budget daily: costs 494 of 1000 units every day, per user"),
        "{stdout}"
    );
    assert!(
        section("sleep")
            .contains("budget daily: costs 0 + 1 × /ms of 1000 units every day, per user"),
        "{stdout}"
    );
}

/// A budget that reads the cost of `add`, a tool of the `shapes` upstream, at `reported`.
fn reported_by_an_upstream(reported: &str) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    format!(
        "upstreams:\n  - name: shapes\n    command: {python}\n    args: [\"{script}\"]\n\
users:\n{alice}\
policies:\n  budgets:\n    - name: daily\n      limit: 1000\n      cost: 0\n      tools:\n        add: {{ reported: {reported}, estimate: 10 }}\n",
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    )
}

#[test]
fn check_warns_of_a_reported_cost_an_upstreams_tool_never_has_and_says_where_it_is() {
    if !python_mcp_available(
        "check_warns_of_a_reported_cost_an_upstreams_tool_never_has_and_says_where_it_is",
    ) {
        return;
    }
    // The output of an imported tool is the upstream's whole result: what `add` returns
    // is at `/structuredContent/result`, never at `/result`.
    let (ok, stdout, stderr) = check_output(&reported_by_an_upstream("/result"));
    assert!(ok, "a warning does not fail check: {stdout}\n{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.contains("warning: budget `daily`"))
        .unwrap_or_else(|| panic!("no warning of the budget: {stderr}"));
    for says in [
        "a call of `add` costs at `/result` (`policies.budgets[0].tools.add`)",
        "`/structuredContent`",
        "charged the estimate, 10,",
        "Write `reported: /structuredContent/result`",
    ] {
        assert!(warning.contains(says), "{says}: {warning}");
    }
    // A place the upstream's output schema rules out is no better: `result` is a number.
    let (ok, _, stderr) = check_output(&reported_by_an_upstream("/structuredContent/result/units"));
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning: budget `daily` reads what a call of `add` costs at `/structuredContent/result/units`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`/structuredContent/result` is integer"),
        "{stderr}"
    );
    // Where the upstream puts it, no warning.
    let (ok, stdout, stderr) = check_output(&reported_by_an_upstream("/structuredContent/result"));
    assert!(ok, "{stderr}");
    assert!(!stderr.contains("budget `daily`"), "{stderr}");
    assert!(
        stdout.contains("budget daily: costs reported at /structuredContent/result (estimate 10)"),
        "{stdout}"
    );
}

#[test]
fn bad_budgets_are_refused_with_the_field_and_the_fix() {
    for (budget, field, says) in [
        (
            "    - { name: a, limit: 0 }\n",
            "policies.budgets[0].limit",
            "from 1 to",
        ),
        (
            "    - { name: a, limit: 5, window: 1500ms }\n",
            "policies.budgets[0].window",
            "whole seconds",
        ),
        (
            "    - { name: a, limit: 5 }\n    - { name: a, limit: 6 }\n",
            "policies.budgets[1].name",
            "two budgets are named `a`",
        ),
        (
            "    - { name: a, limit: 5, partition: team }\n",
            "policies.budgets[0].partition",
            "attribute:<name>",
        ),
        (
            "    - { name: a, limit: 5, tools: { sleep: { argument: ms } } }\n",
            "policies.budgets[0].tools.sleep",
            "JSON Pointer",
        ),
        (
            "    - { name: a, limit: 5, tools: { sleep: { reported: /units } } }\n",
            "policies.budgets[0].tools.sleep",
            "`estimate` is missing",
        ),
        (
            "    - { name: a, limit: 5, cost: -1 }\n",
            "policies.budgets[0].cost",
            "whole number",
        ),
    ] {
        let (ok, _, stderr) = check_output(&config(budget));
        assert!(!ok, "{budget} was accepted");
        assert!(stderr.contains(field), "{budget}: {stderr}");
        assert!(stderr.contains(says), "{budget}: {stderr}");
    }
}
