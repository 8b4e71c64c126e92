//! MCP server: a toolgate pipeline served over streamable HTTP inside an axum router,
//! called once by an MCP client, then shut down.
//!
//! Every `tools/call` runs through the pipeline, so the hook below applies to MCP callers
//! exactly as it does to local ones. Run with `cargo run --example mcp_server`.

use std::time::Duration;

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{
    Hook, HookResult, Pipeline, ToolError, ToolInvokeContext, User, hook, tool_fn,
};
use toolgate_mcp::rmcp::ServiceExt;
use toolgate_mcp::rmcp::model::CallToolRequestParams;
use toolgate_mcp::rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use toolgate_mcp::rmcp::transport::{StreamableHttpClientTransport, StreamableHttpServerConfig};
use toolgate_mcp::{ListFilter, McpServer};

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct AddInput {
    #[garde(range(min = -1000, max = 1000))]
    a: i64,
    #[garde(range(min = -1000, max = 1000))]
    b: i64,
}

/// An object output: MCP clients get it as `structuredContent`.
#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: i64,
}

/// Only callers with a known identity may call tools.
struct NoAnonymous;

#[hook]
impl Hook for NoAnonymous {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.user().id == "anonymous" {
            return ctx.abort(
                "sign in first: send `Authorization: Bearer <name>`",
                "unauthenticated",
                401,
            );
        }
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tokio::time::timeout(Duration::from_secs(60), run())
        .await
        .map_err(|_| "the example did not finish within 60 s")?
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let pipeline = Pipeline::builder()
        .tool(
            tool_fn(
                "add",
                "Adds two integers between -1000 and 1000.",
                |i: AddInput| async move { Ok::<_, ToolError>(Sum { sum: i.a + i.b }) },
            )
            .annotations(ToolAnnotations::READ_ONLY),
        )
        .hook(NoAnonymous)
        .build()?;

    // The principal comes from the bearer token (a real host verifies it first).
    let server = McpServer::new(pipeline)
        .identify(|parts| {
            let token = parts.headers.get("authorization")?.to_str().ok()?;
            Some(User::new(token.strip_prefix("Bearer ")?))
        })
        .list_filter(ListFilter::new(|tool, user| {
            !tool.has_tag("admin") || user.has_role("admin")
        }));

    let shutdown = toolgate_core::external::CancellationToken::new();
    let config =
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
    let app = axum::Router::new()
        .route("/health", axum::routing::get(|| async { "ok" }))
        .nest_service("/mcp", server.http_service(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let serving = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
    });
    println!("serving MCP at {url}");

    // An MCP client (rmcp) calls the server once.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header("alice"),
    );
    let client = ().serve(transport).await?;
    let tools = client.peer().list_all_tools().await?;
    println!(
        "tools: {:?}",
        tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>()
    );

    let arguments = json!({"a": 2, "b": 40})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("add").with_arguments(arguments))
        .await?;
    println!("add(2, 40) -> {}", json!(result.structured_content));
    if result.structured_content != Some(json!({"sum": 42})) {
        return Err(format!("unexpected result: {result:?}").into());
    }

    let arguments = json!({"a": 2000, "b": 1})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("add").with_arguments(arguments))
        .await?;
    let message = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone());
    println!(
        "add(2000, 1) -> isError={:?}: {}",
        result.is_error,
        message.unwrap_or_default()
    );

    client.cancel().await?;
    shutdown.cancel();
    serving.await??;
    println!("shut down");
    Ok(())
}
