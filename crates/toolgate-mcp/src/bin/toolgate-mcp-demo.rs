//! `toolgate-mcp-demo`: a small MCP server that serves demo tools through a toolgate
//! pipeline with an authorization rule, a per-user rate limit and a concurrency limit.
//! The integration tests, the import test and the Python SDK check run it as a child
//! process.
//!
//! ```text
//! toolgate-mcp-demo stdio                 # one MCP connection over stdin/stdout
//! toolgate-mcp-demo http 127.0.0.1:0      # streamable HTTP at /mcp; prints `listening on http://ADDR/mcp`
//! ```
//!
//! Environment: `TOOLGATE_DEMO_USER` and `TOOLGATE_DEMO_ROLES` (comma-separated) name the
//! stdio principal; over HTTP the principal is the bearer token (`Authorization: Bearer
//! alice`, roles from `x-demo-roles`). `TOOLGATE_DEMO_RATE` sets how many calls of a
//! `metered` tool one user may make per minute (default 2). `TOOLGATE_DEMO_TOKEN`, when
//! set, is required as the bearer token over HTTP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolgate_core::tool::{ToolAnnotations, tool_fn_with_context};
use toolgate_core::{
    Hook, HookResult, Pipeline, ToolError, ToolInvokeContext, User, hook, tool_fn,
};
use toolgate_mcp::{ListFilter, McpServer};

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct EchoInput {
    /// The text to return.
    #[garde(length(max = 1000))]
    text: String,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct AddInput {
    #[garde(range(min = -1000, max = 1000))]
    a: i64,
    #[garde(range(min = -1000, max = 1000))]
    b: i64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Sum {
    sum: i64,
}

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
struct SlowInput {
    /// How long to work, in milliseconds.
    #[garde(range(max = 600_000))]
    ms: u64,
}

/// Denies tools tagged `destructive` to callers without the `operator` role.
struct OperatorsOnly;

#[hook]
impl Hook for OperatorsOnly {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.tool().has_tag("destructive") && !ctx.user().has_role("operator") {
            let reason = format!("`{}` needs the operator role", ctx.tool_name());
            return ctx.abort(reason, "forbidden", 403);
        }
        Ok(())
    }
}

/// At most `limit` calls of `metered` tools per user per minute.
struct RateLimit {
    limit: u32,
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

#[hook]
impl Hook for RateLimit {
    fn will_acquire_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !ctx.tool().has_tag("metered") {
            return Ok(());
        }
        let now = Instant::now();
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let (start, used) = windows.entry(ctx.user().id.clone()).or_insert((now, 0));
        if now.duration_since(*start) >= Duration::from_secs(60) {
            (*start, *used) = (now, 0);
        }
        if *used >= self.limit {
            let wait = Duration::from_secs(60).saturating_sub(now.duration_since(*start));
            return ctx.retry_after(wait, "rate limited");
        }
        *used += 1;
        Ok(())
    }
}

/// One call at a time of tools tagged `limited`; the permit lives in the context, so it
/// comes back on every path, cancellation included.
struct OneAtATime(Arc<Semaphore>);

#[hook]
impl Hook for OneAtATime {
    fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !ctx.tool().has_tag("limited") {
            return Ok(());
        }
        match Arc::clone(&self.0).try_acquire_owned() {
            Ok(permit) => {
                ctx.hold(self, permit);
                Ok(())
            }
            Err(_) => Err(ToolError::RetryAfter {
                delay: Duration::from_millis(500),
                reason: "too many concurrent calls".to_owned(),
                code: "overloaded".into(),
                status: 503,
            }
            .into()),
        }
    }

    fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.release::<OwnedSemaphorePermit>(self);
        Ok(())
    }
}

fn pipeline(rate: u32) -> Result<Pipeline, Box<dyn std::error::Error>> {
    Ok(Pipeline::builder()
        .tool(
            tool_fn(
                "echo",
                "Returns the text it is given.",
                |input: EchoInput| async move { Ok::<_, ToolError>(input.text) },
            )
            .annotations(ToolAnnotations::READ_ONLY),
        )
        .tool(
            tool_fn(
                "add",
                "Adds two integers between -1000 and 1000.",
                |input: AddInput| async move {
                    Ok::<_, ToolError>(Sum {
                        sum: input.a + input.b,
                    })
                },
            )
            .annotations(ToolAnnotations::READ_ONLY),
        )
        .tool(
            tool_fn(
                "slow",
                "Works for `ms` milliseconds; one call at a time.",
                |input: SlowInput| async move {
                    tokio::time::sleep(Duration::from_millis(input.ms)).await;
                    Ok::<_, ToolError>(format!("worked {} ms", input.ms))
                },
            )
            .tag("limited"),
        )
        .tool(
            tool_fn(
                "metered_ping",
                "Answers pong; rate limited per user.",
                |_: ()| async move { Ok::<_, ToolError>("pong") },
            )
            .tag("metered"),
        )
        .tool(
            tool_fn(
                "delete_all",
                "Deletes everything (operators only; here it deletes nothing).",
                |_: ()| async move { Ok::<_, ToolError>("deleted nothing") },
            )
            .tag("destructive")
            .annotations(ToolAnnotations {
                destructive: true,
                ..ToolAnnotations::default()
            }),
        )
        .tool(
            tool_fn(
                "admin_stats",
                "Server statistics, listed to admins only.",
                |_: ()| async move { Ok::<_, ToolError>("all quiet") },
            )
            .tag("admin"),
        )
        .tool(tool_fn(
            "pid",
            "The server's process id.",
            |_: ()| async move { Ok::<_, ToolError>(std::process::id()) },
        ))
        .tool(tool_fn_with_context(
            "whoami",
            "The caller's user id as the server sees it.",
            |_: (), ctx: &ToolInvokeContext| {
                Box::pin(async move { Ok::<_, ToolError>(ctx.user().id.clone()) })
            },
        ))
        .tool(tool_fn_with_context(
            "session",
            "The MCP session this call belongs to.",
            |_: (), ctx: &ToolInvokeContext| {
                Box::pin(async move {
                    Ok::<_, ToolError>(ctx.session_id().unwrap_or_default().to_owned())
                })
            },
        ))
        .hook(OperatorsOnly)
        .hook(RateLimit {
            limit: rate,
            windows: Mutex::new(HashMap::new()),
        })
        .hook(OneAtATime(Arc::new(Semaphore::new(1))))
        .build()?)
}

fn roles(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rate = std::env::var("TOOLGATE_DEMO_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let user =
        User::new(std::env::var("TOOLGATE_DEMO_USER").unwrap_or_else(|_| "local".to_owned()))
            .with_roles(roles(
                &std::env::var("TOOLGATE_DEMO_ROLES").unwrap_or_default(),
            ));
    let server = McpServer::new(pipeline(rate)?)
        .server_info("toolgate-mcp-demo", env!("CARGO_PKG_VERSION"))
        .default_user(user)
        .list_filter(ListFilter::new(|tool, user| {
            !tool.has_tag("admin") || user.has_role("admin")
        }));

    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["stdio"] => server.serve_stdio().await?,
        ["http", addr] => {
            let required = std::env::var("TOOLGATE_DEMO_TOKEN").ok();
            let server = server.identify(move |parts| {
                let token = parts
                    .headers
                    .get(http::header::AUTHORIZATION)?
                    .to_str()
                    .ok()?
                    .strip_prefix("Bearer ")?;
                if required.as_deref().is_some_and(|r| r != token) {
                    return Some(User::new("rejected-token"));
                }
                let roles = parts
                    .headers
                    .get("x-demo-roles")
                    .and_then(|v| v.to_str().ok())
                    .map(roles)
                    .unwrap_or_default();
                Some(User::new(token).with_roles(roles))
            });
            let config = rmcp::transport::StreamableHttpServerConfig::default()
                .with_sse_keep_alive(Some(Duration::from_millis(200)));
            let app = axum::Router::new().nest_service("/mcp", server.http_service(config));
            let listener = tokio::net::TcpListener::bind(addr).await?;
            println!("listening on http://{}/mcp", listener.local_addr()?);
            // Without TCP_NODELAY a reply written in pieces waits for the client's delayed
            // ACK (about 40 ms per call on a kept-alive connection).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app).await?;
        }
        _ => {
            eprintln!("usage: toolgate-mcp-demo stdio | toolgate-mcp-demo http ADDR");
            std::process::exit(2);
        }
    }
    Ok(())
}
