//! The upstream's tasks (SEP-2663): `tasks/*` requests, and polling a task for a caller
//! that does not take tasks.

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, CancelTaskParams, CancelTaskRequest, ClientCapabilities, ClientRequest,
    CreateTaskResult, GetTaskParams, GetTaskRequest, GetTaskResult, InputResponses,
    RequestMetaObject, ServerResult, TASKS_EXTENSION_ID, TaskPayload, UpdateTaskParams,
    UpdateTaskRequest,
};
use rmcp::service::{Peer, PeerRequestOptions};
use serde_json::Value;
use tokio::time::Instant;
use toolgate_core::error::error_text;
use toolgate_core::{ToolError, User};

use super::Link;
use super::abandoned::cancellable;

/// The shortest and longest wait between two `tasks/get` of a task toolgate polls itself.
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

impl Link {
    /// `request` (a `tasks/*` request) to the upstream, declaring the tasks extension in
    /// its `_meta`, as the extension requires of every `tasks/*` request. Cancelled
    /// upstream when given up before its answer ([`cancellable`]). Its place is taken in
    /// `user`'s share.
    async fn task_request(
        &self,
        request: ClientRequest,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<ServerResult, ToolError> {
        self.request(&self.current, user, deadline, |peer, seat| async move {
            cancellable(&peer, request, tasks_options(), seat.as_ref()).await
        })
        .await
    }

    /// `tasks/get` of the upstream's task `id`.
    ///
    /// # Errors
    ///
    /// The upstream's refusal (`invalid_input` for a task it does not know), or the
    /// request's failure.
    pub async fn get_task(
        &self,
        id: &str,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<GetTaskResult, ToolError> {
        let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id)));
        match self.task_request(request, user, deadline).await? {
            ServerResult::GetTaskResult(task) => Ok(task),
            _ => Err(self.unexpected("tasks/get")),
        }
    }

    /// `tasks/cancel` of the upstream's task `id`.
    ///
    /// # Errors
    ///
    /// As [`get_task`](Self::get_task).
    pub async fn cancel_task(
        &self,
        id: &str,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let request =
            ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(id)));
        self.task_request(request, user, deadline).await.map(drop)
    }

    /// `tasks/update` of the upstream's task `id`: the caller's answers to what the task
    /// asked.
    ///
    /// # Errors
    ///
    /// As [`get_task`](Self::get_task).
    pub async fn update_task(
        &self,
        id: &str,
        responses: InputResponses,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let request = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
            UpdateTaskParams::new(id, responses),
        ));
        self.task_request(request, user, deadline).await.map(drop)
    }

    /// The end of the upstream's task `created`, polled with `tasks/get` for a caller
    /// that does not take tasks: its result, or an error when it failed, was
    /// cancelled, asks for input (which such a caller cannot give in a task) or does not
    /// end by `deadline`. A task given up before it ends — at the deadline, or the call
    /// dropped — is cancelled upstream.
    pub(super) async fn await_task(
        &self,
        created: CreateTaskResult,
        user: &User,
        started: Instant,
        deadline: Instant,
    ) -> Result<CallToolResult, ToolError> {
        let id = created.task.task_id;
        let mut interval = created.task.poll_interval_ms;
        // Nobody will ask for the task once this call is given up — at its deadline, or
        // dropped — so the upstream may stop its work.
        let connected = self.peer(&self.current, deadline).await;
        let (peer, _) = connected.map_err(|e| self.sent_already(e, started))?;
        let mut cancel = CancelTaskOnDrop {
            peer,
            id: Some(id.clone()),
        };
        loop {
            let wait = interval
                .map_or(POLL_BOUNDS.0, Duration::from_millis)
                .clamp(POLL_BOUNDS.0, POLL_BOUNDS.1);
            if Instant::now() + wait >= deadline {
                return Err(self.timed_out(started));
            }
            tokio::time::sleep(wait).await;
            let polled = self.get_task(&id, Some(user), deadline).await;
            let task = polled.map_err(|e| self.sent_already(e, started))?.task;
            interval = task.task.poll_interval_ms;
            let name = &self.config.name;
            if task.status().is_terminal() {
                cancel.id = None;
            }
            match task.payload {
                TaskPayload::Working => continue,
                // What the upstream sent (serde's words quote it) is scrubbed whole, then
                // cut: a cut never leaves half a credential behind.
                TaskPayload::Completed { result } => {
                    return serde_json::from_value(Value::Object(result)).map_err(|e| {
                        let why = self.scrubbed_sent(e.to_string());
                        ToolError::execution(error_text(format_args!(
                            "MCP server `{name}` ended its task with a result that is not a tool result: {why}"
                        )))
                    });
                }
                TaskPayload::Failed { error } => {
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                    let sent = self.scrubbed_sent(message.to_owned());
                    return Err(ToolError::execution(error_text(format_args!(
                        "MCP server `{name}`: the call's task failed: {sent}"
                    ))));
                }
                TaskPayload::Cancelled => {
                    return Err(ToolError::execution(format!(
                        "MCP server `{name}` cancelled the call's task"
                    )));
                }
                _ => {
                    return Err(ToolError::execution(format!(
                        "MCP server `{name}` asks for input in the call's task, which only a caller that declares the tasks extension can give"
                    )));
                }
            }
        }
    }

    /// `e`, the error of a request made for a call that was sent (made at `started`), whose
    /// task runs: held up by the upstream's bound until the call's deadline, it is the call
    /// out of time — not an upstream too busy to take the call (503 `upstream_busy`), which
    /// its caller might send again, and run twice.
    fn sent_already(&self, e: ToolError, started: Instant) -> ToolError {
        if e.code() == "upstream_busy" {
            self.timed_out(started)
        } else {
            e
        }
    }
}

/// The options of a `tasks/*` request: the tasks extension declared in its `_meta`, as the
/// extension requires of every one.
fn tasks_options() -> PeerRequestOptions {
    let mut capabilities = ClientCapabilities::default();
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(capabilities);
    PeerRequestOptions::no_options().with_meta(meta)
}

/// Cancels an upstream task toolgate polls when the poll is given up before the task ends.
struct CancelTaskOnDrop {
    peer: Peer<RoleClient>,
    /// `None` once the task has ended.
    id: Option<String>,
}

impl Drop for CancelTaskOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                    CancelTaskParams::new(id),
                ));
                let cancelled = async {
                    peer.send_request_with_option(request, tasks_options())
                        .await?
                        .await_response()
                        .await
                };
                let _ = tokio::time::timeout(POLL_BOUNDS.1, cancelled).await;
            });
        }
    }
}
