//! Providers from the host for a batch: the thread's session seeded through the pipeline,
//! request values for every call with `ExecuteOptions::provide`, and `per_call_provider`
//! checking each call of the batch.

use std::sync::Arc;

use serde_json::json;
use toolgate_agent::{ExecuteOptions, InMemoryStateManager, ThreadConfig, ToolCall, ToolSystem};
use toolgate_core::external::TypeMapKey;
use toolgate_core::tool::tool_fn_with_context;
use toolgate_core::{Hook, HookResult, Pipeline, ToolError, ToolInvokeContext, hook};

/// The thread's allowed hosts: session scope, seeded by the host.
struct AllowedHosts;
impl TypeMapKey for AllowedHosts {
    type Value = Vec<String>;
}

/// The request's tenant: request scope.
struct Tenant;
impl TypeMapKey for Tenant {
    type Value = String;
}

/// Refuses a `host` the thread may not reach; reads the tenant too.
struct AllowList;

#[hook]
#[requires(AllowedHosts, Tenant)]
impl Hook for AllowList {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.get::<Tenant>()?;
        let host = ctx.input()["host"].as_str().unwrap_or_default().to_owned();
        if !ctx.get::<AllowedHosts>()?.contains(&host) {
            return ctx.abort(format!("host `{host}` is not allowed"), "forbidden", 403);
        }
        Ok(())
    }
}

#[derive(serde::Deserialize, garde::Validate, schemars::JsonSchema)]
struct Fetch {
    #[garde(length(min = 1, max = 100))]
    host: String,
}

fn system() -> ToolSystem {
    let pipeline = Pipeline::builder()
        .tool(tool_fn_with_context(
            "fetch",
            "Fetches from a host.",
            |f: Fetch, ctx: &ToolInvokeContext| {
                let tenant = ctx.get::<Tenant>().map(|t| t.to_string());
                Box::pin(async move { Ok::<_, ToolError>(format!("{}@{}", tenant?, f.host)) })
            },
        ))
        .hook(AllowList)
        .per_call_provider::<AllowedHosts>()
        .per_call_provider::<Tenant>();
    let state = Arc::new(InMemoryStateManager::new());
    for thread in ["t1", "t2"] {
        state.set_config(thread, ThreadConfig::enabling(["fetch"]));
    }
    ToolSystem::builder(pipeline, state)
        .build()
        .expect("both keys are declared per call, so `#[requires]` holds")
}

fn calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new("c1", "fetch", json!({"host": "docs.rs"})),
        ToolCall::new("c2", "fetch", json!({"host": "evil.example"})),
    ]
}

#[tokio::test]
async fn a_batch_reads_its_threads_seeded_session_and_the_batchs_request_values() {
    let system = system();
    system
        .pipeline()
        .session("t1")
        .provide::<AllowedHosts>(vec!["docs.rs".into()]);

    let options = ExecuteOptions::new().provide::<Tenant>("acme".to_owned());
    let results = system.execute_tools("t1", calls(), options).await;

    assert_eq!(results[0].output, Some(json!("acme@docs.rs")));
    assert_eq!(results[1].error_code(), Some("forbidden"));
}

#[tokio::test]
async fn each_call_of_a_batch_is_checked_for_the_providers_the_host_declared() {
    let system = system();
    system
        .pipeline()
        .session("t1")
        .provide::<AllowedHosts>(vec!["docs.rs".into()]);

    let no_tenant = system
        .execute_tools("t1", calls(), ExecuteOptions::new())
        .await;
    let unseeded_thread = system
        .execute_tools(
            "t2",
            calls(),
            ExecuteOptions::new().provide::<Tenant>("acme".to_owned()),
        )
        .await;

    for result in no_tenant.iter().chain(&unseeded_thread) {
        assert_eq!(
            result.error_code(),
            Some("provider_not_supplied"),
            "{result:?}"
        );
    }
    // The model is told the server is misconfigured, not the host's Rust types (the log
    // names them).
    for result in [&no_tenant[0], &unseeded_thread[0]] {
        let message = &result.error.as_ref().unwrap().message;
        assert!(message.contains("not configured"), "{message}");
        assert!(
            !message.contains("Tenant") && !message.contains("AllowedHosts"),
            "{message}"
        );
    }
}
