//! The scenarios that `benches/pipeline.rs` times and `tests/allocations.rs` counts: one
//! small typed tool (add two numbers, JSON in and out) called directly, through the
//! pipeline with more and more hooks, and behind a tower stack.
//!
//! Both targets include this file, so what is timed is exactly what is counted.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::core::external::TypeMapKey;
use toolgate::core::registry::ToolRegistry;
use toolgate::core::tool::parse_input;
use toolgate::prelude::*;
use tower::util::BoxCloneService;
use tower::{Service, ServiceExt};

/// The input of the benchmarked tool.
#[derive(Deserialize, Serialize, Validate, JsonSchema)]
pub struct AddInput {
    #[garde(range(min = -1_000_000, max = 1_000_000))]
    a: i64,
    #[garde(range(min = -1_000_000, max = 1_000_000))]
    b: i64,
}

/// The output of the benchmarked tool.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Sum {
    sum: i64,
}

/// The benchmarked tool: adds two numbers.
pub struct Add;

/// The tool's work, shared by [`Add`] and the tower service so both do the same thing.
fn add(input: AddInput) -> Sum {
    Sum {
        sum: input.a + input.b,
    }
}

impl Tool for Add {
    type Input = AddInput;
    type Output = Sum;

    fn name(&self) -> &str {
        "add"
    }

    fn description(&self) -> &str {
        "Adds two numbers."
    }

    async fn execute(&self, input: AddInput, _ctx: &ToolInvokeContext) -> Result<Sum, ToolError> {
        Ok(add(input))
    }
}

/// The JSON input every scenario is called with.
pub fn add_input() -> Value {
    json!({ "a": 1, "b": 2 })
}

/// A hook that does nothing at the stages it lists: what the pipeline itself costs per
/// hook call. Its stage methods are the trait's defaults, which return a ready future.
struct NoOp(StageSet);

#[hook]
impl Hook for NoOp {
    // Hand-written: each scenario chooses the stages; the methods are the trait's defaults.
    fn stages(&self) -> StageSet {
        self.0
    }
}

/// The same no-op written the way an author writes a hook under `#[hook]`: a plain `fn`
/// per stage returning `Ok(())`, which the macro turns into a ready future. It must cost
/// what [`NoOp`] costs.
struct WrittenNoOp(StageSet);

#[hook]
impl Hook for WrittenNoOp {
    // Hand-written: each instance takes part in one of the ten stages it implements.
    fn stages(&self) -> StageSet {
        self.0
    }
    fn will_authorize(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_acquire_quota(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_acquire_semaphore(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_validate_input(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_read_cache(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_execute(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn did_execute(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_redact_output(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn will_audit(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn on_metrics(&self, _ctx: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
}

/// The same no-op written without `#[hook]`: a hand-written `impl Hook` that lists its
/// stages and keeps the trait's default methods, declaring no synchronous stages. What a
/// hook costs when its author does not use the macro.
struct HandWrittenNoOp(StageSet);

impl Hook for HandWrittenNoOp {
    fn stages(&self) -> StageSet {
        self.0
    }
}

/// Ten stages a realistic policy set uses, each reached once on the success path.
const TEN_STAGES: [Stage; 10] = [
    Stage::WillAuthorize,
    Stage::WillAcquireQuota,
    Stage::WillAcquireSemaphore,
    Stage::WillValidateInput,
    Stage::WillReadCache,
    Stage::WillExecute,
    Stage::DidExecute,
    Stage::WillRedactOutput,
    Stage::WillAudit,
    Stage::OnMetrics,
];

/// A tower layer that forwards everything: the tower counterpart of a [`NoOp`] hook.
#[derive(Clone)]
struct PassThrough<S>(S);

impl<S: Service<Value>> Service<Value> for PassThrough<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Value) -> S::Future {
        self.0.call(request)
    }
}

/// A type-erased tower service with JSON in and out.
type JsonService = BoxCloneService<Value, Value, ToolError>;

/// The tool as a tower service: parse and check the JSON input exactly as the registry's
/// erased tool does, run the same work, serialize the output.
fn add_service()
-> impl Service<Value, Response = Value, Error = ToolError, Future: Send> + Clone + Send {
    tower::service_fn(|input: Value| async move {
        let parsed = parse_input::<AddInput>(&input)?;
        serde_json::to_value(add(parsed)).map_err(|e| ToolError::internal(e.to_string()))
    })
}

/// Ten pass-through layers, each boxed: composed at run time like hooks are, each layer
/// boxes the future of the one inside it.
fn tower_boxed_each() -> JsonService {
    let mut service = BoxCloneService::new(add_service());
    for _ in 0..10 {
        service = BoxCloneService::new(PassThrough(service));
    }
    service
}

/// Ten pass-through layers composed statically, the whole stack boxed once.
fn tower_static() -> JsonService {
    let s = add_service();
    let s = PassThrough(PassThrough(PassThrough(PassThrough(PassThrough(s)))));
    let s = PassThrough(PassThrough(PassThrough(PassThrough(PassThrough(s)))));
    BoxCloneService::new(s)
}

/// What a direct-call harness is given (a request provider): how many times to repeat
/// the call, and the owned inputs of the calls that take JSON.
struct HarnessRun;

impl TypeMapKey for HarnessRun {
    type Value = (u64, Mutex<Vec<Value>>);
}

/// The direct-call harness: a tool whose body calls the benchmarked tool `iterations`
/// times and returns how long that took in nanoseconds. It exists because a
/// [`ToolInvokeContext`], which both `Tool::execute` and `ErasedTool::call` take, is only
/// made by the pipeline; the harness's own invocation is outside the timed loop. The
/// outputs the body returns are dropped after the timing, as criterion drops the
/// pipeline's.
fn harness(
    name: &'static str,
    body: impl for<'a> Fn(u64, Vec<Value>, &'a ToolInvokeContext) -> BoxFuture<'a, Vec<Value>>
    + Send
    + Sync
    + 'static,
) -> impl Tool {
    tool_fn_with_context(
        name,
        "Times direct calls of `add`.",
        move |_: AddInput, ctx: &ToolInvokeContext| {
            let harness_run = ctx
                .get::<HarnessRun>()
                .expect("the harness is invoked with its run");
            let (iterations, inputs) = &*harness_run;
            let inputs = std::mem::take(&mut *inputs.lock().expect("not poisoned"));
            let run = body(*iterations, inputs, ctx);
            Box::pin(async move {
                let started = Instant::now();
                let outputs = run.await;
                let elapsed = started.elapsed();
                drop(outputs);
                Ok::<_, ToolError>(elapsed.as_nanos() as u64)
            })
        },
    )
}

/// Every scenario, built once.
pub struct Scenarios {
    direct: Pipeline,
    /// The pipeline with no hooks.
    pub pipeline_0_hooks: Pipeline,
    /// The pipeline with ten no-op hooks, each at a different stage.
    pub pipeline_10_hooks: Pipeline,
    /// [`Self::pipeline_10_hooks`] with the no-ops written as plain `fn`s under `#[hook]`.
    pub pipeline_10_written_hooks: Pipeline,
    /// [`Self::pipeline_10_hooks`] with the no-ops written without `#[hook]`.
    pub pipeline_10_hand_written_hooks: Pipeline,
    /// The pipeline with one no-op hook at every stage, `around_execute` included.
    pub pipeline_every_stage: Pipeline,
    /// The pipeline with retry, a timeout, consent, a result cache and secret injection,
    /// none of which applies to `add` (not idempotent, no time limit of its own, no approval
    /// needed, not read-only, no secret declared).
    pub pipeline_uninterested_hooks: Pipeline,
    /// Ten tower layers, each boxed.
    pub tower_10_boxed: RefCell<JsonService>,
    /// Ten tower layers composed statically, boxed once.
    pub tower_10_static: RefCell<JsonService>,
}

impl Scenarios {
    /// Builds every scenario.
    pub fn new() -> Self {
        let mut registry = ToolRegistry::new();
        registry.register(Add).expect("`add` registers");
        let registry = std::sync::Arc::new(registry);

        let direct = Pipeline::builder()
            .tool(harness("direct_typed", |iterations, _, ctx| {
                Box::pin(async move {
                    for _ in 0..iterations {
                        let input = black_box(AddInput { a: 1, b: 2 });
                        black_box(Add.execute(input, ctx).await.expect("add succeeds"));
                    }
                    Vec::new()
                })
            }))
            .tool(harness("direct_erased", move |_, inputs, ctx| {
                let registry = std::sync::Arc::clone(&registry);
                let mut outputs = Vec::with_capacity(inputs.len());
                Box::pin(async move {
                    // What a home-made dispatcher does: given owned JSON off the wire,
                    // find the tool by name, parse and check the input, call the tool,
                    // get JSON back, drop the input.
                    for input in inputs {
                        let tool = &black_box(&registry)
                            .get(black_box("add"))
                            .expect("`add` is registered")
                            .tool;
                        let prepared = tool.check_input(&input).expect("the input is valid");
                        outputs.push(tool.call(prepared, ctx).await.expect("add succeeds"));
                        drop(black_box(input));
                    }
                    outputs
                })
            }));

        Scenarios {
            direct: direct.build().expect("the harness pipeline builds"),
            pipeline_0_hooks: pipeline(Vec::<NoOp>::new()),
            pipeline_10_hooks: pipeline(
                TEN_STAGES
                    .iter()
                    .map(|&s| NoOp(StageSet::of(&[s])))
                    .collect(),
            ),
            pipeline_10_written_hooks: pipeline(
                TEN_STAGES
                    .iter()
                    .map(|&s| WrittenNoOp(StageSet::of(&[s])))
                    .collect(),
            ),
            pipeline_10_hand_written_hooks: pipeline(
                TEN_STAGES
                    .iter()
                    .map(|&s| HandWrittenNoOp(StageSet::of(&[s])))
                    .collect(),
            ),
            pipeline_every_stage: pipeline(vec![NoOp(StageSet::ALL)]),
            pipeline_uninterested_hooks: uninterested_hooks(),
            tower_10_boxed: RefCell::new(tower_boxed_each()),
            tower_10_static: RefCell::new(tower_static()),
        }
    }

    /// Calls the typed tool `iterations` times with `Tool::execute`; returns the time taken.
    pub fn direct_typed(&self, iterations: u64) -> impl Future<Output = Duration> + '_ {
        self.run_harness("direct_typed", iterations, Vec::new())
    }

    /// Finds the tool in a registry by name and calls `ErasedTool::call` (JSON in, JSON
    /// out) `iterations` times; returns the time taken. The inputs are built here, before
    /// the returned future runs.
    pub fn direct_erased(&self, iterations: u64) -> impl Future<Output = Duration> + '_ {
        let inputs = (0..iterations).map(|_| add_input()).collect();
        self.direct_erased_with(inputs)
    }

    /// [`Self::direct_erased`] with these inputs, one call each.
    pub fn direct_erased_with(&self, inputs: Vec<Value>) -> impl Future<Output = Duration> + '_ {
        self.run_harness("direct_erased", inputs.len() as u64, inputs)
    }

    async fn run_harness(&self, name: &str, iterations: u64, inputs: Vec<Value>) -> Duration {
        let options = InvokeOptions::new().provide::<HarnessRun>((iterations, Mutex::new(inputs)));
        let nanos = self
            .direct
            .invoke(name, add_input(), options)
            .await
            .expect("the harness succeeds");
        Duration::from_nanos(nanos.as_u64().expect("the harness returns nanoseconds"))
    }
}

impl Default for Scenarios {
    fn default() -> Self {
        Self::new()
    }
}

/// A pipeline serving [`Add`] with these hooks.
fn pipeline<H: Hook>(hooks: Vec<H>) -> Pipeline {
    let mut builder = Pipeline::builder().tool(Add);
    for hook in hooks {
        builder = builder.hook(hook);
    }
    builder.build().expect("the pipeline builds")
}

/// A pipeline serving [`Add`] with five policies that leave it alone: retry (`add` is
/// not idempotent), a per-attempt timeout for another tool, consent for another tool, a
/// result cache (`add` is not read-only) and secret injection for another tool. What a
/// policy that does not apply to a tool costs its calls.
fn uninterested_hooks() -> Pipeline {
    use toolgate::hooks::cache::ResultCache;
    use toolgate::hooks::consent::Consent;
    use toolgate::hooks::retry::Retry;
    use toolgate::hooks::secrets::{InMemorySecrets, SecretInjection};
    use toolgate::hooks::timeout::{Timeout, TimeoutScope};
    Pipeline::builder()
        .tool(Add)
        .hook(
            Retry::builder()
                .build()
                .expect("the default retry policy builds"),
        )
        .hook(Timeout::only_listed(TimeoutScope::Attempt).tool("slow", Duration::from_secs(5)))
        .hook(Consent::builder().tool("delete").build())
        .hook(ResultCache::builder().build())
        .hook(
            SecretInjection::builder()
                .source(InMemorySecrets::new().with("token", "t"))
                .tool("deploy", ["token"])
                .build(),
        )
        .build()
        .expect("the pipeline builds")
}

/// Invokes `add` through `pipeline`, as a caller does.
pub fn invoke(
    pipeline: &Pipeline,
    input: Value,
) -> impl Future<Output = Result<Value, ToolError>> + '_ {
    pipeline.invoke("add", input, InvokeOptions::new())
}

/// Calls a tower stack as a caller does: ready, then call.
pub fn call_tower(
    service: &RefCell<JsonService>,
    input: Value,
) -> impl Future<Output = Result<Value, ToolError>> + use<> {
    let mut service = service.borrow_mut();
    // Pass-through layers over a `service_fn` are always ready; tower's contract still
    // wants `poll_ready` before `call`, and it costs the same as in real use.
    service
        .ready()
        .now_or_never()
        .expect("pass-through layers are always ready")
        .expect("pass-through layers never fail to be ready");
    service.call(input)
}
