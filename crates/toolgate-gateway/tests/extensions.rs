//! Hooks of your own in the gateway (`Extensions` given to `Process::start`), the
//! providers they read, and the built-in calculator's answer to an expression without a
//! value.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use toolgate_core::external::TypeMapKey;
use toolgate_core::hook::HookRegistration;
use toolgate_core::provider::{Scope, bind_provider};
use toolgate_core::{Hook, HookResult, InvokeOptions, ToolInvokeContext, User, hook};
use toolgate_gateway::config::parse;
use toolgate_gateway::{Extensions, Process};

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
    let extensions = Extensions::new().hook(NoInterns);
    let gateway = Process::start(config, extensions).await.unwrap().current();

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

/// Calls counted across every configuration: a global provider.
struct CallCount;
impl TypeMapKey for CallCount {
    type Value = AtomicU64;
}

/// The roles allowed in a session: made once per session by a binder.
struct SessionRoles;
impl TypeMapKey for SessionRoles {
    type Value = Vec<String>;
}

/// Counts calls, and refuses those whose session does not allow the caller's roles.
struct SessionGate;

#[hook]
#[requires(CallCount, SessionRoles)]
impl Hook for SessionGate {
    fn name(&self) -> &str {
        "session_gate"
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.get::<CallCount>()?.fetch_add(1, Ordering::SeqCst);
        let roles = ctx.get::<SessionRoles>()?;
        if !ctx.user().roles.iter().any(|r| roles.contains(r)) {
            return ctx.abort("this session does not allow your role", "forbidden", 403);
        }
        Ok(())
    }
}

#[tokio::test]
async fn extension_providers_reach_hooks_in_every_scope_and_survive_a_rebuild() {
    let config = parse(CONFIG).unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let extensions = Extensions::new()
        .provide_shared::<CallCount>(Arc::clone(&count))
        .hook(bind_provider::<SessionRoles, _>(Scope::Session, |ctx| {
            // Only the first call of a session decides what the session allows.
            Some(ctx.user().roles.clone())
        }))
        .hook(SessionGate);
    let process = Process::start(config.clone(), extensions)
        .await
        .expect("the extension supplies both keys, so `#[requires]` holds");
    let gateway = process.current();
    let input = json!({"expression": "6 * 7"});
    let as_role = |role: &str| {
        InvokeOptions::new()
            .user(User::new("ana").with_roles([role]))
            .session("s1")
    };

    let first = gateway
        .pipeline()
        .invoke("calculator", input.clone(), as_role("analyst"))
        .await
        .unwrap();
    let intern_in_the_same_session = gateway
        .pipeline()
        .invoke("calculator", input.clone(), as_role("intern"))
        .await
        .unwrap_err();
    assert_eq!(first["result"], 42);
    assert_eq!(intern_in_the_same_session.code(), "forbidden");

    // A reload builds a new pipeline from the same extensions: the global value is shared.
    process.reload(config).await.unwrap();
    let rebuilt = process.current();
    assert!(
        !Arc::ptr_eq(&gateway, &rebuilt),
        "the reload swapped in a new gateway"
    );
    rebuilt
        .pipeline()
        .invoke("calculator", input, as_role("analyst"))
        .await
        .unwrap();
    assert_eq!(
        count.load(Ordering::SeqCst),
        3,
        "one counter across both builds"
    );
}

#[tokio::test]
async fn an_extension_hook_for_an_unknown_tool_fails_the_build() {
    let config = parse(CONFIG).unwrap();
    let extensions =
        Extensions::new().hook(HookRegistration::new(NoInterns).for_tool("no_such_tool"));
    let err = Process::start(config, extensions).await.unwrap_err();
    assert!(err.to_string().contains("no_such_tool"), "{err}");
}

#[tokio::test]
async fn an_expression_without_a_value_is_the_callers_mistake() {
    let config = parse(CONFIG).unwrap();
    let gateway = Process::start(config, Extensions::new())
        .await
        .unwrap()
        .current();
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
