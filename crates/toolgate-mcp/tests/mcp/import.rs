//! Importing tools from upstream MCP servers (the demo server in a child process, over
//! stdio or streamable HTTP), and serving them again through a toolgate pipeline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::common::{DEMO, HttpDemo, call, http_client, imported, is_error, text, within};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::tool::ToolSource;
use toolgate_core::{
    Hook, HookResult, InvokeOptions, JsonTool, Pipeline, ToolError, ToolInvokeContext, hook,
};
use toolgate_hooks::secrets::SCRUBBED;
use toolgate_mcp::rmcp::transport::streamable_http_server::session::local::SessionConfig;
use toolgate_mcp::{Backoff, McpError, McpServer, Upstream, UpstreamConfig};

/// At most `limit` calls per user of tools imported over MCP (a stand-in for the quota
/// policy of toolgate-hooks).
struct ImportedRateLimit {
    limit: u32,
    used: Mutex<HashMap<String, u32>>,
}

#[hook]
impl Hook for ImportedRateLimit {
    fn will_acquire_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !matches!(ctx.tool().source, ToolSource::Mcp { .. }) {
            return Ok(());
        }
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let count = used.entry(ctx.user().id.clone()).or_insert(0);
        if *count >= self.limit {
            return ctx.retry_after(Duration::from_millis(1500), "rate limited");
        }
        *count += 1;
        Ok(())
    }
}

fn demo_stdio(name: &str) -> UpstreamConfig {
    UpstreamConfig::stdio(name, DEMO, ["stdio"])
        .env("TOOLGATE_DEMO_RATE", "1000")
        .backoff(Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
        })
}

/// Serves `server` over streamable HTTP on an ephemeral loopback port.
async fn serve_http(server: &McpServer) -> (String, CancellationToken) {
    serve_http_with_sessions(server, SessionConfig::default()).await
}

/// [`serve_http`], with rmcp's settings of each session.
async fn serve_http_with_sessions(
    server: &McpServer,
    sessions: SessionConfig,
) -> (String, CancellationToken) {
    let shutdown = CancellationToken::new();
    let config = rmcp::transport::StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token());
    let app = axum::Router::new()
        .nest_service("/mcp", server.http_service_with_sessions(config, sessions));
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
    (url, shutdown)
}

async fn invoke(pipeline: &Pipeline, tool: &str, input: Value) -> Result<Value, ToolError> {
    within(
        30,
        "invoke",
        pipeline.invoke(tool, input, InvokeOptions::new()),
    )
    .await
}

#[tokio::test]
async fn imported_tools_are_served_again_with_a_rate_limit_applied() {
    let upstream = within(30, "import", Upstream::connect(demo_stdio("demo")))
        .await
        .expect("imported");
    let echo = upstream
        .definitions()
        .iter()
        .find(|d| d.name == "echo")
        .expect("echo is discovered");
    assert_eq!(
        echo.source,
        ToolSource::Mcp {
            server: "demo".to_owned()
        }
    );
    assert!(
        echo.annotations.read_only,
        "the upstream's hints are kept for listing"
    );
    assert_eq!(
        echo.input_schema["properties"]["text"]["type"],
        json!("string")
    );

    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let builder = Pipeline::builder().registry(tools).hook(ImportedRateLimit {
        limit: 2,
        used: Mutex::new(HashMap::new()),
    });
    let server = McpServer::new(builder.build().expect("built"));
    let (url, shutdown) = serve_http(&server).await;

    let client = http_client(&url, None, None).await;
    let tools = within(20, "tools/list", client.peer().list_all_tools())
        .await
        .expect("listed");
    let add = tools
        .iter()
        .find(|t| t.name == "add")
        .expect("the imported add is served");
    assert!(
        add.output_schema.is_some(),
        "the upstream's output schema is served"
    );

    let result = call(&client, "add", json!({"a": 1, "b": 2}))
        .await
        .expect("answered");
    assert_eq!(result.structured_content, Some(json!({"sum": 3})));
    let result = call(&client, "echo", json!({"text": "through two toolgates"}))
        .await
        .expect("answered");
    assert_eq!(text(&result), "through two toolgates");
    let result = call(&client, "echo", json!({"text": "one too many"}))
        .await
        .expect("answered");
    assert!(is_error(&result));
    assert_eq!(text(&result), "rate limited, retry after 1500 ms");

    // A wrong argument is refused before the call leaves, naming the field…
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    let error = invoke(&pipeline, "add", json!({"a": "five", "b": 0}))
        .await
        .expect_err("refused here");
    assert_eq!(error.code(), "invalid_input", "{error}");
    assert!(error.to_string().contains("argument `a`"), "{error}");
    assert!(upstream.validates_arguments("add"));

    // …and with checking off, the upstream's own refusal comes back as its tool error.
    let unchecked = within(
        30,
        "import",
        Upstream::connect(demo_stdio("demo").validate_arguments(false)),
    )
    .await
    .expect("imported");
    assert!(!unchecked.validates_arguments("add"));
    let mut tools = ToolRegistry::new();
    unchecked.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    let error = invoke(&pipeline, "add", json!({"a": 5000, "b": 0}))
        .await
        .expect_err("refused upstream");
    assert_eq!(error.code(), "tool_error", "{error}");
    assert!(error.to_string().contains("argument `a`"), "{error}");
    shutdown.cancel();
}

#[tokio::test]
async fn name_collision_is_refused_unless_a_prefix_is_configured() {
    let local = || {
        std::sync::Arc::new(JsonTool::new(
            "echo",
            "A local echo.",
            json!({"type": "object"}),
            |input, _ctx| Box::pin(async move { Ok::<_, ToolError>(input.clone()) }),
        ))
    };
    let upstream = within(30, "import", Upstream::connect(demo_stdio("demo")))
        .await
        .expect("imported");
    let mut tools = ToolRegistry::new();
    tools.register_erased(local()).expect("registered");
    match upstream.register(&mut tools) {
        Err(McpError::Collision { server, tool }) => {
            assert_eq!((server.as_str(), tool.as_str()), ("demo", "echo"));
        }
        other => panic!("expected a collision, got {other:?}"),
    }

    let prefixed = within(
        30,
        "import",
        Upstream::connect(demo_stdio("demo").prefix("demo.")),
    )
    .await
    .expect("imported");
    let mut tools = ToolRegistry::new();
    tools.register_erased(local()).expect("registered");
    let names = prefixed
        .register(&mut tools)
        .expect("no collision with a prefix");
    assert!(names.contains(&"demo.echo".to_owned()), "{names:?}");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    let out = invoke(&pipeline, "demo.echo", json!({"text": "remote"}))
        .await
        .expect("called");
    assert_eq!(
        out,
        json!({"content": [{"type": "text", "text": "remote"}]})
    );
    let out = invoke(&pipeline, "echo", json!({"text": "local"}))
        .await
        .expect("called");
    assert_eq!(out, json!({"text": "local"}));
}

#[tokio::test]
async fn stdio_upstream_killed_mid_test_is_started_again() {
    let upstream = within(30, "import", Upstream::connect(demo_stdio("demo")))
        .await
        .expect("imported");
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");

    let first = invoke(&pipeline, "pid", json!({})).await.expect("called");
    // A number is not an MCP structured output: it travels as text.
    let pid: u32 = first["content"][0]["text"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a pid");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());

    let second = within(20, "the upstream comes back", async {
        loop {
            match pipeline
                .invoke("pid", json!({}), InvokeOptions::new())
                .await
            {
                Ok(out) => break out,
                // The call that finds the connection dead fails with a transient error.
                Err(e) => assert!(e.is_retryable(), "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_ne!(second, first, "a new upstream process serves the call");
}

#[tokio::test]
async fn http_upstream_killed_and_restarted_mid_test_is_reconnected() {
    let mut demo = HttpDemo::start("127.0.0.1:0", &[]).await;
    let addr = demo.addr();
    let config = UpstreamConfig::http("remote", demo.url.clone())
        .call_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(2))
        .backoff(Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(300),
        });
    let (_upstream, pipeline) = imported(config).await;
    let first = invoke(&pipeline, "pid", json!({})).await.expect("called");

    demo.kill().await;
    let error = invoke(&pipeline, "pid", json!({}))
        .await
        .expect_err("the upstream is down");
    assert!(
        error.is_retryable(),
        "a dead upstream is a transient failure: {error}"
    );

    let _restarted = HttpDemo::start(&addr, &[]).await;
    let second = within(20, "the upstream comes back", async {
        loop {
            if let Ok(out) = pipeline
                .invoke("pid", json!({}), InvokeOptions::new())
                .await
            {
                break out;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_ne!(second, first, "the restarted process serves the call");
}

#[tokio::test]
async fn credential_comes_from_the_environment_and_the_callers_token_is_not_forwarded() {
    // Cargo sets CARGO_PKG_NAME for the test process: the credential's variable.
    let credential = std::env::var("CARGO_PKG_NAME").expect("set by cargo");
    let demo = HttpDemo::start(
        "127.0.0.1:0",
        &[("TOOLGATE_DEMO_TOKEN", credential.as_str())],
    )
    .await;
    let config = UpstreamConfig::http("remote", demo.url.clone()).credential_env("CARGO_PKG_NAME");
    let upstream = within(30, "import", Upstream::connect(config))
        .await
        .expect("imported");
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let server = McpServer::new(Pipeline::builder().registry(tools).build().expect("built"));
    let (url, shutdown) = serve_http(&server).await;

    let client = http_client(&url, Some("inbound-caller-token"), None).await;
    let result = call(&client, "whoami", json!({})).await.expect("answered");
    // The upstream answers with the bearer token it saw. Had it seen the caller's token,
    // that would come back as it is; toolgate's own credential comes back scrubbed — an
    // upstream cannot echo its credential to the caller.
    assert_eq!(
        text(&result),
        SCRUBBED,
        "the upstream sees toolgate's credential, not the caller's"
    );
    shutdown.cancel();

    let missing = UpstreamConfig::http("remote", demo.url.clone())
        .credential_env("TOOLGATE_MCP_TEST_UNSET_VARIABLE");
    match within(10, "import", Upstream::connect(missing)).await {
        Err(McpError::MissingCredential { var, .. }) => {
            assert_eq!(var, "TOOLGATE_MCP_TEST_UNSET_VARIABLE")
        }
        other => panic!("expected a missing credential, got {other:?}"),
    }
}

#[tokio::test]
async fn call_past_its_deadline_times_out_and_is_cancelled_upstream() {
    let upstream = within(
        30,
        "import",
        Upstream::connect(demo_stdio("demo").call_timeout(Duration::from_millis(300))),
    )
    .await
    .expect("imported");
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");

    let started = std::time::Instant::now();
    let error = invoke(&pipeline, "slow", json!({"ms": 120_000}))
        .await
        .expect_err("times out");
    assert_eq!(error.code(), "timeout", "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The upstream was told to cancel, so its one-at-a-time permit comes back.
    within(10, "the upstream permit comes back", async {
        loop {
            if invoke(&pipeline, "slow", json!({"ms": 1})).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn declared_tools_are_registered_while_the_upstream_is_down() {
    let declared = toolgate_core::tool::ToolDefinition {
        name: "lookup".to_owned(),
        title: None,
        description: "Looks something up.".to_owned(),
        version: "1".to_owned(),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: Default::default(),
        tags: Vec::new(),
        source: ToolSource::Local,
    };
    let config = UpstreamConfig::stdio(
        "gone",
        "/nonexistent/toolgate-mcp-upstream",
        Vec::<String>::new(),
    )
    .declare(declared)
    .connect_timeout(Duration::from_millis(500))
    .backoff(Backoff {
        initial: Duration::from_secs(5),
        max: Duration::from_secs(5),
    });
    let upstream = within(10, "import", Upstream::connect(config))
        .await
        .expect("declared tools need no upstream");
    assert_eq!(
        upstream.definitions()[0].source,
        ToolSource::Mcp {
            server: "gone".to_owned()
        }
    );
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    let error = invoke(&pipeline, "lookup", json!({}))
        .await
        .expect_err("the upstream is down");
    assert_eq!(
        (error.code(), error.status()),
        ("upstream_unavailable", 503),
        "{error}"
    );
    assert!(error.retry_after_delay().is_some());
}

#[tokio::test]
async fn a_call_after_the_upstream_expired_its_session_is_answered_on_a_new_one() {
    // An upstream with sessions (2025-11-25, no `server/discover`) that ends a session
    // after 300 ms without a message.
    let mut tools = ToolRegistry::new();
    tools
        .register_erased(std::sync::Arc::new(JsonTool::new(
            "echo",
            "Answers with its input.",
            json!({"type": "object"}),
            |input, _ctx| Box::pin(async move { Ok::<_, ToolError>(input.clone()) }),
        )))
        .expect("registered");
    let server = McpServer::new(Pipeline::builder().registry(tools).build().expect("built"));
    let mut sessions = SessionConfig::default();
    sessions.keep_alive = Some(Duration::from_millis(300));
    let (url, shutdown) = serve_http_with_sessions(&server, sessions).await;

    let config = UpstreamConfig::http("sessions", url).discover(false);
    let upstream = within(30, "import", Upstream::connect(config))
        .await
        .expect("imported");
    let mut imported = ToolRegistry::new();
    upstream.register(&mut imported).expect("registered");
    let pipeline = Pipeline::builder()
        .registry(imported)
        .build()
        .expect("built");
    let first = invoke(&pipeline, "echo", json!({"n": 1}))
        .await
        .expect("called");
    assert_eq!(first["content"][0]["text"], r#"{"n":1}"#, "{first}");

    // The session is gone at the upstream: the call is refused there with 404, was not
    // run, and goes again on a session set up anew — the caller sees only its answer.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for n in 2..6 {
        let answer = invoke(&pipeline, "echo", json!({ "n": n }))
            .await
            .unwrap_or_else(|e| panic!("call {n} after the session expired failed: {e}"));
        assert_eq!(
            answer["content"][0]["text"],
            format!(r#"{{"n":{n}}}"#),
            "{answer}"
        );
    }
    shutdown.cancel();
}
