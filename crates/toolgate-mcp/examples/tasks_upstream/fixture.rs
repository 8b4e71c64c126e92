//! An MCP server that runs tools as tasks (SEP-2663, `io.modelcontextprotocol/tasks`), on
//! rmcp: the tools the conformance suite's `tasks-*` scenarios call by name, so that they
//! can run through the gateway importing it, and what the gateway's own tests need.
//!
//! * `greet` — never a task: `Hello, {name}!`.
//! * `slow_compute` — a task for a caller that declares the extension (`seconds` of work,
//!   then `computed {label}`; `cancelled` when cancelled meanwhile); for any other
//!   caller, the same work done before answering.
//! * `failing_job` — a task only (a caller without the extension is refused `-32021`):
//!   after a moment, a result with `isError`.
//! * `protocol_error_job` — a task that fails (`status: failed`, a JSON-RPC error).
//! * `confirm_delete` — a task that asks one question (`input_required`), answered with
//!   `tasks/update`; `multi_input` asks two at once, answered in any order.
//! * `test_tool_with_task` — one `input_required` round (`user_name`), then a task
//!   whose result greets the name given.
//!
//! Task ids are plain counters (`task-1`, `task-2`, …) and every task is anyone's: the
//! server trusts whoever knows an id — what a gateway in front of it must not.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, DetailedTask, ErrorCode, ErrorData, GetTaskParams, GetTaskResult,
    InputRequests, InputRequiredResult, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, TASKS_EXTENSION_ID, Task, TaskPayload, Tool,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// How long a task is kept after it is created.
const TTL: Duration = Duration::from_secs(600);

/// The tasks of the server (of all its clients: an id is enough to reach one).
#[derive(Clone, Default)]
pub struct TasksUpstream {
    tasks: Arc<Mutex<HashMap<String, TaskState>>>,
    next: Arc<AtomicU64>,
}

struct TaskState {
    task: DetailedTask,
    /// The questions still unanswered, by key.
    pending: InputRequests,
    /// The answers given so far, by key.
    answers: BTreeMap<String, Value>,
    /// Woken when the task is answered or cancelled.
    changed: Arc<Notify>,
}

impl TasksUpstream {
    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskState>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new working task; its handle, and what wakes its work.
    fn create(&self) -> (CreateTaskResult, String, Arc<Notify>) {
        let id = format!("task-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let now = now();
        let task = Task::new(id.clone(), Default::default(), now.clone(), now)
            .with_ttl_ms(TTL.as_millis() as u64)
            .with_poll_interval_ms(100);
        let changed = Arc::new(Notify::new());
        self.tasks().insert(
            id.clone(),
            TaskState {
                task: DetailedTask::new(task.clone(), TaskPayload::Working),
                pending: InputRequests::new(),
                answers: BTreeMap::new(),
                changed: Arc::clone(&changed),
            },
        );
        (CreateTaskResult::new(task), id, changed)
    }

    /// Moves task `id` to `payload`, unless it has ended already (a cancelled task stays
    /// cancelled).
    fn settle(&self, id: &str, payload: TaskPayload) {
        if let Some(state) = self.tasks().get_mut(id)
            && !state.task.status().is_terminal()
        {
            let mut task = state.task.task.clone();
            task.last_updated_at = now();
            state.task = DetailedTask::new(task, payload);
        }
    }

    fn ended(&self, id: &str) -> bool {
        self.tasks()
            .get(id)
            .is_none_or(|state| state.task.status().is_terminal())
    }

    /// Asks `questions` in task `id`, then waits until every one is answered (or the task
    /// ends); the answers.
    async fn ask(&self, id: &str, questions: InputRequests) -> Option<BTreeMap<String, Value>> {
        let changed = {
            let mut tasks = self.tasks();
            let state = tasks.get_mut(id)?;
            state.pending = questions.clone();
            let task = state.task.task.clone();
            state.task = DetailedTask::new(
                task,
                TaskPayload::InputRequired {
                    input_requests: questions,
                },
            );
            Arc::clone(&state.changed)
        };
        loop {
            let waiting = changed.notified();
            {
                let mut tasks = self.tasks();
                let state = tasks.get_mut(id)?;
                if state.task.status().is_terminal() {
                    return None;
                }
                if state.pending.is_empty() {
                    let task = state.task.task.clone();
                    state.task = DetailedTask::new(task, TaskPayload::Working);
                    return Some(std::mem::take(&mut state.answers));
                }
            }
            waiting.await;
        }
    }

    /// Runs `work` as a new task; the handle to answer.
    fn spawn<F, Fut>(&self, work: F) -> CallToolResponse
    where
        F: FnOnce(TasksUpstream, String, Arc<Notify>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (created, id, changed) = self.create();
        tokio::spawn(work(self.clone(), id, changed));
        CallToolResponse::Task(created)
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

fn completed(result: CallToolResult) -> TaskPayload {
    let result = match serde_json::to_value(result) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    };
    TaskPayload::Completed { result }
}

fn question(message: &str, field: &str) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]},
    }})
}

fn questions(asked: Value) -> InputRequests {
    serde_json::from_value(asked).expect("well-formed questions")
}

/// The first string field of an elicitation answer (`{"action": "accept", "content": …}`).
fn answer_text(answer: Option<&Value>) -> String {
    answer
        .and_then(|a| a["content"].as_object())
        .and_then(|content| content.values().find_map(Value::as_str))
        .unwrap_or("(no answer)")
        .to_owned()
}

fn tool(name: &str, description: &str, properties: Value) -> Tool {
    serde_json::from_value(json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties},
    }))
    .expect("a well-formed tool")
}

fn unknown_task(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown task {id}"), None)
}

impl ServerHandler for TasksUpstream {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
        ServerConfig::new(capabilities)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let seconds = json!({"seconds": {"type": "number"}, "label": {"type": "string"}});
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "greet",
                "Greets, at once.",
                json!({"name": {"type": "string"}}),
            ),
            tool("slow_compute", "Works `seconds`, as a task.", seconds),
            tool(
                "failing_job",
                "A task that ends in a tool error.",
                json!({}),
            ),
            tool("protocol_error_job", "A task that fails.", json!({})),
            tool(
                "confirm_delete",
                "A task that asks one question.",
                json!({}),
            ),
            tool("multi_input", "A task that asks two questions.", json!({})),
            tool(
                "test_tool_with_task",
                "Asks a name, then greets it in a task.",
                json!({}),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        let arguments = request.arguments.clone().unwrap_or_default();
        let task_only = || {
            let mut required = rmcp::model::ClientCapabilities::default();
            required
                .extensions
                .get_or_insert_with(Default::default)
                .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
            ErrorData::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "this tool runs only as a task: declare io.modelcontextprotocol/tasks",
                Some(json!({"requiredCapabilities": required})),
            )
        };
        match request.name.as_ref() {
            "greet" => {
                let name = arguments["name"].as_str().unwrap_or("stranger");
                Ok(CallToolResponse::Complete(text(format!("Hello, {name}!"))))
            }
            "slow_compute" => {
                let seconds = arguments["seconds"].as_f64().unwrap_or(1.0).max(0.0);
                let label = arguments["label"].as_str().unwrap_or("").to_owned();
                let work = Duration::from_secs_f64(seconds);
                if !takes_tasks {
                    tokio::time::sleep(work).await;
                    return Ok(CallToolResponse::Complete(text(format!(
                        "computed {label}"
                    ))));
                }
                Ok(self.spawn(move |tasks, id, changed| async move {
                    tokio::select! {
                        () = tokio::time::sleep(work) => {
                            tasks.settle(&id, completed(text(format!("computed {label}"))));
                        }
                        () = async { while !tasks.ended(&id) { changed.notified().await } } => {}
                    }
                }))
            }
            "failing_job" if takes_tasks => Ok(self.spawn(|tasks, id, _| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let failed = CallToolResult::error(vec![ContentBlock::text("the job failed")]);
                tasks.settle(&id, completed(failed));
            })),
            "protocol_error_job" if takes_tasks => Ok(self.spawn(|tasks, id, _| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let error = json!({"code": -32603, "message": "the job crashed"});
                let error = error.as_object().cloned().unwrap_or_default();
                tasks.settle(&id, TaskPayload::Failed { error });
            })),
            "confirm_delete" if takes_tasks => Ok(self.spawn(|tasks, id, _| async move {
                let asked = questions(json!({"confirm": question("Delete it?", "confirm")}));
                if let Some(answers) = tasks.ask(&id, asked).await {
                    let said = answer_text(answers.get("confirm"));
                    tasks.settle(&id, completed(text(format!("delete: {said}"))));
                }
            })),
            "multi_input" if takes_tasks => Ok(self.spawn(|tasks, id, _| async move {
                let asked = questions(json!({
                    "first": question("First?", "first"),
                    "second": question("Second?", "second"),
                }));
                if let Some(answers) = tasks.ask(&id, asked).await {
                    let first = answer_text(answers.get("first"));
                    let second = answer_text(answers.get("second"));
                    tasks.settle(&id, completed(text(format!("{first} and {second}"))));
                }
            })),
            "test_tool_with_task" if takes_tasks => {
                let given = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_name"));
                let Some(given) = given else {
                    let asked =
                        questions(json!({"user_name": question("Your name?", "user_name")}));
                    return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                        Some(asked),
                        Some("asked-name".to_owned()),
                    )));
                };
                let name = answer_text(Some(given));
                Ok(self.spawn(move |tasks, id, _| async move {
                    tasks.settle(&id, completed(text(format!("Hello, {name}!"))));
                }))
            }
            "failing_job"
            | "protocol_error_job"
            | "confirm_delete"
            | "multi_input"
            | "test_tool_with_task" => Err(task_only()),
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let tasks = self.tasks();
        let state = tasks
            .get(&request.task_id)
            .ok_or_else(|| unknown_task(&request.task_id))?;
        Ok(GetTaskResult::new(state.task.clone()))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let changed = {
            let tasks = self.tasks();
            let state = tasks
                .get(&request.task_id)
                .ok_or_else(|| unknown_task(&request.task_id))?;
            Arc::clone(&state.changed)
        };
        self.settle(&request.task_id, TaskPayload::Cancelled);
        changed.notify_waiters();
        Ok(())
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut tasks = self.tasks();
        let state = tasks
            .get_mut(&request.task_id)
            .ok_or_else(|| unknown_task(&request.task_id))?;
        for (key, answer) in request.input_responses {
            if state.pending.remove(&key).is_some() {
                state.answers.insert(key, answer);
            }
        }
        if !state.pending.is_empty() {
            let task = state.task.task.clone();
            state.task = DetailedTask::new(
                task,
                TaskPayload::InputRequired {
                    input_requests: state.pending.clone(),
                },
            );
        }
        state.changed.notify_waiters();
        Ok(())
    }
}
