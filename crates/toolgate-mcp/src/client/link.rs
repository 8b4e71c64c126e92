//! The connection to one upstream: established on demand, re-established with backoff
//! when the upstream dies.

use std::borrow::Cow;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;
use toolgate_core::{ToolDefinition, ToolError};
use toolgate_hooks::secrets::Scrubber;

use super::{UpstreamConfig, UpstreamTransport};

type Session = RunningService<RoleClient, ()>;

/// How long one call may wait for an upstream that is down to come back.
const MAX_WAIT_PER_CALL: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Default)]
struct State {
    session: Option<Session>,
    /// Consecutive failed connection attempts.
    failures: u32,
    /// No new attempt before this instant.
    retry_at: Option<Instant>,
    /// Counts connections, so a failure forgets only the connection it happened on.
    generation: u64,
}

pub(crate) struct Link {
    pub config: UpstreamConfig,
    credential: Option<String>,
    /// Every credential of `config`: scrubbed from what the upstream sends back.
    scrubber: Scrubber,
    state: Mutex<State>,
}

impl Link {
    pub fn new(config: UpstreamConfig, credential: Option<String>) -> Self {
        Link {
            scrubber: config.scrubber(),
            config,
            credential,
            state: Mutex::new(State::default()),
        }
    }

    /// `text` without the upstream's credentials: for log lines and error messages.
    pub fn scrubbed(&self, mut text: String) -> String {
        self.scrubber.scrub_string(&mut text);
        text
    }

    /// A call's result without the upstream's credentials, before the pipeline sees it:
    /// an upstream that echoes its token (or leaks it in an error) cannot get it to the
    /// caller, a cache entry, an audit record or a log line.
    pub fn scrub(&self, result: Result<Value, ToolError>) -> Result<Value, ToolError> {
        if self.scrubber.is_empty() {
            return result;
        }
        match result {
            Ok(mut output) => {
                if self.scrubber.scrub_value(&mut output) > 0 {
                    tracing::warn!(server = %self.config.name, "the MCP server's answer contained its own credential; it was scrubbed");
                }
                Ok(output)
            }
            Err(mut error) => {
                self.scrubber.scrub_error(&mut error);
                Err(error)
            }
        }
    }

    /// A discovered tool's definition without the upstream's credentials.
    pub fn scrub_definition(&self, mut definition: ToolDefinition) -> ToolDefinition {
        if self.scrubber.is_empty() {
            return definition;
        }
        self.scrubber.scrub_string(&mut definition.description);
        if let Some(title) = &mut definition.title {
            self.scrubber.scrub_string(title);
        }
        self.scrubber.scrub_value(&mut definition.input_schema);
        if let Some(schema) = &mut definition.output_schema {
            self.scrubber.scrub_value(schema);
        }
        definition
    }

    /// A live connection, connecting if needed. One call waits out short backoffs (up
    /// to [`MAX_WAIT_PER_CALL`] in all, within its deadline); past that it fails at once
    /// with a retry-after naming the wait, so callers of a dead upstream do not hang.
    pub async fn peer(&self, deadline: Instant) -> Result<(Peer<RoleClient>, u64), ToolError> {
        let wait_until = deadline.min(Instant::now() + MAX_WAIT_PER_CALL);
        let mut state = self.state.lock().await;
        loop {
            if let Some(session) = &state.session {
                if !session.is_transport_closed() && !session.is_closed() {
                    return Ok((session.peer().clone(), state.generation));
                }
                tracing::warn!(server = %self.config.name, "MCP server connection lost; reconnecting");
                state.session = None;
            }
            let now = Instant::now();
            if let Some(retry_at) = state.retry_at.filter(|t| *t > now) {
                if retry_at >= wait_until {
                    return Err(self.unavailable(retry_at - now));
                }
                tokio::time::sleep_until(retry_at).await;
            }
            let attempt_deadline = deadline.min(Instant::now() + self.config.connect_timeout);
            match tokio::time::timeout_at(attempt_deadline, self.connect()).await {
                Ok(Ok(session)) => {
                    if state.failures > 0 {
                        tracing::info!(server = %self.config.name, "MCP server reconnected");
                    }
                    state.failures = 0;
                    state.retry_at = None;
                    state.session = Some(session);
                    state.generation += 1;
                }
                failed => {
                    let reason = match failed {
                        Ok(Err(reason)) => self.scrubbed(reason),
                        _ => "the connection attempt timed out".to_owned(),
                    };
                    state.failures += 1;
                    let wait = self.config.backoff.delay(state.failures);
                    state.retry_at = Some(Instant::now() + wait);
                    tracing::warn!(server = %self.config.name, failures = state.failures, %reason, retry_in_ms = wait.as_millis() as u64, "cannot connect to MCP server");
                    if Instant::now() >= wait_until {
                        return Err(self.unavailable(wait));
                    }
                }
            }
        }
    }

    fn unavailable(&self, wait: std::time::Duration) -> ToolError {
        ToolError::RetryAfter {
            delay: wait,
            reason: format!("MCP server `{}` is unavailable", self.config.name),
            code: Cow::Borrowed("upstream_unavailable"),
            status: 503,
        }
    }

    async fn connect(&self) -> Result<Session, String> {
        match &self.config.transport {
            UpstreamTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                if let (Some(var), Some(value)) = (&self.config.credential_env, &self.credential) {
                    cmd.env(var, value);
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(relay_stderr(
                        self.config.name.clone(),
                        self.scrubber.clone(),
                        stderr,
                    ));
                }
                ().serve(transport).await.map_err(|e| e.to_string())
            }
            UpstreamTransport::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = &self.credential {
                    config = config.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                ().serve(transport).await.map_err(|e| e.to_string())
            }
        }
    }

    /// Drops the connection if it is still the one that failed.
    async fn forget(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state.generation == generation {
            state.session = None;
        }
    }

    /// Every tool the upstream lists.
    pub async fn list_tools(&self, deadline: Instant) -> Result<Vec<Tool>, ToolError> {
        let (peer, generation) = self.peer(deadline).await?;
        match tokio::time::timeout_at(deadline, peer.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => {
                self.forget(generation).await;
                Err(ToolError::transient(e.to_string()))
            }
            Err(_) => Err(ToolError::Timeout {
                after: self.config.connect_timeout,
            }),
        }
    }

    /// Calls a tool upstream by its upstream name. Dropping the future cancels the
    /// upstream call (rmcp sends `notifications/cancelled`).
    pub async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
        deadline: Instant,
    ) -> Result<CallToolResult, ToolError> {
        let started = Instant::now();
        // A request that could not be sent never ran: it is safe to send it again once,
        // on a new connection. A request lost after it was sent is not retried.
        for attempt in 0..2 {
            let (peer, generation) = self.peer(deadline).await?;
            let params =
                CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
            match tokio::time::timeout_at(deadline, peer.call_tool(params)).await {
                Err(_) => {
                    return Err(ToolError::Timeout {
                        after: started.elapsed(),
                    });
                }
                Ok(Ok(result)) => return Ok(result),
                Ok(Err(ServiceError::TransportSend(e))) if attempt == 0 => {
                    let error = self.scrubbed(e.to_string());
                    tracing::warn!(server = %self.config.name, %error, "could not send the call; reconnecting");
                    self.forget(generation).await;
                }
                Ok(Err(ServiceError::McpError(e))) => {
                    return Err(ToolError::execution(format!(
                        "MCP server `{}` refused the call: {}",
                        self.config.name, e.message
                    )));
                }
                Ok(Err(e)) => {
                    self.forget(generation).await;
                    return Err(ToolError::transient(format!(
                        "the connection to MCP server `{}` failed during the call ({e}); it is being re-established, try again",
                        self.config.name
                    )));
                }
            }
        }
        Err(ToolError::transient(format!(
            "MCP server `{}` could not be reached; try again",
            self.config.name
        )))
    }
}

/// The longest line of a stdio upstream's stderr relayed whole; longer ones are cut.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// Relays a stdio upstream's stderr into the log, one event per line (target
/// `toolgate_mcp::upstream`, level `info`), with the upstream's credentials scrubbed: a
/// program that prints its token on failure does not get it into the log.
async fn relay_stderr(server: String, scrubber: Scrubber, stderr: tokio::process::ChildStderr) {
    use futures::StreamExt;
    use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(MAX_STDERR_LINE));
    while let Some(line) = lines.next().await {
        match line {
            Ok(mut line) => {
                scrubber.scrub_string(&mut line);
                tracing::info!(target: "toolgate_mcp::upstream", %server, "{line}");
            }
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                tracing::info!(target: "toolgate_mcp::upstream", %server, "(a line of more than {MAX_STDERR_LINE} bytes was left out)");
            }
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}
