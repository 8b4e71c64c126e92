//! The [`ToolSystem`]: runs the batches of tool calls a model plans, through the pipeline.

mod builder;
mod options;
mod resume;
mod trace;

use std::collections::HashMap;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::task::JoinSet;
use toolgate_core::error::shown_text;
use toolgate_core::registry::MAX_NAME_LEN;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Invocation, InvokeOptions, Pipeline, PipelineBuilder, ToolError};

pub use builder::{SystemBuildError, ToolSystemBuilder};
pub use options::{Concurrency, ExecuteOptions, ResumeOptions};
pub use resume::ResumeError;
pub use trace::TraceId;

use crate::limit::{cut_error, effective_limit};
use crate::modes::AWAITING_PERSON;
use crate::{
    Arguments, ExecutionMode, Observation, ObservationStream, Observer, ResultError, StateManager,
    ThreadConfig, ToolCall, ToolResult, ToolStatus, UsageStats, truncate_output,
};

/// What every clone of a tool system shares.
struct Inner {
    pipeline: Pipeline,
    state: Arc<dyn StateManager>,
    modes: HashMap<String, ExecutionMode>,
    observer: Observer,
    result_max_chars: usize,
    concurrency: Concurrency,
    timeout: Option<Duration>,
    stats: Option<Arc<UsageStats>>,
}

/// The agent-facing tool system: runs batches of parsed tool calls through a pipeline and
/// answers each with a [`ToolResult`], in call order.
///
/// Per call: the tool must exist and be enabled for the thread (its [`ThreadConfig`] from
/// the [`StateManager`]); arguments must be JSON; then the call runs through the pipeline
/// with the thread as session, the call id as request id, the batch's user, the batch's
/// request-scoped providers ([`ExecuteOptions::provide`]), and the trace id bound as a
/// [`TraceId`] provider. A call that fails, panics or suspends never costs
/// the other calls their results.
///
/// Cheap to clone.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use garde::Validate;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
/// use toolgate_agent::{ExecuteOptions, InMemoryStateManager, ThreadConfig, ToolCall, ToolSystem};
/// use toolgate_core::{tool_fn, Pipeline, ToolError};
///
/// #[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// struct Add { #[garde(skip)] a: i64, #[garde(skip)] b: i64 }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("add", "Adds a and b.", |x: Add| async move { Ok::<_, ToolError>(x.a + x.b) }));
/// let state = Arc::new(InMemoryStateManager::new());
/// state.set_config("thread-1", ThreadConfig::enabling(["add"]));
/// let system = ToolSystem::builder(pipeline, state).build()?;
///
/// let results = system
///     .execute_tools("thread-1", vec![ToolCall::new("c1", "add", json!({"a": 2, "b": 3}))], ExecuteOptions::new())
///     .await;
/// assert_eq!(results[0].output, Some(json!(5)));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ToolSystem {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSystem")
            .field("pipeline", &self.inner.pipeline)
            .field("modes", &self.inner.modes)
            .field("concurrency", &self.inner.concurrency)
            .finish_non_exhaustive()
    }
}

impl ToolSystem {
    /// A builder over the tools and hooks of `pipeline`, with thread state from `state`.
    pub fn builder(pipeline: PipelineBuilder, state: Arc<dyn StateManager>) -> ToolSystemBuilder {
        ToolSystemBuilder::new(pipeline, state)
    }

    /// The pipeline the calls run through.
    pub fn pipeline(&self) -> &Pipeline {
        &self.inner.pipeline
    }

    /// Every tool's definition, in registration order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.inner.pipeline.definitions().cloned().collect()
    }

    /// The definitions of the tools enabled for `thread` (what to offer its model).
    ///
    /// # Errors
    ///
    /// [`StateError`](crate::StateError) when the thread's configuration cannot be loaded.
    pub async fn enabled_definitions(
        &self,
        thread: &str,
    ) -> Result<Vec<ToolDefinition>, crate::StateError> {
        let config = self.inner.state.thread_config(thread).await?;
        Ok(self
            .inner
            .pipeline
            .definitions()
            .filter(|d| config.is_enabled(&d.name))
            .cloned()
            .collect())
    }

    /// A tool's execution mode.
    pub fn mode(&self, tool: &str) -> ExecutionMode {
        self.inner.modes.get(tool).copied().unwrap_or_default()
    }

    /// A stream of the observations recorded from now on.
    pub fn subscribe(&self) -> ObservationStream {
        self.inner.observer.subscribe()
    }

    /// The observer (for its drop count).
    pub fn observer(&self) -> &Observer {
        &self.inner.observer
    }

    /// The usage statistics, if the system records them.
    pub fn stats(&self) -> Option<&Arc<UsageStats>> {
        self.inner.stats.as_ref()
    }

    /// Runs a batch of calls in `thread` and returns one result per call, in call order.
    ///
    /// Never fails as a whole: every way a call can go wrong (thread configuration not
    /// loadable, unknown or disabled tool, unparseable or invalid arguments, a tool error,
    /// a panic, a timeout) is that call's error result; a call that waits for a person is
    /// a suspended result, to [`resume`](Self::resume) later.
    ///
    /// `thread` is also the calls' session id, trusted as given
    /// ([`InvokeOptions::session`](toolgate_core::InvokeOptions::session)): every batch
    /// run in one thread shares its session, whoever sends it. Pass a thread the host made
    /// for this user, or qualify one a client named with the caller first (as
    /// `toolgate_http::session_key` does, `[tenant, user, id]`) — never the client's id as
    /// it is.
    pub async fn execute_tools(
        &self,
        thread: &str,
        calls: Vec<ToolCall>,
        options: ExecuteOptions,
    ) -> Vec<ToolResult> {
        let trace_id = options.trace_id.clone().unwrap_or_else(trace::new_trace_id);
        let config = match self.inner.state.thread_config(thread).await {
            Ok(config) => Arc::new(config),
            Err(e) => {
                let error = ToolError::abort(
                    format!(
                        "the tool configuration of this thread could not be loaded ({e}); no tool ran"
                    ),
                    "thread_config_unavailable",
                    503,
                );
                return calls
                    .into_iter()
                    .map(|call| {
                        let mut result = ToolResult::error(call.id, call.name, &error);
                        result.metadata.trace_id = Some(trace_id.clone());
                        self.finish(thread, &trace_id, result)
                    })
                    .collect();
            }
        };
        let batch = Batch {
            thread: Arc::from(thread),
            trace_id: Arc::from(trace_id.as_str()),
            config,
            options: Arc::new(options),
        };
        match batch.options.concurrency.unwrap_or(self.inner.concurrency) {
            Concurrency::Sequential => {
                let mut results = Vec::with_capacity(calls.len());
                for call in calls {
                    results.push(self.run_guarded(&batch, call).await);
                }
                results
            }
            // A semaphore holds at most `MAX_PERMITS`; a bound past the batch's size changes
            // nothing, so a bound of `usize::MAX` runs every call at once.
            Concurrency::Parallel(bound) => {
                let bound = bound.min(calls.len()).max(1);
                self.run_parallel(&batch, calls, bound).await
            }
        }
    }

    /// Runs calls on their own tasks, at most `bound` at a time, admitted in call order.
    ///
    /// Admission is this loop's, one call at a time: it waits for the call's turn (a
    /// permit; the semaphore hands them out first come, first served), then polls the
    /// call once here, which runs it into the pipeline up to its first wait — the
    /// `will_create_invoke_context` hooks and every synchronous stage after them — and only
    /// then hands it to a task of its own and admits the next call. Spawning every call at
    /// once and letting each wait for its turn in its task would leave the order to the
    /// runtime, which runs the last task a worker spawned first: the calls would enter
    /// the pipeline last-first, or in any order across workers, and a hook that takes a
    /// quota or writes an audit record would see them so. Only this first poll is one at a
    /// time; the calls then run at once, up to `bound`.
    async fn run_parallel(
        &self,
        batch: &Batch,
        calls: Vec<ToolCall>,
        bound: usize,
    ) -> Vec<ToolResult> {
        let permits = Arc::new(tokio::sync::Semaphore::new(bound));
        let mut results: Vec<Option<ToolResult>> = vec![None; calls.len()];
        let mut requests = Vec::with_capacity(calls.len());
        let mut tasks = JoinSet::new();
        let mut index_of = HashMap::new();
        for (index, call) in calls.into_iter().enumerate() {
            requests.push((call.id.clone(), call.name.clone()));
            // A call still waiting for its turn at the batch's deadline stops waiting: it
            // is admitted at once and answered as out of time (see `run_call`).
            let turn = Arc::clone(&permits).acquire_owned();
            let permit = match batch.options.deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, turn).await.ok(),
                None => Some(turn.await),
            };
            let system = self.clone();
            let batch = batch.clone();
            let mut run = Box::pin(async move { system.run_guarded(&batch, call).await });
            match std::future::poll_fn(|cx| Poll::Ready(run.as_mut().poll(cx))).await {
                Poll::Ready(result) => results[index] = Some(result),
                Poll::Pending => {
                    let handle = tasks.spawn(async move {
                        let _permit = permit;
                        run.await
                    });
                    index_of.insert(handle.id(), index);
                }
            }
        }
        while let Some(joined) = tasks.join_next_with_id().await {
            match joined {
                Ok((id, result)) => results[index_of[&id]] = Some(result),
                Err(error) => {
                    let index = index_of[&error.id()];
                    let (call_id, tool_name) = &requests[index];
                    tracing::error!(
                        call_id,
                        tool_name,
                        "a tool call's task failed; its result is an internal error"
                    );
                    let failure = ToolError::internal(
                        "the call's task failed before it produced a result; try the call again",
                    );
                    let mut result =
                        ToolResult::error(call_id.clone(), tool_name.clone(), &failure);
                    result.metadata.trace_id = Some(batch.trace_id.to_string());
                    results[index] = Some(result);
                }
            }
        }
        results
            .into_iter()
            .zip(requests)
            .map(|(result, (call_id, tool_name))| {
                result.unwrap_or_else(|| {
                    ToolResult::error(
                        call_id,
                        tool_name,
                        &ToolError::internal("the call produced no result"),
                    )
                })
            })
            .collect()
    }

    /// One call, with a panic anywhere in the agent layer contained to its own result.
    async fn run_guarded(&self, batch: &Batch, call: ToolCall) -> ToolResult {
        use futures::FutureExt;
        let (call_id, tool_name) = (call.id.clone(), call.name.clone());
        match std::panic::AssertUnwindSafe(self.run_call(batch, call))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(_) => {
                tracing::error!(
                    call_id,
                    tool_name,
                    "a tool call panicked outside the pipeline; the panic was contained"
                );
                let mut result = ToolResult::error(
                    call_id,
                    tool_name,
                    &ToolError::internal("the call panicked; the panic was contained"),
                );
                result.metadata.trace_id = Some(batch.trace_id.to_string());
                result
            }
        }
    }

    async fn run_call(&self, batch: &Batch, call: ToolCall) -> ToolResult {
        let ToolCall {
            id,
            name,
            arguments,
        } = call;
        let limit = effective_limit(
            batch.options.result_max_chars,
            batch.config.result_max_chars,
            self.inner.result_max_chars,
        );
        let rejected = |error: ToolError, raw: Option<String>| {
            let mut result = ToolResult::error(id.clone(), name.clone(), &error);
            result.metadata.trace_id = Some(batch.trace_id.to_string());
            result.metadata.mode = self.mode(&name);
            // The model's text is kept to the result size limit like an output is: it
            // never went through the pipeline's input size limit.
            result.metadata.raw_arguments = raw.map(|raw| cut_text(raw, limit).0);
            self.finish(&batch.thread, &batch.trace_id, result)
        };
        if let Err(unusable) = crate::check_call_id(&id) {
            let error = ToolError::abort(
                format!("the call {unusable}; the tool did not run"),
                "invalid_call_id",
                400,
            );
            return rejected(error, None);
        }
        if self.inner.pipeline.registry().get(&name).is_none() {
            let error = ToolError::UnknownTool { name: name.clone() };
            // No tool has a name this long: the result names the call by as much of it as
            // any tool's name could be, never by all the caller sent.
            if name.len() > MAX_NAME_LEN {
                let mut result = rejected(error, None);
                result.tool_name = shown_text(&name, MAX_NAME_LEN).into_owned();
                return result;
            }
            return rejected(error, None);
        }
        if !batch.config.is_enabled(&name) {
            let enabled: Vec<&str> = batch
                .config
                .enabled_tools
                .iter()
                .map(String::as_str)
                .collect();
            let error = ToolError::abort(
                format!(
                    "tool `{name}` is not enabled in this thread: call one of the enabled tools ({})",
                    if enabled.is_empty() {
                        "none".to_owned()
                    } else {
                        enabled.join(", ")
                    }
                ),
                "tool_disabled",
                403,
            );
            return rejected(error, None);
        }
        let input = match arguments {
            Arguments::Json { value } => value,
            Arguments::Unparseable { raw, error } => {
                let error = ToolError::InvalidInput(toolgate_core::error::InputViolations::one(
                    "",
                    format!(
                        "the arguments are not valid JSON ({error}): send them again as one JSON object that matches the tool's input schema"
                    ),
                ));
                return rejected(error, Some(raw));
            }
        };
        if let Some(deadline) = batch.options.deadline
            && tokio::time::Instant::now() >= deadline
        {
            let error = ToolError::abort(
                "the batch's time ran out before this call started, so it did not run: send it again, in a batch of fewer calls or with more time",
                "timeout",
                504,
            );
            return rejected(error, None);
        }
        let mut invoke = batch
            .options
            .providers
            .bind(InvokeOptions::new())
            .session(&*batch.thread)
            .provide::<TraceId>(batch.trace_id.to_string());
        invoke = match trace::request_id_of(&id) {
            None => invoke.request_id(id.clone()),
            Some(request_id) => invoke
                .request_id(request_id)
                .provide::<trace::CallId>(id.clone()),
        };
        if let Some(limit) = batch.options.result_max_chars {
            invoke = invoke.provide::<trace::ResultLimit>(limit);
        }
        if let Some(user) = &batch.options.user {
            invoke = invoke.user(Arc::clone(user));
        }
        if let Some(timeout) = batch.options.timeout.or(self.inner.timeout) {
            invoke = invoke.timeout(timeout);
        }
        if let Some(deadline) = batch.options.deadline {
            invoke = invoke.deadline(deadline);
        }
        if let Some(token) = &batch.options.cancellation {
            invoke = invoke.cancellation(token.child_token());
        }
        let started = tokio::time::Instant::now();
        let invocation = self
            .inner
            .pipeline
            .invoke_detailed(&name, input, invoke)
            .await;
        let elapsed = started.elapsed();
        let mut result = self.to_result(id, name, invocation, elapsed, limit);
        result.metadata.trace_id = Some(batch.trace_id.to_string());
        self.finish(&batch.thread, &batch.trace_id, result)
    }

    /// Turns an invocation into a result: status, truncated output, metadata. The duration
    /// is measured on the tokio clock around the invocation, so it follows paused time in
    /// tests like every other timer of the call.
    fn to_result(
        &self,
        call_id: String,
        tool_name: String,
        mut invocation: Invocation,
        elapsed: Duration,
        limit: usize,
    ) -> ToolResult {
        invocation.metadata.remove(AWAITING_PERSON);
        invocation.metadata.remove(trace::CALL_ID);
        invocation.metadata.remove(trace::RESULT_MAX_CHARS);
        let mut result = match invocation.result {
            Ok(output) => {
                let (output, truncation) = truncate_output(output, limit);
                let mut result = ToolResult::success(call_id, tool_name, output);
                result.metadata.truncation = truncation;
                result
            }
            Err(error) => {
                let mut result = ToolResult::error(call_id, tool_name, &error);
                // A tool's or a hook's message reaches the model as an output does: within
                // the same limit, and so do the violations of invalid input.
                // It is taken whole and cut once, to the smaller of the limit and the bound
                // of every error's message, so that its original size is what the
                // truncation tells.
                if let Some(cut) = &mut result.error {
                    *cut = ResultError::whole(&error);
                    let limit = limit.min(toolgate_core::error::MAX_ERROR_CHARS);
                    result.metadata.truncation = cut_error(cut, limit);
                }
                result
            }
        };
        result.metadata.mode = self.mode(&result.tool_name);
        result.metadata.duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        result.metadata.attempts = invocation.attempts;
        result.metadata.absorb(invocation.metadata);
        result
    }

    /// Records the result (observation and statistics) and hands it back. Statistics are
    /// kept for registered tools only: a name the model made up never becomes an entry of
    /// the statistics file, whatever the call ended with.
    fn finish(&self, thread: &str, trace_id: &str, result: ToolResult) -> ToolResult {
        if let Some(stats) = &self.inner.stats
            && self
                .inner
                .pipeline
                .registry()
                .get(&result.tool_name)
                .is_some()
        {
            stats.record(&result);
        }
        let observation = if result.status == ToolStatus::Suspended {
            Observation::Suspended {
                thread_id: thread.to_owned(),
                trace_id: trace_id.to_owned(),
                result: result.clone(),
            }
        } else {
            Observation::ToolExecution {
                thread_id: thread.to_owned(),
                trace_id: trace_id.to_owned(),
                duration_ms: result.metadata.duration_ms,
                display: result.metadata.mode == ExecutionMode::Display,
                result: result.clone(),
            }
        };
        self.inner.observer.record(observation);
        result
    }
}

/// `text` cut to `limit` characters, marker included, as an output would be, and what was
/// cut (`None` when nothing was).
fn cut_text(text: String, limit: usize) -> (String, Option<crate::Truncation>) {
    match truncate_output(serde_json::Value::String(text), limit) {
        (serde_json::Value::String(text), truncation) => (text, truncation),
        (other, truncation) => (other.to_string(), truncation),
    }
}

/// What every call of one batch shares.
#[derive(Clone)]
struct Batch {
    thread: Arc<str>,
    trace_id: Arc<str>,
    config: Arc<ThreadConfig>,
    options: Arc<ExecuteOptions>,
}
