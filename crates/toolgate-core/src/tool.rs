//! Tools: the typed [`Tool`] trait, tools from closures, and the type-erased
//! [`ErasedTool`] the registry stores.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use garde::Validate;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ToolInvokeContext;
pub use crate::definition::{ToolAnnotations, ToolDefinition, ToolSource};
use crate::error::{InputViolation, InputViolations, ToolError, in_json_words};
pub use crate::prepared::PreparedInput;

/// The future of one run of a tool: what [`ErasedTool::call`], a [`JsonTool`]'s handler and
/// a [`tool_fn_with_context`] closure return (`T` is the output, JSON by default). Make one
/// with `Box::pin(async move { … })`.
pub type ToolFuture<'a, T = Value> =
    Pin<Box<dyn Future<Output = Result<T, ToolError>> + Send + 'a>>;

/// What a typed tool's input must be: read from JSON (`Deserialize`), checked with garde
/// (`Validate`), described by schemars (`JsonSchema`). Implemented for every such type;
/// named so that a type that is not one gets an error that says what to write.
///
/// A tool's input is a JSON object, so a bare `String` or number is not one: put it in a
/// struct.
///
/// ```
/// use garde::Validate;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use toolgate_core::tool::ToolInput;
///
/// #[derive(Deserialize, Validate, JsonSchema)]
/// struct Shout {
///     #[garde(length(min = 1, max = 200))]
///     text: String,
/// }
///
/// fn is_tool_input<I: ToolInput>() {}
/// is_tool_input::<Shout>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool's input",
    label = "a tool's input must derive `Deserialize`, `Validate` and `JsonSchema`",
    note = "a tool's input is a JSON object: put a `String` or a number in a struct, e.g. `#[derive(Deserialize, Validate, JsonSchema)] struct Input {{ #[garde(length(max = 200))] text: String }}`",
    note = "if your type derives them already, check that its `garde` is 0.23 and its `schemars` 1, the versions toolgate uses (`cargo tree -i garde`)"
)]
pub trait ToolInput:
    DeserializeOwned + Validate<Context = ()> + JsonSchema + Send + Sync + 'static
{
}

impl<T> ToolInput for T where
    T: DeserializeOwned + Validate<Context = ()> + JsonSchema + Send + Sync + 'static
{
}

/// Anything a pipeline accepts as a tool: a typed [`Tool`] (a [`tool_fn`] too), a
/// [`JsonTool`], or an [`ErasedTool`] behind an `Arc`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a toolgate tool",
    label = "this needs `impl Tool for {Self}`, or `impl ErasedTool` behind an `Arc`",
    note = "a closure becomes a tool with `tool_fn(name, description, |input: MyInput| async move {{ … }})`; a tool known only by its JSON Schema is a `JsonTool`"
)]
pub trait IntoTool {
    /// The tool in the form the registry stores.
    fn into_tool(self) -> Arc<dyn ErasedTool>;
}

impl<T: Tool> IntoTool for T {
    fn into_tool(self) -> Arc<dyn ErasedTool> {
        Arc::new(Typed(self))
    }
}

impl<F> IntoTool for JsonTool<F>
where
    JsonTool<F>: ErasedTool,
{
    fn into_tool(self) -> Arc<dyn ErasedTool> {
        Arc::new(self)
    }
}

impl<T: ErasedTool> IntoTool for Arc<T> {
    fn into_tool(self) -> Arc<dyn ErasedTool> {
        self
    }
}

impl IntoTool for Arc<dyn ErasedTool> {
    fn into_tool(self) -> Arc<dyn ErasedTool> {
        self
    }
}

/// A tool with typed input and output.
///
/// The input type carries one set of attributes for both sides of the contract: serde for
/// the shape, garde for the bounds, and schemars turns both into the advertised JSON Schema
/// (a `#[garde(length(max = 10))]` shows up as `"maxLength": 10`).
///
/// # Examples
///
/// ```
/// use garde::Validate;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use toolgate_core::{Tool, ToolError, ToolInvokeContext};
///
/// #[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// struct AddInput {
///     #[garde(range(min = -1000, max = 1000))]
///     a: i64,
///     #[garde(range(min = -1000, max = 1000))]
///     b: i64,
/// }
///
/// #[derive(Serialize, Deserialize, JsonSchema)]
/// struct Sum { sum: i64 }
///
/// struct Add;
///
/// impl Tool for Add {
///     type Input = AddInput;
///     type Output = Sum;
///     fn name(&self) -> &str { "add" }
///     fn description(&self) -> &str { "Adds two numbers." }
///     async fn execute(&self, input: AddInput, _ctx: &ToolInvokeContext) -> Result<Sum, ToolError> {
///         Ok(Sum { sum: input.a + input.b })
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a typed toolgate tool",
    label = "this needs `impl Tool for {Self}`",
    note = "a closure becomes a tool with `tool_fn(name, description, |input: MyInput| async move {{ … }})`",
    note = "a tool known only by its JSON Schema is a `JsonTool`, which `PipelineBuilder::tool` takes as it is"
)]
pub trait Tool: Send + Sync + 'static {
    /// The input: deserialized from JSON, checked with garde, described by schemars.
    type Input: DeserializeOwned + Validate<Context = ()> + JsonSchema + Send + Sync + 'static;
    /// The output: serialized to JSON, described by schemars.
    type Output: Serialize + JsonSchema + Send + 'static;

    /// The unique name callers use.
    fn name(&self) -> &str;

    /// What the tool does, written for the model that will decide to call it.
    fn description(&self) -> &str;

    /// The version (part of cache keys: bump it when outputs change meaning).
    fn version(&self) -> &str {
        "1"
    }

    /// What the tool does to the world.
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::default()
    }

    /// Labels for policies.
    fn tags(&self) -> Vec<String> {
        Vec::new()
    }

    /// Runs the tool on a parsed, checked input.
    fn execute(
        &self,
        input: Self::Input,
        ctx: &ToolInvokeContext,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// The type-erased form of a tool, JSON in and JSON out: what the registry stores.
///
/// Typed tools get it through [`ToolRegistry::register`](crate::registry::ToolRegistry::register);
/// tools known only by a JSON Schema (an imported MCP tool) implement it directly.
pub trait ErasedTool: Send + Sync + 'static {
    /// The tool's definition.
    fn definition(&self) -> ToolDefinition;

    /// The tool's own check of an input, run right after the `will_validate_input` hooks.
    /// May return the parsed input so the first attempt can use it.
    ///
    /// # Errors
    ///
    /// [`ToolError::InvalidInput`] listing every failing field.
    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError>;

    /// Runs the tool on `ctx.input()` (or on `prepared`, when the input has not changed
    /// since it was checked).
    fn call<'a>(
        &'a self,
        prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> ToolFuture<'a>;
}

/// The JSON Schema of `T` as tools advertise it (draft 2020-12, subschemas inlined).
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// Parses and checks an input for a typed tool: serde with the path of a type error, then
/// garde with every failing field.
///
/// # Errors
///
/// [`ToolError::InvalidInput`].
pub fn parse_input<I>(input: &Value) -> Result<I, ToolError>
where
    I: DeserializeOwned + Validate<Context = ()>,
{
    // The well-formed input, the common case, is read without tracking paths; only an
    // input that fails is read again to find where (deserializing a `&Value` has no side
    // effects, so the second read fails the same way).
    // JSON Schema counts `1000.0` and `1e3` as integers; serde reads integers only from
    // numbers written as such, so an input that fails is read again with them so written.
    let read = I::deserialize(input).or_else(|plain| {
        integral(input)
            .and_then(|integral| I::deserialize(&integral).ok())
            .ok_or(plain)
    });
    let parsed: I = match read {
        Ok(parsed) => parsed,
        Err(plain) => {
            return Err(match serde_path_to_error::deserialize::<_, I>(input) {
                Err(e) => {
                    let path = e.path().to_string();
                    let path = if path == "." { String::new() } else { path };
                    let message = in_json_words(&e.into_inner().to_string());
                    ToolError::InvalidInput(InputViolations::one(path, message))
                }
                Ok(_) => ToolError::InvalidInput(InputViolations::one(
                    "",
                    in_json_words(&plain.to_string()),
                )),
            });
        }
    };
    parsed.validate().map_err(|report| {
        ToolError::InvalidInput(InputViolations(
            report
                .iter()
                .map(|(path, error)| InputViolation {
                    path: path.to_string(),
                    message: error.to_string(),
                })
                .collect(),
        ))
    })?;
    Ok(parsed)
}

/// `value` with every number that is a whole number but not written as one (`1000.0`,
/// `1e3`) written as one; `None` when it has none. Only numbers whose whole value a double
/// holds exactly (below 2^53) are taken.
fn integral(value: &Value) -> Option<Value> {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) => {
            let f = n.as_f64().filter(|_| n.is_f64())?;
            (f.fract() == 0.0 && f.abs() < EXACT).then(|| Value::from(f as i64))
        }
        Value::Array(items) => {
            let changed: Vec<Option<Value>> = items.iter().map(integral).collect();
            changed.iter().any(Option::is_some).then(|| {
                Value::Array(
                    changed
                        .into_iter()
                        .zip(items)
                        .map(|(new, old)| new.unwrap_or_else(|| old.clone()))
                        .collect(),
                )
            })
        }
        Value::Object(fields) => {
            let changed: Vec<Option<Value>> = fields.values().map(integral).collect();
            changed.iter().any(Option::is_some).then(|| {
                Value::Object(
                    changed
                        .into_iter()
                        .zip(fields)
                        .map(|(new, (key, old))| (key.clone(), new.unwrap_or_else(|| old.clone())))
                        .collect(),
                )
            })
        }
        _ => None,
    }
}

/// A [`Tool`] seen as an [`ErasedTool`].
pub(crate) struct Typed<T>(pub T);

impl<T: Tool> ErasedTool for Typed<T> {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.0.name().to_owned(),
            title: None,
            description: self.0.description().to_owned(),
            version: self.0.version().to_owned(),
            input_schema: schema_for::<T::Input>(),
            output_schema: Some(schema_for::<T::Output>()),
            annotations: self.0.annotations(),
            tags: self.0.tags(),
            source: ToolSource::Local,
        }
    }

    fn check_input(&self, input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        parse_input::<T::Input>(input).map(|i| Some(PreparedInput::new(i)))
    }

    fn call<'a>(
        &'a self,
        prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> ToolFuture<'a> {
        Box::pin(async move {
            let input = match prepared.and_then(PreparedInput::downcast::<T::Input>) {
                Some(input) => input,
                None => parse_input::<T::Input>(ctx.input())?,
            };
            let output = self.0.execute(input, ctx).await?;
            serde_json::to_value(output).map_err(|e| {
                ToolError::internal(format!("the tool's output could not be serialized: {e}"))
            })
        })
    }
}

/// A tool made from a closure: see [`tool_fn`] and [`tool_fn_with_context`].
pub struct FnTool<I, O, H> {
    name: String,
    description: String,
    version: String,
    annotations: ToolAnnotations,
    tags: Vec<String>,
    handler: H,
    _types: PhantomData<fn(I) -> O>,
}

/// A closure that runs a tool (implemented for the two closure shapes [`tool_fn`] and
/// [`tool_fn_with_context`] accept).
pub trait Handler<I, O>: Send + Sync + 'static {
    /// Runs the closure.
    fn run<'a>(&'a self, input: I, ctx: &'a ToolInvokeContext) -> ToolFuture<'a, O>;
}

/// The closure shape of [`tool_fn`]: input only.
pub struct InputOnly<F>(F);

impl<I, O, F, Fut> Handler<I, O> for InputOnly<F>
where
    F: Fn(I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    fn run<'a>(&'a self, input: I, _ctx: &'a ToolInvokeContext) -> ToolFuture<'a, O> {
        Box::pin((self.0)(input))
    }
}

/// The closure shape of [`tool_fn_with_context`]: input and context.
pub struct WithContext<F>(F);

impl<I, O, F> Handler<I, O> for WithContext<F>
where
    F: for<'a> Fn(I, &'a ToolInvokeContext) -> ToolFuture<'a, O> + Send + Sync + 'static,
{
    fn run<'a>(&'a self, input: I, ctx: &'a ToolInvokeContext) -> ToolFuture<'a, O> {
        (self.0)(input, ctx)
    }
}

/// A tool from an async closure over its typed input.
///
/// ```
/// use garde::Validate;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use toolgate_core::tool::ToolAnnotations;
/// use toolgate_core::{tool_fn, ToolError};
///
/// #[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// struct Echo { #[garde(length(max = 1000))] text: String }
///
/// let echo = tool_fn("echo", "Returns the text it is given.", |input: Echo| async move {
///     Ok::<_, ToolError>(input.text)
/// })
/// .annotations(ToolAnnotations::READ_ONLY);
/// ```
pub fn tool_fn<I, O, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> FnTool<I, O, InputOnly<F>>
where
    I: ToolInput,
    F: Fn(I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    FnTool::new(name.into(), description.into(), InputOnly(f))
}

/// A tool from a closure that also reads the context (providers, secrets, cancellation).
/// The closure returns a boxed future borrowing the context.
///
/// ```
/// use toolgate_core::tool::tool_fn_with_context;
/// use toolgate_core::{ToolError, ToolInvokeContext};
///
/// let whoami = tool_fn_with_context("whoami", "Names the caller.", |_: (), ctx: &ToolInvokeContext| {
///     Box::pin(async move { Ok::<_, ToolError>(ctx.user().id.clone()) })
/// });
/// ```
pub fn tool_fn_with_context<I, O, F>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> FnTool<I, O, WithContext<F>>
where
    I: ToolInput,
    F: for<'a> Fn(I, &'a ToolInvokeContext) -> ToolFuture<'a, O> + Send + Sync + 'static,
{
    FnTool::new(name.into(), description.into(), WithContext(f))
}

impl<I, O, H> FnTool<I, O, H> {
    fn new(name: String, description: String, handler: H) -> Self {
        FnTool {
            name,
            description,
            version: "1".to_owned(),
            annotations: ToolAnnotations::default(),
            tags: Vec::new(),
            handler,
            _types: PhantomData,
        }
    }

    /// Sets the version.
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Sets the annotations.
    #[must_use]
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Adds a tag.
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }
}

impl<I, O, H> Tool for FnTool<I, O, H>
where
    I: DeserializeOwned + Validate<Context = ()> + JsonSchema + Send + Sync + 'static,
    O: Serialize + JsonSchema + Send + 'static,
    H: Handler<I, O>,
{
    type Input = I;
    type Output = O;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn annotations(&self) -> ToolAnnotations {
        self.annotations
    }

    fn tags(&self) -> Vec<String> {
        self.tags.clone()
    }

    async fn execute(&self, input: I, ctx: &ToolInvokeContext) -> Result<O, ToolError> {
        self.handler.run(input, ctx).await
    }
}

/// A tool known only by its JSON Schema: JSON in, JSON out. Its input is checked against
/// the schema by the validation policy, not by the tool; the core only insists on an
/// object where the schema declares one.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{JsonTool, ToolError};
///
/// let upper = JsonTool::new(
///     "upper",
///     "Upper-cases `text`.",
///     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
///     |input, _ctx| Box::pin(async move {
///         let text = input["text"].as_str().unwrap_or_default().to_uppercase();
///         Ok::<_, ToolError>(json!({ "text": text }))
///     }),
/// );
/// ```
pub struct JsonTool<F> {
    definition: ToolDefinition,
    handler: F,
}

impl<F> JsonTool<F>
where
    F: for<'a> Fn(&'a Value, &'a ToolInvokeContext) -> ToolFuture<'a> + Send + Sync + 'static,
{
    /// A tool with this name, description and input schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: F,
    ) -> Self {
        JsonTool {
            definition: ToolDefinition {
                name: name.into(),
                title: None,
                description: description.into(),
                version: "1".to_owned(),
                input_schema,
                output_schema: None,
                annotations: ToolAnnotations::default(),
                tags: Vec::new(),
                source: ToolSource::Local,
            },
            handler,
        }
    }

    /// The definition, to adjust (version, annotations, tags, source, output schema).
    pub fn definition_mut(&mut self) -> &mut ToolDefinition {
        &mut self.definition
    }
}

impl<F> ErasedTool for JsonTool<F>
where
    F: for<'a> Fn(&'a Value, &'a ToolInvokeContext) -> ToolFuture<'a> + Send + Sync + 'static,
{
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn check_input(&self, _input: &Value) -> Result<Option<PreparedInput>, ToolError> {
        Ok(None)
    }

    fn call<'a>(
        &'a self,
        _prepared: Option<PreparedInput>,
        ctx: &'a ToolInvokeContext,
    ) -> ToolFuture<'a> {
        (self.handler)(ctx.input(), ctx)
    }
}
