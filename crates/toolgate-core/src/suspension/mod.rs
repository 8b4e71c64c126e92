//! Suspended invocations: what is kept while a call waits for a person, how long it may
//! wait, how many calls one caller (a user id in a tenant) may park, and how it resumes.
//!
//! * [`SuspensionStore`] — where calls wait; [`InMemorySuspensionStore`] is the default.
//! * [`SuspensionLimits`] — the bounds every built-in store keeps: calls per caller, calls in
//!   all, and how long a call waits before it expires.
//! * [`SuspensionTable`] — those bounds as a plain table, for a store of your own.

mod decision;
mod id;
mod limits;
mod memory;
mod table;

use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::approval::CallBinding;
use crate::error::ToolError;
use crate::stage::Stage;
use crate::user::User;

pub use decision::decision_token;
pub(crate) use id::new_suspension_id;
pub use limits::SuspensionLimits;
pub use memory::InMemorySuspensionStore;
pub use table::{SuspensionTable, stored_size};

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
    /// The input as it was when the call was suspended: a call that asks to wait before
    /// its input stages are done waits at the end of `will_redact_input`, so this is the
    /// validated, redacted input the tool would run with.
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
    /// When it expires: past this instant it can no longer be resumed. Set by the store
    /// when it keeps the call ([`SuspensionLimits::expire_after`]); `None` for a store
    /// that keeps calls until they are resumed.
    #[serde(default)]
    pub expires_at: Option<SystemTime>,
    /// What an approval of this call is bound to, recorded by the pipeline when the call
    /// waited (see [`approval`](crate::approval)). `None` for a call kept by an earlier
    /// version, which resumes without the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<CallBinding>,
}

impl SuspendedInvocation {
    /// The call without its input, output, payload and metadata (`null` and empty): who
    /// made it, of which tool, why and when, as [`SuspensionStore::claim_expired`] gives an
    /// expired call.
    ///
    /// ```
    /// # use serde_json::json;
    /// # use toolgate_core::suspension::SuspendedInvocation;
    /// # fn described(call: SuspendedInvocation) {
    /// let told = call.without_contents();
    /// assert_eq!((told.tool, told.input), (call.tool, json!(null)));
    /// # }
    /// ```
    #[must_use]
    pub fn without_contents(&self) -> Self {
        SuspendedInvocation {
            input: Value::Null,
            output: None,
            metadata: Map::new(),
            payload: Value::Null,
            ..self.clone()
        }
    }
}

/// An approval for a caller to make one call again: the call that waited, turned by
/// [`Pipeline::approve_retry`](crate::Pipeline::approve_retry) into a capability that the
/// next call with an equal [`CallBinding`] uses up, once, before `expires_at`.
///
/// It carries no secret: it is found by its binding's [key](CallBinding::key), which only
/// the call itself produces.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RetryApproval {
    /// What a call must match to use it.
    pub binding: CallBinding,
    /// The waiting call it was given on.
    pub suspension_id: String,
    /// Who approved (their user id), when the decision said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The tenant of who approved, when they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by_tenant: Option<String>,
    /// When it was given.
    pub decided_at: SystemTime,
    /// Past this instant it is void.
    pub expires_at: SystemTime,
}

/// The outcome of a call that waited for approval, kept for the caller who made it to read
/// once an approver has decided ([`SuspensionStore::keep_outcome`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DecidedCall {
    /// The suspension id the call waited under.
    pub id: String,
    /// Who made the call: with [`tenant`](Self::tenant), the only caller who may read the
    /// outcome ([`is_for`](Self::is_for)).
    pub user: String,
    /// The tenant of who made the call, if they had one. An outcome kept by an earlier
    /// version, which kept no tenant, reads as made by a caller without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The result as the host answers it (the gateway keeps its JSON result).
    pub result: Value,
    /// When it was decided.
    pub decided_at: SystemTime,
    /// When the call began to wait ([`SuspendedInvocation::suspended_at`]): when it was
    /// made, as its caller counts. `None` for an outcome kept by an earlier version, which
    /// did not keep it, or by a host that does not say
    /// ([`with_suspended_at`](Self::with_suspended_at)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_at: Option<SystemTime>,
}

impl DecidedCall {
    /// The outcome of the call `id` that `user` made, decided now.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_core::User;
    /// use toolgate_core::suspension::DecidedCall;
    ///
    /// let ann = User::new("ann").with_tenant("acme");
    /// let outcome = DecidedCall::new("s-1", &ann, json!({ "status": "ok" }));
    /// assert!(outcome.is_for(&ann));
    /// assert!(!outcome.is_for(&User::new("ann").with_tenant("globex")));
    /// ```
    pub fn new(id: impl Into<String>, user: &User, result: Value) -> Self {
        Self {
            id: id.into(),
            user: user.id.clone(),
            tenant: user.tenant.clone(),
            result,
            decided_at: SystemTime::now(),
            suspended_at: None,
        }
    }

    /// The same outcome, saying that the call began to wait at `at`.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use serde_json::json;
    /// use toolgate_core::User;
    /// use toolgate_core::suspension::DecidedCall;
    ///
    /// let made = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    /// let outcome = DecidedCall::new("s-1", &User::new("ann"), json!({})).with_suspended_at(made);
    /// assert_eq!(outcome.suspended_at, Some(made));
    /// ```
    #[must_use]
    pub fn with_suspended_at(mut self, at: SystemTime) -> Self {
        self.suspended_at = Some(at);
        self
    }

    /// Whether `user` made the call, and so may read its outcome: the same id in the same
    /// tenant ([`User::is_same_caller`]). `ann` of another tenant is someone else.
    pub fn is_for(&self, user: &User) -> bool {
        self.user == user.id && self.tenant == user.tenant
    }
}

/// The running record a decision keeps for its call as it takes it
/// ([`SuspensionStore::take_running`]), with the token of that decision
/// ([`decision_token`]): what a host gives [`InvokeOptions::running`] or
/// [`Pipeline::approve_retry_running`] so that the pipeline's take keeps it.
///
/// [`InvokeOptions::running`]: crate::InvokeOptions::running
/// [`Pipeline::approve_retry_running`]: crate::Pipeline::approve_retry_running
#[derive(Clone, Debug, PartialEq)]
pub struct RunningRecord {
    /// What the call's caller reads while it runs (its `id` is the call's).
    pub record: DecidedCall,
    /// The token of the decision keeping it, for
    /// [`remove_running`](SuspensionStore::remove_running).
    pub token: String,
}

/// The `status` of a running record: the result a host keeps as the outcome of a decided
/// call while it runs ([`SuspensionStore::take_running`], [`SuspensionStore::keep_running`]),
/// until the call's real outcome replaces it. The gateway keeps such records, and the MCP
/// server's tasks read them (a task `working`): one name, so the two always agree.
pub const RUNNING_STATUS: &str = "running";

/// The error code of a decided call whose running record outlived its deadline: it began,
/// and no outcome was ever recorded (the host running it stopped, or could not record how
/// it ended). The gateway answers it as the call's outcome, and the MCP server's tasks read
/// it (a task `failed`): one name, so the two always agree.
pub const OUTCOME_LOST: &str = "outcome_lost";

/// The shortest time a store keeps an expired call for
/// [`claim_expired`](SuspensionStore::claim_expired), however short
/// [`expire_after`](SuspensionLimits::expire_after): ten minutes, many rounds of the
/// hosts that claim.
pub const EXPIRY_TOLD_WITHIN: std::time::Duration = std::time::Duration::from_secs(600);

/// Why a suspension store could not keep or give back a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SuspensionStoreError {
    /// This caller — a user id in a tenant ([`User::is_same_caller`]) — already has as
    /// many calls waiting as one caller may. `ann` of another tenant has places of her own.
    #[error(
        "{} already has {max} calls waiting for approval: wait until an approver decides on some of them, or ask one to, before making more",
        caller_in_words(user, tenant.as_deref())
    )]
    UserFull {
        /// The caller's user id.
        user: String,
        /// The caller's tenant, if they have one.
        tenant: Option<String>,
        /// How many calls one caller may park.
        max: usize,
    },
    /// The store holds as many waiting calls as it may.
    #[error(
        "{max} calls already wait for approval: try again once approvers have decided on some of them"
    )]
    Full {
        /// How many calls the store may hold.
        max: usize,
    },
    /// This caller's waiting calls, with this one, would take more bytes than one caller's
    /// may ([`SuspensionLimits::max_bytes_per_user`]). Other callers are unaffected.
    #[error(
        "the calls of {} waiting for approval would take more than {max_bytes} bytes with this one: wait until an approver decides on some of them, or make the call with smaller arguments",
        caller_in_words(user, tenant.as_deref())
    )]
    UserBytesFull {
        /// The caller's user id.
        user: String,
        /// The caller's tenant, if they have one.
        tenant: Option<String>,
        /// How many bytes one caller's waiting calls may take.
        max_bytes: usize,
    },
    /// The waiting calls, with this one, would take more bytes than the store may hold
    /// ([`SuspensionLimits::max_bytes_total`]).
    #[error(
        "the calls waiting for approval would take more than {max_bytes} bytes with this one: try again once approvers have decided on some of them"
    )]
    BytesFull {
        /// How many bytes the store's waiting calls may take.
        max_bytes: usize,
    },
    /// The call waited longer than its store allows and can no longer be resumed.
    #[error(
        "the suspended call `{}` expired before anyone decided on it and will not run: make the call again if it is still needed",
        crate::error::shown_id(id)
    )]
    Expired {
        /// The suspension id.
        id: String,
    },
    /// The store itself failed (storage unreachable, unreadable, not writable). The message
    /// reaches the caller as it is: say what to check.
    #[error("the suspension store failed: {0}")]
    Unavailable(String),
    /// The store cannot keep approvals for a retry
    /// ([`SuspensionStore::keep_retry_approval`]).
    #[error(
        "the configured suspension store cannot keep approvals for a retry: approve the waiting call itself (resume it), or configure a store that can (the in-memory store can)"
    )]
    CannotApproveRetries,
    /// The store cannot keep the outcomes of decided calls
    /// ([`SuspensionStore::keep_outcome`]).
    #[error(
        "the configured suspension store cannot keep the outcomes of decided calls: configure a store that can (the in-memory store can)"
    )]
    CannotKeepOutcomes,
    /// The store cannot enumerate the calls it keeps; it looks them up by id only.
    #[error(
        "the configured suspension store cannot list waiting calls: look a call up by its id, or configure a store that can list them (the in-memory store can)"
    )]
    CannotList,
}

impl SuspensionStoreError {
    /// [`UserFull`](Self::UserFull) for `user`, who already has `max` calls waiting.
    pub fn user_full(user: &User, max: usize) -> Self {
        SuspensionStoreError::UserFull {
            user: user.id.clone(),
            tenant: user.tenant.clone(),
            max,
        }
    }
}

/// A caller as a person reads it: "user `ann`", or "user `ann` of tenant `acme`".
fn caller_in_words(user: &str, tenant: Option<&str>) -> String {
    format!("user {}", crate::user::named(user, tenant))
}

/// A store's refusal as the caller sees it: a user over their cap of waiting calls (in
/// number or in bytes) is `too_many_suspended` (429), a full store (either way)
/// `suspensions_full` (503), an expired call
/// [`ToolError::SuspensionExpired`] (410), a failing store `suspension_store_unavailable`
/// (503).
impl From<SuspensionStoreError> for ToolError {
    fn from(error: SuspensionStoreError) -> Self {
        use SuspensionStoreError as E;
        match error {
            E::Expired { id } => ToolError::SuspensionExpired { id },
            e @ (E::UserFull { .. } | E::UserBytesFull { .. }) => {
                ToolError::abort(e.to_string(), "too_many_suspended", 429)
            }
            e @ (E::Full { .. } | E::BytesFull { .. }) => {
                ToolError::abort(e.to_string(), "suspensions_full", 503)
            }
            e @ E::CannotApproveRetries => {
                ToolError::abort(e.to_string(), "cannot_approve_retries", 501)
            }
            e @ E::CannotList => ToolError::abort(e.to_string(), "cannot_list", 501),
            e @ E::CannotKeepOutcomes => {
                ToolError::abort(e.to_string(), "cannot_keep_outcomes", 501)
            }
            // The store's own message says what to check (Redis away, a key that differs
            // between replicas, a full disk): "try again later" would mislead for most.
            e => ToolError::abort(e.to_string(), "suspension_store_unavailable", 503),
        }
    }
}

/// Which waiting calls a listing ([`SuspensionStore::list`]) asks for: every condition
/// that is set must hold.
///
/// ```
/// use toolgate_core::User;
/// use toolgate_core::suspension::SuspensionFilter;
///
/// // Ann's own calls: hers in her tenant, not those of an `ann` of another one.
/// let anns = SuspensionFilter::of_caller(&User::new("ann").with_tenant("acme"));
/// assert_eq!(anns.user.as_deref(), Some("ann"));
/// assert_eq!(anns.tenant, Some(Some("acme".to_owned())));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuspensionFilter {
    /// Only the calls of this tool.
    pub tool: Option<String>,
    /// Only the calls of this user id, in whichever tenant unless [`tenant`](Self::tenant)
    /// says.
    pub user: Option<String>,
    /// Only the calls made in this tenant; `Some(None)`: only those of callers without
    /// one.
    pub tenant: Option<Option<String>>,
    /// Only the calls suspended at or after this instant.
    pub since: Option<SystemTime>,
}

impl SuspensionFilter {
    /// The calls `user` made: the same id in the same tenant
    /// ([`User::is_same_caller`]).
    pub fn of_caller(user: &User) -> Self {
        SuspensionFilter {
            user: Some(user.id.clone()),
            tenant: Some(user.tenant.clone()),
            ..SuspensionFilter::default()
        }
    }

    /// Whether the decided call `decided` is one of those this filter asks for: its tool
    /// is the `tool_name` of its result, and `since` is about when it was decided.
    pub fn matches_outcome(&self, decided: &DecidedCall) -> bool {
        self.tool
            .as_ref()
            .is_none_or(|tool| decided.result["tool_name"].as_str() == Some(tool.as_str()))
            && self.user.as_ref().is_none_or(|user| *user == decided.user)
            && self
                .tenant
                .as_ref()
                .is_none_or(|tenant| *tenant == decided.tenant)
            && self.since.is_none_or(|since| decided.decided_at >= since)
    }

    /// Whether `suspended` is one of the calls this filter asks for.
    pub fn matches(&self, suspended: &SuspendedInvocation) -> bool {
        self.tool
            .as_ref()
            .is_none_or(|tool| *tool == suspended.tool)
            && self
                .user
                .as_ref()
                .is_none_or(|user| *user == suspended.user.id)
            && self
                .tenant
                .as_ref()
                .is_none_or(|tenant| *tenant == suspended.user.tenant)
            && self
                .since
                .is_none_or(|since| suspended.suspended_at >= since)
    }
}

/// Where suspended invocations wait. The in-memory store is the default; the agent layer
/// adds one that survives a restart, and a shared store (a database table, Redis) lets any
/// replica resume a call that another one suspended.
///
/// A store bounds what it keeps (DESIGN.md §10): the calls of one caller (a user id in a
/// tenant, as [`User::is_same_caller`] compares them: `ann` of `globex` never takes the
/// places of `ann` of `acme`), the calls in all,
/// and how long a call waits. The built-in stores keep [`SuspensionLimits`] with a
/// [`SuspensionTable`]; a store of your own can use the table too. Refuse a call past a
/// bound with [`SuspensionStoreError::UserFull`] or [`SuspensionStoreError::Full`] (the
/// caller gets 429 or 503), and answer a look-up of an expired call with
/// [`SuspensionStoreError::Expired`] (the caller gets 410).
///
/// Whether an id expired is only for those who could see the call while it waited: keep
/// who made it (id and tenant) with the expired id and answer
/// [`expired_owner`](Self::expired_owner), so that a host (the gateway does) answers anyone
/// else — `ann` of another tenant included — as it answers an unknown id (404).
/// A store that keeps the default answers no owner, and its expired calls look unknown to
/// everyone but approvers.
///
/// Object safe: the pipeline holds an `Arc<dyn SuspensionStore>`. Write the methods as
/// `async fn` under [`#[async_trait]`](crate::external::async_trait), re-exported here so that an
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
/// use toolgate_core::external::async_trait;
/// use toolgate_core::hook::HookFuture;
/// use toolgate_core::stage::StageSet;
/// use toolgate_core::suspension::{
///     ResumeDecision, SuspendedInvocation, SuspensionStore, SuspensionStoreError,
/// };
/// use toolgate_core::{tool_fn, Hook, InvokeOptions, Pipeline, Stage, ToolError, ToolInvokeContext};
///
/// #[derive(Default)]
/// struct JsonRows(Mutex<HashMap<String, String>>);
///
/// fn parse(row: Option<String>) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
///     row.map(|row| serde_json::from_str(&row))
///         .transpose()
///         .map_err(|e| SuspensionStoreError::Unavailable(format!("unreadable row: {e}")))
/// }
///
/// #[async_trait]
/// impl SuspensionStore for JsonRows {
///     async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError> {
///         let row = serde_json::to_string(&suspended)
///             .map_err(|e| SuspensionStoreError::Unavailable(e.to_string()))?;
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
///         StageSet::of(&[Stage::WillCheckConsent])
///     }
///     fn will_check_consent<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
///         ctx.suspend("a person approves every call").into()
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .suspension_store(Arc::new(JsonRows::default()))
///     .hook(AskFirst)
///     .build()?;
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
    /// Keeps a suspended invocation, or refuses it past the store's bounds.
    async fn save(&self, suspended: SuspendedInvocation) -> Result<(), SuspensionStoreError>;

    /// Removes and returns the suspended invocation with this id, so that it resumes once;
    /// [`SuspensionStoreError::Expired`] when it waited too long.
    async fn take(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError>;

    /// The suspended invocation with this id, left in place;
    /// [`SuspensionStoreError::Expired`] when it waited too long.
    async fn get(&self, id: &str) -> Result<Option<SuspendedInvocation>, SuspensionStoreError>;

    /// Who made the call `id`, if it expired and the store still answers
    /// [`SuspensionStoreError::Expired`] for it: for a host to tell that caller it expired
    /// (410) and anyone else, as for an id it never kept, that it is unknown (404), so that
    /// nobody learns that another caller's call existed.
    ///
    /// The owner is a [`User`] with the id and tenant of who made the call (roles and
    /// attributes are not kept: leave them empty); a host compares it with
    /// [`User::is_same_caller`], so that `ann` of another tenant is not told. A store that
    /// keeps an owner's id only must answer `None` for a caller with a tenant, never a
    /// `User` without one.
    ///
    /// `None` when `id` did not expire, is no longer remembered as expired, or the store
    /// does not know who made it (an expired id remembered by an earlier version, which
    /// kept no owner): a host then treats the call as nobody's. The default, for a store
    /// that keeps no owners, answers `None`.
    ///
    /// ```
    /// # use toolgate_core::User;
    /// // How a host answers: 410 to the owner, 404 to anyone else.
    /// let owner = Some(User::new("ann").with_tenant("acme"));
    /// let asking = User::new("ann").with_tenant("globex");
    /// assert!(!owner.is_some_and(|owner| owner.is_same_caller(&asking)));
    /// ```
    async fn expired_owner(&self, id: &str) -> Result<Option<User>, SuspensionStoreError> {
        let _ = id;
        Ok(None)
    }

    /// Up to `limit` waiting calls that match `filter`, in the order of their ids, starting
    /// after the id `after` (the last one of the previous page) when it is given. Expired
    /// calls are not listed.
    ///
    /// A store that can only look calls up by id keeps this default, which answers
    /// [`SuspensionStoreError::CannotList`].
    async fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let _ = (filter, after, limit);
        Err(SuspensionStoreError::CannotList)
    }

    /// Up to `limit` waiting calls, as their ids and expiries only, in the order of their
    /// ids, starting after the id `after` when it is given: what a watcher of expiries
    /// needs to find the calls it does not watch yet, which it then reads one by one with
    /// [`get`](Self::get). Expired calls are not listed.
    ///
    /// A store whose calls may be large (each up to the host's body limit) answers this
    /// without reading them: a watcher that lists every waiting call again and again must
    /// not read every caller's inputs each time. The default lists the calls themselves
    /// ([`list`](Self::list), with no filter) and keeps their ids and expiries, so that a
    /// store that can list needs nothing more; one that cannot answers
    /// [`SuspensionStoreError::CannotList`] here too.
    async fn list_expiries(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Option<SystemTime>)>, SuspensionStoreError> {
        let calls = self
            .list(&SuspensionFilter::default(), after, limit)
            .await?;
        Ok(calls
            .into_iter()
            .map(|call| (call.id, call.expires_at))
            .collect())
    }

    /// Claims the telling of expiries: up to `limit` calls that expired before anyone
    /// decided them and whose expiry nobody has claimed yet, oldest expiry first. Each
    /// expired call is given once, to whichever host asks first, so that of several
    /// replicas watching one shared store exactly one tells that a call expired — and one
    /// that never saw the call start tells it too, when the replica that parked it is gone.
    ///
    /// A call is given as it waited, but without its input, output, payload and metadata
    /// (empty, `null`): what telling of it needs. The store keeps an expired call for this
    /// for [`SuspensionLimits::expire_after`] after its expiry, and
    /// [`EXPIRY_TOLD_WITHIN`] at least, at most [`SuspensionLimits::max_total`] of them (the
    /// oldest going first), so a host that claims every few minutes misses none; calls
    /// nobody claims are dropped then.
    /// A claimed call is not given again, even if the host that claimed it fails to tell
    /// it: the telling is at most once, and once as long as the claiming host lives.
    ///
    /// The default, for a store that cannot, answers [`SuspensionStoreError::CannotList`];
    /// a host then tells the expiries of the calls it watches itself.
    async fn claim_expired(
        &self,
        limit: usize,
    ) -> Result<Vec<SuspendedInvocation>, SuspensionStoreError> {
        let _ = limit;
        Err(SuspensionStoreError::CannotList)
    }

    /// Keeps an approval for a retry until its `expires_at`, under the same bounds as
    /// waiting calls (per caller — the binding's user id and tenant — and in all).
    ///
    /// A store that cannot keeps this default, which answers
    /// [`SuspensionStoreError::CannotApproveRetries`]; calls then only resume.
    async fn keep_retry_approval(
        &self,
        approval: RetryApproval,
    ) -> Result<(), SuspensionStoreError> {
        let _ = approval;
        Err(SuspensionStoreError::CannotApproveRetries)
    }

    /// Uses up one approval for a retry whose binding has the [key](CallBinding::key)
    /// `key` and that has not expired: removes it and returns it, atomically, so that of
    /// two calls asking at once only one gets it. `None` when there is none.
    ///
    /// The default, for a store that keeps none, answers `None`.
    async fn use_retry_approval(
        &self,
        key: &str,
    ) -> Result<Option<RetryApproval>, SuspensionStoreError> {
        let _ = key;
        Ok(None)
    }

    /// Keeps the outcome of a decided call for its caller to read, for
    /// [`SuspensionLimits::expire_after`] after the decision, at most
    /// [`SuspensionLimits::max_per_user`] of them per caller (the call's user id in its
    /// tenant) and [`SuspensionLimits::max_total`] in all. Keeping an outcome for an id
    /// again replaces it, and so does keeping one over a running record
    /// ([`keep_running`](Self::keep_running)), whichever decision kept that record.
    ///
    /// A caller at their cap loses their own oldest outcome, never another caller's: any
    /// caller may keep outcomes at will (withdrawing their own waiting calls keeps one
    /// each), and without a cap per caller one of them would push out everyone's. Past
    /// `max_total`, the last bound on memory, the caller who holds the most outcomes loses
    /// their own oldest, never a caller who holds fewer: many callers together, or one
    /// whose cap is near `max_total`, cannot push out the outcomes of the others either. A
    /// store of your own must keep both caps so; [`SuspensionTable`] does.
    ///
    /// The default, for a store that keeps none, answers
    /// [`SuspensionStoreError::CannotKeepOutcomes`].
    async fn keep_outcome(&self, outcome: DecidedCall) -> Result<(), SuspensionStoreError> {
        let _ = outcome;
        Err(SuspensionStoreError::CannotKeepOutcomes)
    }

    /// Keeps `record` as the outcome of the call `record.id` only if nothing is kept for
    /// that id yet — no outcome, no running record —, checked and written as one atomic
    /// step, and tags it with `token`, the token of the decision keeping it
    /// ([`decision_token`]). `true` when it was kept; `false` when something was kept
    /// already, which is left as it is.
    ///
    /// A *running record* is what a decided call's caller reads while the call runs, until
    /// its outcome replaces it. A host keeps one as its decision takes the call, with
    /// [`take_running`](Self::take_running), so that the record is always that of the
    /// decision that took the call; this is the second half of that method's default, for
    /// a store that cannot do both at once. It is counted and capped as an outcome
    /// ([`keep_outcome`](Self::keep_outcome)), once per id.
    ///
    /// Once kept, a running record is replaced by [`keep_outcome`](Self::keep_outcome) —
    /// whichever decision kept it: only the decision that took the call keeps an
    /// outcome — and removed by [`remove_running`](Self::remove_running) only with the
    /// token it was kept with.
    ///
    /// The default reads [`outcome`](Self::outcome) and then keeps the record with
    /// [`keep_outcome`](Self::keep_outcome), without its token: it is not atomic (an
    /// outcome kept between the two steps is replaced by the record, and a host reads the
    /// call as running until the record expires or reads as lost), and the default
    /// [`remove_running`](Self::remove_running) cannot remove what it kept. A store shared
    /// by replicas, or by decisions running at once, should do both atomically.
    async fn keep_running(
        &self,
        record: DecidedCall,
        token: &str,
    ) -> Result<bool, SuspensionStoreError> {
        let _ = token;
        if self.outcome(&record.id).await?.is_some() {
            return Ok(false);
        }
        self.keep_outcome(record).await?;
        Ok(true)
    }

    /// Takes the waiting call `id`, as [`take`](Self::take) does, and when it was taken
    /// keeps `record` as its running record in its place, tagged with `token`, the token
    /// of the deciding decision ([`decision_token`]) — one atomic step. The record is kept
    /// over nothing or over a running record (one a failed decision left behind), never
    /// over an outcome, which stays; it is counted and capped as an outcome
    /// ([`keep_outcome`](Self::keep_outcome)).
    ///
    /// This is how a host keeps what a decided call's caller reads while it runs: from the
    /// moment the call leaves the waiting calls, with no moment between in which it reads
    /// as neither waiting nor running, until its outcome replaces the record. Of two
    /// approvers deciding at once, only the one whose take wins keeps a record, so the
    /// caller reads who actually decided, and until when the call runs; the loser keeps
    /// nothing, and never writes over the outcome of a decision that took the call first
    /// (a rejection, kept at once).
    ///
    /// A decision that ends the call at once and runs nothing — a rejection, a caller's
    /// withdrawal — keeps the call's end this way, as `record`: its caller reads the end
    /// from the take on, never an unknown call in between, and the decision keeps it again
    /// with [`keep_outcome`](Self::keep_outcome) once recorded, which drops the token.
    ///
    /// The default takes the call and then keeps the record with
    /// [`keep_running`](Self::keep_running): the record is still the taking decision's,
    /// but in two steps — between them the call reads as neither waiting nor running (a
    /// caller may be told it is unknown), a record left behind by an earlier decision
    /// stays in place of this one's, and if keeping the record fails the call is taken
    /// all the same (the failure is logged) and reads as unknown until it ends. The
    /// built-in stores do it in one step.
    async fn take_running(
        &self,
        id: &str,
        record: DecidedCall,
        token: &str,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let Some(taken) = self.take(id).await? else {
            return Ok(None);
        };
        if let Err(error) = self.keep_running(record, token).await {
            tracing::warn!(suspension_id = id, %error, "a taken call's running record could not be kept: its caller will not find it until it ends");
        }
        Ok(Some(taken))
    }

    /// Removes the running record that the decision `token` kept for the call `id`
    /// ([`take_running`](Self::take_running), [`keep_running`](Self::keep_running)), if
    /// it is still what is kept: for a decision that put the call it took back to wait (an
    /// approval for a retry that could not be kept), which leaves nothing running.
    /// Whatever else is kept for `id` — an outcome, a running record another decision
    /// kept — is left as it is; the check and the removal are one atomic step. `true` when
    /// the record was removed.
    ///
    /// The default, for a store that keeps no tokens, removes nothing and answers `false`:
    /// the record stays until an outcome replaces it or it expires. Hosts read a running
    /// record as nothing while its call still waits, and the built-in stores keep the record
    /// of the next decision to take the call over it ([`take_running`](Self::take_running)).
    async fn remove_running(&self, id: &str, token: &str) -> Result<bool, SuspensionStoreError> {
        let _ = (id, token);
        Ok(false)
    }

    /// Keeps `outcome` as the end of the call `outcome.id` only over a running record
    /// ([`keep_running`](Self::keep_running)) — whichever decision kept it — or over
    /// nothing, checked and written as one atomic step; an outcome kept for that id
    /// already is left as it is. `true` when it was kept.
    ///
    /// This is how a host ends a call that ran, and how a caller withdraws one that runs.
    /// Both replace the running record, so that of the two, the first to land is the
    /// call's end: a caller's withdrawal stays however the call then ends (it is stopped,
    /// and what it answers is not kept over the withdrawal), and a withdrawal that comes
    /// after the call's end is refused. In every other case this keeps as
    /// [`keep_outcome`](Self::keep_outcome) does: over a running record whichever decision
    /// kept it — only the decision that took the call ends it —, and over nothing (a record
    /// that could not be kept, or expired).
    ///
    /// The default, for a store that does not tell running records from outcomes, keeps
    /// `outcome` with [`keep_outcome`](Self::keep_outcome) and answers `true`: whatever
    /// ends last replaces the other, so a call withdrawn while it ran may read as ended
    /// with its own result once it ends. The built-in stores do it atomically.
    async fn keep_outcome_over_running(
        &self,
        outcome: DecidedCall,
    ) -> Result<bool, SuspensionStoreError> {
        self.keep_outcome(outcome).await?;
        Ok(true)
    }

    /// The outcome kept for the call `id`, if it is decided and its outcome is still kept.
    ///
    /// The default, for a store that keeps none, answers `None`.
    async fn outcome(&self, id: &str) -> Result<Option<DecidedCall>, SuspensionStoreError> {
        let _ = id;
        Ok(None)
    }

    /// Up to `limit` kept outcomes that match `filter`
    /// ([`SuspensionFilter::matches_outcome`]), in the order of their ids, starting after
    /// the id `after` when it is given: the decided calls, as [`list`](Self::list) gives
    /// the waiting ones. Outcomes past their expiry are not listed.
    ///
    /// A store that cannot enumerate its outcomes keeps this default, which answers
    /// [`SuspensionStoreError::CannotList`].
    async fn list_outcomes(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DecidedCall>, SuspensionStoreError> {
        let _ = (filter, after, limit);
        Err(SuspensionStoreError::CannotList)
    }
}
