//! A tower [`Service`] over a pipeline.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use serde_json::Value;
use toolgate_core::{InvokeOptions, Pipeline, ToolError};
use tower_service::Service;

/// One call for a [`PipelineService`]: a tool's name, its JSON input, and the options.
#[derive(Debug)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments.
    pub input: Value,
    /// The caller, session, deadline and provided values.
    pub options: InvokeOptions,
}

impl ToolCall {
    /// A call of `tool` with `input` and default options.
    pub fn new(tool: impl Into<String>, input: Value) -> Self {
        ToolCall {
            tool: tool.into(),
            input,
            options: InvokeOptions::new(),
        }
    }

    /// The same call with these options.
    pub fn options(mut self, options: InvokeOptions) -> Self {
        self.options = options;
        self
    }
}

/// A pipeline as a tower [`Service`]: a [`ToolCall`] in, the tool's output or its
/// [`ToolError`] out, so tower middleware (timeouts, concurrency limits, load shedding,
/// tracing) stacks in front of it.
///
/// `poll_ready` is always ready: the pipeline holds no capacity of its own to wait for (its
/// rate limits and concurrency policies answer each call, as a [`ToolError`]). For
/// backpressure, put tower's `ConcurrencyLimit` or `LoadShed` in front of it.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::prelude::*;
/// use toolgate_http::{PipelineService, ToolCall};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .build()?;
/// let service = tower::ServiceBuilder::new()
///     .concurrency_limit(64)
///     .service(PipelineService::new(pipeline));
/// let output = service.oneshot(ToolCall::new("ping", json!(null))).await?;
/// assert_eq!(output, json!("pong"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PipelineService {
    pipeline: Pipeline,
}

impl PipelineService {
    /// The service over this pipeline.
    pub fn new(pipeline: Pipeline) -> Self {
        PipelineService { pipeline }
    }

    /// The pipeline it calls.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }
}

impl Service<ToolCall> for PipelineService {
    type Response = Value;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<Value, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        let pipeline = self.pipeline.clone();
        Box::pin(async move { pipeline.invoke(&call.tool, call.input, call.options).await })
    }
}
