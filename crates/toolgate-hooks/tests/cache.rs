//! The result cache: hits, TTLs, what is cached, scoping, and errors.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_core::tool::{ErasedTool, ToolAnnotations, ToolSource};
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_hooks::cache::{MokaCache, NO_CACHE_TAG, PUBLIC_RESULTS_TAG, ResultCache, ScopeBy};
use toolgate_hooks::redaction::Redaction;

/// A tool whose output names the caller, counting its executions.
fn owner_tool(
    name: &str,
    runs: Arc<AtomicUsize>,
    configure: impl FnOnce(&mut toolgate_core::tool::ToolDefinition),
) -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new(name, "Names its caller.", json!({}), move |input, ctx| {
        runs.fetch_add(1, Ordering::SeqCst);
        let out = json!({ "owner": ctx.user().id, "input": input });
        Box::pin(async move { Ok::<_, ToolError>(out) })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    configure(tool.definition_mut());
    Arc::new(tool)
}

fn as_user(id: &str) -> InvokeOptions {
    InvokeOptions::new().user(User::new(id))
}

fn pipeline(tool: Arc<dyn ErasedTool>, cache: ResultCache) -> Pipeline {
    Pipeline::builder().tool(tool).hook(cache).build().unwrap()
}

#[tokio::test]
async fn a_hit_skips_execution_and_is_still_redacted_and_audited() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let mut tool = JsonTool::new("contact", "", json!({}), move |_, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok::<_, ToolError>(json!("mail ann@example.com")) })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    let backend = Arc::new(MokaCache::default());
    let (audit, sink) = common::memory_audit();
    let p = Pipeline::builder()
        .tool(tool)
        .hook(
            ResultCache::builder()
                .shared_backend(backend.clone())
                .build(),
        )
        .hook(Redaction::new())
        .hook(audit)
        .build()
        .unwrap();
    for _ in 0..2 {
        let out = p
            .invoke("contact", json!({}), as_user("ann"))
            .await
            .unwrap();
        assert_eq!(out, json!("mail [REDACTED:email]"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let cached: Vec<String> = sink
        .records()
        .iter()
        .map(|r| r.metadata["cache"].to_string())
        .collect();
    assert_eq!(cached, ["\"miss\"", "\"hit\""]);
    assert_eq!(sink.records()[1].attempts, 0, "a hit never runs the tool");
    // Redaction ran before the write, so the entry itself is redacted.
    assert_eq!(backend.values(), [json!("mail [REDACTED:email]")]);
}

#[tokio::test(start_paused = true)]
async fn entries_expire_after_their_tool_ttl() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("t", runs.clone(), |_| {}),
        ResultCache::builder()
            .tool_ttl("t", Duration::from_secs(10))
            .build(),
    );
    p.invoke("t", json!(1), as_user("a")).await.unwrap();
    tokio::time::advance(Duration::from_secs(9)).await;
    p.invoke("t", json!(1), as_user("a")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    p.invoke("t", json!(1), as_user("a")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_ttl_too_long_for_the_clock_caches_for_good_instead_of_panicking() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("t", runs.clone(), |_| {}),
        ResultCache::builder().ttl(Duration::MAX).build(),
    );
    p.invoke("t", json!(1), as_user("a")).await.unwrap();
    tokio::time::advance(Duration::from_secs(365 * 24 * 3600)).await;
    p.invoke("t", json!(1), as_user("a")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "still a hit a year on");
}

#[tokio::test]
async fn only_read_only_tools_from_this_program_are_cached_by_default() {
    type Configure = fn(&mut toolgate_core::tool::ToolDefinition);
    let cases: [(&str, Configure, usize); 3] = [
        ("local-read-only", |_| {}, 1),
        ("writes", |d| d.annotations = ToolAnnotations::default(), 3),
        (
            "remote-read-only",
            |d| {
                d.source = ToolSource::Mcp {
                    server: "far".into(),
                }
            },
            3,
        ),
    ];
    for (name, configure, expected_runs) in cases {
        let runs = Arc::new(AtomicUsize::new(0));
        let p = pipeline(
            owner_tool(name, runs.clone(), configure),
            ResultCache::new(),
        );
        for _ in 0..3 {
            p.invoke(name, json!({}), as_user("a")).await.unwrap();
        }
        assert_eq!(runs.load(Ordering::SeqCst), expected_runs, "{name}");
    }
}

#[tokio::test]
async fn include_and_exclude_override_the_default() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("w", runs.clone(), |d| {
            d.annotations = ToolAnnotations::default()
        }),
        ResultCache::builder().include("w").build(),
    );
    p.invoke("w", json!(1), as_user("a")).await.unwrap();
    p.invoke("w", json!(1), as_user("a")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("r", runs.clone(), |_| {}),
        ResultCache::builder().exclude("r").build(),
    );
    p.invoke("r", json!(1), as_user("a")).await.unwrap();
    p.invoke("r", json!(1), as_user("a")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn errors_are_never_cached_so_the_next_call_executes() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let mut tool = JsonTool::new("flaky", "", json!({}), move |_, _| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n == 0 {
                Err(ToolError::execution("upstream down"))
            } else {
                Ok(json!("fine"))
            }
        })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    let p = pipeline(Arc::new(tool), ResultCache::new());
    assert!(p.invoke("flaky", json!({}), as_user("a")).await.is_err());
    assert_eq!(
        p.invoke("flaky", json!({}), as_user("a")).await.unwrap(),
        json!("fine")
    );
    assert_eq!(
        p.invoke("flaky", json!({}), as_user("a")).await.unwrap(),
        json!("fine")
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "error, then an execution, then a hit"
    );
}

#[tokio::test]
async fn public_results_are_shared_and_tenant_scope_shares_within_a_tenant_only() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("pub", runs.clone(), |d| {
            d.tags.push(PUBLIC_RESULTS_TAG.into())
        }),
        ResultCache::new(),
    );
    let first = p.invoke("pub", json!(1), as_user("a")).await.unwrap();
    let second = p.invoke("pub", json!(1), as_user("b")).await.unwrap();
    assert_eq!((runs.load(Ordering::SeqCst), &first), (1, &second));

    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("t", runs.clone(), |_| {}),
        ResultCache::builder().scope_by(ScopeBy::Tenant).build(),
    );
    let in_acme = |id: &str| InvokeOptions::new().user(User::new(id).with_tenant("acme"));
    let in_globex = |id: &str| InvokeOptions::new().user(User::new(id).with_tenant("globex"));
    p.invoke("t", json!(1), in_acme("a")).await.unwrap();
    p.invoke("t", json!(1), in_acme("b")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "same tenant shares");
    let other = p.invoke("t", json!(1), in_globex("c")).await.unwrap();
    assert_eq!(
        other["owner"], "c",
        "another tenant never sees acme's entry"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_tool_tagged_no_cache_runs_every_time_even_when_a_rule_includes_it() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("state", runs.clone(), |d| d.tags.push(NO_CACHE_TAG.into())),
        ResultCache::builder()
            .tool_ttl("state", Duration::from_secs(60))
            .build(),
    );
    for _ in 0..3 {
        p.invoke("state", json!(1), as_user("a")).await.unwrap();
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "no call was served from the cache"
    );
}

#[tokio::test]
async fn a_new_tool_version_never_reads_an_older_versions_entries() {
    let backend = Arc::new(MokaCache::default());
    let runs = Arc::new(AtomicUsize::new(0));
    for version in ["1", "2"] {
        let p = pipeline(
            owner_tool("t", runs.clone(), |d| d.version = version.into()),
            ResultCache::builder()
                .shared_backend(backend.clone())
                .build(),
        );
        p.invoke("t", json!(1), as_user("a")).await.unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn field_order_of_the_input_does_not_change_the_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(owner_tool("t", runs.clone(), |_| {}), ResultCache::new());
    let a: Value = serde_json::from_str(r#"{"x": 1, "y": 2}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"y": 2, "x": 1}"#).unwrap();
    p.invoke("t", a, as_user("u")).await.unwrap();
    p.invoke("t", b, as_user("u")).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_made_with_no_store_is_neither_answered_from_nor_stored_in_the_cache() {
    let runs = Arc::new(AtomicUsize::new(0));
    let p = pipeline(
        owner_tool("r", Arc::clone(&runs), |_| {}),
        ResultCache::new(),
    );
    let no_store = || as_user("a").no_store();
    p.invoke("r", json!(1), no_store()).await.unwrap();
    p.invoke("r", json!(1), as_user("a")).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the no-store result was not stored"
    );
    p.invoke("r", json!(1), no_store()).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "nor read: the tool ran again"
    );
    p.invoke("r", json!(1), as_user("a")).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the stored result still serves others"
    );
}

#[tokio::test]
async fn a_result_the_tool_marks_no_store_is_not_stored() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    // Asks "the user" on even runs: that result depends on the answer, not the input.
    let mut tool = JsonTool::new("greet", "", json!({}), move |_, ctx| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n.is_multiple_of(2) {
            ctx.set_no_store();
        }
        Box::pin(async move { Ok::<_, ToolError>(json!(format!("answer {n}"))) })
    });
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    let p = pipeline(Arc::new(tool), ResultCache::new());
    let call = || p.invoke("greet", json!({}), as_user("a"));
    assert_eq!(call().await.unwrap(), json!("answer 0"));
    assert_eq!(
        call().await.unwrap(),
        json!("answer 1"),
        "run 0 was not stored"
    );
    assert_eq!(call().await.unwrap(), json!("answer 1"), "run 1 was");
}

#[tokio::test]
async fn a_tool_whose_results_are_not_cached_has_no_cache_in_its_plan() {
    let runs = Arc::new(AtomicUsize::new(0));
    let read_only = owner_tool("lookup", Arc::clone(&runs), |_| {});
    let writes = owner_tool("send", Arc::clone(&runs), |d| {
        d.annotations = ToolAnnotations::default();
    });
    let tagged = owner_tool("fresh", Arc::clone(&runs), |d| {
        d.tags.push(NO_CACHE_TAG.to_owned());
    });
    let p = Pipeline::builder()
        .tool(read_only)
        .tool(writes)
        .tool(tagged)
        .hook(ResultCache::builder().build())
        .build()
        .unwrap();
    let planned = |tool: &str| {
        p.plan(tool)
            .unwrap()
            .iter()
            .any(|(_, hooks)| hooks.iter().any(|h| h == "result_cache"))
    };
    assert!(planned("lookup"), "a read-only tool is cached");
    assert!(!planned("send"), "a tool that is not read-only is not");
    assert!(!planned("fresh"), "a tool tagged {NO_CACHE_TAG} is not");
    // And a call of a tool left out still runs every time.
    for _ in 0..2 {
        p.invoke("send", json!({}), as_user("ann")).await.unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Key `n` of a tool `big`, for filling a backend directly.
fn nth_key(n: usize) -> toolgate_hooks::cache::CacheKey {
    let tool: toolgate_core::tool::ToolDefinition = serde_json::from_value(json!({
        "name": "big", "description": "", "version": "1", "input_schema": {}
    }))
    .unwrap();
    let scope = toolgate_hooks::cache::KeyScope::User("ann".into());
    toolgate_hooks::cache::cache_key(&tool, &scope, &json!({ "n": n }))
}

#[tokio::test]
async fn the_memory_cache_is_bounded_in_bytes_however_large_the_results() {
    use toolgate_hooks::cache::CacheBackend;
    const MIB: usize = 1024 * 1024;
    let cache = MokaCache::default();
    let hour = Duration::from_secs(3600);
    // 100 results of 1 MiB: far fewer entries than a count would allow, and 100 MiB.
    let large = json!("x".repeat(MIB));
    for n in 0..100 {
        cache.put(&nth_key(n), large.clone(), hour).await.unwrap();
    }
    cache.run_pending_tasks().await;
    let held = cache.values().len();
    assert!(
        held * MIB <= 64 * MIB,
        "{held} results of 1 MiB held, past 64 MiB"
    );
    assert!(held > 0, "results of 1 MiB are still cached");
    assert!(cache.weighted_size() <= MokaCache::DEFAULT_MAX_BYTES);
    // Small results are still cached next to them.
    cache
        .put(&nth_key(1000), json!({"small": true}), hour)
        .await
        .unwrap();
    cache.run_pending_tasks().await;
    assert_eq!(
        cache.get(&nth_key(1000)).await.unwrap(),
        Some(json!({"small": true}))
    );
}

#[tokio::test]
async fn a_result_larger_than_the_largest_entry_is_not_stored() {
    use toolgate_hooks::cache::CacheBackend;
    let cache = MokaCache::builder()
        .max_bytes(64 * 1024)
        .max_entry_bytes(8 * 1024)
        .build();
    let hour = Duration::from_secs(3600);
    cache.put(&nth_key(1), json!("small"), hour).await.unwrap();
    cache
        .put(&nth_key(2), json!("x".repeat(16 * 1024)), hour)
        .await
        .unwrap();
    assert_eq!(cache.get(&nth_key(1)).await.unwrap(), Some(json!("small")));
    assert_eq!(cache.get(&nth_key(2)).await.unwrap(), None);
    assert_eq!(cache.oversize_skipped(), 1);
    // A larger result under a key drops the older one: it would be served in its place.
    cache
        .put(&nth_key(1), json!("x".repeat(16 * 1024)), hour)
        .await
        .unwrap();
    assert_eq!(cache.get(&nth_key(1)).await.unwrap(), None);
    // Filled with entries of 4 KiB, the cache stays within its 64 KiB.
    for n in 10..100 {
        cache
            .put(&nth_key(n), json!("x".repeat(4 * 1024)), hour)
            .await
            .unwrap();
    }
    cache.run_pending_tasks().await;
    assert!(
        cache.weighted_size() <= 64 * 1024,
        "{}",
        cache.weighted_size()
    );
    assert!(cache.entry_count() >= 8, "{}", cache.entry_count());
}

#[tokio::test]
async fn a_small_capacity_still_stores_small_results() {
    use toolgate_hooks::cache::CacheBackend;
    // A sixteenth of 4 KiB (256 bytes) is less than any entry weighs with its overhead
    // and key: such a cache stored nothing.
    let cache = MokaCache::builder().max_bytes(4 * 1024).build();
    assert_eq!(cache.max_entry_bytes(), 4 * 1024);
    let hour = Duration::from_secs(3600);
    cache.put(&nth_key(1), json!("small"), hour).await.unwrap();
    assert_eq!(cache.get(&nth_key(1)).await.unwrap(), Some(json!("small")));
    assert_eq!(cache.oversize_skipped(), 0);
    // Filled, it stays within its 4 KiB.
    for n in 10..100 {
        cache.put(&nth_key(n), json!(n), hour).await.unwrap();
    }
    cache.run_pending_tasks().await;
    assert!(
        cache.weighted_size() <= 4 * 1024,
        "{}",
        cache.weighted_size()
    );
    assert!(cache.entry_count() > 0);
    // Below the least default, the largest entry is the whole capacity.
    let tiny = MokaCache::builder().max_bytes(1024).build();
    assert_eq!(tiny.max_entry_bytes(), 1024);
    tiny.put(&nth_key(1), json!(1), hour).await.unwrap();
    assert_eq!(tiny.get(&nth_key(1)).await.unwrap(), Some(json!(1)));
}

#[tokio::test]
async fn a_cache_by_entry_count_keeps_its_count_and_the_default_bytes() {
    use toolgate_hooks::cache::CacheBackend;
    let cache = MokaCache::new(3);
    assert_eq!(cache.max_bytes(), MokaCache::DEFAULT_MAX_BYTES);
    let hour = Duration::from_secs(3600);
    for n in 0..10 {
        cache.put(&nth_key(n), json!(n), hour).await.unwrap();
    }
    cache.run_pending_tasks().await;
    assert!(cache.entry_count() <= 3, "{}", cache.entry_count());
    assert!(cache.entry_count() > 0);
}

#[tokio::test]
async fn a_result_of_many_small_items_weighs_what_it_holds_in_memory_not_its_text() {
    use toolgate_hooks::cache::CacheBackend;
    let cache = MokaCache::default();
    // About 20 KB as JSON text, but 10,000 values in memory (320 KB, or 720 KB when
    // serde_json's features make a value larger): within the largest entry either way.
    let many = Value::Array(vec![json!(0); 10_000]);
    cache
        .put(&nth_key(1), many, Duration::from_secs(3600))
        .await
        .unwrap();
    cache.run_pending_tasks().await;
    let in_memory = 10_000 * std::mem::size_of::<Value>() as u64;
    assert!(
        cache.weighted_size() >= in_memory,
        "weighs {} for {in_memory} bytes of values",
        cache.weighted_size()
    );
}
