//! Cedar policies in an in-process pipeline: the issue's examples (refunds below 100 EUR
//! for one's own tenant; no `delete_rows` without a `where`), shadow policies recorded and
//! not applied, refusals before capacity, listings, and load errors placed at their line
//! and column.

use std::sync::{Arc, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::{Value, json};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::tool::ErasedTool;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, Stage, ToolError, User};
use toolgate_hooks::audit::{Audit, MemorySink};
use toolgate_hooks::policy::{CedarPolicies, PolicySource, Verdict};
use toolgate_hooks::quota::InMemoryQuota;
use toolgate_hooks::{ArgumentRepair, Quota, Rate, Validation};
use toolgate_test::ScriptedTool;

const REFUND_POLICY: &str = r#"// Analysts refund small amounts, in their own tenant only.
@id("analyst-refunds")
permit(principal, action == Action::"refund", resource)
when {
    principal.roles.contains("analyst") &&
    principal has tenant &&
    context.arguments.tenant == principal.tenant &&
    context.arguments.amount.lessThan(decimal("100.0"))
};

@id("everyone-lists")
permit(principal, action == Action::"list_rows", resource);

@id("admins-delete")
permit(principal, action == Action::"delete_rows", resource)
when { principal.roles.contains("admin") };

@id("delete-needs-where")
@reason("`delete_rows` needs a non-empty `where`, so that it never empties a table")
forbid(principal, action == Action::"delete_rows", resource)
unless { context.arguments has "where" && context.arguments["where"] != "" };
"#;

fn tools() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let refund = ScriptedTool::returning("refund", json!("refunded")).input_schema(json!({
        "type": "object",
        "required": ["amount", "tenant"],
        "properties": {
            "amount": {"type": "number", "minimum": 0},
            "tenant": {"type": "string"},
            "note": {"type": "string"}
        }
    }));
    let delete =
        ScriptedTool::returning("delete_rows", json!({"deleted": 3})).input_schema(json!({
            "type": "object",
            "required": ["table"],
            "properties": {"table": {"type": "string"}, "where": {"type": "string"}}
        }));
    let list = ScriptedTool::returning("list_rows", json!([])).input_schema(json!({
        "type": "object",
        "properties": {"limit": {"type": "integer"}}
    }));
    for tool in [refund, delete, list] {
        registry
            .register_erased(tool.into_erased())
            .expect("a valid tool");
    }
    registry
}

fn policies(registry: &ToolRegistry, text: &str) -> CedarPolicies {
    CedarPolicies::builder()
        .source(PolicySource::new("refunds.cedar", text))
        .build(registry.definitions())
        .expect("the policies load")
}

struct Fixture {
    pipeline: Pipeline,
    audit: MemorySink,
    quota: InMemoryQuota,
}

fn fixture(text: &str) -> Fixture {
    let registry = tools();
    let policies = policies(&registry, text);
    let audit = MemorySink::new();
    let quota = InMemoryQuota::builder().build();
    let pipeline = Pipeline::builder()
        .registry(registry)
        .hook(policies)
        .hook(
            Quota::builder(Rate::per_minute(1000).unwrap())
                .backend(Arc::new(quota.clone()))
                .build(),
        )
        .hook(ArgumentRepair::new())
        .hook(Validation::new())
        .hook(Audit::builder().sink(audit.clone()).build())
        .build()
        .expect("the pipeline builds");
    Fixture {
        pipeline,
        audit,
        quota,
    }
}

fn analyst(tenant: &str) -> User {
    User::new("ann").with_roles(["analyst"]).with_tenant(tenant)
}

async fn call(f: &Fixture, user: User, tool: &str, input: Value) -> Result<Value, ToolError> {
    f.pipeline
        .invoke(tool, input, InvokeOptions::new().user(user))
        .await
}

#[tokio::test]
async fn an_analyst_refunds_below_100_eur_in_her_own_tenant_only() {
    let f = fixture(REFUND_POLICY);
    let ok = call(
        &f,
        analyst("acme"),
        "refund",
        json!({"amount": 99.99, "tenant": "acme"}),
    )
    .await;
    assert_eq!(ok.unwrap(), json!("refunded"));

    for (input, what) in [
        (
            json!({"amount": 100, "tenant": "acme"}),
            "100 EUR is not below 100",
        ),
        (json!({"amount": 250.5, "tenant": "acme"}), "over the limit"),
        (json!({"amount": 5, "tenant": "globex"}), "another tenant"),
    ] {
        let err = call(&f, analyst("acme"), "refund", input)
            .await
            .unwrap_err();
        assert_eq!((err.code(), err.status()), ("forbidden", 403), "{what}");
        assert!(
            err.to_string().contains("may not call `refund`"),
            "{what}: {err}"
        );
        assert!(
            !err.to_string().contains("analyst-refunds"),
            "a refusal never names a policy without a reason: {err}"
        );
    }
    let records = f.audit.records();
    let last = &records.last().unwrap().policies[0];
    assert_eq!(last.decision, Verdict::Deny);
    assert_eq!(
        last.stage,
        Stage::WillNormalizeInput,
        "it depended on the arguments"
    );
    assert_eq!(records[0].policies[0].determining, ["analyst-refunds"]);
}

#[tokio::test]
async fn the_policy_sees_the_repaired_validated_arguments() {
    let f = fixture(REFUND_POLICY);
    // `"42.5"` is repaired to 42.5 before the policy reads it as a decimal.
    let ok = call(
        &f,
        analyst("acme"),
        "refund",
        json!({"amount": "42.5", "tenant": "acme"}),
    )
    .await;
    assert_eq!(ok.unwrap(), json!("refunded"));
    let err = call(
        &f,
        analyst("acme"),
        "refund",
        json!({"amount": "420", "tenant": "acme"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "forbidden");
}

#[tokio::test]
async fn nobody_deletes_rows_without_a_where_and_is_told_why() {
    let f = fixture(REFUND_POLICY);
    let admin = || User::new("root").with_roles(["admin"]);
    let ok = call(
        &f,
        admin(),
        "delete_rows",
        json!({"table": "t", "where": "id = 3"}),
    )
    .await;
    assert_eq!(ok.unwrap(), json!({"deleted": 3}));
    for input in [json!({"table": "t"}), json!({"table": "t", "where": ""})] {
        let err = call(&f, admin(), "delete_rows", input).await.unwrap_err();
        assert_eq!(err.code(), "forbidden");
        assert!(
            err.to_string().contains("needs a non-empty `where`"),
            "{err}"
        );
    }
    let record = f.audit.records().pop().unwrap();
    assert_eq!(record.policies[0].determining, ["delete-needs-where"]);
}

#[tokio::test]
async fn a_call_no_policy_could_permit_is_refused_before_capacity_is_charged() {
    let f = fixture(REFUND_POLICY);
    let guest = User::new("guest");
    let err = call(&f, guest, "refund", json!({"amount": 1, "tenant": "acme"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    assert!(err.to_string().contains("no policy permits it"), "{err}");
    let record = f.audit.records().pop().unwrap();
    assert_eq!(record.policies[0].stage, Stage::WillAuthorize);
    assert!(
        record
            .stages
            .iter()
            .all(|t| t.stage != Stage::WillAcquireQuota),
        "the quota stage did not run: {:?}",
        record.stages
    );
    assert_eq!(f.quota.key_count(), 0, "no rate-limit unit was taken");
}

#[tokio::test]
async fn arguments_that_do_not_fit_the_schema_are_denied() {
    // Without validation, a string amount reaches the policy: it cannot be read as a
    // decimal, so the call is denied (fail closed), saying which argument.
    let registry = tools();
    let pipeline = Pipeline::builder()
        .hook(policies(&registry, REFUND_POLICY))
        .registry(registry)
        .build()
        .unwrap();
    let err = pipeline
        .invoke(
            "refund",
            json!({"amount": "lots", "tenant": "acme"}),
            InvokeOptions::new().user(analyst("acme")),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    assert!(
        err.to_string()
            .contains("argument `amount` is not a number"),
        "{err}"
    );
}

const SHADOW_POLICY: &str = r#"
@id("anyone-refunds")
permit(principal, action == Action::"refund", resource);

@id("small-refunds-only")
@mode("shadow")
forbid(principal, action == Action::"refund", resource)
when { context.arguments.amount.greaterThan(decimal("10.0")) };
"#;

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("one recorder per test binary");
        snapshotter
    })
}

/// A counter's name, labels and value.
type Counted = (String, Vec<(String, String)>, u64);

/// Every counter since the last snapshot, with its labels (a snapshot drains them).
fn counters() -> Vec<Counted> {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(c) => Some((
                key.key().name().to_owned(),
                key.key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect(),
                c,
            )),
            _ => None,
        })
        .collect()
}

fn count(counters: &[Counted], name: &str, labels: &[(&str, &str)]) -> u64 {
    counters
        .iter()
        .filter(|(n, have, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
        })
        .map(|(.., c)| c)
        .sum()
}

#[tokio::test]
async fn a_shadow_policy_is_recorded_and_counted_but_not_applied() {
    snapshotter();
    let f = fixture(SHADOW_POLICY);
    let ok = call(
        &f,
        User::new("bob"),
        "refund",
        json!({"amount": 50, "tenant": "acme"}),
    )
    .await;
    assert_eq!(
        ok.unwrap(),
        json!("refunded"),
        "the shadow forbid does not bite"
    );

    let record = f.audit.records().pop().unwrap();
    let decision = &record.policies[0];
    assert_eq!(decision.decision, Verdict::Allow);
    assert_eq!(decision.determining, ["anyone-refunds"]);
    let shadow = decision.shadow.as_ref().expect("a shadow decision");
    assert_eq!(shadow.decision, Verdict::Deny);
    assert_eq!(shadow.determining, ["small-refunds-only"]);
    assert!(shadow.disagrees);
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(json["policies"][0]["shadow"]["decision"], "deny");

    let seen = counters();
    let decisions = "toolgate_policy_decisions_total";
    let shadow_forbid = [
        ("policy", "small-refunds-only"),
        ("mode", "shadow"),
        ("decision", "deny"),
    ];
    assert_eq!(count(&seen, decisions, &shadow_forbid), 1, "{seen:?}");
    let enforced_permit = [
        ("policy", "anyone-refunds"),
        ("mode", "enforce"),
        ("decision", "allow"),
    ];
    assert_eq!(count(&seen, decisions, &enforced_permit), 1, "{seen:?}");
    let disagreements = [("decision", "allow"), ("shadow_decision", "deny")];
    assert_eq!(
        count(
            &seen,
            "toolgate_policy_shadow_disagreements_total",
            &disagreements
        ),
        1
    );

    // A small refund: the shadow policy agrees, so nothing of it is determining.
    call(
        &f,
        User::new("bob"),
        "refund",
        json!({"amount": 5, "tenant": "acme"}),
    )
    .await
    .unwrap();
    let shadow = f.audit.records().pop().unwrap().policies[0]
        .shadow
        .clone()
        .unwrap();
    assert!(!shadow.disagrees);
    assert!(shadow.determining.is_empty());
}

#[test]
fn listings_show_what_some_policy_could_permit() {
    let registry = tools();
    let policies = policies(&registry, REFUND_POLICY);
    let names = |user: &User| -> Vec<String> {
        policies
            .visible_tools(user, registry.definitions())
            .into_iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    let mut analyst_sees = names(&analyst("acme"));
    analyst_sees.sort();
    assert_eq!(
        analyst_sees,
        ["list_rows", "refund"],
        "refund depends on the arguments"
    );
    assert_eq!(names(&User::new("guest")), ["list_rows"]);
    let mut admin_sees = names(&User::new("root").with_roles(["admin"]));
    admin_sees.sort();
    assert_eq!(admin_sees, ["delete_rows", "list_rows"]);
}

#[test]
fn each_tool_lists_the_policies_that_could_decide_its_calls() {
    let registry = tools();
    let text = format!(
        "{REFUND_POLICY}\n@id(\"watch-tagged\")\n@mode(\"shadow\")\nforbid(principal, action, resource) when {{ resource.tags.contains(\"pii\") }};\n\n@id(\"office-hours\")\nforbid(principal, action, resource) when {{ context.time.utc_hour < 6 }};\n"
    );
    let policies = policies(&registry, &text);
    let applicable = |tool: &str| {
        let definition = registry.get(tool).expect("a tool").definition.clone();
        policies
            .applicable(&definition)
            .into_iter()
            .map(|p| (p.id, p.permit, p.shadow, p.always))
            .collect::<Vec<_>>()
    };
    let p = |id: &str, permit, always| (id.to_owned(), permit, false, always);
    // Another tool's policies and a condition on a tag the tool lacks are left out; a
    // condition on the caller, the arguments or the time keeps a policy in.
    assert_eq!(
        applicable("delete_rows"),
        [
            p("admins-delete", true, false),
            p("delete-needs-where", false, false),
            p("office-hours", false, false),
        ]
    );
    assert_eq!(
        applicable("list_rows"),
        [
            p("everyone-lists", true, true),
            p("office-hours", false, false)
        ]
    );
    let sources: Vec<String> = policies
        .applicable(&registry.get("refund").unwrap().definition)
        .into_iter()
        .map(|p| p.source)
        .collect();
    assert_eq!(sources, ["refunds.cedar", "refunds.cedar"]);
}

#[test]
fn a_typo_in_an_argument_is_a_load_error_with_its_line_and_column() {
    let registry = tools();
    let text = "permit(principal, action == Action::\"refund\", resource)\nwhen {\n    context.arguments.amout.lessThan(decimal(\"1.0\"))\n};\n";
    let err = CedarPolicies::builder()
        .source(PolicySource::new("policies/refund.cedar", text))
        .build(registry.definitions())
        .err()
        .expect("a typo does not load");
    let problem = &err.problems[0];
    assert_eq!(problem.source, "policies/refund.cedar");
    let at = problem.at.expect("a location");
    assert_eq!((at.line, at.column), (3, 5), "{err}");
    assert!(
        err.to_string().starts_with("policies/refund.cedar:3:5: "),
        "{err}"
    );
    assert!(err.to_string().contains("amout"), "{err}");
    assert!(
        err.to_string().contains("policy `policies/refund.cedar#1`"),
        "named by our id: {err}"
    );
}

#[test]
fn syntax_errors_unknown_modes_and_duplicate_ids_are_load_errors() {
    let registry = tools();
    let load = |text: &str| {
        CedarPolicies::builder()
            .source(PolicySource::new("p.cedar", text))
            .build(registry.definitions())
            .err()
            .map(|e| e.to_string())
    };
    let syntax = load("permit(principal, action, resource)\nwhen { true ").unwrap();
    assert!(syntax.starts_with("p.cedar:2:"), "{syntax}");
    let mode = load("@mode(\"loud\") permit(principal, action, resource);").unwrap();
    assert!(
        mode.contains("@mode(\\\"enforce\\\")") || mode.contains("@mode(\"enforce\")"),
        "{mode}"
    );
    let twice = load("@id(\"a\") permit(principal, action, resource);\n@id(\"a\") permit(principal, action, resource);").unwrap();
    assert!(twice.contains("two policies have the id `a`"), "{twice}");
    assert_eq!(
        load("permit(principal, action in Action::\"call\", resource);"),
        None
    );
}

#[test]
fn a_template_is_a_load_error_not_a_forbid_that_never_applies() {
    // Nothing links a template to a principal or a resource, so Cedar never evaluates it:
    // loaded, this `forbid` would read as a rule and forbid nothing.
    let registry = tools();
    let err = CedarPolicies::builder()
        .source(PolicySource::new(
            "p.cedar",
            "permit(principal, action, resource);\n@id(\"no-delete\")\nforbid(principal == ?principal, action == Action::\"delete_rows\", resource);",
        ))
        .build(registry.definitions())
        .err()
        .map(|e| e.to_string())
        .expect("a template does not load");
    assert!(
        err.starts_with("p.cedar: policy `no-delete` is a template"),
        "{err}"
    );
    assert!(err.contains("?principal"), "{err}");
}

#[tokio::test]
async fn a_tool_added_after_the_policies_were_loaded_is_denied() {
    let registry = tools();
    let policies = policies(&registry, "permit(principal, action, resource);");
    let pipeline = Pipeline::builder()
        .tool(ScriptedTool::returning("late", json!(1)).into_erased())
        .hook(Arc::new(policies))
        .build()
        .unwrap();
    let err = pipeline
        .invoke("late", json!({}), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    assert!(err.to_string().contains("no policy covers it"), "{err}");
}

/// A tool that answers `value`, tagged `tags`.
fn tagged(name: &str, schema: Value, tags: &[&str], value: Value) -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new(name, "A tagged tool.", schema, move |_, _| {
        let value = value.clone();
        Box::pin(async move { Ok::<_, ToolError>(value) })
    });
    tool.definition_mut().tags = tags.iter().map(|t| (*t).to_owned()).collect();
    Arc::new(tool)
}

#[tokio::test]
async fn an_action_group_takes_tools_by_their_tag_never_by_a_name_an_upstream_chose() {
    let mut registry = ToolRegistry::new();
    let schema = || json!({"type": "object"});
    registry
        .register_erased(tagged(
            "prompt.review",
            schema(),
            &["mcp-prompt"],
            json!("prompt"),
        ))
        .unwrap();
    // A plain tool an upstream named as if it were a prompt.
    registry
        .register_erased(tagged("prompt.evil", schema(), &[], json!("ran")))
        .unwrap();
    let policies = CedarPolicies::builder()
        .source(PolicySource::new(
            "prompts.cedar",
            r#"permit(principal, action in Action::"prompt", resource);"#,
        ))
        .action_group("prompt", "mcp-prompt")
        .build(registry.definitions())
        .unwrap();
    let pipeline = Pipeline::builder()
        .registry(registry)
        .hook(policies)
        .build()
        .unwrap();
    let anyone = || InvokeOptions::new().user(User::new("mallory"));
    let prompt = pipeline.invoke("prompt.review", json!({}), anyone()).await;
    assert_eq!(prompt.unwrap(), json!("prompt"));
    let evil = pipeline
        .invoke("prompt.evil", json!({}), anyone())
        .await
        .unwrap_err();
    assert_eq!(evil.code(), "forbidden", "{evil}");
}

#[tokio::test]
async fn a_completion_request_is_allowed_where_the_listing_shows_the_tool() {
    let mut registry = ToolRegistry::new();
    let prompt = tagged(
        "prompt.review",
        json!({
            "type": "object",
            "required": ["language"],
            "properties": {"language": {"type": "string"}}
        }),
        &["mcp-prompt"],
        json!("ok"),
    );
    registry.register_erased(prompt).unwrap();
    let policies = CedarPolicies::builder()
        .source(PolicySource::new(
            "prompts.cedar",
            r#"permit(principal, action in Action::"prompt", resource)
               when { principal.roles.contains("dev") && context.arguments.language == "rust" };"#,
        ))
        .action_group("prompt", "mcp-prompt")
        .completion_requests("complete", ["mcp-prompt"])
        .build(registry.definitions())
        .unwrap();
    let pipeline = Pipeline::builder()
        .registry(registry)
        .hook(policies)
        .build()
        .unwrap();
    let complete = json!({"complete": {"argument": {"name": "language", "value": "ru"}}});
    let dev = || InvokeOptions::new().user(User::new("dee").with_roles(["dev"]));
    let ok = pipeline
        .invoke("prompt.review", complete.clone(), dev())
        .await;
    assert_eq!(
        ok.unwrap(),
        json!("ok"),
        "no required argument is asked of a completion"
    );
    let guest = pipeline
        .invoke(
            "prompt.review",
            complete,
            InvokeOptions::new().user(User::new("guest")),
        )
        .await
        .unwrap_err();
    assert_eq!(guest.code(), "forbidden");
    let go = pipeline
        .invoke("prompt.review", json!({"language": "go"}), dev())
        .await
        .unwrap_err();
    assert_eq!(
        go.code(),
        "forbidden",
        "a real call is decided on its arguments"
    );
}

#[tokio::test]
async fn a_completion_shaped_input_to_a_tool_that_answers_none_is_decided_on_its_arguments() {
    // `purge` takes `{"complete": {}}` as its arguments (its schema allows any others): it
    // would run without a `where`, which the policy forbids. Only a tool that answers
    // completions (tagged so) has such an input decided as a completion request.
    let mut registry = ToolRegistry::new();
    let purge = tagged(
        "purge",
        json!({"type": "object", "properties": {"where": {"type": "string"}}}),
        &[],
        json!({"deleted": "everything"}),
    );
    registry.register_erased(purge).unwrap();
    let policies = CedarPolicies::builder()
        .source(PolicySource::new(
            "purge.cedar",
            r#"permit(principal, action, resource) when { principal.roles.contains("admin") };
               @reason("`purge` needs a `where`")
               forbid(principal, action == Action::"purge", resource)
               unless { context.arguments has "where" };"#,
        ))
        .completion_requests("complete", ["mcp-prompt", "mcp-resources"])
        .build(registry.definitions())
        .unwrap();
    let pipeline = Pipeline::builder()
        .registry(registry)
        .hook(policies)
        .hook(Validation::new())
        .build()
        .unwrap();
    let admin = || InvokeOptions::new().user(User::new("root").with_roles(["admin"]));
    for input in [
        json!({"complete": {}}),
        json!({"complete": {"argument": {"name": "where", "value": ""}}}),
    ] {
        let err = pipeline
            .invoke("purge", input.clone(), admin())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "forbidden", "{input}: {err}");
        assert!(err.to_string().contains("needs a `where`"), "{err}");
    }
    let ok = pipeline
        .invoke("purge", json!({"where": "id = 3"}), admin())
        .await;
    assert_eq!(ok.unwrap(), json!({"deleted": "everything"}));
}

#[tokio::test]
async fn a_forbid_that_fails_to_evaluate_denies_every_way_a_call_is_decided() {
    // The forbid overflows (seconds since 1970 times 10^10 is past 2^63) whoever calls
    // with whatever arguments: a call, a completion request and a listing all deny, and
    // the caller is told that access could not be checked, not the forbid's reason nor
    // that the permit decided.
    let mut registry = ToolRegistry::new();
    let prompt = tagged(
        "prompt.review",
        json!({"type": "object", "properties": {"language": {"type": "string"}}}),
        &["mcp-prompt"],
        json!("ok"),
    );
    registry.register_erased(prompt).unwrap();
    let policies = CedarPolicies::builder()
        .source(PolicySource::new(
            "overflow.cedar",
            r#"@id("everyone")
               permit(principal, action, resource);
               @id("overflows")
               @reason("the clock says no")
               forbid(principal, action, resource)
               when { context.time.unix_seconds * 10000000000 > 0 };"#,
        ))
        .action_group("prompt", "mcp-prompt")
        .completion_requests("complete", ["mcp-prompt"])
        .build(registry.definitions())
        .unwrap();
    let audit = MemorySink::new();
    let pipeline = Pipeline::builder()
        .registry(registry)
        .hook(policies.clone())
        .hook(Audit::builder().sink(audit.clone()).build())
        .build()
        .unwrap();
    let ann = User::new("ann");
    assert!(
        policies
            .visible_tools(&ann, pipeline.definitions())
            .is_empty(),
        "a tool every call of which is denied is not listed"
    );
    for input in [
        json!({"language": "rust"}),
        json!({"complete": {"argument": {"name": "language", "value": "ru"}}}),
    ] {
        let err = pipeline
            .invoke(
                "prompt.review",
                input.clone(),
                InvokeOptions::new().user(ann.clone()),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), "forbidden", "{input}: {err}");
        let message = err.to_string();
        assert!(message.contains("could not be checked"), "{message}");
        assert!(!message.contains("the clock says no"), "{message}");
        let record = audit.records().pop().unwrap();
        assert_eq!(record.policies[0].decision, Verdict::Deny);
        assert_eq!(record.policies[0].determining, ["overflows"], "{input}");
        assert_eq!(record.policies[0].errored, ["overflows"], "{input}");
    }
}

#[tokio::test]
async fn a_resumed_call_is_decided_again_by_the_policies_in_force() {
    use toolgate_core::suspension::{InMemorySuspensionStore, ResumeDecision, SuspensionLimits};
    use toolgate_hooks::Consent;

    let store = Arc::new(InMemorySuspensionStore::new(SuspensionLimits::default()));
    let with_policies = |text: &str| {
        let registry = tools();
        let policies = policies(&registry, text);
        Pipeline::builder()
            .registry(registry)
            .hook(policies)
            .hook(Consent::builder().tool("refund").build())
            .suspension_store(store.clone())
            .build()
            .unwrap()
    };
    let before = with_policies(REFUND_POLICY);
    let stricter = REFUND_POLICY.replace("decimal(\"100.0\")", "decimal(\"10.0\")");
    let after = with_policies(&stricter);
    let suspend = || async {
        match call_on(&before, "refund", json!({"amount": 50, "tenant": "acme"})).await {
            Err(ToolError::Suspended { suspension_id, .. }) => suspension_id,
            other => panic!("the refund waits for approval: {other:?}"),
        }
    };

    let id = suspend().await;
    let err = after
        .resume(&id, ResumeDecision::Approve, InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    assert!(
        err.to_string().contains("may no longer call `refund`"),
        "{err}"
    );

    let id = suspend().await;
    let ok = before
        .resume(&id, ResumeDecision::Approve, InvokeOptions::new())
        .await;
    assert_eq!(ok.unwrap(), json!("refunded"));
}

async fn call_on(pipeline: &Pipeline, tool: &str, input: Value) -> Result<Value, ToolError> {
    pipeline
        .invoke(tool, input, InvokeOptions::new().user(analyst("acme")))
        .await
}

#[tokio::test]
async fn a_policy_naming_a_user_id_and_a_tenant_admits_that_caller_only() {
    // `User::"ann"` alone is the id `ann` in every tenant; the tenant narrows it to one.
    let f = fixture(
        r#"permit(principal, action == Action::"list_rows", resource)
when { principal == User::"ann" && principal has tenant && principal.tenant == "acme" };"#,
    );
    let list = |user: User| call(&f, user, "list_rows", json!({}));
    assert_eq!(list(analyst("acme")).await.unwrap(), json!([]));
    for other in [
        analyst("globex"),
        User::new("ann"),
        User::new("bob").with_tenant("acme"),
    ] {
        let err = list(other.clone()).await.unwrap_err();
        assert_eq!(err.code(), "forbidden", "{other:?}: {err}");
    }

    // The tenant is optional: a policy that reads it without `has` does not load.
    let unguarded = r#"permit(principal, action, resource)
when { principal == User::"ann" && principal.tenant == "acme" };"#;
    let err = CedarPolicies::builder()
        .source(PolicySource::new("ann.cedar", unguarded))
        .build(tools().definitions())
        .err()
        .expect("an unguarded optional attribute does not load");
    assert!(err.to_string().contains("tenant"), "{err}");
}

#[tokio::test]
async fn a_caller_is_in_its_tenant_so_a_policy_scoped_to_a_tenant_admits_its_callers_only() {
    let f =
        fixture(r#"permit(principal in Tenant::"acme", action == Action::"list_rows", resource);"#);
    let list = |user: User| call(&f, user, "list_rows", json!({}));
    assert_eq!(list(analyst("acme")).await.unwrap(), json!([]));
    assert_eq!(
        list(User::new("bob").with_tenant("acme")).await.unwrap(),
        json!([])
    );
    for other in [analyst("globex"), User::new("ann")] {
        let err = list(other.clone()).await.unwrap_err();
        assert_eq!(err.code(), "forbidden", "{other:?}: {err}");
    }

    // One id in one tenant, as the docs write it.
    let f = fixture(
        r#"permit(principal, action == Action::"list_rows", resource)
when { principal == User::"ann" && principal in Tenant::"acme" };"#,
    );
    let list = |user: User| call(&f, user, "list_rows", json!({}));
    assert_eq!(list(analyst("acme")).await.unwrap(), json!([]));
    for other in [
        analyst("globex"),
        User::new("ann"),
        User::new("bob").with_tenant("acme"),
    ] {
        let err = list(other.clone()).await.unwrap_err();
        assert_eq!(err.code(), "forbidden", "{other:?}: {err}");
    }
}

/// A policy whose condition nests `terms` deep (a chain of `&&`, which Cedar nests one
/// level a term), called on a thread with a runtime worker's 2 MiB of stack: permitted.
fn deep_condition_is_decided_on_a_workers_stack(terms: usize) {
    let condition = vec!["principal.roles.contains(\"analyst\")"; terms].join(" && ");
    let text = format!(
        "@id(\"deep\")\npermit(principal, action == Action::\"list_rows\", resource) when {{ {condition} }};"
    );
    let worker = std::thread::Builder::new().stack_size(2 * 1024 * 1024);
    let answer = worker
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let f = fixture(&text);
                call(&f, analyst("acme"), "list_rows", json!({})).await
            })
        })
        .expect("a thread")
        .join()
        .expect("no overflow");
    assert_eq!(answer.expect("permitted"), json!([]), "{terms} terms");
}

#[test]
fn a_condition_nested_deeper_than_a_workers_stack_holds_is_still_decided() {
    // A debug build's evaluator fits about 32 levels in 2 MiB, and fails the policy past
    // that (Cedar stops short of the stack's end): the permit would deny.
    for terms in [8, 100, 1_000] {
        deep_condition_is_decided_on_a_workers_stack(terms);
    }
}
