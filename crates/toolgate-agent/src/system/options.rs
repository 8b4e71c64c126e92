//! The options of a batch and of a resume.

use std::any::TypeId;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::external::TypeMapKey;
use toolgate_core::suspension::RunningRecord;
use toolgate_core::{CallerId, InvokeOptions, User};

/// How the calls of a batch run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// One after the other, in call order.
    Sequential,
    /// At most this many at once (at least 1; any bound above the batch's size, up to
    /// `usize::MAX`, means every call at once); results still come back in call order.
    Parallel(usize),
}

/// The options of one batch.
#[derive(Clone, Debug)]
pub struct ExecuteOptions {
    pub(crate) user: Option<Arc<User>>,
    pub(crate) trace_id: Option<String>,
    pub(crate) concurrency: Option<Concurrency>,
    pub(crate) result_max_chars: Option<usize>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) cancellation: Option<CancellationToken>,
    pub(crate) providers: BatchProviders,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ExecuteOptions {
    /// The anonymous user, a generated trace id, the system's concurrency, limit and
    /// timeout.
    pub fn new() -> Self {
        ExecuteOptions {
            user: None,
            trace_id: None,
            concurrency: None,
            result_max_chars: None,
            timeout: None,
            deadline: None,
            cancellation: None,
            providers: BatchProviders::default(),
        }
    }

    /// Who the calls run for.
    #[must_use]
    pub fn user(mut self, user: impl Into<Arc<User>>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The trace id of the batch (generated when not given).
    #[must_use]
    pub fn trace_id(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }

    /// How the calls run (overrides the system's default).
    #[must_use]
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// The result size limit for these calls; wins over the thread's and the system's.
    #[must_use]
    pub fn result_max_chars(mut self, max_chars: usize) -> Self {
        self.result_max_chars = Some(max_chars);
        self
    }

    /// How long each call may take (overrides the system's default). A timeout too long for
    /// the clock to add (`Duration::MAX`) is none.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// When the whole batch must be answered: every call runs under the earlier of this
    /// deadline and its own [`timeout`](Self::timeout), and a call that has not started by
    /// then (it waited for its turn under [`Concurrency`]) does not run: its result is a
    /// `timeout` error saying the batch's time ran out. Without it, a batch lasts as long as
    /// its rounds of calls take, each round up to the timeout of one call.
    #[must_use]
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Cancelling this token cancels the calls of the batch: each one still running ends
    /// with [`ToolError::Cancelled`](toolgate_core::ToolError::Cancelled) after its tail
    /// (`on_error`, audit, releases), and its result says so. Each call's tool sees a
    /// child of the token, so a tool that cancels its own call does not cancel the others.
    #[must_use]
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Binds a request-scoped provider for every call of the batch, as
    /// [`InvokeOptions::provide`] does for one call: each call gets its own clone of
    /// `value`, and hooks and tools read it with `ctx.get::<K>()`. A second binding of the
    /// same key replaces the first.
    ///
    /// This is how a host hands each call what belongs to the request rather than to the
    /// user or the session, such as the access token its caller presented. The value is
    /// never printed: `Debug` of these options shows only how many providers are bound.
    /// The [`TraceId`](crate::TraceId) of the batch is bound after these, so it always
    /// names the batch, whatever is bound here.
    ///
    /// # Examples
    ///
    /// A tenant id the host knows from the request, read by every call's tool:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use toolgate_agent::{ExecuteOptions, InMemoryStateManager, ThreadConfig, ToolCall, ToolSystem};
    /// use toolgate_core::external::TypeMapKey;
    /// use toolgate_core::tool::tool_fn_with_context;
    /// use toolgate_core::{Pipeline, ToolError, ToolInvokeContext};
    /// # use garde::Validate; use schemars::JsonSchema; use serde::{Deserialize, Serialize};
    /// # #[derive(Deserialize, Serialize, Validate, JsonSchema)] struct NoArgs {}
    ///
    /// struct Tenant;
    /// impl TypeMapKey for Tenant {
    ///     type Value = String;
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pipeline = Pipeline::builder().tool(tool_fn_with_context(
    ///     "tenant",
    ///     "Names the tenant of the request.",
    ///     |_: NoArgs, ctx: &ToolInvokeContext| {
    ///         let tenant = ctx.get::<Tenant>().map(|t| (*t).clone());
    ///         Box::pin(async move { tenant.map_err(|e| ToolError::internal(e.to_string())) })
    ///     },
    /// ));
    /// let state = Arc::new(InMemoryStateManager::new());
    /// state.set_config("thread-1", ThreadConfig::enabling(["tenant"]));
    /// let system = ToolSystem::builder(pipeline, state).build()?;
    ///
    /// let options = ExecuteOptions::new().provide::<Tenant>("acme".to_owned());
    /// assert!(!format!("{options:?}").contains("acme"), "a provider's value is never printed");
    /// let calls = vec![
    ///     ToolCall::new("c1", "tenant", json!({})),
    ///     ToolCall::new("c2", "tenant", json!({})),
    /// ];
    /// let results = system.execute_tools("thread-1", calls, options).await;
    /// assert_eq!(results[0].output, Some(json!("acme")));
    /// assert_eq!(results[1].output, Some(json!("acme")));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn provide<K>(mut self, value: K::Value) -> Self
    where
        K: TypeMapKey,
        K::Value: Clone + Send + Sync + 'static,
    {
        self.providers.insert::<K>(value);
        self
    }
}

/// The request-scoped providers bound to every call of a batch: for each key, how to bind
/// a fresh clone of its value into one call's options.
#[derive(Clone, Default)]
pub(crate) struct BatchProviders(Vec<(TypeId, BindProvider)>);

/// Binds one provider's value into a call's options.
type BindProvider = Arc<dyn Fn(InvokeOptions) -> InvokeOptions + Send + Sync>;

impl BatchProviders {
    fn insert<K>(&mut self, value: K::Value)
    where
        K: TypeMapKey,
        K::Value: Clone + Send + Sync + 'static,
    {
        let bind: BindProvider =
            Arc::new(move |options: InvokeOptions| options.provide::<K>(value.clone()));
        let key = TypeId::of::<K>();
        match self.0.iter_mut().find(|(bound, _)| *bound == key) {
            Some((_, earlier)) => *earlier = bind,
            None => self.0.push((key, bind)),
        }
    }

    /// `options` with every provider bound.
    pub(crate) fn bind(&self, options: InvokeOptions) -> InvokeOptions {
        self.0
            .iter()
            .fold(options, |options, (_, bind)| bind(options))
    }
}

/// How many are bound, never what: a provider may hold a secret.
impl std::fmt::Debug for BatchProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("len", &self.0.len())
            .finish()
    }
}

/// The options of a resume.
#[derive(Clone, Debug, Default)]
pub struct ResumeOptions {
    pub(crate) user: Option<Arc<User>>,
    pub(crate) result_max_chars: Option<usize>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancellation: Option<CancellationToken>,
    pub(crate) decided_by: Option<CallerId>,
    pub(crate) reason: Option<String>,
    pub(crate) running: Option<RunningRecord>,
}

impl ResumeOptions {
    /// The result size limit of the call's batch, when the batch set one (else the
    /// thread's as it is now, or the system's), and the system's timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The result size limit; wins over the one the call's batch set, the thread's and
    /// the system's.
    #[must_use]
    pub fn result_max_chars(mut self, max_chars: usize) -> Self {
        self.result_max_chars = Some(max_chars);
        self
    }

    /// How long the rest of the call may take. A timeout too long for the clock to add
    /// (`Duration::MAX`) is none.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The user who made the call, as the host knows them now (their roles or tenant may
    /// have changed while the call waited): an approved or completed call is authorized
    /// again as them. Must be the same user (id) as the call's: an approval or completion
    /// as anyone else is [`ResumeError::NotTheCaller`](crate::ResumeError::NotTheCaller).
    #[must_use]
    pub fn user(mut self, user: impl Into<Arc<User>>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Who decides — an approver's user id, or the approver (`&User`) with their tenant:
    /// kept with the decision, for the audit record and hooks
    /// ([`InvokeOptions::decided_by`](toolgate_core::InvokeOptions::decided_by)).
    #[must_use]
    pub fn decided_by(mut self, approver: impl Into<CallerId>) -> Self {
        self.decided_by = Some(approver.into());
        self
    }

    /// Why the approver approved: kept with the decision, for the audit record and hooks
    /// ([`InvokeOptions::decision_reason`](toolgate_core::InvokeOptions::decision_reason)).
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The running record to keep for the call as the resume takes it, in the same step
    /// of the store
    /// ([`InvokeOptions::running`](toolgate_core::InvokeOptions::running)).
    #[must_use]
    pub fn running(mut self, running: RunningRecord) -> Self {
        self.running = Some(running);
        self
    }

    /// Cancelling this token cancels the resumed call: it ends with
    /// [`ToolError::Cancelled`](toolgate_core::ToolError::Cancelled) after its tail
    /// (`on_error`, audit, releases).
    #[must_use]
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }
}
