//! [`ToolInvokeContext`]: everything one invocation knows, handed to every hook and the tool.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use typemap_rev::{TypeMap, TypeMapKey};

use crate::control::{Control, HookResult, SuspendRequest};
use crate::definition::ToolDefinition;
use crate::error::ToolError;
use crate::prepared::PreparedInput;
use crate::progress::Progress;
use crate::provider::{ProviderError, ProviderRequirement, Providers, Scope, Scopes, SessionScope};
use crate::random::random_u64;
use crate::secret::SecretSlot;
use crate::stage::Stage;
use crate::suspension::ResumeDecision;
use crate::user::CallerId;
pub use crate::user::User;

/// The id of one invocation: given by the caller, or generated (unique per process, and
/// prefixed per process so that replicas do not collide).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Given(Arc<str>),
    Generated(u64),
}

static PROCESS_PREFIX: LazyLock<u32> = LazyLock::new(|| random_u64() as u32);

/// The next block of request ids to hand to a thread.
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// How many ids a thread takes from [`NEXT_REQUEST`] at a time.
const REQUEST_ID_BLOCK: u64 = 1024;

thread_local! {
    /// This thread's block of ids: the next one, and the end of the block.
    static REQUEST_IDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl RequestId {
    /// A new id, unique in this process. Threads take ids in blocks, so that making one
    /// is a thread-local increment, not an atomic operation shared by every thread; ids
    /// are unique but not in call order across threads.
    pub fn generate() -> Self {
        let id = REQUEST_IDS.with(|ids| {
            let (mut next, mut end) = ids.get();
            if next == end {
                next = NEXT_REQUEST.fetch_add(REQUEST_ID_BLOCK, Ordering::Relaxed);
                end = next + REQUEST_ID_BLOCK;
            }
            ids.set((next + 1, end));
            next
        });
        RequestId(Repr::Generated(id))
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId(Repr::Given(Arc::from(s)))
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId(Repr::Given(Arc::from(s)))
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Given(s) => f.write_str(s),
            Repr::Generated(n) => f.write_str(generated_text(*PROCESS_PREFIX, *n, &mut [0; 29])),
        }
    }
}

/// `req-{prefix:08x}-{n:x}` written into `buf`, without the formatting machinery: the
/// id is written once per audited call, and `write!` costs ten times as much.
fn generated_text(prefix: u32, n: u64, buf: &mut [u8; 29]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf[..4].copy_from_slice(b"req-");
    for (i, slot) in buf[4..12].iter_mut().enumerate() {
        *slot = HEX[(prefix >> (28 - 4 * i) & 0xf) as usize];
    }
    buf[12] = b'-';
    let digits = (16 - n.leading_zeros() as usize / 4).max(1);
    for (i, slot) in buf[13..13 + digits].iter_mut().enumerate() {
        *slot = HEX[(n >> (4 * (digits - 1 - i)) & 0xf) as usize];
    }
    std::str::from_utf8(&buf[..13 + digits]).expect("hex digits are ASCII")
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A hook's decision, kept in the invocation's decision trace for audit.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Decision {
    /// The stage it was made at.
    pub stage: Stage,
    /// The hook that made it.
    pub hook: Arc<str>,
    /// `respond`, `suspend`, or an error code such as `forbidden`.
    pub outcome: String,
    /// Whether it took effect: `false` for hooks in audit (shadow) mode and for ignored
    /// failures.
    pub applied: bool,
}

/// How long one hook took at one stage (recorded when the pipeline is built with
/// [`PipelineBuilder::record_hook_timings`](crate::PipelineBuilder::record_hook_timings)).
#[derive(Clone, Debug, PartialEq)]
pub struct HookTiming {
    /// The stage.
    pub stage: Stage,
    /// The hook.
    pub hook: Arc<str>,
    /// How long its stage method took.
    pub duration: Duration,
}

/// The clock of invocation timings: quanta's calibrated reading of the CPU's time-stamp
/// counter (about 10 ns a read on these machines, against 24 ns for `Instant::now`), which
/// uses the OS clock instead where the CPU has no stable counter. What the context shows
/// is converted to the standard library's types when asked for ([`ago`]).
pub(crate) type ClockInstant = quanta::Instant;

/// Reads the invocation clock once, so that its calibration (under a millisecond) is done
/// when a pipeline is built rather than in its first call.
pub(crate) fn warm_clock() {
    let _ = ClockInstant::now();
}

/// How long ago `t` was. Conversions go through it, reading both clocks afresh: a fixed
/// anchor between the counter and the OS clocks would drift as NTP slews the latter.
fn ago(t: ClockInstant) -> Duration {
    ClockInstant::now().saturating_duration_since(t)
}

/// `t` as a standard [`Instant`].
fn to_std_instant(t: ClockInstant) -> Instant {
    let since = ago(t);
    let now = Instant::now();
    now.checked_sub(since).unwrap_or(now)
}

/// What the invocations of one tool share with their contexts: the tool's definition and
/// the pipeline's global and session scopes.
pub(crate) struct ToolScope {
    pub definition: ToolDefinition,
    pub scopes: Arc<Scopes>,
    pub limits: crate::limits::InputLimits,
}

/// Everything one invocation knows: identity, input and output with their histories, a
/// scratchpad for hooks, providers, secrets, the error, timing, the attempt number, the
/// deadline and the cancellation token.
///
/// The pipeline creates it; hooks get `&mut` at every stage, the tool gets `&`.
/// Its `Debug` output never shows secrets.
pub struct ToolInvokeContext {
    pub(crate) scope: Arc<ToolScope>,
    session_id: Option<Arc<str>>,
    request_id: RequestId,
    /// `None` for the anonymous user (no reference count to touch per call).
    user: Option<Arc<User>>,
    input: Value,
    pub(crate) input_version: u32,
    output: Option<Value>,
    /// Made on first use: a call whose hooks keep nothing pays nothing.
    scratch: Option<TypeMap>,
    pub(crate) error: Option<ToolError>,
    started: ClockInstant,
    pub(crate) finished: Option<ClockInstant>,
    pub(crate) attempt: u32,
    /// How many times the tool itself ran.
    pub(crate) runs: u32,
    deadline: Option<tokio::time::Instant>,
    cancel: OnceLock<CancellationToken>,
    request_providers: Providers,
    session: OnceLock<Option<Arc<SessionScope>>>,
    /// The per-call providers the tool looked up while it ran ([`Self::tool_provider_reads`]).
    tool_reads: Mutex<Vec<ProviderRequirement>>,
    secrets: SecretSlot,
    /// Set by [`set_no_store`](Self::set_no_store), by the tool while it runs too.
    no_store: AtomicBool,
    pub(crate) stage: Stage,
    pub(crate) progress: Progress,
    pub(crate) prepared: Option<(u32, PreparedInput)>,
    /// What the invocation keeps a record of beyond its current state, made on the first
    /// record: a call whose hooks record nothing makes, moves and drops none of it.
    trail: Option<Box<Trail>>,
}

/// The records of an invocation: histories, metadata, decisions, timings, the resume.
#[derive(Default)]
pub(crate) struct Trail {
    input_history: Vec<Value>,
    output_history: Vec<Value>,
    pub(crate) stage_durations: Vec<(Stage, Duration)>,
    pub(crate) hook_timings: Vec<HookTiming>,
    metadata: Map<String, Value>,
    pub(crate) decisions: Vec<Decision>,
    pub(crate) resumed: Option<ResumeDecision>,
    pub(crate) decided_by: Option<CallerId>,
    pub(crate) decision_reason: Option<String>,
    /// The instant an approved call must reach execution by.
    pub(crate) run_by: Option<tokio::time::Instant>,
    /// The waiting call whose approval for a retry this call used.
    pub(crate) retry_of: Option<String>,
    /// The waiting call this call resumes.
    pub(crate) resumed_from: Option<String>,
}

pub(crate) struct ContextParts {
    pub scope: Arc<ToolScope>,
    pub session_id: Option<Arc<str>>,
    pub request_id: RequestId,
    pub user: Option<Arc<User>>,
    pub input: Value,
    pub deadline: Option<tokio::time::Instant>,
    pub cancel: Option<CancellationToken>,
    pub providers: Providers,
    pub no_store: bool,
    /// What a suspended call had gathered, when it resumes.
    pub restored: Option<Box<Restored>>,
}

/// What a resumed call takes over from the call that was suspended.
pub(crate) struct Restored {
    pub output: Option<Value>,
    pub metadata: Map<String, Value>,
    pub decision: ResumeDecision,
    pub decided_by: Option<CallerId>,
    pub decision_reason: Option<String>,
    pub run_by: Option<tokio::time::Instant>,
    pub retry_of: Option<String>,
    /// The id of the waiting call resumed.
    pub resumed_from: Option<String>,
}

impl ToolInvokeContext {
    /// A new context. What a resumed call brings back from its suspension
    /// (`parts.restored`) is the caller's to hand to [`restore`](Self::restore) once the
    /// context is where it stays: the context is returned as it is built, so that it can
    /// be written once, in place — it is the largest value of an invocation, and every
    /// move of it is a copy.
    #[inline(always)]
    pub(crate) fn new(parts: ContextParts) -> Self {
        let cancel = OnceLock::new();
        if let Some(token) = parts.cancel {
            let _ = cancel.set(token);
        }
        ToolInvokeContext {
            scope: parts.scope,
            session_id: parts.session_id,
            request_id: parts.request_id,
            user: parts.user,
            input: parts.input,
            input_version: 0,
            output: None,
            scratch: None,
            error: None,
            started: ClockInstant::now(),
            finished: None,
            attempt: 0,
            runs: 0,
            deadline: parts.deadline,
            cancel,
            request_providers: parts.providers,
            session: OnceLock::new(),
            tool_reads: Mutex::new(Vec::new()),
            secrets: SecretSlot::default(),
            no_store: AtomicBool::new(parts.no_store),
            stage: Stage::WillCreateInvokeContext,
            progress: Progress::default(),
            prepared: None,
            trail: None,
        }
    }

    /// Takes over what the suspended call had gathered.
    #[cold]
    pub(crate) fn restore(&mut self, restored: Restored) {
        if let Some(output) = restored.output {
            self.set_output(output);
        }
        *self.metadata_mut() = restored.metadata;
        let trail = self.trail_mut();
        trail.resumed = Some(restored.decision);
        trail.decided_by = restored.decided_by;
        trail.decision_reason = restored.decision_reason;
        trail.run_by = restored.run_by;
        trail.retry_of = restored.retry_of;
        trail.resumed_from = restored.resumed_from;
    }

    /// This fresh call used an approval for a retry: it runs as approved.
    #[cold]
    pub(crate) fn run_as_approved(&mut self, approval: crate::suspension::RetryApproval) {
        let left = approval
            .expires_at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        let metadata = std::mem::take(self.metadata_mut());
        self.restore(Restored {
            output: None,
            metadata,
            decision: ResumeDecision::Approve,
            decided_by: approval.decided_by.map(|id| CallerId {
                id,
                tenant: approval.decided_by_tenant,
            }),
            decision_reason: None,
            run_by: Some(tokio::time::Instant::now() + left),
            retry_of: Some(approval.suspension_id),
            resumed_from: None,
        });
    }

    /// The instant an approved call must reach execution by, for a call that runs on an
    /// approval.
    pub(crate) fn approval_run_by(&self) -> Option<tokio::time::Instant> {
        self.trail.as_ref()?.run_by
    }

    // ----- identity -----

    /// The definition of the tool being called (name, version, annotations, schemas).
    pub fn tool(&self) -> &ToolDefinition {
        &self.scope.definition
    }

    /// The bounds the pipeline holds every input to
    /// ([`PipelineBuilder::input_limits`](crate::PipelineBuilder::input_limits)): the input
    /// was within them when the call came in. A hook that makes input anew (parses a JSON
    /// string it was sent, say) keeps what it makes within them too.
    pub fn input_limits(&self) -> crate::limits::InputLimits {
        self.scope.limits
    }

    /// The name of the tool being called; it is also the tool's id in the registry.
    pub fn tool_name(&self) -> &str {
        &self.scope.definition.name
    }

    /// The session id, if the call belongs to a session.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The id of this invocation.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// Who is calling.
    pub fn user(&self) -> &User {
        match &self.user {
            Some(user) => user,
            None => &crate::user::ANONYMOUS,
        }
    }

    /// The stage the pipeline is at.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    // ----- input and output -----

    /// The current input (raw JSON: typed tools parse it when they run).
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// Replaces the input; the previous value goes to the input history.
    pub fn set_input(&mut self, input: Value) {
        let previous = std::mem::replace(&mut self.input, input);
        self.trail_mut().input_history.push(previous);
        self.input_version = self.input_version.wrapping_add(1);
    }

    /// Earlier inputs, oldest first (each value once; the current one is [`input`](Self::input)).
    pub fn input_history(&self) -> &[Value] {
        self.trail.as_ref().map_or(&[], |t| &t.input_history)
    }

    /// The current output, once there is one.
    pub fn output(&self) -> Option<&Value> {
        self.output.as_ref()
    }

    /// Replaces the output; the previous value, if any, goes to the output history.
    pub fn set_output(&mut self, output: Value) {
        if let Some(previous) = self.output.replace(output) {
            self.trail_mut().output_history.push(previous);
        }
    }

    /// Earlier outputs, oldest first.
    pub fn output_history(&self) -> &[Value] {
        self.trail.as_ref().map_or(&[], |t| &t.output_history)
    }

    /// The trail, made on the first record.
    pub(crate) fn trail_mut(&mut self) -> &mut Trail {
        self.trail.get_or_insert_with(Box::default)
    }

    pub(crate) fn take_output(&mut self) -> Option<Value> {
        self.output.take()
    }

    /// The metadata, taken out (an invocation that recorded nothing makes no record for it).
    pub(crate) fn take_metadata(&mut self) -> Map<String, Value> {
        self.trail
            .as_mut()
            .map(|t| std::mem::take(&mut t.metadata))
            .unwrap_or_default()
    }

    // ----- scratchpad, metadata, secrets -----

    /// The hooks' scratchpad: typed values keyed by [`TypeMapKey`] types, private to this
    /// invocation. Anything stored here is dropped with the context, so an RAII guard (a
    /// permit, a lease) kept here comes back on every path, cancellation included.
    pub fn scratch(&self) -> &TypeMap {
        static EMPTY: LazyLock<TypeMap> = LazyLock::new(TypeMap::new);
        self.scratch.as_ref().unwrap_or(&EMPTY)
    }

    /// The scratchpad, mutably.
    pub fn scratch_mut(&mut self) -> &mut TypeMap {
        self.scratch.get_or_insert_with(TypeMap::new)
    }

    /// Keeps `guard` for the rest of the invocation on behalf of the hook instance
    /// `owner` — a permit, a lease, anything released by being dropped.
    ///
    /// What a call holds is keyed by the guard's type *and* the hook instance (its
    /// address), so two instances of one hook type stacked on a call (a global cap and a
    /// per-tool cap, say) never take or drop each other's guards. The guard is dropped by
    /// [`release`](Self::release) at the paired release stage, or with the context on
    /// every other path — an error, a suspension, a dropped call — so it always comes back.
    ///
    /// Pass the hook itself: `ctx.hold(self, permit)`. One instance registered twice
    /// (the same `Arc` added to two pipelines' worth of registrations) is one owner.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tokio::sync::{OwnedSemaphorePermit, Semaphore};
    /// use toolgate_core::{hook, Hook, HookResult, ToolInvokeContext};
    ///
    /// struct InFlightLimit(Arc<Semaphore>);
    ///
    /// #[hook]
    /// impl Hook for InFlightLimit {
    ///     fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
    ///         let Ok(permit) = Arc::clone(&self.0).try_acquire_owned() else {
    ///             return ctx.abort("too many calls at once", "busy", 503);
    ///         };
    ///         ctx.hold(self, permit);
    ///         Ok(())
    ///     }
    ///
    ///     fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
    ///         ctx.release::<OwnedSemaphorePermit>(self);
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn hold<G: Send + Sync + 'static>(&mut self, owner: &impl ?Sized, guard: G) {
        self.scratch_mut()
            .entry::<Held<G>>()
            .or_default()
            .push((owner_key(owner), guard));
    }

    /// The guard of type `G` that hook instance `owner` holds (the latest, if several).
    pub fn held<G: Send + Sync + 'static>(&self, owner: &impl ?Sized) -> Option<&G> {
        let key = owner_key(owner);
        self.scratch
            .as_ref()?
            .get::<Held<G>>()?
            .iter()
            .rev()
            .find_map(|(id, guard)| (*id == key).then_some(guard))
    }

    /// Drops (and so gives back) the guards of type `G` that hook instance `owner` holds;
    /// returns how many there were. Finding none is normal: a release stage runs once its
    /// acquire stage was reached, even when the acquiring hook refused the call or never
    /// ran.
    pub fn release<G: Send + Sync + 'static>(&mut self, owner: &impl ?Sized) -> usize {
        let key = owner_key(owner);
        let Some(held) = self.scratch.as_mut().and_then(|s| s.get_mut::<Held<G>>()) else {
            return 0;
        };
        let before = held.len();
        held.retain(|(id, _)| *id != key);
        before - held.len()
    }

    /// Metadata that travels with the result (argument repairs, sources, truncation…).
    pub fn metadata(&self) -> &Map<String, Value> {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        self.trail.as_ref().map_or(&EMPTY, |t| &t.metadata)
    }

    /// Metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.trail_mut().metadata
    }

    /// The secrets injected for this call.
    pub fn secrets(&self) -> &SecretSlot {
        &self.secrets
    }

    /// The secret slot, mutably (for the `will_inject_secrets` stage).
    pub fn secrets_mut(&mut self) -> &mut SecretSlot {
        &mut self.secrets
    }

    /// Marks the result as one not to reuse: it depends on more than the input (answers
    /// the caller gave during the call, say). A cache does not store it. Takes `&self`, so
    /// that the tool, which gets `&ToolInvokeContext`, can say so while it runs.
    ///
    /// ```
    /// # use toolgate_core::ToolInvokeContext;
    /// fn after_asking_the_user(ctx: &ToolInvokeContext) {
    ///     ctx.set_no_store();
    ///     assert!(ctx.is_no_store());
    /// }
    /// ```
    pub fn set_no_store(&self) {
        self.no_store.store(true, Ordering::Relaxed);
    }

    /// Whether the result is not to be reused: the call was made with
    /// [`InvokeOptions::no_store`](crate::InvokeOptions::no_store) (a cache does not answer
    /// it either), or [`set_no_store`](Self::set_no_store) was called.
    pub fn is_no_store(&self) -> bool {
        self.no_store.load(Ordering::Relaxed)
    }

    // ----- error, timing, attempts, deadline, cancellation -----

    /// The error, once the invocation failed.
    pub fn error(&self) -> Option<&ToolError> {
        self.error.as_ref()
    }

    /// The error, mutably: for `on_error` hooks that scrub or enrich its message (what
    /// they return there is never applied, so this is how they change what the caller
    /// sees). The invocation stays failed.
    pub fn error_mut(&mut self) -> Option<&mut ToolError> {
        self.error.as_mut()
    }

    /// When the invocation started (monotonic).
    pub fn started(&self) -> Instant {
        to_std_instant(self.started)
    }

    /// When the invocation started (wall clock).
    pub fn started_at(&self) -> SystemTime {
        let since = ago(self.started);
        let now = SystemTime::now();
        now.checked_sub(since).unwrap_or(now)
    }

    /// When the invocation finished: set before the record phase on every path.
    pub fn finished(&self) -> Option<Instant> {
        self.finished.map(to_std_instant)
    }

    /// How long the invocation took (so far, until it finished).
    pub fn elapsed(&self) -> Duration {
        self.finished
            .unwrap_or_else(ClockInstant::now)
            .duration_since(self.started)
    }

    /// How long each stage that has hooks took, in the order they ran. Empty unless the
    /// pipeline records stage durations: built with
    /// [`PipelineBuilder::record_stage_durations`](crate::PipelineBuilder::record_stage_durations),
    /// or serving a hook that [wants them](crate::Hook::wants_stage_durations) (as the
    /// audit hook does).
    pub fn stage_durations(&self) -> &[(Stage, Duration)] {
        self.trail.as_ref().map_or(&[], |t| &t.stage_durations)
    }

    /// How long each hook took (empty unless the pipeline records hook timings).
    pub fn hook_timings(&self) -> &[HookTiming] {
        self.trail.as_ref().map_or(&[], |t| &t.hook_timings)
    }

    /// The hooks' decisions so far (aborts, responds, suspensions, shadow decisions).
    pub fn decisions(&self) -> &[Decision] {
        self.trail.as_ref().map_or(&[], |t| &t.decisions)
    }

    /// The execution attempt: 0 before the tool first runs, 1 for the first attempt.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How many times the tool itself ran: an attempt that a hook answered or refused at
    /// `will_execute` (or `on_retry`) is not a run, and a cache hit or a refusal makes none.
    pub fn runs(&self) -> u32 {
        self.runs
    }

    /// The deadline of the call, if it has one.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// Time left until the deadline (zero once it has passed).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
    }

    /// The cancellation token of the call. It fires when the deadline passes or the caller
    /// cancels; long-running tools should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancel.get_or_init(CancellationToken::new)
    }

    /// Puts `token` in place of the call's cancellation token and returns the previous one
    /// — for a hook that bounds part of the call (one attempt) with a child token and puts
    /// the parent back afterwards. The pipeline's own deadline and drop handling cancel
    /// whichever token is in place; the caller's token keeps being watched as before.
    pub fn replace_cancellation(&mut self, token: CancellationToken) -> CancellationToken {
        let previous = std::mem::replace(&mut self.cancel, OnceLock::from(token));
        previous.into_inner().unwrap_or_default()
    }

    /// Moves the deadline earlier (never later): `remaining()` then reflects it, so later
    /// hooks (a retry policy) plan within it. The hook that narrows the deadline enforces
    /// it; the pipeline enforces the deadline the call started with.
    pub fn narrow_deadline(&mut self, deadline: tokio::time::Instant) {
        self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
    }

    /// The caller's token, if the call was given one (lookups here do not create one).
    pub(crate) fn cancellation_if_given(&self) -> Option<CancellationToken> {
        self.cancel.get().cloned()
    }

    pub(crate) fn cancel_if_watched(&self) {
        if let Some(token) = self.cancel.get() {
            token.cancel();
        }
    }

    /// The decision this invocation was resumed with, if it was resumed; `Approve` too for
    /// a call that runs on an approval for a retry ([`approved_retry_of`](Self::approved_retry_of)).
    pub fn resumed(&self) -> Option<&ResumeDecision> {
        self.trail.as_ref()?.resumed.as_ref()
    }

    /// Who decided on this resumed invocation (an approver's user id), when the resume
    /// said ([`InvokeOptions::decided_by`](crate::InvokeOptions::decided_by)).
    pub fn decided_by(&self) -> Option<&str> {
        Some(&self.trail.as_ref()?.decided_by.as_ref()?.id)
    }

    /// The tenant of who decided on this resumed invocation, when they have one.
    pub fn decided_by_tenant(&self) -> Option<&str> {
        self.trail.as_ref()?.decided_by.as_ref()?.tenant.as_deref()
    }

    /// Why the approver decided as they did, when the resume said
    /// ([`InvokeOptions::decision_reason`](crate::InvokeOptions::decision_reason)); a
    /// rejection's reason is in its [`ResumeDecision`].
    pub fn decision_reason(&self) -> Option<&str> {
        self.trail.as_ref()?.decision_reason.as_deref()
    }

    /// The id of the waiting call whose approval for a retry this call used
    /// ([`Pipeline::approve_retry`](crate::Pipeline::approve_retry)), if it ran on one.
    pub fn approved_retry_of(&self) -> Option<&str> {
        self.trail.as_ref()?.retry_of.as_deref()
    }

    /// The id of the waiting call this invocation resumes
    /// ([`Pipeline::resume`](crate::Pipeline::resume)), if it was resumed: the id its
    /// suspension was given, not one the caller chose. `None` for a call that runs on an
    /// approval for a retry ([`approved_retry_of`](Self::approved_retry_of) names that one).
    pub fn resumed_from(&self) -> Option<&str> {
        self.trail.as_ref()?.resumed_from.as_deref()
    }

    // ----- providers -----

    /// The provider under key `K`, looked up request → session → global.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Missing`] naming `K` when no scope binds it.
    pub fn get<K: TypeMapKey>(&self) -> Result<Arc<K::Value>, ProviderError> {
        self.try_get::<K>().ok_or(ProviderError::Missing {
            key: std::any::type_name::<K>(),
        })
    }

    /// The provider under key `K`, if any scope binds it.
    pub fn try_get<K: TypeMapKey>(&self) -> Option<Arc<K::Value>> {
        if let Some(v) = self.request_providers.get::<K>() {
            self.note_tool_read::<K>();
            return Some(Arc::clone(v));
        }
        if let Some(v) = self.session_scope().and_then(|s| s.get::<K>()) {
            self.note_tool_read::<K>();
            return Some(v);
        }
        let global = self.scope.scopes.globals.get::<K>().cloned();
        if global.is_none() {
            self.note_tool_read::<K>();
        }
        global
    }

    /// The providers the tool looked up while it ran that this call's request or session
    /// scope answered, or that no scope binds: what its output may depend on besides its
    /// input, its user and the global scope. A lookup of a key no scope binds counts,
    /// because the output may depend on the absence. Lookups by hooks do not count.
    ///
    /// A result cache reads this after the tool ran: a result that depends on per-call
    /// providers is stored only under a key that holds their values, or when its owner
    /// declared it independent of them (`ResultCacheBuilder::key_includes`,
    /// `independent_of` in `toolgate-hooks`).
    pub fn tool_provider_reads(&self) -> Vec<ProviderRequirement> {
        self.tool_reads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    #[inline]
    fn note_tool_read<K: TypeMapKey>(&self) {
        if self.progress.in_tool.load(Ordering::Relaxed) {
            self.note_read(ProviderRequirement::of::<K>());
        }
    }

    #[cold]
    fn note_read(&self, read: ProviderRequirement) {
        let mut reads = self.tool_reads.lock().unwrap_or_else(|e| e.into_inner());
        if !reads.contains(&read) {
            reads.push(read);
        }
    }

    /// Whether this call's session scope binds `K` (a binder that fills a session once).
    pub(crate) fn session_binds<K: TypeMapKey>(&self) -> bool {
        self.session_scope().is_some_and(|s| s.get::<K>().is_some())
    }

    /// Binds a provider in the request or session scope.
    ///
    /// # Errors
    ///
    /// [`ProviderError::GlobalReadOnly`] for [`Scope::Global`] (global providers are bound
    /// on the pipeline builder), [`ProviderError::NoSession`] for [`Scope::Session`] when
    /// the call has no session id.
    pub fn provide<K: TypeMapKey>(
        &mut self,
        value: K::Value,
        scope: Scope,
    ) -> Result<(), ProviderError> {
        let key = std::any::type_name::<K>();
        match scope {
            Scope::Request => {
                self.request_providers.insert::<K>(value);
                Ok(())
            }
            Scope::Session => {
                let id = self
                    .session_id
                    .clone()
                    .ok_or(ProviderError::NoSession { key })?;
                let maker = self.user();
                let scope = self.scope.scopes.sessions.get_or_create(&id, Some(maker));
                scope.insert::<K>(Arc::new(value));
                self.session = OnceLock::from(Some(scope));
                Ok(())
            }
            Scope::Global => Err(ProviderError::GlobalReadOnly { key }),
        }
    }

    fn session_scope(&self) -> Option<&Arc<SessionScope>> {
        self.session
            .get_or_init(|| {
                let id = self.session_id.as_deref()?;
                self.scope.scopes.sessions.get(id)
            })
            .as_ref()
    }

    // ----- control helpers -----

    /// Short-circuits with `value` as the output (see [`Control::Respond`]).
    pub fn respond(&self, value: Value) -> HookResult {
        Err(Control::Respond(value))
    }

    /// Refuses the call with a reason, a machine code and an HTTP status.
    pub fn abort(
        &self,
        reason: impl Into<String>,
        code: impl Into<std::borrow::Cow<'static, str>>,
        status: u16,
    ) -> HookResult {
        Err(Control::Error(ToolError::abort(reason, code, status)))
    }

    /// Refuses the call for now: the caller may retry after `delay`.
    pub fn retry_after(&self, delay: Duration, reason: impl Into<String>) -> HookResult {
        Err(Control::Error(ToolError::retry_after(delay, reason)))
    }

    /// Suspends the call until a person decides (see [`Control::Suspend`]). Asked before
    /// the input is checked and redacted, the call waits once it is (at the end of
    /// `will_redact_input`).
    pub fn suspend(&self, reason: impl Into<String>) -> HookResult {
        Err(Control::Suspend(SuspendRequest::new(reason)))
    }
}

impl fmt::Debug for ToolInvokeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolInvokeContext")
            .field("tool", &self.scope.definition.name)
            .field("request_id", &self.request_id)
            .field("session_id", &self.session_id)
            .field("user", &self.user().id)
            .field("stage", &self.stage)
            .field("attempt", &self.attempt)
            .field("error", &self.error)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// The scratchpad key of the guards of type `G` that hooks hold, by owning instance.
struct Held<G>(std::marker::PhantomData<G>);

impl<G: Send + Sync + 'static> TypeMapKey for Held<G> {
    type Value = Vec<(usize, G)>;
}

/// A hook instance's key in [`Held`]: its address.
fn owner_key<T: ?Sized>(owner: &T) -> usize {
    std::ptr::from_ref(owner).cast::<()>().addr()
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_request_ids_read_as_prefix_and_hex_counter() {
        for (prefix, n) in [
            (0u32, 0u64),
            (0xdead_beef, 1),
            (7, 0x1234_abcd),
            (u32::MAX, u64::MAX),
        ] {
            assert_eq!(
                super::generated_text(prefix, n, &mut [0; 29]),
                format!("req-{prefix:08x}-{n:x}")
            );
        }
    }

    use std::collections::HashSet;

    use super::*;

    #[test]
    fn generated_request_ids_are_unique_across_threads() {
        let per_thread = 3 * REQUEST_ID_BLOCK as usize;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..per_thread)
                        .map(|_| RequestId::generate())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seen = HashSet::new();
        for thread in threads {
            for id in thread.join().expect("the thread finishes") {
                assert!(seen.insert(id), "an id was handed out twice");
            }
        }
        assert_eq!(seen.len(), 4 * per_thread);
    }

    #[test]
    fn the_anonymous_user_is_one_shared_instance() {
        assert_eq!(crate::user::ANONYMOUS.id, "anonymous");
        assert!(Arc::ptr_eq(&User::anonymous(), &crate::user::ANONYMOUS));
    }
}
