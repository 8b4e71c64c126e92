//! Hooks of your own in the gateway (`Extensions` with `Gateway::build_with`), and the
//! built-in calculator's answer to an expression without a value.

use serde_json::json;
use toolgate_core::hook::HookRegistration;
use toolgate_core::{Hook, HookResult, InvokeOptions, ToolInvokeContext, User, hook};
use toolgate_gateway::config::parse;
use toolgate_gateway::state::SharedState;
use toolgate_gateway::{Extensions, Gateway};

struct NoInterns;

#[hook]
impl Hook for NoInterns {
    fn name(&self) -> &str {
        "no_interns"
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.user().has_role("intern") {
            return ctx.abort("interns may not call tools", "forbidden", 403);
        }
        Ok(())
    }
}

const CONFIG: &str = r#"
tools:
  builtin: [calculator]
policies:
  authorization:
    rules:
      - { effect: allow, roles: [analyst, intern], tools: [calculator] }
"#;

#[tokio::test]
async fn an_extension_hook_runs_beside_the_configured_policies() {
    let config = parse(CONFIG).unwrap();
    let shared = SharedState::new(&config).await.unwrap();
    let extensions = Extensions::new().hook(NoInterns);
    let gateway = Gateway::build_with(config, &shared, &extensions)
        .await
        .unwrap();

    let (_, plan) = gateway
        .plans()
        .into_iter()
        .find(|(tool, _)| tool == "calculator")
        .expect("the calculator has a plan");
    let listed = format!("{plan:?}");
    assert!(listed.contains("no_interns"), "plan: {listed}");

    let input = json!({"expression": "6 * 7"});
    let intern = InvokeOptions::new().user(User::new("ian").with_roles(["intern"]));
    let err = gateway
        .pipeline()
        .invoke("calculator", input.clone(), intern)
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("forbidden", 403));
    assert_eq!(err.to_string(), "interns may not call tools");

    let analyst = InvokeOptions::new().user(User::new("ana").with_roles(["analyst"]));
    let out = gateway
        .pipeline()
        .invoke("calculator", input, analyst)
        .await
        .unwrap();
    assert_eq!(out["result"], 42);
}

#[tokio::test]
async fn an_extension_hook_for_an_unknown_tool_fails_the_build() {
    let config = parse(CONFIG).unwrap();
    let shared = SharedState::new(&config).await.unwrap();
    let extensions =
        Extensions::new().hook(HookRegistration::new(NoInterns).for_tool("no_such_tool"));
    let err = Gateway::build_with(config, &shared, &extensions)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no_such_tool"), "{err}");
}

#[tokio::test]
async fn an_expression_without_a_value_is_the_callers_mistake() {
    let config = parse(CONFIG).unwrap();
    let shared = SharedState::new(&config).await.unwrap();
    let gateway = Gateway::build(config, &shared).await.unwrap();
    let analyst = || InvokeOptions::new().user(User::new("ana").with_roles(["analyst"]));
    for expression in ["2^2000", "9223372036854775807 + 1", "1 / 0", "2 +"] {
        let err = gateway
            .pipeline()
            .invoke("calculator", json!({ "expression": expression }), analyst())
            .await
            .unwrap_err();
        assert_eq!(
            (err.code(), err.status()),
            ("invalid_input", 400),
            "{expression}: {err}"
        );
        assert!(
            err.to_string().contains("expression"),
            "{expression}: {err}"
        );
    }
}
