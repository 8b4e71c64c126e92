//! One MCP connection (a stdio connection, or a streamable HTTP session): the rmcp
//! `ServerHandler` that routes `tools/list` and `tools/call` into the pipeline.

// Logging is deprecated by SEP-2577 for the 2026-07-28 revision; clients on 2025-11-25 still
// set a level with `logging/setLevel`.
#![allow(deprecated)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, ErrorCode, ErrorData,
    Implementation, ListToolsResult, LoggingLevel, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, SetLevelRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use toolgate_core::{InvokeOptions, ToolError, User};

use super::ServerInner;
use super::http::{ClientDisconnected, HostShutdown};
use crate::caller::{CallerKey, CallerRequest};
use crate::convert::{InputShape, error_to_result, output_to_result, to_mcp_tool, unknown_tool};

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

pub(crate) struct Connection {
    server: Arc<ServerInner>,
    /// The session id when the transport gives none (stdio).
    own_id: Arc<str>,
    /// The session ids this connection used, ended when it closes.
    sessions: Mutex<Vec<Arc<str>>>,
    /// The level set with `logging/setLevel`: log messages of imported tools' upstreams
    /// at or above it are relayed to this connection's calls.
    log_level: Mutex<Option<LoggingLevel>>,
}

impl Connection {
    pub(crate) fn new(server: Arc<ServerInner>) -> Self {
        let n = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
        Connection {
            server,
            own_id: Arc::from(format!("mcp-{}-{n}", std::process::id())),
            sessions: Mutex::new(Vec::new()),
            log_level: Mutex::new(None),
        }
    }

    /// The MCP session: the `Mcp-Session-Id` of an HTTP session, else this connection.
    fn session_id(&self, parts: Option<&http::request::Parts>) -> Arc<str> {
        let id = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| Arc::clone(&self.own_id), Arc::from);
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if !sessions.contains(&id) {
            sessions.push(Arc::clone(&id));
        }
        id
    }

    fn user(&self, parts: Option<&http::request::Parts>) -> Arc<User> {
        let Some(parts) = parts else {
            return Arc::clone(&self.server.default_user);
        };
        if let Some(user) = self.server.identify.as_ref().and_then(|f| f(parts)) {
            return Arc::new(user);
        }
        if let Some(user) = parts.extensions.get::<Arc<User>>() {
            return Arc::clone(user);
        }
        if let Some(user) = parts.extensions.get::<User>() {
            return Arc::new(user.clone());
        }
        Arc::clone(&self.server.default_user)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let sessions = self.sessions.get_mut().unwrap_or_else(|e| e.into_inner());
        for id in sessions.drain(..) {
            self.server.pipeline.end_session(&id);
        }
    }
}

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        );
        info.server_info =
            Implementation::new(self.server.name.clone(), self.server.version.clone());
        info.instructions = self.server.instructions.clone();
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let user = self.user(context.extensions.get::<http::request::Parts>());
        let tools = self
            .server
            .pipeline
            .definitions()
            .filter(|d| {
                self.server
                    .filter
                    .as_ref()
                    .is_none_or(|f| f.allows(d, &user))
            })
            .map(to_mcp_tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context.extensions.get::<http::request::Parts>();
        let user = self.user(parts);
        let name = request.name;
        let pipeline = &self.server.pipeline;
        let definition = match pipeline.registry().get(&name) {
            Some(tool)
                if self
                    .server
                    .filter
                    .as_ref()
                    .is_none_or(|f| f.allows(&tool.definition, &user)) =>
            {
                tool.definition.clone()
            }
            _ => return Err(unknown_tool(&name)),
        };
        let input =
            InputShape::of(&definition.input_schema).input(request.arguments.unwrap_or_default());
        // Fires when the client sends `notifications/cancelled`, or when the host cuts
        // the call at shutdown.
        let cancel = context.ct.child_token();
        let caller = CallerRequest {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            log_level: *self.log_level.lock().unwrap_or_else(|e| e.into_inner()),
        };
        let mut options = InvokeOptions::new()
            .session(self.session_id(parts))
            .user(user)
            .cancellation(cancel.clone())
            .provide::<CallerKey>(caller);
        if let Some(timeout) = self.server.call_timeout {
            options = options.timeout(timeout);
        }
        let invoke = pipeline.invoke(&name, input, options);
        let invoke = async {
            match parts.and_then(|p| p.extensions.get::<HostShutdown>()) {
                Some(shutdown) => shutdown.cut(invoke, &cancel).await,
                None => invoke.await,
            }
        };
        let disconnected = parts.and_then(|p| p.extensions.get::<ClientDisconnected>());
        let result = match disconnected {
            // Dropping the invocation cancels it and releases what it holds.
            Some(disconnected) => tokio::select! {
                result = invoke => result,
                () = disconnected.cancelled() => {
                    tracing::debug!(tool = %name, "the HTTP client disconnected; call cancelled");
                    Err(ToolError::Cancelled)
                }
            },
            None => invoke.await,
        };
        match result {
            Ok(output) => Ok(output_to_result(&definition, output).into()),
            Err(ToolError::UnknownTool { .. }) => Err(unknown_tool(&name)),
            Err(error) => Ok(error_to_result(&error).into()),
        }
    }

    /// Sets the level of the log messages relayed from upstreams to this connection.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().unwrap_or_else(|e| e.into_inner()) = Some(request.level);
        Ok(())
    }

    /// A request rmcp could not read as any method it knows. For a known method this
    /// means malformed parameters: say so, rather than "method not found".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method;
        let hint = match method.as_str() {
            "tools/call" => Some(
                "`params` must be {\"name\": string, \"arguments\": object}; `arguments` holds the tool's arguments as a JSON object",
            ),
            "tools/list" => Some("`params` may only carry a string `cursor`"),
            _ => None,
        };
        Err(match hint {
            Some(hint) => {
                ErrorData::invalid_params(format!("malformed `{method}` request: {hint}"), None)
            }
            None => ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method `{method}` is not supported by this server"),
                None,
            ),
        })
    }
}
