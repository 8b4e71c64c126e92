//! [`ScriptedTool`]: a tool whose behaviour on each call is written down in advance.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use toolgate_core::tool::{ErasedTool, PreparedInput, ToolAnnotations, ToolDefinition, ToolSource};
use toolgate_core::{ToolError, ToolInvokeContext};

use crate::PANIC_PAYLOAD;

/// What a [`ScriptedTool`] does on one call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// Return this output.
    Ok(Value),
    /// Return the input it was called with.
    Echo,
    /// Fail with a transient (retryable) error with this message.
    Transient(String),
    /// Fail with a permanent error with this message.
    Permanent(String),
    /// Fail with this error.
    Fail(ToolError),
    /// Panic with a message containing [`PANIC_PAYLOAD`].
    Panic,
    /// Wait until the call's cancellation token fires, then fail with
    /// [`ToolError::Cancelled`]. Without a cancellation it never finishes.
    Hang,
    /// Sleep on the tokio clock, then do the next step.
    Sleep(Duration, Box<Step>),
}

impl Step {
    /// [`Step::Ok`].
    pub fn ok(value: Value) -> Self {
        Step::Ok(value)
    }

    /// [`Step::Transient`].
    pub fn transient(message: impl Into<String>) -> Self {
        Step::Transient(message.into())
    }

    /// [`Step::Permanent`].
    pub fn permanent(message: impl Into<String>) -> Self {
        Step::Permanent(message.into())
    }

    /// Sleep for `duration`, then `then`.
    pub fn sleep(duration: Duration, then: Step) -> Self {
        Step::Sleep(duration, Box::new(then))
    }
}

struct State {
    definition: ToolDefinition,
    script: Mutex<VecDeque<Step>>,
    otherwise: Step,
    calls: AtomicUsize,
    running: AtomicUsize,
    cancelled: AtomicUsize,
}

/// A JSON tool whose behaviour per call follows a script, and which counts its calls.
///
/// Call *n* does step *n* of the script; calls past the end of the script do the
/// [`otherwise`](Self::otherwise) step (`Ok("ok")` unless set). Clones share the script and
/// the counters, so a test keeps one clone and registers another
/// ([`into_erased`](Self::into_erased)).
///
/// Its input schema is `{"type": "object"}` unless set with
/// [`input_schema`](Self::input_schema).
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{InvokeOptions, Pipeline};
/// use toolgate_test::{ScriptedTool, Step};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let tool = ScriptedTool::new("flaky")
///     .then(Step::transient("connection reset"))
///     .then(Step::ok(json!({"rows": 3})));
///
/// let pipeline = Pipeline::builder()
///     .tool(tool.clone().into_erased())
///     .build()
///     .unwrap();
///
/// let first = pipeline.invoke("flaky", json!({}), InvokeOptions::new()).await;
/// assert!(first.unwrap_err().is_retryable());
/// let second = pipeline.invoke("flaky", json!({}), InvokeOptions::new()).await;
/// assert_eq!(second.unwrap(), json!({"rows": 3}));
/// assert_eq!(tool.calls(), 2);
/// # }
/// ```
#[derive(Clone)]
pub struct ScriptedTool {
    state: Arc<State>,
}

impl ScriptedTool {
    /// A tool named `name` with an empty script (a name the registry refuses fails at
    /// registration).
    pub fn new(name: impl Into<String>) -> Self {
        ScriptedTool {
            state: Arc::new(State {
                definition: ToolDefinition {
                    name: name.into(),
                    title: None,
                    description: "A tool whose behaviour is scripted by a test.".to_owned(),
                    version: "1".to_owned(),
                    input_schema: json!({"type": "object"}),
                    output_schema: None,
                    annotations: ToolAnnotations::default(),
                    tags: Vec::new(),
                    source: ToolSource::Local,
                },
                script: Mutex::new(VecDeque::new()),
                otherwise: Step::Ok(json!("ok")),
                calls: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
                cancelled: AtomicUsize::new(0),
            }),
        }
    }

    /// A tool that returns `value` on every call.
    pub fn returning(name: impl Into<String>, value: Value) -> Self {
        ScriptedTool::new(name).otherwise(Step::Ok(value))
    }

    /// Appends a step to the script (clones share the script, so this works on a clone
    /// kept by the test too).
    #[must_use]
    pub fn then(self, step: Step) -> Self {
        self.state
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(step);
        self
    }

    /// Sets what calls past the end of the script do.
    ///
    /// # Panics
    ///
    /// If called after a clone of the tool was made (script it before sharing it).
    #[must_use]
    pub fn otherwise(mut self, step: Step) -> Self {
        self.state_mut().otherwise = step;
        self
    }

    /// Sets the input schema.
    ///
    /// # Panics
    ///
    /// If called after a clone of the tool was made.
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.state_mut().definition.input_schema = schema;
        self
    }

    /// Sets the annotations.
    ///
    /// # Panics
    ///
    /// If called after a clone of the tool was made.
    #[must_use]
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.state_mut().definition.annotations = annotations;
        self
    }

    /// The tool as the registry stores it, for
    /// [`PipelineBuilder::tool`](toolgate_core::PipelineBuilder::tool).
    pub fn into_erased(self) -> Arc<dyn ErasedTool> {
        Arc::new(self)
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.state.definition.name
    }

    /// How many times the tool was called.
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// How many calls are running now (a call whose future was dropped counts as ended).
    pub fn running(&self) -> usize {
        self.state.running.load(Ordering::SeqCst)
    }

    /// How many [`Step::Hang`] calls saw their cancellation token fire.
    pub fn saw_cancellation(&self) -> usize {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    fn state_mut(&mut self) -> &mut State {
        Arc::get_mut(&mut self.state)
            .expect("configure a ScriptedTool before cloning or registering it")
    }

    fn next_step(&self) -> Step {
        self.state
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .unwrap_or_else(|| self.state.otherwise.clone())
    }
}

/// Counts a call as running until it is dropped, however it ends.
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run_step(state: &State, step: Step, ctx: &ToolInvokeContext) -> Result<Value, ToolError> {
    let mut step = step;
    loop {
        return match step {
            Step::Ok(value) => Ok(value),
            Step::Echo => Ok(ctx.input().clone()),
            Step::Transient(message) => Err(ToolError::transient(message)),
            Step::Permanent(message) => Err(ToolError::execution(message)),
            Step::Fail(error) => Err(error),
            Step::Panic => panic!("{PANIC_PAYLOAD} in tool `{}`", ctx.tool_name()),
            Step::Hang => {
                ctx.cancellation().cancelled().await;
                state.cancelled.fetch_add(1, Ordering::SeqCst);
                Err(ToolError::Cancelled)
            }
            Step::Sleep(duration, then) => {
                tokio::time::sleep(duration).await;
                step = *then;
                continue;
            }
        };
    }
}

impl ErasedTool for ScriptedTool {
    fn definition(&self) -> ToolDefinition {
        self.state.definition.clone()
    }

    fn check_input(&self, _input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        Ok(None)
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let state = &*self.state;
        state.calls.fetch_add(1, Ordering::SeqCst);
        state.running.fetch_add(1, Ordering::SeqCst);
        let running = Running(&state.running);
        let step = self.next_step();
        Box::pin(async move {
            let _running = running;
            run_step(state, step, ctx).await
        })
    }
}

impl fmt::Debug for ScriptedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedTool")
            .field("name", &self.state.definition.name)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}
