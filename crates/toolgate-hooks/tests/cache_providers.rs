//! The result cache and per-call providers: a result that depends on a request's or a
//! session's values is never served to another call, unless the key holds those values or
//! the owner declared the result independent of them. And what capacity a hit and a
//! refused input spend (capacity comes before input and cache in stage order).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use garde::Validate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_core::external::TypeMapKey;
use toolgate_core::tool::{ErasedTool, ToolAnnotations, tool_fn};
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_hooks::cache::ResultCache;
use toolgate_hooks::partition::Partition;
use toolgate_hooks::quota::{Quota, Rate};

/// Where the request came from: a request-scoped provider the host binds.
struct RemoteAddr;
impl TypeMapKey for RemoteAddr {
    type Value = String;
}

/// A deployment-wide setting: a global provider.
struct Motd;
impl TypeMapKey for Motd {
    type Value = String;
}

/// A read-only tool that answers with the caller's address (and the global message, when
/// bound), counting its runs.
fn whoami(runs: Arc<AtomicUsize>) -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new("whoami", "Names your address.", json!({}), move |_, ctx| {
        runs.fetch_add(1, Ordering::SeqCst);
        let addr = ctx.try_get::<RemoteAddr>().map(|a| a.to_string());
        let motd = ctx.try_get::<Motd>().map(|m| m.to_string());
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, ToolError>(json!({ "addr": addr, "motd": motd }))
        })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    Arc::new(tool)
}

fn from(addr: &str) -> InvokeOptions {
    InvokeOptions::new()
        .user(User::new("ann"))
        .provide::<RemoteAddr>(addr.to_owned())
}

async fn addr_of(pipeline: &Pipeline, options: InvokeOptions) -> (Value, Value) {
    let invocation = pipeline.invoke_detailed("whoami", json!({}), options).await;
    let out = invocation.result.unwrap();
    (out["addr"].clone(), invocation.metadata["cache"].clone())
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_reads_a_request_provider_is_never_served_another_requests_result() {
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(whoami(Arc::clone(&runs)))
        .provide::<Motd>("hello".into())
        .hook(ResultCache::new())
        .build()
        .unwrap();

    let first = addr_of(&pipeline, from("10.0.0.1")).await;
    let second = addr_of(&pipeline, from("10.0.0.2")).await;
    let again = addr_of(&pipeline, from("10.0.0.1")).await;

    assert_eq!(first, (json!("10.0.0.1"), json!("miss")));
    assert_eq!(second, (json!("10.0.0.2"), json!("miss")));
    assert_eq!(again, (json!("10.0.0.1"), json!("miss")), "never stored");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn concurrent_identical_calls_are_not_handed_a_result_that_read_request_values() {
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(whoami(Arc::clone(&runs)))
        .provide::<Motd>("hello".into())
        .hook(ResultCache::new())
        .build()
        .unwrap();

    let (a, b) = tokio::join!(
        addr_of(&pipeline, from("10.0.0.1")),
        addr_of(&pipeline, from("10.0.0.2")),
    );

    assert_eq!(a.0, json!("10.0.0.1"));
    assert_eq!(b.0, json!("10.0.0.2"), "the follower ran the tool itself");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn with_the_provider_in_the_key_results_are_cached_per_value() {
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(whoami(Arc::clone(&runs)))
        .provide::<Motd>("hello".into())
        .hook(ResultCache::builder().key_includes::<RemoteAddr>().build())
        .build()
        .unwrap();

    let first = addr_of(&pipeline, from("10.0.0.1")).await;
    let other = addr_of(&pipeline, from("10.0.0.2")).await;
    let again = addr_of(&pipeline, from("10.0.0.1")).await;

    assert_eq!(first, (json!("10.0.0.1"), json!("miss")));
    assert_eq!(other, (json!("10.0.0.2"), json!("miss")));
    assert_eq!(again, (json!("10.0.0.1"), json!("hit")));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_result_declared_independent_of_the_provider_is_cached_and_shared() {
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(whoami(Arc::clone(&runs)))
        .provide::<Motd>("hello".into())
        .hook(
            ResultCache::builder()
                .independent_of::<RemoteAddr>()
                .build(),
        )
        .build()
        .unwrap();

    let first = addr_of(&pipeline, from("10.0.0.1")).await;
    let second = addr_of(&pipeline, from("10.0.0.2")).await;

    assert_eq!(first, (json!("10.0.0.1"), json!("miss")));
    assert_eq!(
        second,
        (json!("10.0.0.1"), json!("hit")),
        "the owner said the address does not matter"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_reads_only_global_providers_is_cached() {
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(whoami(Arc::clone(&runs)))
        .provide::<Motd>("hello".into())
        .provide::<RemoteAddr>("gateway".into())
        .hook(ResultCache::new())
        .build()
        .unwrap();
    let ann = || InvokeOptions::new().user(User::new("ann"));

    let first = addr_of(&pipeline, ann()).await;
    let second = addr_of(&pipeline, ann()).await;

    assert_eq!(first, (json!("gateway"), json!("miss")));
    assert_eq!(second, (json!("gateway"), json!("hit")));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_looks_up_a_provider_no_scope_binds_is_not_stored() {
    let runs = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .tool(whoami(Arc::clone(&runs)))
        .hook(ResultCache::new())
        .build()
        .unwrap();
    let ann = || InvokeOptions::new().user(User::new("ann"));

    addr_of(&pipeline, ann()).await;
    let second = addr_of(&pipeline, ann()).await;

    assert_eq!(
        second,
        (Value::Null, json!("miss")),
        "its output may depend on the absence, which the next call may not share"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[derive(Deserialize, Validate, JsonSchema)]
struct Square {
    #[garde(range(min = 0, max = 100))]
    n: i64,
}

#[tokio::test(start_paused = true)]
async fn a_cache_hit_and_a_refused_input_each_spend_a_rate_limit_unit() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let square = tool_fn("square", "Squares n.", move |s: Square| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(s.n * s.n) }
    })
    .annotations(ToolAnnotations::READ_ONLY);
    let pipeline = Pipeline::builder()
        .tool(square)
        .hook(ResultCache::new())
        .hook(
            Quota::builder(Rate::per_minute(3).unwrap())
                .partition(Partition::User)
                .build(),
        )
        .build()
        .unwrap();
    let ann = || InvokeOptions::new().user(User::new("ann"));

    let miss = pipeline
        .invoke_detailed("square", json!({"n": 7}), ann())
        .await;
    let hit = pipeline
        .invoke_detailed("square", json!({"n": 7}), ann())
        .await;
    let refused = pipeline.invoke("square", json!({"n": 999}), ann()).await;
    let limited = pipeline.invoke("square", json!({"n": 7}), ann()).await;

    assert_eq!(miss.metadata["cache"], "miss");
    assert_eq!(hit.metadata["cache"], "hit");
    assert_eq!(refused.unwrap_err().code(), "invalid_input");
    assert_eq!(
        limited.unwrap_err().code(),
        "rate_limited",
        "capacity comes before input and cache: the hit and the refusal took a unit each"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
