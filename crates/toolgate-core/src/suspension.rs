//! Suspended invocations: what is kept while a call waits for a person, and how it resumes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::{Stage, User};

/// How a person decided on a suspended call.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ResumeDecision {
    /// Go on with the call after the stage that suspended it.
    Approve,
    /// Refuse the call: it fails with code `rejected` (HTTP 403) and this reason.
    Reject {
        /// Why, for the caller.
        reason: String,
    },
    /// The person completed the call: this is its output, and the tool does not run.
    Complete {
        /// The output.
        output: Value,
    },
}

/// Everything needed to resume a suspended invocation. Serializable, so a store can keep it
/// across restarts. The scratchpad, request providers and secrets are not kept: a resumed
/// call binds and injects them again in the stages after the suspending one.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SuspendedInvocation {
    /// The id to resume with.
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's version when the call was suspended.
    pub tool_version: String,
    /// The session id.
    pub session_id: Option<String>,
    /// The request id.
    pub request_id: String,
    /// The caller.
    pub user: User,
    /// The input as it was when the call was suspended.
    pub input: Value,
    /// The output, if the call was suspended after producing one.
    pub output: Option<Value>,
    /// The metadata gathered so far.
    pub metadata: Map<String, Value>,
    /// The stage that suspended; resuming continues after it.
    pub stage: Stage,
    /// What the call waits for.
    pub reason: String,
    /// What the person needs to decide.
    pub payload: Value,
    /// When it was suspended.
    pub suspended_at: SystemTime,
}

/// A suspension store failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("suspension store: {0}")]
pub struct SuspensionStoreError(pub String);

/// Where suspended invocations wait. The in-memory store is the default; the agent layer
/// adds one that survives a restart, and a shared store (a database table, Redis) lets any
/// replica resume a call that another one suspended.
///
/// Object safe: the pipeline holds an `Arc<dyn SuspensionStore>`. Write the methods as
/// `async fn` under [`#[async_trait]`](crate::async_trait), re-exported here so that an
/// implementer needs no dependency of their own; it turns each one into a boxed future,
/// one allocation per call.
///
/// # Examples
///
/// Suspended calls kept as JSON text under their id, the way a database table would keep
/// them, plugged into a pipeline whose every call waits for a person:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
///
/// use serde_json::json;
/// use toolgate_core::{
///     async_trait, tool_fn, Hook, HookFuture, InvokeOptions, Pipeline, ResumeDecision, Stage,
///     StageSet, SuspendedInvocation, SuspensionStore, SuspensionStoreError, ToolError,
///     ToolInvokeContext,
/// };
///
/// #[derive(Default)]
/// struct JsonRows(Mutex<HashMap<String, String>>);
///
/// fn parse(row: Option<String>) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
///     row.map(|row| serde_json::from_str(&row))
///         .transpose()
///         .map_err(|e| SuspensionStoreError(format!("unreadable row: {e}")))
/// }
///
/// #[async_trait]
/// impl SuspensionStore for JsonRows {
///     async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
///         let row = serde_json::to_string(&suspended)
///             .map_err(|e| SuspensionStoreError(e.to_string()))?;
///         self.0.lock().unwrap().insert(suspended.id, row);
///         Ok(())
///     }
///
///     async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError>
///     {
///         let row = self.0.lock().unwrap().remove(id);
///         parse(row)
///     }
///
///     async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError>
///     {
///         let row = self.0.lock().unwrap().get(id).cloned();
///         parse(row)
///     }
/// }
///
/// /// Every call waits for a person.
/// struct AskFirst;
///
/// impl Hook for AskFirst {
///     fn stages(&self) -> StageSet {
///         StageSet::of(&[Stage::WillAuthorize])
///     }
///     fn will_authorize<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
///         ctx.suspend("a person approves every call").into()
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut builder = Pipeline::builder();
/// builder.tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))?;
/// builder.suspension_store(Arc::new(JsonRows::default()));
/// let pipeline = builder.hook(AskFirst).build()?;
///
/// let waiting = pipeline.invoke("ping", json!(null), InvokeOptions::new()).await.unwrap_err();
/// let ToolError::Suspended { suspension_id, .. } = waiting else { panic!("{waiting}") };
/// assert_eq!(pipeline.suspended(&suspension_id).await?.unwrap().tool, "ping");
/// let approved = pipeline.resume(&suspension_id, ResumeDecision::Approve, InvokeOptions::new());
/// assert_eq!(approved.await?, json!("pong"));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait SuspensionStore: Send + Sync + 'static {
    /// Keeps a suspended invocation.
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError>;

    /// Removes and returns the suspended invocation with this id, so that it resumes once.
    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError>;

    /// The suspended invocation with this id, left in place.
    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError>;
}

/// The default store: in memory, bounded.
#[derive(Debug)]
pub struct InMemorySuspensionStore {
    entries: Mutex<HashMap<String, SuspendedInvocation>>,
    max_entries: usize,
}

impl InMemorySuspensionStore {
    /// A store that holds at most `max_entries` suspended calls; past that, saving fails
    /// (and the call fails) rather than growing without bound.
    pub fn new(max_entries: usize) -> Self {
        InMemorySuspensionStore {
            entries: Mutex::new(HashMap::new()),
            max_entries,
        }
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for InMemorySuspensionStore {
    fn default() -> Self {
        InMemorySuspensionStore::new(10_000)
    }
}

#[async_trait]
impl SuspensionStore for InMemorySuspensionStore {
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= self.max_entries {
            return Err(SuspensionStoreError(format!(
                "{} calls already wait for approval: resume or reject some first",
                entries.len()
            )));
        }
        entries.insert(suspended.id.clone(), suspended);
        Ok(())
    }

    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        Ok(self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id))
    }

    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        Ok(self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned())
    }
}

/// A new suspension id: unguessable enough to be handed to a person, unique per process.
pub(crate) fn new_suspension_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "susp-{:016x}{:016x}",
        crate::context::random_u64() ^ n,
        crate::context::random_u64()
    )
}
