//! The [`Pipeline`]: a registry of tools with compiled hook plans, and the invoke API.

mod builder;
mod options;
mod run;
mod stages;
mod tail;
mod telemetry;
mod walk;

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use crate::limits::InputLimits;
pub use builder::PipelineBuilder;
pub use options::InvokeOptions;
pub use telemetry::{SpanValues, TARGET as SPAN_TARGET};

use crate::approval::{self, CallBinding};
use crate::context::{ContextParts, RequestId, Restored, ToolScope};
use crate::definition::ToolDefinition;
use crate::error::{InputViolations, ToolError};
use crate::plan::ToolPlan;
use crate::provider::{PerCall, Scopes, SessionProviders, bounded_session_id, kept_session_id};
use crate::registry::{ToolRef, ToolRegistry};
use crate::stage::Stage;
use crate::suspension::{
    ResumeDecision, RetryApproval, RunningRecord, SuspendedInvocation, SuspensionFilter,
    SuspensionStore, SuspensionStoreError,
};
use crate::tool::ErasedTool;
use crate::user::{CallerId, User};
use walk::Start;

/// The whole outcome of one invocation, from [`Pipeline::invoke_detailed`]: the output or
/// the error, plus what the caller of an agent layer reports alongside it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Invocation {
    /// The output, or why there is none (as [`Pipeline::invoke`] returns it).
    pub result: Result<Value, ToolError>,
    /// The metadata hooks gathered ([`ToolInvokeContext::metadata`](crate::ToolInvokeContext::metadata)): repairs, sources…
    pub metadata: serde_json::Map<String, Value>,
    /// How many times the tool ran (0 when the call ended before execution, or was
    /// completed by a person).
    pub attempts: u32,
    /// How long the invocation took, from its context's creation to its end.
    pub duration: std::time::Duration,
}

impl Invocation {
    fn concluded(result: Result<Value, ToolError>, details: run::Details<'_>) -> Self {
        let (metadata, attempts, duration) = details.into_parts();
        Invocation {
            result,
            metadata,
            attempts,
            duration,
        }
    }

    fn rejected(error: ToolError) -> Self {
        Invocation {
            result: Err(error),
            metadata: serde_json::Map::new(),
            attempts: 0,
            duration: std::time::Duration::ZERO,
        }
    }
}

/// What the engine of every invocation of a pipeline shares.
pub(crate) struct Shared {
    pub suspensions: Arc<dyn SuspensionStore>,
    /// How long one hook may take at a tail stage (on_error, record, release, end).
    pub tail_hook_timeout: std::time::Duration,
    /// Which values the invocation spans record.
    pub span_values: SpanValues,
    /// Whether a traced invocation's stages get spans of their own.
    pub stage_spans: bool,
    /// The configuration generation approvals are bound to.
    pub generation: Arc<str>,
    /// How soon an approved call must start to run.
    pub approval_run_within: std::time::Duration,
}

/// A registered tool with its compiled plan.
pub(crate) struct ToolEntry {
    /// What its invocations' contexts see: the definition and the provider scopes.
    pub scope: Arc<ToolScope>,
    pub tool: Arc<dyn ErasedTool>,
    pub plan: ToolPlan,
    pub shared: Arc<Shared>,
    pub wants_object: bool,
    /// The digest of the tool's definition, made the first time a call of it waits.
    pub definition_digest: std::sync::OnceLock<String>,
}

impl ToolEntry {
    /// The binding of a call of this tool by `user` with `input` (see [`approval`]).
    ///
    /// [`approval`]: crate::approval
    pub(crate) fn binding(&self, user: &User, input: &Value) -> CallBinding {
        let definition = &self.scope.definition;
        let digest = self
            .definition_digest
            .get_or_init(|| approval::definition_digest(definition));
        CallBinding::with_definition_digest(
            definition,
            digest.clone(),
            user,
            input,
            &self.shared.generation,
        )
    }
}

struct PipelineInner {
    registry: ToolRegistry,
    entries: Vec<Arc<ToolEntry>>,
    scopes: Arc<Scopes>,
    shared: Arc<Shared>,
    limits: InputLimits,
    /// The providers the host supplies with every call, checked on each fresh call.
    per_call: Box<[PerCall]>,
}

/// A compiled pipeline: tools, hooks in per-tool plans, providers. Cheap to clone (one
/// `Arc`), safe to share across tasks.
///
/// # Examples
///
/// ```
/// use garde::Validate;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
/// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
///
/// #[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// struct Args {
///     #[garde(range(min = 1, max = 50))]
///     limit: u32,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder().tool(tool_fn("count", "Counts to `limit`.", |a: Args| async move {
///     Ok::<_, ToolError>((1..=a.limit).collect::<Vec<_>>())
/// })).build()?;
///
/// let out = pipeline
///     .invoke("count", json!({ "limit": 3 }), InvokeOptions::new().user(User::new("alice")))
///     .await?;
/// assert_eq!(out, json!([1, 2, 3]));
///
/// let err = pipeline.invoke("count", json!({ "limit": 99 }), InvokeOptions::new()).await.unwrap_err();
/// assert_eq!(err.to_string(), "invalid arguments: argument `limit`: greater than 50");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<PipelineInner>,
}

impl Pipeline {
    /// A builder with no tools and no hooks.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder::new()
    }

    /// The tools this pipeline serves.
    pub fn registry(&self) -> &ToolRegistry {
        &self.inner.registry
    }

    /// Every tool's definition, in registration order.
    pub fn definitions(&self) -> impl ExactSizeIterator<Item = &ToolDefinition> {
        self.inner.registry.definitions()
    }

    /// The compiled plan of a tool: each stage that has hooks, with the hooks' names in the
    /// order they run. A hook whose [interest](crate::Hook::interest) in the tool is never
    /// is not in it.
    pub fn plan(&self, tool: &str) -> Option<Vec<(Stage, Vec<String>)>> {
        self.entry(tool).ok().map(|e| e.plan.describe())
    }

    /// How many sessions hold session-scoped providers.
    pub fn session_count(&self) -> usize {
        self.inner.scopes.sessions.len()
    }

    /// Drops a session and its providers. Returns whether it existed. `id` is the id as
    /// given to [`InvokeOptions::session`] (a long one is looked up by its digest, see
    /// [`bounded_session_id`]).
    pub fn end_session(&self, id: &str) -> bool {
        self.inner.scopes.sessions.remove(&bounded_session_id(id))
    }

    /// The host's handle on the providers of session `id`: what it binds there, every call
    /// made with [`InvokeOptions::session`]`(id)` reads, whoever makes it — so seed a
    /// session whose id no other user can send (see [`InvokeOptions::session`]). An id
    /// longer than [`MAX_SESSION_ID_LEN`](crate::provider::MAX_SESSION_ID_LEN) bytes is
    /// kept as its digest, as `InvokeOptions::session` keeps it. A session made here
    /// belongs to the host, not to a caller (see
    /// [`SessionConfig`](crate::provider::SessionConfig)). See [`SessionProviders`].
    pub fn session(&self, id: impl AsRef<str>) -> SessionProviders {
        SessionProviders::new(Arc::clone(&self.inner.scopes), kept_session_id(id.as_ref()))
    }

    /// Invokes a tool by name with JSON input.
    ///
    /// # Errors
    ///
    /// Every way an invocation can end without an output, as a [`ToolError`]; a suspended
    /// call ends with [`ToolError::Suspended`] carrying the id to [`resume`](Self::resume).
    pub async fn invoke(
        &self,
        tool: &str,
        input: Value,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        let entry = self.entry(tool).inspect_err(rejected)?;
        self.inner.limits.check(&input).inspect_err(rejected)?;
        self.check_supplied(&options).inspect_err(rejected)?;
        let parts = context_parts(entry, input, options, None);
        run::run_to_end(entry, parts, Start::Fresh, |result, _| result).await
    }

    /// Invokes a tool by name with JSON input, like [`invoke`](Self::invoke), and returns
    /// the whole [`Invocation`]: the result plus metadata, attempts and duration.
    pub async fn invoke_detailed(
        &self,
        tool: &str,
        input: Value,
        options: InvokeOptions,
    ) -> Invocation {
        let entry = match self.entry(tool).inspect_err(rejected) {
            Ok(entry) => entry,
            Err(error) => return Invocation::rejected(error),
        };
        if let Err(error) = self.inner.limits.check(&input).inspect_err(rejected) {
            return Invocation::rejected(error);
        }
        if let Err(error) = self.check_supplied(&options).inspect_err(rejected) {
            return Invocation::rejected(error);
        }
        let parts = context_parts(entry, input, options, None);
        run::run_to_end(entry, parts, Start::Fresh, Invocation::concluded).await
    }

    /// Invokes a tool by name with JSON text, checked against the size and depth limits
    /// before it is parsed.
    ///
    /// # Errors
    ///
    /// As [`invoke`](Self::invoke); text that is not JSON is [`ToolError::InvalidInput`].
    pub async fn invoke_str(
        &self,
        tool: &str,
        json: &str,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        let entry = self.entry(tool).inspect_err(rejected)?;
        let input = self.inner.limits.parse(json).inspect_err(rejected)?;
        self.check_supplied(&options).inspect_err(rejected)?;
        let parts = context_parts(entry, input, options, None);
        run::run_to_end(entry, parts, Start::Fresh, |result, _| result).await
    }

    /// Invokes a typed tool with a typed input, and reads the output back as its type.
    ///
    /// # Errors
    ///
    /// As [`invoke`](Self::invoke).
    pub async fn invoke_typed<I, O>(
        &self,
        tool: &ToolRef<I, O>,
        input: I,
        options: InvokeOptions,
    ) -> Result<O, ToolError>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        let input = serde_json::to_value(input)
            .map_err(|e| ToolError::InvalidInput(InputViolations::one("", e.to_string())))?;
        let output = self.invoke(tool.name(), input, options).await?;
        serde_json::from_value(output).map_err(|e| {
            ToolError::internal(format!(
                "the output of `{}` no longer has its declared type (an output hook reshaped it): {e}",
                tool.name()
            ))
        })
    }

    /// The suspended call with this id, left in place.
    ///
    /// # Errors
    ///
    /// [`ToolError::SuspensionExpired`] when it waited too long; a 503 abort when the
    /// suspension store fails.
    pub async fn suspended(&self, id: &str) -> Result<Option<SuspendedInvocation>, ToolError> {
        Ok(self.inner.shared.suspensions.get(id).await?)
    }

    /// Up to `limit` waiting calls that match `filter`, in id order, after the id `after`:
    /// see [`SuspensionStore::list`].
    ///
    /// # Errors
    ///
    /// [`SuspensionStoreError::CannotList`] when the suspension store cannot enumerate the
    /// calls it keeps; otherwise the store's own error.
    pub async fn list_suspended(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        self.inner
            .shared
            .suspensions
            .list(filter, after, limit)
            .await
    }

    /// The store this pipeline's calls wait in: for a host that keeps the outcomes of
    /// decided calls there ([`SuspensionStore::keep_outcome`]) or reads them back.
    pub fn suspension_store(&self) -> &Arc<dyn SuspensionStore> {
        &self.inner.shared.suspensions
    }

    /// Resumes a suspended call. It continues after the stage that suspended it, without
    /// running the earlier stages again — except `will_acquire_semaphore`, because the
    /// concurrency permit was given back while the call waited, and, unless the decision
    /// is a rejection, `will_authorize` and `will_check_feature_flags`: whether the caller
    /// may call the tool is decided again by this pipeline's hooks, as they are now.
    /// Session and request id are those of the suspended call; `options` may set a
    /// deadline, a cancellation token and request providers. The caller is the suspended
    /// call's, as they were when it waited, unless `options` names a
    /// [`user`](InvokeOptions::user): the same user as the host knows them now, whose roles
    /// may have changed while the call waited (not their id or tenant, which say who they
    /// are: `ann` of another tenant is another caller). A host that can look its users up
    /// again should name them, so that a caller demoted while their call waited is
    /// authorized as what they are now. A rejection runs no policy and ignores it.
    ///
    /// # Errors
    ///
    /// An internal error, before anything is taken, when `options` names another user than
    /// the one who made the call, by id or tenant (the call still waits);
    /// [`ToolError::UnknownSuspension`] for an id that is unknown or already resumed;
    /// [`ToolError::SuspensionExpired`] for one that waited too long;
    /// [`ToolError::NotDecided`] (503) when the suspension store fails to look the call up
    /// or to take it — nothing was decided, and the call goes on waiting;
    /// `unknown_tool` (404) when this pipeline no longer has the tool (the call ends);
    /// otherwise as [`invoke`](Self::invoke).
    pub async fn resume(
        &self,
        suspension_id: &str,
        decision: ResumeDecision,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        self.resume_detailed(suspension_id, decision, options)
            .await
            .result
    }

    /// Resumes a suspended call, like [`resume`](Self::resume), and returns the whole
    /// [`Invocation`]. The metadata includes what was gathered before the suspension.
    pub async fn resume_detailed(
        &self,
        suspension_id: &str,
        decision: ResumeDecision,
        options: InvokeOptions,
    ) -> Invocation {
        match self.resume_context(suspension_id, &decision, options).await {
            Ok((entry, parts, after)) => {
                run::run_to_end(
                    entry,
                    parts,
                    Start::Resume { after, decision },
                    Invocation::concluded,
                )
                .await
            }
            Err(error) => Invocation::rejected(error),
        }
    }

    async fn resume_context(
        &self,
        suspension_id: &str,
        decision: &ResumeDecision,
        mut options: InvokeOptions,
    ) -> Result<(&Arc<ToolEntry>, ContextParts, Stage), ToolError> {
        // A rejection is always allowed: it ends a call that can no longer be approved.
        let check = !matches!(decision, ResumeDecision::Reject { .. });
        let caller_now = options.user.take().filter(|_| check);
        let resume = *options.resume.take().unwrap_or_default();
        let (entry, saved) = self
            .take_suspended(suspension_id, check, caller_now.as_deref(), resume.running)
            .await?;
        options.session_id = saved.session_id.as_deref().map(Arc::from);
        options.request_id = Some(saved.request_id);
        // The caller as the host knows them now, if it said: their roles may have changed
        // while the call waited, and the policy stages run again as them.
        options.user = Some(caller_now.unwrap_or_else(|| Arc::new(saved.user)));
        let restored = Box::new(Restored {
            output: saved.output,
            metadata: saved.metadata,
            decision: decision.clone(),
            decided_by: resume.decided_by,
            decision_reason: resume.decision_reason,
            run_by: check
                .then(|| tokio::time::Instant::now() + self.inner.shared.approval_run_within),
            retry_of: None,
            resumed_from: Some(suspension_id.to_owned()),
        });
        let parts = context_parts(entry, saved.input, options, Some(restored));
        Ok((entry, parts, saved.stage))
    }

    /// Approves a waiting call for its caller to make again, instead of running it now:
    /// the call ends, and the next call of the same caller whose [binding](crate::approval)
    /// is equal — same tool and definition, same input once validated, defaulted and
    /// redacted, same configuration generation — runs once without waiting, if it comes
    /// within [`approval_run_within`](PipelineBuilder::approval_run_within). Any other call
    /// waits as usual and leaves the approval in place. `decided_by` names the approver for
    /// the record: their user id (`"boss".into()`), or `CallerId::of(&approver)` with
    /// their tenant.
    ///
    /// For callers that answer "needs approval" by calling again once a person has said
    /// yes, as agent frameworks do. The approval carries no id for the caller to replay: a
    /// call uses it by being the same call.
    ///
    /// # Errors
    ///
    /// As [`resume`](Self::resume) before the call runs (`unknown_suspension`,
    /// `suspension_expired`, `approval_mismatch`, [`ToolError::NotDecided`]);
    /// `cannot_approve_retries` (501) when the
    /// suspension store cannot keep approvals for a retry, and past its caps the errors of
    /// a store that is full — the call still waits then.
    ///
    /// # Examples
    ///
    /// ```
    /// use garde::Validate;
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    /// use serde_json::json;
    /// use toolgate_core::hook::hook_fn;
    /// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, Stage, ToolError, User};
    ///
    /// #[derive(Deserialize, Validate, JsonSchema)]
    /// struct Wipe {
    ///     #[garde(skip)]
    ///     disk: u32,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pipeline = Pipeline::builder()
    ///     .tool(tool_fn("wipe", "Wipes a disk.", |w: Wipe| async move {
    ///         Ok::<_, ToolError>(format!("wiped {}", w.disk))
    ///     }))
    ///     .hook(hook_fn(Stage::WillCheckConsent, |ctx| ctx.suspend("a person approves wipes").into()))
    ///     .build()?;
    /// let ann = || InvokeOptions::new().user(User::new("ann"));
    ///
    /// let waiting = pipeline.invoke("wipe", json!({"disk": 1}), ann()).await.unwrap_err();
    /// let ToolError::Suspended { suspension_id, .. } = waiting else { panic!("{waiting}") };
    /// pipeline.approve_retry(&suspension_id, Some("boss".into())).await?;
    ///
    /// // Another disk is another call: it waits for its own approval.
    /// let other = pipeline.invoke("wipe", json!({"disk": 2}), ann()).await.unwrap_err();
    /// assert_eq!(other.code(), "suspended");
    /// // The approved call runs, once.
    /// assert_eq!(pipeline.invoke("wipe", json!({"disk": 1}), ann()).await?, json!("wiped 1"));
    /// let again = pipeline.invoke("wipe", json!({"disk": 1}), ann()).await.unwrap_err();
    /// assert_eq!(again.code(), "suspended");
    /// # Ok(()) }
    /// ```
    pub async fn approve_retry(
        &self,
        suspension_id: &str,
        decided_by: Option<CallerId>,
    ) -> Result<RetryApproval, ToolError> {
        self.approve_retry_keeping(suspension_id, decided_by, None)
            .await
    }

    /// Approves a waiting call for a retry, like [`approve_retry`](Self::approve_retry),
    /// keeping `running` as the call's running record as the approval takes it, in the
    /// same step of the store ([`SuspensionStore::take_running`]); removed again if the
    /// call goes back to wait.
    ///
    /// # Errors
    ///
    /// As [`approve_retry`](Self::approve_retry).
    ///
    /// [`SuspensionStore::take_running`]: crate::suspension::SuspensionStore::take_running
    pub async fn approve_retry_running(
        &self,
        suspension_id: &str,
        decided_by: Option<CallerId>,
        running: RunningRecord,
    ) -> Result<RetryApproval, ToolError> {
        self.approve_retry_keeping(suspension_id, decided_by, Some(running))
            .await
    }

    async fn approve_retry_keeping(
        &self,
        suspension_id: &str,
        decided_by: Option<CallerId>,
        running: Option<RunningRecord>,
    ) -> Result<RetryApproval, ToolError> {
        let token = running.as_ref().map(|r| r.token.clone());
        let (entry, saved) = self
            .take_suspended(suspension_id, true, None, running)
            .await?;
        let decided_at = SystemTime::now();
        let approval = RetryApproval {
            binding: saved
                .binding
                .clone()
                .unwrap_or_else(|| entry.binding(&saved.user, &saved.input)),
            suspension_id: saved.id.clone(),
            decided_by_tenant: decided_by.as_ref().and_then(|d| d.tenant.clone()),
            decided_by: decided_by.map(|d| d.id),
            decided_at,
            expires_at: decided_at + self.inner.shared.approval_run_within,
        };
        let store = &self.inner.shared.suspensions;
        if let Err(error) = store.keep_retry_approval(approval.clone()).await {
            // Not approved after all: the call goes back to wait for another decision.
            if let Err(lost) = store.save(saved).await {
                tracing::error!(suspension_id, %lost, "a call whose approval for a retry could not be kept could not be put back to wait either");
            }
            // Nothing runs: the record kept as the call was taken goes.
            if let Some(token) = token
                && let Err(left) = store.remove_running(suspension_id, &token).await
            {
                tracing::warn!(suspension_id, %left, "the running record of a call put back to wait could not be removed");
            }
            return Err(error.into());
        }
        tracing::info!(suspension_id, tool = %approval.binding.tool, user = %approval.binding.user, decided_by = approval.decided_by.as_deref().unwrap_or(""), "call approved for a retry");
        Ok(approval)
    }

    /// The configuration generation approvals are bound to
    /// ([`PipelineBuilder::generation`]).
    pub fn generation(&self) -> &str {
        &self.inner.shared.generation
    }

    /// Hands out the waiting call `suspension_id` once, with its tool's entry. With
    /// `check`, only while its binding still holds — the tool's definition as it was, and
    /// the stored call (caller, input) as it was bound; a mismatch leaves the call waiting.
    /// The configuration generation is not compared: a resumed call is authorized again
    /// under the policies as they are now, and an approval for a retry carries the
    /// generation in its binding.
    async fn take_suspended(
        &self,
        suspension_id: &str,
        check: bool,
        caller_now: Option<&User>,
        running: Option<RunningRecord>,
    ) -> Result<(&Arc<ToolEntry>, SuspendedInvocation), ToolError> {
        let store = &self.inner.shared.suspensions;
        let unknown = || ToolError::UnknownSuspension {
            id: suspension_id.to_owned(),
        };
        let gone = |tool: &str| {
            ToolError::abort(
                format!(
                    "tool `{tool}` no longer exists: it was removed while the call waited for approval, so the call did not run"
                ),
                "unknown_tool",
                404,
            )
        };
        if check {
            // Checked on a look first, so that a mismatch does not use the call up; the
            // take below is what hands it out once.
            // A call whose tool is gone is handed out below and ends.
            let waiting = store
                .get(suspension_id)
                .await
                .map_err(|e| not_decided(suspension_id, e))?
                .ok_or_else(unknown)?;
            if let Some(now) = caller_now
                && !now.is_same_caller(&waiting.user)
            {
                return Err(ToolError::internal(format!(
                    "the call `{suspension_id}` was made by {}, and the host resumed it as {}: a resumed call runs as the user who made it. The call still waits",
                    waiting.user.named(),
                    now.named()
                )));
            }
            if let (Ok(entry), Some(bound)) = (self.entry(&waiting.tool), &waiting.binding) {
                // A reload's policies do not void a waiting call: the resumed call is
                // authorized again by the hooks as they are now (`RUN_AGAIN`).
                let now = CallBinding {
                    generation: bound.generation.clone(),
                    ..entry.binding(&waiting.user, &waiting.input)
                };
                if let Some(what) = now.mismatch(bound) {
                    tracing::warn!(suspension_id, tool = %waiting.tool, differs = what, "a waiting call was not resumed: its approval is bound to something that changed");
                    return Err(ToolError::abort(
                        format!(
                            "the call `{suspension_id}` was not run: {what} is not what it was when the call waited, and an approval holds only for the call as it was. The call still waits: reject it, or decide on it where {what} is unchanged"
                        ),
                        "approval_mismatch",
                        409,
                    ));
                }
            }
        }
        let taken = match running {
            Some(RunningRecord { record, token }) => {
                store.take_running(suspension_id, record, &token).await
            }
            None => store.take(suspension_id).await,
        };
        let saved = taken
            .map_err(|e| not_decided(suspension_id, e))?
            .ok_or_else(unknown)?;
        let entry = self.entry(&saved.tool).map_err(|_| gone(&saved.tool))?;
        Ok((entry, saved))
    }

    /// A fresh call brings every provider the host declared it supplies with every call.
    #[inline]
    fn check_supplied(&self, options: &InvokeOptions) -> Result<(), ToolError> {
        if self.inner.per_call.is_empty() {
            return Ok(());
        }
        self.inner
            .scopes
            .check_supplied(
                &self.inner.per_call,
                &options.providers,
                options.session_id.as_deref(),
            )
            .map_err(ToolError::Provider)
    }

    #[inline]
    fn entry(&self, tool: &str) -> Result<&Arc<ToolEntry>, ToolError> {
        self.inner
            .registry
            .index_of(tool)
            .map(|i| &self.inner.entries[i])
            .ok_or_else(|| ToolError::UnknownTool {
                name: tool.to_owned(),
            })
    }
}

fn rejected(error: &ToolError) {
    if let ToolError::Provider(wiring) = error {
        tracing::error!(code = error.code(), error = %wiring, "invocation rejected before the pipeline");
        return;
    }
    tracing::debug!(
        code = error.code(),
        "invocation rejected before the pipeline"
    );
}

/// The error of a decision on the waiting call `id` that the store failed to look up or to
/// take: [`ToolError::NotDecided`], but for a call that expired, which no decision can
/// take any more.
#[cold]
fn not_decided(id: &str, error: SuspensionStoreError) -> ToolError {
    match error {
        SuspensionStoreError::Expired { .. } => error.into(),
        other => ToolError::NotDecided {
            id: id.to_owned(),
            message: other.to_string(),
        },
    }
}

/// What the context of an invocation is made of; the context itself is made where it stays
/// for the whole run, inside the invocation future.
#[inline]
fn context_parts(
    entry: &Arc<ToolEntry>,
    input: Value,
    options: InvokeOptions,
    restored: Option<Box<Restored>>,
) -> ContextParts {
    let deadline = options.effective_deadline();
    ContextParts {
        scope: Arc::clone(&entry.scope),
        session_id: options.session_id,
        request_id: options
            .request_id
            .map_or_else(RequestId::generate, RequestId::from),
        user: options.user,
        input,
        deadline,
        cancel: options.cancellation,
        providers: options.providers,
        no_store: options.no_store,
        restored,
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("tools", &self.inner.registry.len())
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    pub(crate) fn from_parts(
        registry: ToolRegistry,
        entries: Vec<Arc<ToolEntry>>,
        scopes: Arc<Scopes>,
        shared: Arc<Shared>,
        limits: InputLimits,
        per_call: Box<[PerCall]>,
    ) -> Self {
        Pipeline {
            inner: Arc::new(PipelineInner {
                registry,
                entries,
                scopes,
                shared,
                limits,
                per_call,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::hook::{Hook, HookFuture};
    use crate::stage::StageSet;
    use crate::{JsonTool, ToolInvokeContext};

    /// A hand-written hook that keeps the trait's default methods at two stages.
    struct KeepsDefaults;

    impl Hook for KeepsDefaults {
        fn stages(&self) -> StageSet {
            StageSet::of(&[Stage::WillAuthorize, Stage::WillAudit])
        }
    }

    /// A hand-written hook that answers at once at `will_authorize`, with a method of its
    /// own: nothing proves it always will.
    struct OwnMethod;

    impl Hook for OwnMethod {
        fn stages(&self) -> StageSet {
            StageSet::of(&[Stage::WillAuthorize])
        }

        fn will_authorize<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            HookFuture::ok()
        }
    }

    fn pipeline(hooks: impl FnOnce(PipelineBuilder) -> PipelineBuilder) -> Pipeline {
        let tool = JsonTool::new("t", "echoes", json!({"type": "object"}), |input, _ctx| {
            let output = input.clone();
            Box::pin(async move { Ok(output) })
        });
        hooks(Pipeline::builder().tool(tool)).build().unwrap()
    }

    #[tokio::test]
    async fn a_stage_whose_hooks_keep_their_defaults_runs_in_place_after_the_first_call() {
        let pipeline = pipeline(|b| b.hook(KeepsDefaults));
        let plan = &pipeline.entry("t").unwrap().plan;
        assert!(!plan.is_synchronous(Stage::WillAuthorize));
        pipeline
            .invoke("t", json!({}), InvokeOptions::new())
            .await
            .unwrap();
        assert!(plan.is_synchronous(Stage::WillAuthorize));
        assert!(plan.is_synchronous(Stage::WillAudit));
    }

    #[tokio::test]
    async fn a_hook_keeping_its_defaults_is_found_out_behind_every_wrapper() {
        type Register = Box<dyn FnOnce(PipelineBuilder) -> PipelineBuilder>;
        let wrapped: [(&str, Register); 4] = [
            (
                "Arc<dyn Hook>",
                Box::new(|b| b.hook(Arc::new(KeepsDefaults) as Arc<dyn Hook>)),
            ),
            (
                "Box<KeepsDefaults>",
                Box::new(|b| b.hook(Box::new(KeepsDefaults))),
            ),
            (
                "Box<dyn Hook>",
                Box::new(|b| b.hook(Box::new(KeepsDefaults) as Box<dyn Hook>)),
            ),
            (
                "Arc<Option<KeepsDefaults>>",
                Box::new(|b| b.hook(Arc::new(Some(KeepsDefaults)))),
            ),
        ];
        for (what, register) in wrapped {
            let pipeline = pipeline(register);
            pipeline
                .invoke("t", json!({}), InvokeOptions::new())
                .await
                .unwrap();
            let plan = &pipeline.entry("t").unwrap().plan;
            assert!(plan.is_synchronous(Stage::WillAuthorize), "{what}");
        }
    }

    /// A wrapper that keeps the trait's default `around_execute`, counting the calls of
    /// its `will_execute` (which keeps the default's answer too).
    struct WrapsByDefault(Arc<std::sync::atomic::AtomicUsize>);

    impl Hook for WrapsByDefault {
        fn stages(&self) -> StageSet {
            StageSet::of(&[Stage::AroundExecute, Stage::WillExecute])
        }
        fn will_execute<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            HookFuture::ok()
        }
    }

    /// A wrapper of its own that hands the rest of the chain back as the default does,
    /// and counts its calls: nothing proves it always will.
    struct HandsBack(Arc<std::sync::atomic::AtomicUsize>);

    impl Hook for HandsBack {
        fn stages(&self) -> StageSet {
            StageSet::of(&[Stage::AroundExecute])
        }
        fn around_execute<'a>(
            &'a self,
            ctx: &'a mut ToolInvokeContext,
            next: crate::hook::Next<'a>,
        ) -> HookFuture<'a> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            next.run(ctx)
        }
    }

    #[tokio::test]
    async fn wrappers_keeping_the_default_around_execute_are_stepped_over_from_the_second_call() {
        type Register = Box<dyn FnOnce(PipelineBuilder, WrapsByDefault) -> PipelineBuilder>;
        let wrapped: [(&str, Register); 4] = [
            ("the hook", Box::new(|b, h| b.hook(h))),
            (
                "Box<dyn Hook>",
                Box::new(|b, h| b.hook(Box::new(h) as Box<dyn Hook>)),
            ),
            ("Arc<Option<_>>", Box::new(|b, h| b.hook(Arc::new(Some(h))))),
            (
                "two of them",
                Box::new(|b, h| {
                    let other = WrapsByDefault(Arc::clone(&h.0));
                    b.hook(h).hook(other)
                }),
            ),
        ];
        for (what, register) in wrapped {
            let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let hook = WrapsByDefault(Arc::clone(&calls));
            let pipeline = pipeline(|b| register(b, hook));
            let plan = &pipeline.entry("t").unwrap().plan;
            assert!(!plan.wrappers_kept_default(), "{what}");
            for round in 1..=3 {
                let output = pipeline
                    .invoke("t", json!({"round": round}), InvokeOptions::new())
                    .await
                    .unwrap();
                assert_eq!(output, json!({"round": round}), "{what}");
                assert!(plan.wrappers_kept_default(), "{what}");
            }
            let per_call = if what == "two of them" { 2 } else { 1 };
            assert_eq!(
                calls.load(std::sync::atomic::Ordering::SeqCst),
                3 * per_call,
                "{what}"
            );
        }
    }

    #[tokio::test]
    async fn a_wrapper_of_its_own_is_called_on_every_call_even_beside_one_keeping_the_default() {
        for with_default in [false, true] {
            let wrapped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let executed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let own = HandsBack(Arc::clone(&wrapped));
            let default = WrapsByDefault(Arc::clone(&executed));
            let pipeline = pipeline(|b| {
                let b = b.hook(own);
                if with_default { b.hook(default) } else { b }
            });
            for _ in 0..3 {
                pipeline
                    .invoke("t", json!({}), InvokeOptions::new())
                    .await
                    .unwrap();
            }
            let plan = &pipeline.entry("t").unwrap().plan;
            assert!(
                !plan.wrappers_kept_default(),
                "with a default: {with_default}"
            );
            assert_eq!(wrapped.load(std::sync::atomic::Ordering::SeqCst), 3);
            let expected = if with_default { 3 } else { 0 };
            assert_eq!(executed.load(std::sync::atomic::Ordering::SeqCst), expected);
        }
    }

    /// A hook whose methods answer at once and declare it, as `#[hook]` writes them: it
    /// logs each call, and panics or answers with its name at the stages it is told to.
    struct AtOnce {
        name: &'static str,
        stages: StageSet,
        panics_at: StageSet,
        responds_at: StageSet,
        log: Arc<std::sync::Mutex<Vec<(&'static str, Stage)>>>,
    }

    impl AtOnce {
        fn new(
            name: &'static str,
            stages: &[Stage],
            log: &Arc<std::sync::Mutex<Vec<(&'static str, Stage)>>>,
        ) -> Self {
            AtOnce {
                name,
                stages: StageSet::of(stages),
                panics_at: StageSet::EMPTY,
                responds_at: StageSet::EMPTY,
                log: Arc::clone(log),
            }
        }

        fn at(&self, stage: Stage) -> HookFuture<'static> {
            self.log.lock().unwrap().push((self.name, stage));
            if self.panics_at.contains(stage) {
                panic!("{} panics at {stage}", self.name);
            }
            if self.responds_at.contains(stage) {
                return HookFuture::ready(Err(crate::Control::Respond(json!(self.name))));
            }
            HookFuture::ok()
        }
    }

    impl Hook for AtOnce {
        fn stages(&self) -> StageSet {
            self.stages
        }
        fn synchronous_stages(&self) -> StageSet {
            self.stages
        }
        fn name(&self) -> &str {
            self.name
        }
        fn will_execute<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            self.at(Stage::WillExecute)
        }
        fn did_execute<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            self.at(Stage::DidExecute)
        }
        fn did_release_semaphore<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            self.at(Stage::DidReleaseSemaphore)
        }
        fn did_release_quota<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            self.at(Stage::DidReleaseQuota)
        }
        fn will_finalize_invoke<'a>(&'a self, _ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
            self.at(Stage::WillFinalizeInvoke)
        }
    }

    #[tokio::test]
    async fn a_panic_in_a_tail_run_in_place_skips_no_hook_after_it() {
        let log = Arc::default();
        let releases = AtOnce::new(
            "releases",
            &[
                Stage::DidReleaseSemaphore,
                Stage::DidReleaseQuota,
                Stage::WillFinalizeInvoke,
            ],
            &log,
        );
        let panics = AtOnce {
            panics_at: StageSet::of(&[Stage::DidReleaseSemaphore]),
            ..AtOnce::new("panics", &[Stage::DidReleaseSemaphore], &log)
        };
        // At `did_*` stages the hook registered last runs first: the one that panics.
        let pipeline = pipeline(|b| b.hook(releases).hook(panics));
        for _ in 0..2 {
            log.lock().unwrap().clear();
            let out = pipeline.invoke("t", json!({}), InvokeOptions::new()).await;
            assert_eq!(out.unwrap(), json!({}));
            assert_eq!(
                *log.lock().unwrap(),
                [
                    ("panics", Stage::DidReleaseSemaphore),
                    ("releases", Stage::DidReleaseSemaphore),
                    ("releases", Stage::DidReleaseQuota),
                    ("releases", Stage::WillFinalizeInvoke),
                ]
            );
        }
    }

    #[tokio::test]
    async fn an_attempt_run_in_place_takes_its_hooks_answers_as_a_wrapped_one_does() {
        let log = Arc::default();
        let before = AtOnce {
            responds_at: StageSet::of(&[Stage::WillExecute]),
            ..AtOnce::new("will_execute", &[Stage::WillExecute], &log)
        };
        let answering_before = pipeline(|b| b.hook(before));
        let answered = answering_before
            .invoke_detailed("t", json!({}), InvokeOptions::new())
            .await;
        assert_eq!(answered.result.unwrap(), json!("will_execute"));
        assert_eq!(answered.attempts, 0, "the tool did not run");

        let after = AtOnce {
            responds_at: StageSet::of(&[Stage::DidExecute]),
            ..AtOnce::new(
                "did_execute",
                &[Stage::WillExecute, Stage::DidExecute],
                &log,
            )
        };
        let answering_after = pipeline(|b| b.hook(after));
        let answered = answering_after
            .invoke_detailed("t", json!({}), InvokeOptions::new())
            .await;
        assert_eq!(answered.result.unwrap(), json!("did_execute"));
        assert_eq!(answered.attempts, 1);
        assert_eq!(
            log.lock().unwrap()[1..],
            [
                ("did_execute", Stage::WillExecute),
                ("did_execute", Stage::DidExecute),
            ]
        );
    }

    #[tokio::test]
    async fn a_stage_with_a_method_of_a_hooks_own_is_not_taken_for_synchronous() {
        let pipeline = pipeline(|b| b.hook(KeepsDefaults).hook(OwnMethod));
        let plan = &pipeline.entry("t").unwrap().plan;
        for _ in 0..2 {
            pipeline
                .invoke("t", json!({}), InvokeOptions::new())
                .await
                .unwrap();
        }
        assert!(!plan.is_synchronous(Stage::WillAuthorize));
        // The other stage of the defaults is, on its own.
        assert!(plan.is_synchronous(Stage::WillAudit));
    }
}
