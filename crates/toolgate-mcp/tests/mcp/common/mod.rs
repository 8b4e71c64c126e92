//! Shared helpers: the demo server as a child process (stdio or HTTP), rmcp clients for
//! it, and bounded waits. Every wait has a timeout; every child is killed on drop.
#![allow(dead_code)]

pub mod hand_written;
pub mod rmcp_upstream;
pub mod scenarios;

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;
use toolgate_core::external::TypeMapKey;
use toolgate_core::provider::Scope;
use toolgate_core::tool::{IntoTool, tool_fn_with_context};
use toolgate_core::{
    Hook, HookResult, Pipeline, PipelineBuilder, ToolError, ToolInvokeContext, hook,
};

pub type Client = RunningService<RoleClient, ()>;

/// Calls made in this session so far: bound by [`SessionCounter`], read by a tool.
pub struct Calls;

impl TypeMapKey for Calls {
    type Value = AtomicU64;
}

/// A pipeline with the tool `count`, which answers how many calls its session has made
/// (itself included), and the [`SessionCounter`] it reads.
pub fn counting() -> PipelineBuilder {
    Pipeline::builder()
        .tool(tool_fn_with_context(
            "count",
            "Counts the calls of this session.",
            |_: (), ctx: &ToolInvokeContext| {
                Box::pin(async move {
                    let calls = ctx.get::<Calls>()?;
                    Ok::<_, ToolError>(calls.fetch_add(1, Ordering::SeqCst) + 1)
                })
            },
        ))
        .hook(SessionCounter)
}

/// Binds a fresh [`Calls`] counter in the session scope when the session has none.
pub struct SessionCounter;

#[hook]
impl Hook for SessionCounter {
    fn will_bind_providers(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.try_get::<Calls>().is_none()
            && let Err(e) = ctx.provide::<Calls>(AtomicU64::new(0), Scope::Session)
        {
            return Err(e.into());
        }
        Ok(())
    }
}

/// Notifies when dropped: when the call holding it ends, however it ends.
pub struct Ends(pub Arc<Notify>);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// The tool `wait`, which runs until its call is cancelled: `started` is notified when a
/// call starts, `ended` when it ends (it saw its cancellation, or it was dropped).
pub fn wait_tool(started: &Arc<Notify>, ended: &Arc<Notify>) -> impl IntoTool + use<> {
    let (started, ended) = (Arc::clone(started), Arc::clone(ended));
    tool_fn_with_context(
        "wait",
        "Waits until the call is cancelled.",
        move |_: (), ctx: &ToolInvokeContext| {
            let (started, ended) = (Arc::clone(&started), Arc::clone(&ended));
            let cancel = ctx.cancellation().clone();
            Box::pin(async move {
                let _ends = Ends(ended);
                started.notify_one();
                cancel.cancelled().await;
                Ok::<_, ToolError>("cancelled".to_owned())
            })
        },
    )
}

/// `config`'s upstream, connected, and its tools imported into a pipeline without hooks.
pub async fn imported(config: toolgate_mcp::UpstreamConfig) -> (toolgate_mcp::Upstream, Pipeline) {
    let upstream = within(30, "import", toolgate_mcp::Upstream::connect(config))
        .await
        .expect("imported");
    let mut tools = toolgate_core::registry::ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    (upstream, pipeline)
}

/// The demo server binary built with this crate.
pub const DEMO: &str = env!("CARGO_BIN_EXE_toolgate-mcp-demo");

/// Serves `app` on a free loopback port for the rest of the test; its base URL
/// (`http://127.0.0.1:<port>`).
pub async fn serve_on_loopback(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Fails the test instead of hanging when `future` takes longer than `secs`.
pub async fn within<T>(secs: u64, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {secs} s: {what}"))
}

/// An rmcp client connected to the demo server over stdio, with these environment
/// variables. The child is killed when the client is dropped.
pub async fn stdio_client(env: &[(&str, &str)]) -> Client {
    let mut cmd = tokio::process::Command::new(DEMO);
    cmd.arg("stdio").envs(env.iter().copied());
    let transport = TokioChildProcess::new(cmd).expect("the demo server starts");
    within(20, "stdio handshake", ().serve(transport))
        .await
        .expect("the MCP handshake succeeds")
}

/// The demo server serving streamable HTTP in a child process.
pub struct HttpDemo {
    pub child: tokio::process::Child,
    pub url: String,
}

impl HttpDemo {
    /// Starts it on `addr` (`127.0.0.1:0` for an ephemeral port) and waits until it
    /// listens.
    pub async fn start(addr: &str, env: &[(&str, &str)]) -> HttpDemo {
        let mut child = tokio::process::Command::new(DEMO)
            .args(["http", addr])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the demo server starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = within(20, "the HTTP demo server listens", lines.next_line())
            .await
            .expect("stdout is readable")
            .expect("the server prints its address");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        HttpDemo { child, url }
    }

    /// `127.0.0.1:PORT` of the server.
    pub fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned()
    }

    /// Kills the server and waits until it is gone.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("the server can be killed");
        within(10, "the HTTP demo server exits", self.child.wait())
            .await
            .expect("wait works");
    }
}

/// An rmcp client for a streamable HTTP endpoint, with an optional bearer token and
/// `x-demo-roles` header.
pub async fn http_client(url: &str, token: Option<&str>, roles: Option<&str>) -> Client {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    if let Some(roles) = roles {
        let mut headers = std::collections::HashMap::new();
        headers.insert(
            http::HeaderName::from_static("x-demo-roles"),
            http::HeaderValue::from_str(roles).expect("a valid header"),
        );
        config = config.custom_headers(headers);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    within(20, "HTTP handshake", ().serve(transport))
        .await
        .expect("the MCP handshake succeeds")
}

/// `tools/call` with JSON arguments, bounded in time.
pub async fn call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    within(
        30,
        "tools/call",
        client.peer().call_tool(params(tool, arguments)),
    )
    .await
}

/// The parameters of a `tools/call`.
pub fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    let arguments: JsonObject = match arguments {
        Value::Object(map) => map,
        Value::Null => JsonObject::new(),
        other => panic!("arguments must be an object, not {other}"),
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// The text of a result's content.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the result has `isError: true`.
pub fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

/// Calls `tool` until it succeeds (at most `secs` seconds): for what becomes possible
/// once something is released in the background.
pub async fn call_until_ok(
    client: &Client,
    tool: &str,
    arguments: Value,
    secs: u64,
) -> CallToolResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let result = call(client, tool, arguments.clone())
            .await
            .expect("the call is answered");
        if !is_error(&result) {
            return result;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{tool}` still fails after {secs} s: {}",
            text(&result)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Raw streamable-HTTP requests of a client of the 2025 revisions, for tests that need to
/// see or shape the bytes an SDK client would hide: the endpoint, the protocol version the
/// client speaks, and a bearer token when the server wants one.
pub struct RawHttp<'a> {
    pub http: &'a reqwest::Client,
    pub url: &'a str,
    pub version: &'a str,
    pub bearer: Option<&'a str>,
}

impl RawHttp<'_> {
    /// A `POST` of `body`, in `session` when given, ready to send.
    pub fn request(&self, session: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", self.version)
            .body(body.to_string());
        if let Some(token) = self.bearer {
            request = request.bearer_auth(token);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    /// [`request`](Self::request), sent: the response, whatever its status, once its
    /// headers came (within 10 s).
    pub async fn post(&self, session: Option<&str>, body: &Value) -> reqwest::Response {
        within(
            10,
            "an answer's headers",
            self.request(session, body).send(),
        )
        .await
        .expect("the server answers")
    }

    /// A session: `initialize` declaring `capabilities`, as the client `name`, then
    /// `notifications/initialized`; its id.
    pub async fn session(&self, capabilities: Value, name: &str) -> String {
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": self.version, "capabilities": capabilities,
                "clientInfo": {"name": name, "version": "0"}}});
        let response = self.post(None, &init).await;
        assert!(response.status().is_success(), "{}", response.status());
        let session = response
            .headers()
            .get("mcp-session-id")
            .expect("a stateful server names the session")
            .to_str()
            .expect("ascii")
            .to_owned();
        within(10, "initialize body", response.bytes())
            .await
            .expect("read");
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = self.post(Some(&session), &initialized).await;
        assert!(response.status().is_success(), "{}", response.status());
        session
    }
}

/// The name the test harness knows the test `test` of the module `module` (its
/// `module_path!()`) by: what `--exact` takes to run that test again alone, in a process
/// of its own (to give it an environment of its own, say).
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}
