//! An upstream's lists are asked page by page, within bounds: an upstream that always gives
//! a next page, gives the same cursor again or lists too much fails the listing in plain
//! words naming it, at once, instead of being asked until the deadline with every page
//! kept. And each list is asked of the upstream, not answered from rmcp's response cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::hand_written::json_answer;
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_core::{InvokeOptions, ToolError};
use toolgate_mcp::UpstreamConfig;

/// `MAX_LIST_PAGES` of toolgate's MCP client.
const MAX_LIST_PAGES: usize = 1_000;
/// `MAX_LISTED` of toolgate's MCP client.
const MAX_LISTED: usize = 100_000;
/// `MAX_LISTED_BYTES` of toolgate's MCP client.
const MAX_LISTED_BYTES: usize = 64 * 1024 * 1024;
/// The length of the description of each item [`Lists::Heavy`] lists.
const HEAVY: usize = 4 * 1024 * 1024 - 1024;

/// How the upstream lists (its tools when [`Upstream::tools`], else its resources).
#[derive(Clone, Copy)]
enum Lists {
    /// One item a page, each page with a cursor to a next one, never the same.
    Endless,
    /// One item a page, each page with the same cursor to a next one.
    Circular,
    /// Pages of 10,000 items, eleven of them.
    Huge,
    /// Pages of one item with a description of [`HEAVY`] bytes, twenty of them: each
    /// within what a message can be, all of them more than toolgate takes.
    Heavy,
    /// One page with one resource named after how many lists were asked, good for an
    /// hour as the upstream says (`ttlMs`), for anyone (`cacheScope`).
    Counted,
}

/// A streamable-HTTP upstream at 2025-11-25 with tools and resources, listing as `lists`
/// has it; pages asked are counted.
struct Upstream {
    lists: Lists,
    /// Whether its tools are listed as `lists` has it (else it has none).
    tools: bool,
    /// The pages of its lists asked.
    asked: AtomicUsize,
}

impl Upstream {
    /// The answer to request `id`, a page of `what` (`tools` or `resources`).
    fn page(&self, id: &Value, what: &str) -> Response {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let item = |i: usize| match what {
            "tools" => json!({"name": format!("t{n}-{i}"), "inputSchema": {"type": "object"}}),
            _ => json!({"uri": format!("r://{n}/{i}"), "name": format!("r{n}")}),
        };
        let result = match self.lists {
            Lists::Endless => json!({what: [item(0)], "nextCursor": format!("page-{n}")}),
            Lists::Circular => json!({what: [item(0)], "nextCursor": "again"}),
            Lists::Huge => {
                let items: Vec<_> = (0..10_000).map(item).collect();
                match n {
                    1..11 => json!({what: items, "nextCursor": format!("page-{n}")}),
                    _ => json!({what: items}),
                }
            }
            Lists::Heavy => {
                let item = json!({"uri": format!("r://{n}"), "name": "r", "description": "d".repeat(HEAVY)});
                match n {
                    1..20 => json!({what: [item], "nextCursor": format!("page-{n}")}),
                    _ => json!({what: [item]}),
                }
            }
            Lists::Counted => json!({what: [item(0)], "ttlMs": 3_600_000, "cacheScope": "public"}),
        };
        json_answer(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

async fn posted(State(upstream): State<Arc<Upstream>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "resources": {}},
            "serverInfo": {"name": "lister", "version": "1"}}})),
        "tools/list" if upstream.tools => upstream.page(&id, "tools"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": []}})),
        "resources/list" => upstream.page(&id, "resources"),
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// The upstream listing as `lists` has it (its tools when `tools`), and its configuration
/// (`lister`) with a minute for every call and connection.
async fn start(lists: Lists, tools: bool) -> (Arc<Upstream>, UpstreamConfig) {
    let upstream = Arc::new(Upstream {
        lists,
        tools,
        asked: AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(posted).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(Arc::clone(&upstream));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("lister", url)
        .discover(false)
        .connect_timeout(Duration::from_secs(60))
        .call_timeout(Duration::from_secs(60));
    (upstream, config)
}

/// Lists the resources of an upstream listing them as `lists`; what the caller gets, and
/// how many pages were asked.
async fn list_resources(lists: Lists) -> (Result<Value, ToolError>, usize) {
    let (upstream, config) = start(lists, false).await;
    let (_upstream, pipeline) = imported(config).await;
    upstream.asked.store(0, Ordering::SeqCst);
    let listed = within(
        60,
        "the listing ends",
        pipeline.invoke(
            "resources.lister",
            json!({"list": "resources"}),
            InvokeOptions::new(),
        ),
    )
    .await;
    (listed, upstream.asked.load(Ordering::SeqCst))
}

/// The message of `listed`, which must be an error.
fn failure(listed: Result<Value, ToolError>) -> String {
    match listed {
        Ok(listed) => panic!("listed ({} bytes of JSON)", listed.to_string().len()),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn an_upstream_that_always_gives_a_next_page_is_asked_for_a_bounded_number() {
    let (listed, asked) = list_resources(Lists::Endless).await;
    let error = failure(listed);
    assert!(
        error.contains("MCP server `lister`") && error.contains("more than 1,000 pages"),
        "{error}"
    );
    assert_eq!(asked, MAX_LIST_PAGES, "pages asked");
}

#[tokio::test]
async fn an_upstream_that_gives_the_same_cursor_again_fails_the_listing_at_once() {
    let (listed, asked) = list_resources(Lists::Circular).await;
    let error = failure(listed);
    assert!(
        error.contains("MCP server `lister`") && error.contains("same next-page cursor twice"),
        "{error}"
    );
    // The first page gives the cursor, the second gives it again.
    assert_eq!(asked, 2, "pages asked");
}

#[tokio::test]
async fn an_upstream_that_lists_too_many_items_fails_the_listing() {
    let (listed, asked) = list_resources(Lists::Huge).await;
    let error = failure(listed);
    assert!(
        error.contains("MCP server `lister`") && error.contains("more than 100,000 resources"),
        "{error}"
    );
    // Ten pages of 10,000 are taken; the eleventh would go past the bound.
    const { assert!(10 * 10_000 <= MAX_LISTED && 11 * 10_000 > MAX_LISTED) };
    assert_eq!(asked, 11, "pages asked");
}

#[tokio::test]
async fn an_upstream_that_lists_too_many_bytes_fails_the_listing() {
    let (listed, asked) = list_resources(Lists::Heavy).await;
    let error = failure(listed);
    assert!(
        error.contains("MCP server `lister`") && error.contains("more than 64 MiB of resources"),
        "{error}"
    );
    // Sixteen pages are taken; the seventeenth would go past the bound.
    const { assert!(16 * (HEAVY + 100) <= MAX_LISTED_BYTES && 17 * HEAVY > MAX_LISTED_BYTES) };
    assert_eq!(asked, 17, "pages asked");
}

#[tokio::test]
async fn an_upstream_whose_tools_never_end_fails_its_import_at_once_naming_it() {
    let (upstream, config) = start(Lists::Endless, true).await;
    let imported = within(
        60,
        "the import ends",
        toolgate_mcp::Upstream::connect(config),
    )
    .await;
    let Err(error) = imported else {
        panic!("imported");
    };
    let error = error.to_string();
    assert!(
        error.contains("lister") && error.contains("more than 1,000 pages"),
        "{error}"
    );
    assert_eq!(upstream.asked.load(Ordering::SeqCst), MAX_LIST_PAGES);
}

/// rmcp's response cache, one per connection, kept a list for as long as the upstream's
/// `ttlMs` said: every caller on the shared connection was answered the list the first
/// was, without the upstream being asked again.
#[tokio::test]
async fn each_list_is_asked_of_the_upstream_not_answered_from_a_cache() {
    let (upstream, config) = start(Lists::Counted, false).await;
    let (_upstream, pipeline) = imported(config).await;
    let before = upstream.asked.load(Ordering::SeqCst);
    for n in 1..=2 {
        let listed = within(
            20,
            "the listing ends",
            pipeline.invoke(
                "resources.lister",
                json!({"list": "resources"}),
                InvokeOptions::new(),
            ),
        )
        .await
        .expect("listed");
        assert_eq!(
            listed["resources"][0]["name"],
            format!("r{}", before + n),
            "{listed}"
        );
    }
    assert_eq!(upstream.asked.load(Ordering::SeqCst), before + 2);
}
