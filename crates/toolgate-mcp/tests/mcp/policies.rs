//! toolgate's built-in policies (toolgate-hooks) on tools imported from an upstream MCP
//! server and served again over streamable HTTP: authorization filtering the listing and
//! refusing calls, a JSON-Schema check before anything goes upstream, and a rate limit.

use crate::common::{DEMO, call, http_client, is_error, text, within};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{Pipeline, User};
use toolgate_hooks::authorize::{Authorize, Effect, Rule, Rules};
use toolgate_hooks::quota::{Quota, Rate};
use toolgate_hooks::validation::{SchemaCheck, Validation};
use toolgate_mcp::{ListFilter, McpServer, Upstream, UpstreamConfig};

#[tokio::test]
async fn builtin_policies_guard_imported_tools_served_over_http() {
    let upstream = within(
        30,
        "import",
        Upstream::connect(
            UpstreamConfig::stdio("demo", DEMO, ["stdio"]).env("TOOLGATE_DEMO_RATE", "1000"),
        ),
    )
    .await
    .expect("imported");

    // Everyone may call the imported tools except `pid`, which only admins may see or call.
    let authorize = Authorize::new(
        Rules::new(Effect::Allow)
            .rule(Rule::deny().tool("pid"))
            .rule(Rule::deny().tool("admin_stats")),
    );
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let builder = Pipeline::builder()
        .registry(tools)
        .hook(authorize.clone())
        .hook(Quota::builder(Rate::per_minute(3).expect("a rate")).build())
        .hook(Validation::builder().schema_check(SchemaCheck::All).build());
    let filter = {
        let authorize = authorize.clone();
        ListFilter::new(move |tool, user| authorize.can_call(user, tool))
    };
    let server = McpServer::new(builder.build().expect("built"))
        .identify(|parts| {
            let token = parts.headers.get("authorization")?.to_str().ok()?;
            Some(User::new(token.strip_prefix("Bearer ")?))
        })
        .list_filter(filter);

    let shutdown = CancellationToken::new();
    let config = rmcp::transport::StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token());
    let app = axum::Router::new().nest_service("/mcp", server.http_service(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("bound"));
    let stop = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    });

    let client = http_client(&url, Some("dana"), None).await;
    let tools = within(20, "tools/list", client.peer().list_all_tools())
        .await
        .expect("listed");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"echo") && !names.contains(&"pid"),
        "{names:?}"
    );
    let error = call(&client, "pid", json!({}))
        .await
        .expect_err("pid is hidden, so unknown");
    assert!(error.to_string().contains("unknown tool `pid`"), "{error}");

    // The imported tool's JSON Schema is checked here, before the call goes upstream.
    let result = call(&client, "echo", json!({"text": 42}))
        .await
        .expect("answered");
    assert!(is_error(&result));
    assert!(
        text(&result).starts_with("invalid arguments: argument `text`"),
        "{}",
        text(&result)
    );

    // The rejected call above took one of the three units: the quota runs before validation.
    for _ in 0..2 {
        let result = call(&client, "echo", json!({"text": "ok"}))
            .await
            .expect("answered");
        assert_eq!(text(&result), "ok");
    }
    let result = call(&client, "echo", json!({"text": "over"}))
        .await
        .expect("answered");
    assert!(is_error(&result));
    let message = text(&result);
    assert!(
        message.starts_with("rate limited") && message.contains("retry after"),
        "{message}"
    );
    shutdown.cancel();
}
