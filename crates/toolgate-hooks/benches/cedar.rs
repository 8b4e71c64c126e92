//! What one Cedar decision costs a call: a realistic rule set of 50 policies over 25 tools
//! (a role permit per tool, most with conditions on the typed arguments and the caller's
//! tenant; a forbid per tool, on a missing `where`, on an amount ceiling or on interns),
//! against the same pipeline with no authorization and with the simple role rules, in the
//! same run.
//!
//! Each call is timed on its own (20,000 calls per scenario after 2,000 of warm-up, one
//! thread); the p50 and p99 of the calls are printed, and the decision's share as the
//! difference of the medians.
//!
//!     cargo bench -p toolgate-hooks --features cedar --bench cedar

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{InvokeOptions, Pipeline, User};
use toolgate_hooks::authorize::{Authorize, Effect, Rule, Rules};
use toolgate_hooks::policy::{CedarPolicies, PolicySource};
use toolgate_test::ScriptedTool;

const TOOLS: usize = 25;
const CALLS: usize = 20_000;
const WARM_UP: usize = 2_000;

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for n in 0..TOOLS {
        let tool =
            ScriptedTool::returning(format!("tool_{n}"), json!("done")).input_schema(json!({
                "type": "object",
                "required": ["amount", "tenant"],
                "properties": {
                    "amount": {"type": "number", "minimum": 0},
                    "tenant": {"type": "string"},
                    "where": {"type": "string"},
                    "limit": {"type": "integer"}
                }
            }));
        registry
            .register_erased(tool.into_erased())
            .expect("a valid tool");
    }
    registry
}

/// 50 policies: for each tool a permit for its role (with an amount bound and the
/// caller's own tenant on two tools in three), and a forbid — every fifth tool needs a
/// `where`, the other even ones refuse amounts over 5,000, the odd ones refuse interns.
fn policy_text() -> String {
    let mut text = String::new();
    for n in 0..TOOLS {
        let role = format!("role_{}", n % 5);
        let condition = if n % 3 == 2 {
            format!("principal.roles.contains(\"{role}\")")
        } else {
            format!(
                "principal.roles.contains(\"{role}\") && principal has tenant && \
                 context.arguments.tenant == principal.tenant && \
                 context.arguments.amount.lessThan(decimal(\"{}.0\"))",
                100 + n * 10
            )
        };
        text.push_str(&format!(
            "@id(\"permit-{n}\")\npermit(principal, action == Action::\"tool_{n}\", resource)\nwhen {{ {condition} }};\n\n"
        ));
        let forbid = if n % 5 == 0 {
            "unless { context.arguments has \"where\" && context.arguments[\"where\"] != \"\" }"
        } else if n % 2 == 0 {
            "when { context.arguments.amount.greaterThan(decimal(\"5000.0\")) }"
        } else {
            "when { principal.roles.contains(\"intern\") }"
        };
        text.push_str(&format!(
            "@id(\"forbid-{n}\")\nforbid(principal, action == Action::\"tool_{n}\", resource)\n{forbid};\n\n"
        ));
    }
    text
}

fn pipeline(authorization: &str) -> Pipeline {
    let registry = registry();
    let builder = Pipeline::builder();
    let builder = match authorization {
        "none" => builder,
        "rules" => {
            let mut rules = Rules::new(Effect::Deny);
            for n in 0..5 {
                rules = rules.rule(Rule::allow().role(format!("role_{n}")));
            }
            builder.hook(Authorize::new(rules.rule(Rule::deny().role("intern"))))
        }
        _ => {
            let policies = CedarPolicies::builder()
                .source(PolicySource::new("bench.cedar", policy_text()))
                .build(registry.definitions())
                .expect("the policies load");
            builder.hook(policies)
        }
    };
    builder
        .registry(registry)
        .build()
        .expect("the pipeline builds")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let user = User::new("ann").with_roles(["role_3"]).with_tenant("acme");
    // tool_8: role_3, amounts below 180 in one's own tenant; its forbid: over 5,000.
    let input: Value = json!({"amount": 42.5, "tenant": "acme", "limit": 10});
    let mut medians = Vec::new();
    for scenario in ["none", "rules", "cedar"] {
        let pipeline = pipeline(scenario);
        let mut times = Vec::with_capacity(CALLS);
        runtime.block_on(async {
            for i in 0..WARM_UP + CALLS {
                let options = InvokeOptions::new().user(user.clone());
                let input = input.clone();
                let started = Instant::now();
                let answer = pipeline.invoke("tool_8", input, options).await;
                let took = started.elapsed();
                assert!(answer.is_ok(), "{scenario}: {answer:?}");
                if i >= WARM_UP {
                    times.push(took);
                }
            }
        });
        times.sort_unstable();
        let (p50, p99) = (percentile(&times, 0.50), percentile(&times, 0.99));
        medians.push(p50);
        println!(
            "{scenario:>5}: p50 {:>8.2} µs  p99 {:>8.2} µs  ({CALLS} calls)",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
    }
    println!(
        "one Cedar decision over 50 policies: {:.2} µs at the median (cedar − none); \
         the role rules: {:.2} µs",
        medians[2].saturating_sub(medians[0]).as_secs_f64() * 1e6,
        medians[1].saturating_sub(medians[0]).as_secs_f64() * 1e6
    );
}
