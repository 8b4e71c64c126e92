//! Providers: lookup request → session → global, the read-only global scope, bounded
//! sessions, and missing providers caught at build or named at call time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::core::error::{BuildError, ProviderError};
use toolgate::core::external::TypeMapKey;
use toolgate::core::provider::{ProviderRequirement, Scope, SessionConfig};
use toolgate::core::{
    Hook, HookResult, InvokeOptions, JsonTool, Pipeline, ToolError, ToolInvokeContext, hook,
};

use crate::{TOOL, input, options};

/// A provider the tool reads.
struct Greeting;

impl TypeMapKey for Greeting {
    type Value = String;
}

/// A per-session counter.
struct Visits;

impl TypeMapKey for Visits {
    type Value = AtomicUsize;
}

/// Binds `Greeting = "session"` in the session scope of calls that have a session.
struct BindSessionGreeting;

#[hook]
impl Hook for BindSessionGreeting {
    fn provided_providers(&self) -> Vec<ProviderRequirement> {
        vec![ProviderRequirement::of::<Greeting>()]
    }

    fn will_bind_providers(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.session_id().is_none() {
            return Ok(());
        }
        ctx.provide::<Greeting>("session".to_owned(), Scope::Session)
            .map_err(Into::into)
    }
}

/// Binds a `Visits` counter in the session scope when the session has none yet.
struct CountVisits;

#[hook]
impl Hook for CountVisits {
    fn will_bind_providers(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.try_get::<Visits>().is_some() {
            return Ok(());
        }
        ctx.provide::<Visits>(AtomicUsize::new(0), Scope::Session)
            .map_err(Into::into)
    }
}

/// Tries to bind into the global scope during a call.
struct BindGlobal;

#[hook]
impl Hook for BindGlobal {
    fn will_bind_providers(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.provide::<Greeting>("sneaky".to_owned(), Scope::Global)
            .map_err(Into::into)
    }
}

/// Requires a provider nobody binds.
struct NeedsGreeting;

#[hook]
#[requires(Greeting)]
impl Hook for NeedsGreeting {
    fn name(&self) -> &str {
        "needs_greeting"
    }
}

/// A tool that answers with the `Greeting` provider it finds.
fn greeting_tool() -> std::sync::Arc<dyn toolgate::core::tool::ErasedTool> {
    std::sync::Arc::new(JsonTool::new(
        TOOL,
        "Reads the greeting.",
        json!({"type": "object"}),
        |_, ctx| {
            Box::pin(async move {
                Ok::<_, ToolError>(Value::String(ctx.get::<Greeting>()?.to_string()))
            })
        },
    ))
}

/// A tool that counts visits in its session.
fn visits_tool() -> std::sync::Arc<dyn toolgate::core::tool::ErasedTool> {
    std::sync::Arc::new(JsonTool::new(
        TOOL,
        "Counts visits.",
        json!({"type": "object"}),
        |_, ctx| {
            Box::pin(async move {
                let visits = ctx.get::<Visits>()?;
                Ok::<_, ToolError>(json!(visits.fetch_add(1, Ordering::SeqCst) + 1))
            })
        },
    ))
}

fn visits_pipeline(config: SessionConfig) -> Pipeline {
    Pipeline::builder()
        .tool(visits_tool())
        .hook(CountVisits)
        .sessions(config)
        .build()
        .unwrap()
}

async fn visit(pipeline: &Pipeline, session: &str) -> Value {
    pipeline
        .invoke(TOOL, input(), InvokeOptions::new().session(session))
        .await
        .unwrap()
}

#[tokio::test]
async fn lookup_prefers_request_then_session_then_global() {
    let pipeline = Pipeline::builder()
        .tool(greeting_tool())
        .provide::<Greeting>("global".to_owned())
        .hook(BindSessionGreeting)
        .build()
        .unwrap();

    let global = pipeline.invoke(TOOL, input(), options()).await.unwrap();
    let session = pipeline
        .invoke(TOOL, input(), options().session("s1"))
        .await
        .unwrap();
    let request = pipeline
        .invoke(
            TOOL,
            input(),
            options()
                .session("s1")
                .provide::<Greeting>("request".to_owned()),
        )
        .await
        .unwrap();

    assert_eq!(
        (global, session, request),
        (json!("global"), json!("session"), json!("request"))
    );
}

#[tokio::test]
async fn session_providers_are_shared_by_calls_of_the_same_session_only() {
    let pipeline = visits_pipeline(SessionConfig::default());

    assert_eq!(visit(&pipeline, "a").await, json!(1));
    assert_eq!(visit(&pipeline, "a").await, json!(2));
    assert_eq!(visit(&pipeline, "b").await, json!(1));
    assert_eq!(pipeline.session_count(), 2);
    assert!(pipeline.end_session("a"));
    assert_eq!(visit(&pipeline, "a").await, json!(1));
}

#[tokio::test]
async fn session_providers_are_shared_by_concurrent_calls() {
    let pipeline = visits_pipeline(SessionConfig::default());
    visit(&pipeline, "shared").await;

    let calls = (0..20).map(|_| visit(&pipeline, "shared"));
    futures::future::join_all(calls).await;

    assert_eq!(visit(&pipeline, "shared").await, json!(22));
}

#[tokio::test]
async fn binding_into_the_global_scope_during_a_call_is_an_error() {
    let pipeline = Pipeline::builder()
        .tool(greeting_tool())
        .provide::<Greeting>("global".to_owned())
        .hook(BindGlobal)
        .build()
        .unwrap();

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    match &err {
        ToolError::Provider(ProviderError::GlobalReadOnly { key }) => {
            assert!(key.ends_with("Greeting"), "{key}")
        }
        other => panic!("expected a global-read-only error, got {other:?}"),
    }
    assert_eq!(err.code(), "global_provider_read_only");
    assert!(
        err.to_string()
            .contains("cannot be bound in the global scope"),
        "{err}"
    );
}

#[tokio::test]
async fn a_provider_missing_at_call_time_is_a_typed_error_naming_the_key_type() {
    let pipeline = Pipeline::builder().tool(greeting_tool()).build().unwrap();

    let err = pipeline.invoke(TOOL, input(), options()).await.unwrap_err();

    assert_eq!((err.code(), err.status()), ("missing_provider", 500));
    assert!(err.to_string().contains("providers::Greeting"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn past_the_maximum_session_count_the_least_recently_used_session_is_evicted() {
    let pipeline = visits_pipeline(SessionConfig {
        max_sessions: 3,
        idle_timeout: Duration::from_secs(3600),
    });
    for session in ["s1", "s2", "s3"] {
        visit(&pipeline, session).await;
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    assert_eq!(
        visit(&pipeline, "s2").await,
        json!(2),
        "s2 is now the most recently used"
    );
    tokio::time::advance(Duration::from_millis(5)).await;

    visit(&pipeline, "s4").await;

    assert_eq!(pipeline.session_count(), 3);
    assert_eq!(
        visit(&pipeline, "s2").await,
        json!(3),
        "a recently used session is kept"
    );
    assert_eq!(
        visit(&pipeline, "s1").await,
        json!(1),
        "the least recently used session was evicted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_unused_for_its_idle_timeout_expires() {
    let pipeline = visits_pipeline(SessionConfig {
        max_sessions: 100,
        idle_timeout: Duration::from_secs(60),
    });
    assert_eq!(visit(&pipeline, "s").await, json!(1));
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(
        visit(&pipeline, "s").await,
        json!(2),
        "used within the timeout: kept"
    );

    tokio::time::advance(Duration::from_secs(61)).await;

    assert_eq!(
        visit(&pipeline, "s").await,
        json!(1),
        "idle past the timeout: a fresh session"
    );
}

#[test]
fn a_required_provider_nobody_binds_fails_the_build_naming_hook_and_key() {
    let err = Pipeline::builder()
        .tool(greeting_tool())
        .hook(NeedsGreeting)
        .build()
        .unwrap_err();

    match &err {
        BuildError::MissingProvider { hook, key } => {
            assert_eq!(hook, "needs_greeting");
            assert!(key.ends_with("Greeting"), "{key}");
        }
        other => panic!("expected a missing provider, got {other:?}"),
    }
    assert!(err.to_string().contains("needs_greeting"), "{err}");
}

#[test]
fn a_required_provider_is_satisfied_by_a_global_binding_or_a_hook_that_binds_it() {
    let global = Pipeline::builder()
        .tool(greeting_tool())
        .provide::<Greeting>("hi".to_owned())
        .hook(NeedsGreeting);
    assert!(global.build().is_ok());

    let bound_per_call = Pipeline::builder()
        .tool(greeting_tool())
        .hook(NeedsGreeting)
        .hook(BindSessionGreeting);
    assert!(bound_per_call.build().is_ok());
}
