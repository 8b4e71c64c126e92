//! Providers the host supplies, in every scope: session values seeded through
//! `Pipeline::session`, bounded like every session; request values the host declares it
//! always supplies (`per_call_provider`), accepted by the build check and checked per call;
//! providers bound from the call's context (`bind_provider`); and which per-call providers a
//! tool read, for a cache to know.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::core::error::{BuildError, ProviderError};
use toolgate::core::external::TypeMapKey;
use toolgate::core::provider::{ProviderRequirement, Scope, SessionConfig, bind_provider};
use toolgate::core::tool::ErasedTool;
use toolgate::core::{
    Hook, HookResult, InvokeOptions, JsonTool, Pipeline, ToolError, ToolInvokeContext, hook,
};

use crate::{TOOL, input};

/// The hosts a session may reach.
struct AllowedHosts;

impl TypeMapKey for AllowedHosts {
    type Value = Vec<String>;
}

/// Where the request came from: only the host knows it.
struct RemoteAddr;

impl TypeMapKey for RemoteAddr {
    type Value = String;
}

/// A global counter.
struct Checked;

impl TypeMapKey for Checked {
    type Value = AtomicUsize;
}

/// Refuses a `host` argument the session does not allow, and counts what it checks.
struct AllowList;

#[hook]
#[requires(AllowedHosts, Checked)]
impl Hook for AllowList {
    fn name(&self) -> &str {
        "allow_list"
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.get::<Checked>()?.fetch_add(1, Ordering::SeqCst);
        let host = ctx.input()["host"].as_str().unwrap_or_default().to_owned();
        if !ctx.get::<AllowedHosts>()?.contains(&host) {
            return ctx.abort(format!("host `{host}` is not allowed"), "forbidden", 403);
        }
        Ok(())
    }
}

/// Reads the remote address at `will_audit`.
struct NeedsAddr;

#[hook]
#[requires(RemoteAddr)]
impl Hook for NeedsAddr {
    fn name(&self) -> &str {
        "needs_addr"
    }

    fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.get::<RemoteAddr>()?;
        Ok(())
    }
}

/// A tool that answers with `value(ctx)`.
fn tool(value: fn(&ToolInvokeContext) -> Result<Value, ToolError>) -> Arc<dyn ErasedTool> {
    Arc::new(JsonTool::new(
        TOOL,
        "Answers from the context.",
        json!({"type": "object"}),
        move |_, ctx| {
            let out = value(ctx);
            Box::pin(async move { out })
        },
    ))
}

fn echo_allowed(ctx: &ToolInvokeContext) -> Result<Value, ToolError> {
    Ok(json!(*ctx.get::<AllowedHosts>()?))
}

fn allow_list_pipeline(config: SessionConfig) -> (Pipeline, Arc<AtomicUsize>) {
    let checked = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(tool(echo_allowed))
        .hook(AllowList)
        .provide_shared::<Checked>(Arc::clone(&checked))
        .per_call_provider::<AllowedHosts>()
        .sessions(config)
        .build()
        .expect("the host declared the session value, so `#[requires]` holds");
    (pipeline, checked)
}

fn in_session(id: &str) -> InvokeOptions {
    InvokeOptions::new().session(id)
}

#[tokio::test]
async fn a_session_seeded_by_the_host_is_read_by_hooks_and_tools_of_that_session_only() {
    let (pipeline, checked) = allow_list_pipeline(SessionConfig::default());
    pipeline
        .session("a")
        .provide::<AllowedHosts>(vec!["docs.rs".into()]);
    pipeline
        .session("b")
        .provide::<AllowedHosts>(vec!["crates.io".into()]);

    let a = pipeline
        .invoke(TOOL, json!({"host": "docs.rs"}), in_session("a"))
        .await
        .unwrap();
    let b_refused = pipeline
        .invoke(TOOL, json!({"host": "docs.rs"}), in_session("b"))
        .await
        .unwrap_err();
    let b = pipeline
        .invoke(TOOL, json!({"host": "crates.io"}), in_session("b"))
        .await
        .unwrap();

    assert_eq!(a, json!(["docs.rs"]));
    assert_eq!(b_refused.code(), "forbidden");
    assert_eq!(b, json!(["crates.io"]));
    assert_eq!(checked.load(Ordering::SeqCst), 3, "one global counter");
}

#[tokio::test]
async fn a_value_the_host_seeds_again_replaces_the_sessions_value_for_later_calls() {
    let (pipeline, _) = allow_list_pipeline(SessionConfig::default());
    let session = pipeline.session("a");
    session.provide::<AllowedHosts>(vec!["docs.rs".into()]);
    let host = json!({"host": "docs.rs"});
    assert!(
        pipeline
            .invoke(TOOL, host.clone(), in_session("a"))
            .await
            .is_ok()
    );

    session.provide::<AllowedHosts>(vec![]);

    let err = pipeline
        .invoke(TOOL, host, in_session("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
}

#[tokio::test(start_paused = true)]
async fn sessions_seeded_by_the_host_are_bounded_by_count_and_idle_time_like_any_other() {
    let (pipeline, _) = allow_list_pipeline(SessionConfig {
        max_sessions: 3,
        idle_timeout: Duration::from_secs(60),
    });
    for i in 0..10 {
        pipeline
            .session(format!("s{i}"))
            .provide::<AllowedHosts>(vec![]);
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    assert!(
        pipeline.session_count() <= 3,
        "{}",
        pipeline.session_count()
    );
    assert!(pipeline.session("s9").get::<AllowedHosts>().is_some());
    assert!(pipeline.session("s0").get::<AllowedHosts>().is_none());

    tokio::time::advance(Duration::from_secs(61)).await;

    assert!(
        pipeline.session("s9").get::<AllowedHosts>().is_none(),
        "idle past the timeout: gone"
    );
}

#[tokio::test]
async fn a_call_without_a_provider_the_host_declared_is_refused_naming_the_key_and_three_ways() {
    let (pipeline, checked) = allow_list_pipeline(SessionConfig::default());

    let unseeded = pipeline
        .invoke(TOOL, json!({"host": "docs.rs"}), in_session("never-seeded"))
        .await
        .unwrap_err();
    let sessionless = pipeline
        .invoke(TOOL, json!({"host": "docs.rs"}), InvokeOptions::new())
        .await
        .unwrap_err();

    for err in [&unseeded, &sessionless] {
        match err {
            ToolError::Provider(ProviderError::NotSupplied { key }) => {
                assert!(key.ends_with("AllowedHosts"), "{key}")
            }
            other => panic!("expected a not-supplied error, got {other:?}"),
        }
        assert_eq!((err.code(), err.status()), ("provider_not_supplied", 500));
        let message = err.to_string();
        for way in [
            "InvokeOptions::provide",
            "Pipeline::session(id).provide",
            "PipelineBuilder::provide",
        ] {
            assert!(message.contains(way), "{way} missing from: {message}");
        }
    }
    assert_eq!(checked.load(Ordering::SeqCst), 0, "refused before any hook");
    assert_eq!(
        pipeline.session_count(),
        0,
        "a refused call makes no session"
    );
}

#[tokio::test]
async fn a_request_value_satisfies_a_declared_per_call_provider() {
    let pipeline = Pipeline::builder()
        .tool(tool(|ctx| Ok(json!(*ctx.get::<RemoteAddr>()?))))
        .hook(NeedsAddr)
        .per_call_provider::<RemoteAddr>()
        .build()
        .expect("declared per call, `#[requires(RemoteAddr)]` passes the build");

    let out = pipeline
        .invoke(
            TOOL,
            input(),
            InvokeOptions::new().provide::<RemoteAddr>("10.0.0.7".into()),
        )
        .await
        .unwrap();
    let missing = pipeline
        .invoke_detailed(TOOL, input(), InvokeOptions::new())
        .await;

    assert_eq!(out, json!("10.0.0.7"));
    assert_eq!(
        missing.result.unwrap_err().code(),
        "provider_not_supplied",
        "invoke_detailed checks too"
    );
}

#[test]
fn the_build_error_for_a_missing_provider_gives_the_way_for_each_scope() {
    let err = Pipeline::builder()
        .tool(tool(echo_allowed))
        .hook(NeedsAddr)
        .build()
        .unwrap_err();

    assert!(matches!(err, BuildError::MissingProvider { .. }), "{err:?}");
    let message = err.to_string();
    for way in [
        ".provide::<",
        ".per_call_provider::<",
        "InvokeOptions::provide",
        "Pipeline::session(id).provide",
        "provided_providers",
    ] {
        assert!(message.contains(way), "{way} missing from: {message}");
    }
}

#[tokio::test]
async fn a_session_binder_makes_the_value_once_per_session_and_per_call_without_one() {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&made);
    let checked = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(tool(echo_allowed))
        .hook(AllowList)
        .hook(bind_provider::<AllowedHosts, _>(
            Scope::Session,
            move |ctx| {
                counter.fetch_add(1, Ordering::SeqCst);
                Some(vec![format!("{}.example", ctx.user().id)])
            },
        ))
        .provide_shared::<Checked>(Arc::clone(&checked))
        .build()
        .expect("the binder lists what it binds, so `#[requires]` holds");
    let ann = || {
        InvokeOptions::new()
            .user(toolgate::core::User::new("ann"))
            .session("s")
    };
    let host = json!({"host": "ann.example"});

    for _ in 0..3 {
        assert_eq!(
            pipeline.invoke(TOOL, host.clone(), ann()).await.unwrap(),
            json!(["ann.example"])
        );
    }
    assert_eq!(made.load(Ordering::SeqCst), 1, "once for the session");
    assert!(pipeline.session("s").get::<AllowedHosts>().is_some());

    let no_session = InvokeOptions::new().user(toolgate::core::User::new("ann"));
    assert!(
        pipeline
            .invoke(TOOL, host.clone(), no_session)
            .await
            .is_ok()
    );
    assert_eq!(made.load(Ordering::SeqCst), 2, "made for the call alone");
    assert_eq!(pipeline.session_count(), 1);
}

#[tokio::test]
async fn a_global_binder_fails_each_call_saying_where_globals_are_bound() {
    let pipeline = Pipeline::builder()
        .tool(tool(|_| Ok(json!(null))))
        .hook(bind_provider::<RemoteAddr, _>(Scope::Global, |_| {
            Some("x".into())
        }))
        .build()
        .unwrap();

    let err = pipeline
        .invoke(TOOL, input(), InvokeOptions::new())
        .await
        .unwrap_err();

    assert_eq!(err.code(), "global_provider_read_only");
}

#[tokio::test]
async fn the_context_records_the_per_call_providers_the_tool_read_and_nothing_else() {
    /// Reads both keys at `will_authorize` and records what the tool read at `will_audit`.
    struct Observe(Arc<std::sync::Mutex<Vec<ProviderRequirement>>>);

    #[hook]
    impl Hook for Observe {
        fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
            let _ = ctx.try_get::<RemoteAddr>();
            let _ = ctx.try_get::<AllowedHosts>();
            Ok(())
        }

        fn will_audit(&self, ctx: &mut ToolInvokeContext) -> HookResult {
            *self.0.lock().unwrap() = ctx.tool_provider_reads();
            Ok(())
        }
    }

    let reads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let pipeline = Pipeline::builder()
        .tool(tool(|ctx| {
            let _global = ctx.get::<Checked>()?;
            let _request = ctx.get::<RemoteAddr>()?;
            let _absent = ctx.try_get::<AllowedHosts>();
            Ok(json!(null))
        }))
        .provide::<Checked>(AtomicUsize::new(0))
        .hook(Observe(Arc::clone(&reads)))
        .build()
        .unwrap();

    pipeline
        .invoke(
            TOOL,
            input(),
            InvokeOptions::new().provide::<RemoteAddr>("10.0.0.7".into()),
        )
        .await
        .unwrap();

    assert_eq!(
        *reads.lock().unwrap(),
        vec![
            ProviderRequirement::of::<RemoteAddr>(),
            ProviderRequirement::of::<AllowedHosts>()
        ],
        "the request value and the absent key count; the global one and the hook's reads do not"
    );
}
