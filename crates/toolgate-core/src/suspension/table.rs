//! [`SuspensionTable`]: waiting calls under [`SuspensionLimits`], with the time passed in.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::time::SystemTime;

use super::{
    DecidedCall, RetryApproval, SuspendedInvocation, SuspensionFilter, SuspensionLimits,
    SuspensionStoreError,
};
use crate::approval::CallBinding;
use crate::user::{CallerId as Caller, User};

/// Waiting calls kept under [`SuspensionLimits`]: per-caller and total caps, expiry, and a
/// memory of recently expired ids and who made each. A caller is a user id in a tenant
/// ([`User::is_same_caller`]): `ann` of `globex` counts apart from `ann` of `acme`. Not
/// synchronized and not async: a store wraps it in its own lock and passes the time of
/// every operation in, so a test can move that time.
///
/// Both built-in stores keep one; a store of your own (a database, a shared cache) can
/// too, to enforce the same bounds.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use serde_json::{json, Map};
/// use toolgate_core::suspension::{
///     SuspendedInvocation, SuspensionLimits, SuspensionStoreError, SuspensionTable,
/// };
/// use toolgate_core::{Stage, User};
///
/// let call = |id: &str, user: &str| SuspendedInvocation {
///     id: id.into(),
///     tool: "deploy".into(),
///     tool_version: "1".into(),
///     session_id: None,
///     request_id: id.into(),
///     user: User::new(user),
///     input: json!({}),
///     output: None,
///     metadata: Map::new(),
///     stage: Stage::WillRedactInput,
///     reason: "needs approval".into(),
///     payload: json!(null),
///     suspended_at: SystemTime::UNIX_EPOCH,
///     expires_at: None,
///     binding: None,
/// };
/// let limits = SuspensionLimits {
///     max_per_user: 1,
///     expire_after: Duration::from_secs(60),
///     ..SuspensionLimits::default()
/// };
/// let mut table = SuspensionTable::new(limits);
/// let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600);
///
/// table.insert(call("a", "ann"), noon)?;
/// let refused = table.insert(call("b", "ann"), noon).unwrap_err();
/// assert!(matches!(refused, SuspensionStoreError::UserFull { max: 1, .. }));
/// table.insert(call("c", "bob"), noon)?; // other users are unaffected
/// let mut of_acme = call("e", "ann");
/// of_acme.user = User::new("ann").with_tenant("acme");
/// table.insert(of_acme, noon)?; // and so is the `ann` of a tenant
/// assert_eq!(table.waiting_for(&User::new("ann")), 1);
///
/// let later = noon + Duration::from_secs(61);
/// table.insert(call("d", "ann"), later)?; // ann's first call expired and no longer counts
/// assert_eq!(table.take("a", later), Err(SuspensionStoreError::Expired { id: "a".into() }));
/// # Ok::<(), SuspensionStoreError>(())
/// ```
#[derive(Clone, Debug)]
pub struct SuspensionTable {
    limits: SuspensionLimits,
    entries: BTreeMap<String, SuspendedInvocation>,
    /// What each caller's waiting calls hold: how many, and their bytes.
    per_caller: HashMap<Caller, Held>,
    /// Each waiting call's bytes ([`stored_size`]), by id, measured once when it is kept.
    sizes: HashMap<String, usize>,
    /// The bytes of all waiting calls.
    bytes: usize,
    /// The earliest expiry among the entries: until then, nothing needs removing.
    next_expiry: Option<SystemTime>,
    expired: ExpiredIds,
    /// The calls that expired and whose expiry nobody claimed yet
    /// ([`claim_expired`](Self::claim_expired)), without their contents, oldest expiry
    /// first: at most `max_total`.
    untold: VecDeque<SuspendedInvocation>,
    retries: RetryApprovals,
    outcomes: Outcomes,
}

/// The outcomes of decided calls, by id, and the order they were kept in (each is kept as
/// long as the others, so the first kept is the first to go), in all and per caller, and
/// which caller holds the most.
#[derive(Clone, Debug, Default)]
struct Outcomes {
    /// By id, in id order for listings.
    by_id: BTreeMap<String, DecidedCall>,
    order: VecDeque<(String, SystemTime)>,
    /// Each caller's outcomes in the order of `order`, so that a caller at its cap loses
    /// its own first kept rather than anyone's; a caller with none has no entry.
    per_caller: HashMap<Caller, VecDeque<(String, SystemTime)>>,
    /// Every caller of `per_caller` by their [`Rank`], so that the last is the caller who
    /// holds the most outcomes (of those, the one whose first kept is the oldest): who
    /// loses one past `max_total`. In step with `per_caller`, which changes only through
    /// [`Outcomes::change_for`].
    by_rank: BTreeMap<Rank, Caller>,
    /// The token of the decision that kept each running record in `by_id`, by id: an id
    /// here is a running record, one not here an outcome.
    running: HashMap<String, String>,
}

/// Where a caller stands among those who hold outcomes: how many they hold, then their
/// first kept (decided at, id) reversed, so that of callers who hold as many the one whose
/// first kept is the oldest ranks last. Unique: an id is kept once.
type Rank = (usize, Reverse<(SystemTime, String)>);

/// Approvals for a retry, by the key of their binding; several approvals of equal calls
/// queue under one key.
#[derive(Clone, Debug, Default)]
struct RetryApprovals {
    by_key: BTreeMap<String, VecDeque<RetryApproval>>,
    per_caller: HashMap<Caller, usize>,
    len: usize,
}

/// What one caller's waiting calls hold.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    calls: usize,
    bytes: usize,
}

/// The bytes a waiting call takes, as the byte bounds of [`SuspensionLimits`] count it: its
/// record serialized as compact JSON, measured without building the text.
///
/// ```
/// # use serde_json::{json, Map};
/// # use toolgate_core::suspension::{stored_size, SuspendedInvocation};
/// # fn sized(call: SuspendedInvocation) {
/// assert_eq!(stored_size(&call), serde_json::to_vec(&call).unwrap().len());
/// # }
/// ```
pub fn stored_size(suspended: &SuspendedInvocation) -> usize {
    crate::json::text_len(suspended)
}

/// Who a cap counts and an expired id remembers: the caller a call or an approval is for.
fn caller_of_binding(binding: &CallBinding) -> Caller {
    Caller {
        id: binding.user.clone(),
        tenant: binding.tenant.clone(),
    }
}

/// Whose kept outcomes `outcome` counts among: the caller who made the call.
fn caller_of_outcome(outcome: &DecidedCall) -> Caller {
    Caller {
        id: outcome.user.clone(),
        tenant: outcome.tenant.clone(),
    }
}

impl SuspensionTable {
    /// An empty table.
    pub fn new(limits: SuspensionLimits) -> Self {
        SuspensionTable {
            limits,
            entries: BTreeMap::new(),
            per_caller: HashMap::new(),
            sizes: HashMap::new(),
            bytes: 0,
            next_expiry: None,
            expired: ExpiredIds::default(),
            untold: VecDeque::new(),
            retries: RetryApprovals::default(),
            outcomes: Outcomes::default(),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> SuspensionLimits {
        self.limits
    }

    /// Changes the bounds. They apply to the calls kept from now on; a call already waiting
    /// keeps its expiry and stays even if it is now over a cap.
    pub fn set_limits(&mut self, limits: SuspensionLimits) {
        self.limits = limits;
    }

    /// Keeps a call that asks to wait, stamping its expiry (`now` plus
    /// [`expire_after`](SuspensionLimits::expire_after), or the call's own if sooner).
    /// Expired calls are removed first, so they never count against a cap.
    ///
    /// # Errors
    ///
    /// [`SuspensionStoreError::UserFull`] when the call's caller (its user id in its
    /// tenant) already has `max_per_user` calls waiting; [`SuspensionStoreError::Full`] when
    /// `max_total` calls wait; [`SuspensionStoreError::UserBytesFull`] when the caller's
    /// waiting calls with this one would take more than `max_bytes_per_user` bytes
    /// ([`stored_size`]); [`SuspensionStoreError::BytesFull`] when all of them would take
    /// more than `max_bytes_total`. The table is unchanged then.
    pub fn insert(
        &mut self,
        mut suspended: SuspendedInvocation,
        now: SystemTime,
    ) -> Result<(), SuspensionStoreError> {
        self.remove_expired(now);
        if self.waiting_for(&suspended.user) >= self.limits.max_per_user {
            let max = self.limits.max_per_user;
            return Err(SuspensionStoreError::user_full(&suspended.user, max));
        }
        if self.entries.len() >= self.limits.max_total {
            return Err(SuspensionStoreError::Full {
                max: self.limits.max_total,
            });
        }
        let ours = now.checked_add(self.limits.expire_after);
        suspended.expires_at = match (suspended.expires_at, ours) {
            (Some(given), Some(ours)) => Some(given.min(ours)),
            (given, ours) => given.or(ours),
        };
        let size = stored_size(&suspended);
        let held = self.bytes_of(&suspended.user);
        if held.saturating_add(size) > self.limits.max_bytes_per_user {
            return Err(SuspensionStoreError::UserBytesFull {
                user: suspended.user.id.clone(),
                tenant: suspended.user.tenant.clone(),
                max_bytes: self.limits.max_bytes_per_user,
            });
        }
        if self.bytes.saturating_add(size) > self.limits.max_bytes_total {
            return Err(SuspensionStoreError::BytesFull {
                max_bytes: self.limits.max_bytes_total,
            });
        }
        self.keep_sized(suspended, size);
        Ok(())
    }

    /// Keeps a call that was admitted before — read back from a file at start-up — without
    /// checking the caps. One without an expiry gets `suspended_at` plus `expire_after`; one
    /// that has expired already is not kept, and its id answers as expired.
    pub fn restore(&mut self, mut suspended: SuspendedInvocation, now: SystemTime) {
        if suspended.expires_at.is_none() {
            suspended.expires_at = suspended.suspended_at.checked_add(self.limits.expire_after);
        }
        if is_expired(&suspended, now) {
            let owner = Caller::of(&suspended.user);
            self.untell(&suspended);
            self.expired
                .insert(suspended.id, owner, self.limits.max_total);
        } else {
            self.keep(suspended);
        }
    }

    /// Removes and returns the call with this id.
    ///
    /// # Errors
    ///
    /// [`SuspensionStoreError::Expired`] when it expired (it is removed then too, and its
    /// id is remembered as expired).
    pub fn take(
        &mut self,
        id: &str,
        now: SystemTime,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        self.check(id, now)?;
        Ok(self.forget(id))
    }

    /// The call with this id, left in place.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    pub fn get(
        &mut self,
        id: &str,
        now: SystemTime,
    ) -> Result<Option<&SuspendedInvocation>, SuspensionStoreError> {
        self.check(id, now)?;
        Ok(self.entries.get(id))
    }

    /// Removes every call that has expired by `now`; how many there were. Cheap when none
    /// has: the table knows its earliest expiry.
    pub fn remove_expired(&mut self, now: SystemTime) -> usize {
        if self.next_expiry.is_none_or(|at| at > now) {
            return 0;
        }
        let gone: Vec<(String, Caller)> = self
            .entries
            .values()
            .filter(|s| is_expired(s, now))
            .map(|s| (s.id.clone(), Caller::of(&s.user)))
            .collect();
        let count = gone.len();
        for (id, owner) in gone {
            if let Some(suspended) = self.forget(&id) {
                self.untell(&suspended);
            }
            self.expired.insert(id, owner, self.limits.max_total);
        }
        self.next_expiry = self.entries.values().filter_map(|s| s.expires_at).min();
        count
    }

    /// How many calls of the caller `user` wait — its id in its tenant, whatever its roles
    /// (expired ones that were not removed yet included).
    pub fn waiting_for(&self, user: &User) -> usize {
        self.per_caller
            .get(&Caller::of(user))
            .map_or(0, |held| held.calls)
    }

    /// The bytes the waiting calls of the caller `user` take ([`stored_size`] of each).
    pub fn bytes_of(&self, user: &User) -> usize {
        self.per_caller
            .get(&Caller::of(user))
            .map_or(0, |held| held.bytes)
    }

    /// The bytes all waiting calls take ([`stored_size`] of each).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Up to `limit` calls that match `filter` and have not expired by `now`, in id order,
    /// after the id `after` when it is given: what [`SuspensionStore::list`] answers.
    ///
    /// [`SuspensionStore::list`]: super::SuspensionStore::list
    pub fn list(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> Vec<SuspendedInvocation> {
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        self.entries
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(_, suspended)| suspended)
            .filter(|suspended| !is_expired(suspended, now) && filter.matches(suspended))
            .take(limit)
            .cloned()
            .collect()
    }

    /// The waiting calls by id, for a store that writes them out.
    pub fn entries(&self) -> &BTreeMap<String, SuspendedInvocation> {
        &self.entries
    }

    /// Keeps an approval for a retry until its `expires_at`, under the caps on waiting
    /// calls (`max_per_user` approvals per caller — the binding's user id and tenant —,
    /// `max_total` in all, counted apart from the calls that wait). Expired approvals are
    /// removed first.
    ///
    /// # Errors
    ///
    /// [`SuspensionStoreError::UserFull`] or [`SuspensionStoreError::Full`] past a cap.
    pub fn keep_retry_approval(
        &mut self,
        approval: RetryApproval,
        now: SystemTime,
    ) -> Result<(), SuspensionStoreError> {
        self.retries.remove_expired(now);
        let caller = caller_of_binding(&approval.binding);
        let kept = self.retries.per_caller.get(&caller).copied().unwrap_or(0);
        if kept >= self.limits.max_per_user {
            let max = self.limits.max_per_user;
            return Err(SuspensionStoreError::user_full(&caller.to_user(), max));
        }
        if self.retries.len >= self.limits.max_total {
            return Err(SuspensionStoreError::Full {
                max: self.limits.max_total,
            });
        }
        *self.retries.per_caller.entry(caller).or_default() += 1;
        self.retries.len += 1;
        self.retries
            .by_key
            .entry(approval.binding.key())
            .or_default()
            .push_back(approval);
        Ok(())
    }

    /// Removes and returns the oldest approval for a retry under `key` that has not
    /// expired by `now` (expired ones met on the way are dropped).
    pub fn use_retry_approval(&mut self, key: &str, now: SystemTime) -> Option<RetryApproval> {
        let queue = self.retries.by_key.get_mut(key)?;
        let mut found = None;
        let mut gone: Vec<Caller> = Vec::new();
        while let Some(approval) = queue.pop_front() {
            let live = approval.expires_at > now;
            gone.push(caller_of_binding(&approval.binding));
            if live {
                found = Some(approval);
                break;
            }
        }
        if queue.is_empty() {
            self.retries.by_key.remove(key);
        }
        for caller in &gone {
            self.retries.forget_one(caller);
        }
        found
    }

    /// The approvals for a retry that have not expired by `now`, in the order of their
    /// keys, those under one key in the order they would be used: for a store that writes
    /// them out, and reads them back with [`restore_retry_approval`](Self::restore_retry_approval).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use toolgate_core::approval::CallBinding;
    /// use toolgate_core::suspension::{RetryApproval, SuspensionLimits, SuspensionTable};
    ///
    /// let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600);
    /// let approval = |input: &str, good_for: u64| RetryApproval {
    ///     binding: CallBinding {
    ///         user: "ann".into(),
    ///         tenant: None,
    ///         tool: "deploy".into(),
    ///         definition: "sha256:d".into(),
    ///         input: input.into(),
    ///         generation: "g1".into(),
    ///     },
    ///     suspension_id: format!("susp-{input}"),
    ///     decided_by: Some("boss".into()),
    ///     decided_by_tenant: None,
    ///     decided_at: noon,
    ///     expires_at: noon + Duration::from_secs(good_for),
    /// };
    /// let mut table = SuspensionTable::new(SuspensionLimits::default());
    /// table.keep_retry_approval(approval("prod", 60), noon)?;
    /// table.keep_retry_approval(approval("test", 10), noon)?;
    ///
    /// let later = noon + Duration::from_secs(30);
    /// let live: Vec<&str> = table
    ///     .live_retry_approvals(later)
    ///     .map(|a| a.suspension_id.as_str())
    ///     .collect();
    /// assert_eq!(live, ["susp-prod"]); // the approval of `test` expired
    /// # Ok::<(), toolgate_core::suspension::SuspensionStoreError>(())
    /// ```
    pub fn live_retry_approvals(&self, now: SystemTime) -> impl Iterator<Item = &RetryApproval> {
        self.retries
            .by_key
            .values()
            .flatten()
            .filter(move |approval| approval.expires_at > now)
    }

    /// Keeps an approval for a retry that was kept before — read back from a file at
    /// start-up — without checking the caps (it was admitted when it was given), behind the
    /// approvals already under its key. One that has expired by `now` is not kept. It
    /// counts against the caps for the approvals kept from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use toolgate_core::approval::CallBinding;
    /// use toolgate_core::suspension::{RetryApproval, SuspensionLimits, SuspensionTable};
    ///
    /// let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600);
    /// let approval = |input: &str, good_for: u64| RetryApproval {
    ///     binding: CallBinding {
    ///         user: "ann".into(),
    ///         tenant: None,
    ///         tool: "deploy".into(),
    ///         definition: "sha256:d".into(),
    ///         input: input.into(),
    ///         generation: "g1".into(),
    ///     },
    ///     suspension_id: format!("susp-{input}"),
    ///     decided_by: None,
    ///     decided_by_tenant: None,
    ///     decided_at: noon,
    ///     expires_at: noon + Duration::from_secs(good_for),
    /// };
    /// let limits = SuspensionLimits { max_per_user: 1, ..SuspensionLimits::default() };
    /// let mut table = SuspensionTable::new(limits);
    /// let later = noon + Duration::from_secs(30);
    ///
    /// table.restore_retry_approval(approval("prod", 60), later);
    /// table.restore_retry_approval(approval("stage", 60), later); // past `max_per_user`
    /// table.restore_retry_approval(approval("test", 10), later); // expired: dropped
    ///
    /// assert_eq!(table.retry_approvals(), 2);
    /// let key = approval("prod", 60).binding.key();
    /// assert!(table.use_retry_approval(&key, later).is_some());
    /// # Ok::<(), toolgate_core::suspension::SuspensionStoreError>(())
    /// ```
    pub fn restore_retry_approval(&mut self, approval: RetryApproval, now: SystemTime) {
        if approval.expires_at <= now {
            return;
        }
        *self
            .retries
            .per_caller
            .entry(caller_of_binding(&approval.binding))
            .or_default() += 1;
        self.retries.len += 1;
        self.retries
            .by_key
            .entry(approval.binding.key())
            .or_default()
            .push_back(approval);
    }

    /// Keeps the outcome of a decided call for `expire_after` after its decision, at most
    /// `max_per_user` of them per caller — the call's user id in its tenant — and
    /// `max_total` in all. A caller at its cap loses its own oldest outcome, never another
    /// caller's: one who withdraws calls in a loop (each withdrawal keeps an outcome) cannot
    /// push out the outcomes of others. Past `max_total` the caller who holds the most
    /// outcomes loses their oldest (of callers who hold as many, the one whose oldest is
    /// the oldest): never a caller who holds fewer than this outcome's caller, so a flood
    /// only ever pushes out the flooder's own outcomes while they hold the most.
    pub fn keep_outcome(&mut self, outcome: DecidedCall, now: SystemTime) {
        let keep = self.limits.expire_after;
        self.outcomes.remove_expired(now, keep);
        self.outcomes.remove(&outcome.id);
        let caller = caller_of_outcome(&outcome);
        self.outcomes
            .make_room_for(&caller, self.limits.max_per_user.max(1));
        while self.outcomes.by_id.len() >= self.limits.max_total.max(1)
            && self.outcomes.remove_from_the_most()
        {}
        let kept = (outcome.id.clone(), outcome.decided_at);
        self.outcomes
            .change_for(&caller, |mine| mine.push_back(kept.clone()));
        self.outcomes.order.push_back(kept);
        self.outcomes.by_id.insert(outcome.id.clone(), outcome);
    }

    /// Keeps `record`, the running record of the decision `token`, as the outcome of its
    /// call, only when nothing is kept for its id at `now`: what
    /// [`SuspensionStore::keep_running`] does. Counted and capped as
    /// [`keep_outcome`](Self::keep_outcome). `true` when it was kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use serde_json::json;
    /// use toolgate_core::User;
    /// use toolgate_core::suspension::{DecidedCall, SuspensionLimits, SuspensionTable};
    ///
    /// let mut table = SuspensionTable::new(SuspensionLimits::default());
    /// let now = SystemTime::now();
    /// let ann = User::new("ann");
    /// let running = |by: &str| DecidedCall::new("s-1", &ann, json!({ "status": "running", "by": by }));
    ///
    /// assert!(table.keep_running(running("alice"), "alices", now));
    /// assert!(!table.keep_running(running("bob"), "bobs", now), "alice's stands");
    /// assert!(!table.remove_running("s-1", "bobs", now), "not bob's to remove");
    /// // Alice's decision took the call and it ended: its outcome replaces the record.
    /// table.keep_outcome(DecidedCall::new("s-1", &ann, json!({ "status": "success" })), now);
    /// assert!(!table.keep_running(running("bob"), "bobs", now), "never over an outcome");
    /// assert!(!table.remove_running("s-1", "alices", now), "nor removed with it");
    /// assert_eq!(table.outcome("s-1", now).unwrap().result["status"], "success");
    /// ```
    ///
    /// [`SuspensionStore::keep_running`]: super::SuspensionStore::keep_running
    pub fn keep_running(&mut self, record: DecidedCall, token: &str, now: SystemTime) -> bool {
        if self.outcome(&record.id, now).is_some() {
            return false;
        }
        let id = record.id.clone();
        self.keep_outcome(record, now);
        self.outcomes.running.insert(id, token.to_owned());
        true
    }

    /// Takes the call `id`, as [`take`](Self::take) does, and when it was taken keeps
    /// `record`, the running record of the decision `token`, in its place: over nothing or
    /// a running record, never over an outcome. What [`SuspensionStore::take_running`]
    /// does; the table is one step, under the lock of the store that holds it.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take); nothing is kept then.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use serde_json::{json, Map};
    /// use toolgate_core::suspension::{
    ///     DecidedCall, SuspendedInvocation, SuspensionLimits, SuspensionTable,
    /// };
    /// use toolgate_core::{Stage, User};
    ///
    /// let ann = User::new("ann");
    /// let mut table = SuspensionTable::new(SuspensionLimits::default());
    /// let now = SystemTime::now();
    /// table.insert(SuspendedInvocation {
    ///     id: "s-1".into(),
    ///     tool: "deploy".into(),
    ///     tool_version: "1".into(),
    ///     session_id: None,
    ///     request_id: "s-1".into(),
    ///     user: ann.clone(),
    ///     input: json!({}),
    ///     output: None,
    ///     metadata: Map::new(),
    ///     stage: Stage::WillRedactInput,
    ///     reason: "needs approval".into(),
    ///     payload: json!(null),
    ///     suspended_at: now,
    ///     expires_at: None,
    ///     binding: None,
    /// }, now)?;
    /// let running = |by: &str| DecidedCall::new("s-1", &ann, json!({ "status": "running", "by": by }));
    ///
    /// // Carol's approval takes the call: her record is kept in its place...
    /// assert!(table.take_running("s-1", running("carol"), "carols", now)?.is_some());
    /// // ...and alice, a moment late, takes nothing and keeps nothing.
    /// assert!(table.take_running("s-1", running("alice"), "alices", now)?.is_none());
    /// assert_eq!(table.outcome("s-1", now).unwrap().result["by"], "carol");
    /// # Ok::<(), toolgate_core::suspension::SuspensionStoreError>(())
    /// ```
    ///
    /// [`SuspensionStore::take_running`]: super::SuspensionStore::take_running
    pub fn take_running(
        &mut self,
        id: &str,
        record: DecidedCall,
        token: &str,
        now: SystemTime,
    ) -> Result<Option<SuspendedInvocation>, SuspensionStoreError> {
        let taken = self.take(id, now)?;
        let kept_as = record.id.clone();
        if taken.is_some() && self.keep_outcome_over_running(record, now) {
            self.outcomes.running.insert(kept_as, token.to_owned());
        }
        Ok(taken)
    }

    /// Keeps `outcome` as the end of its call only over a running record — whichever
    /// decision kept it — or over nothing; an outcome kept already for its id (the call's
    /// caller withdrew it while it ran) stays as it is: what
    /// [`SuspensionStore::keep_outcome_over_running`] does. `true` when it was kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use serde_json::json;
    /// use toolgate_core::User;
    /// use toolgate_core::suspension::{DecidedCall, SuspensionLimits, SuspensionTable};
    ///
    /// let mut table = SuspensionTable::new(SuspensionLimits::default());
    /// let now = SystemTime::now();
    /// let ann = User::new("ann");
    /// let kept = |status: &str| DecidedCall::new("s-1", &ann, json!({ "status": status }));
    ///
    /// assert!(table.keep_running(kept("running"), "alices", now));
    /// // Ann withdraws the running call: her withdrawal replaces the record...
    /// assert!(table.keep_outcome_over_running(kept("withdrawn"), now));
    /// // ...and the call's own end, which comes after, does not replace her withdrawal.
    /// assert!(!table.keep_outcome_over_running(kept("success"), now));
    /// assert_eq!(table.outcome("s-1", now).unwrap().result["status"], "withdrawn");
    /// ```
    ///
    /// [`SuspensionStore::keep_outcome_over_running`]: super::SuspensionStore::keep_outcome_over_running
    pub fn keep_outcome_over_running(&mut self, outcome: DecidedCall, now: SystemTime) -> bool {
        let ended = self.outcome(&outcome.id, now).is_some()
            && !self.outcomes.running.contains_key(&outcome.id);
        if ended {
            return false;
        }
        self.keep_outcome(outcome, now);
        true
    }

    /// Removes the running record that the decision `token` kept for `id`, if it is still
    /// kept; anything else kept for `id` stays: what [`SuspensionStore::remove_running`]
    /// does. `true` when it was removed.
    ///
    /// [`SuspensionStore::remove_running`]: super::SuspensionStore::remove_running
    pub fn remove_running(&mut self, id: &str, token: &str, now: SystemTime) -> bool {
        self.outcomes.remove_expired(now, self.limits.expire_after);
        if self
            .outcomes
            .running
            .get(id)
            .is_none_or(|kept| kept != token)
        {
            return false;
        }
        self.outcomes.remove(id)
    }

    /// Keeps the outcome of a call decided before — read back from a file at start-up —
    /// without checking `max_total` (it was admitted when it was kept), in its place by
    /// decision time among the others (its caller's and all), so that the oldest still go
    /// first past the caps. One older than `expire_after` at `now` is not kept; one kept for the same id is replaced.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use serde_json::json;
    /// use toolgate_core::User;
    /// use toolgate_core::suspension::{DecidedCall, SuspensionLimits, SuspensionTable};
    ///
    /// let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600);
    /// let decided = |id: &str, secs: u64| DecidedCall {
    ///     decided_at: noon + Duration::from_secs(secs),
    ///     ..DecidedCall::new(id, &User::new("ann"), json!({ "status": "ok" }))
    /// };
    /// let limits = SuspensionLimits {
    ///     max_total: 1,
    ///     expire_after: Duration::from_secs(60),
    ///     ..SuspensionLimits::default()
    /// };
    /// let mut table = SuspensionTable::new(limits);
    /// let later = noon + Duration::from_secs(70);
    ///
    /// table.restore_outcome(decided("s-2", 20), later);
    /// table.restore_outcome(decided("s-1", 15), later); // past `max_total`
    /// table.restore_outcome(decided("s-0", 0), later); // older than a minute: dropped
    ///
    /// assert!(table.outcome("s-1", later).is_some());
    /// assert!(table.outcome("s-2", later).is_some());
    /// assert!(table.outcome("s-0", later).is_none());
    /// ```
    pub fn restore_outcome(&mut self, outcome: DecidedCall, now: SystemTime) {
        let expired = outcome
            .decided_at
            .checked_add(self.limits.expire_after)
            .is_none_or(|until| until <= now);
        if expired {
            return;
        }
        self.outcomes.remove(&outcome.id);
        let kept = (outcome.id.clone(), outcome.decided_at);
        // It counts against its caller's cap for the outcomes kept from now on.
        self.outcomes
            .change_for(&caller_of_outcome(&outcome), |mine| {
                let place =
                    mine.partition_point(|(_, decided_at)| *decided_at <= outcome.decided_at);
                mine.insert(place, kept.clone());
            });
        let place = self
            .outcomes
            .order
            .partition_point(|(_, decided_at)| *decided_at <= outcome.decided_at);
        self.outcomes.order.insert(place, kept);
        self.outcomes.by_id.insert(outcome.id.clone(), outcome);
    }

    /// Up to `limit` kept outcomes that match `filter` and are not older than
    /// `expire_after` at `now`, in id order, after the id `after` when it is given: what
    /// [`SuspensionStore::list_outcomes`] answers.
    ///
    /// [`SuspensionStore::list_outcomes`]: super::SuspensionStore::list_outcomes
    pub fn list_outcomes(
        &self,
        filter: &SuspensionFilter,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> Vec<DecidedCall> {
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        let keep = self.limits.expire_after;
        self.outcomes
            .by_id
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(_, decided)| decided)
            .filter(|decided| {
                decided
                    .decided_at
                    .checked_add(keep)
                    .is_some_and(|until| until > now)
                    && filter.matches_outcome(decided)
            })
            .take(limit)
            .cloned()
            .collect()
    }

    /// The outcome kept for `id`, unless it is older than `expire_after` at `now`.
    pub fn outcome(&mut self, id: &str, now: SystemTime) -> Option<&DecidedCall> {
        self.outcomes.remove_expired(now, self.limits.expire_after);
        self.outcomes.by_id.get(id)
    }

    /// How many approvals for a retry are kept (expired ones not yet removed included).
    pub fn retry_approvals(&self) -> usize {
        self.retries.len
    }

    /// Who made the call `id` — a [`User`] with its id and tenant, no roles —, if it has
    /// expired by `now`: while its id is remembered as expired (the most recent
    /// `max_total` expired ids), or while it waits past its expiry not yet removed. `None`
    /// for an id that waits, is unknown, or was forgotten: what
    /// [`SuspensionStore::expired_owner`] answers.
    ///
    /// [`SuspensionStore::expired_owner`]: super::SuspensionStore::expired_owner
    pub fn expired_owner(&self, id: &str, now: SystemTime) -> Option<User> {
        match self.entries.get(id) {
            Some(suspended) if is_expired(suspended, now) => {
                Some(Caller::of(&suspended.user).to_user())
            }
            Some(_) => None,
            None => self.expired.owner(id).map(Caller::to_user),
        }
    }

    /// Up to `limit` calls that expired by `now` and whose expiry nobody claimed yet,
    /// without their contents, oldest expiry first; each is given once: what
    /// [`SuspensionStore::claim_expired`] answers. Calls are kept for this `expire_after`
    /// after their expiry ([`EXPIRY_TOLD_WITHIN`] at least), at most `max_total` of them.
    ///
    /// [`EXPIRY_TOLD_WITHIN`]: super::EXPIRY_TOLD_WITHIN
    ///
    /// [`SuspensionStore::claim_expired`]: super::SuspensionStore::claim_expired
    pub fn claim_expired(&mut self, limit: usize, now: SystemTime) -> Vec<SuspendedInvocation> {
        self.remove_expired(now);
        let keep = self.limits.expire_after.max(super::EXPIRY_TOLD_WITHIN);
        self.untold.retain(|call| {
            call.expires_at
                .and_then(|at| at.checked_add(keep))
                .is_none_or(|until| until > now)
        });
        let claimed = limit.min(self.untold.len());
        self.untold.drain(..claimed).collect()
    }

    /// Keeps the call `suspended`, which just expired, for [`claim_expired`](Self::claim_expired).
    fn untell(&mut self, suspended: &SuspendedInvocation) {
        if self.limits.max_total == 0 {
            return;
        }
        while self.untold.len() >= self.limits.max_total {
            self.untold.pop_front();
        }
        // In the order of expiry: calls found expired late (by a look-up) come among
        // those found on time.
        let at = suspended.expires_at;
        let place = self.untold.partition_point(|call| call.expires_at <= at);
        self.untold.insert(place, suspended.without_contents());
    }

    /// `Expired` for an id that expired, whether it is still here or was removed.
    fn check(&mut self, id: &str, now: SystemTime) -> Result<(), SuspensionStoreError> {
        let expired = match self.entries.get(id) {
            Some(suspended) if is_expired(suspended, now) => {
                let owner = Caller::of(&suspended.user);
                if let Some(suspended) = self.forget(id) {
                    self.untell(&suspended);
                }
                self.expired
                    .insert(id.to_owned(), owner, self.limits.max_total);
                true
            }
            Some(_) => false,
            None => self.expired.contains(id),
        };
        if expired {
            return Err(SuspensionStoreError::Expired { id: id.to_owned() });
        }
        Ok(())
    }

    fn keep(&mut self, suspended: SuspendedInvocation) {
        let size = stored_size(&suspended);
        self.keep_sized(suspended, size);
    }

    /// Keeps a call whose [`stored_size`] is `size`.
    fn keep_sized(&mut self, suspended: SuspendedInvocation, size: usize) {
        self.forget(&suspended.id);
        let held = self
            .per_caller
            .entry(Caller::of(&suspended.user))
            .or_default();
        held.calls += 1;
        held.bytes += size;
        self.bytes += size;
        self.sizes.insert(suspended.id.clone(), size);
        if let Some(at) = suspended.expires_at {
            self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
        }
        self.entries.insert(suspended.id.clone(), suspended);
    }

    fn forget(&mut self, id: &str) -> Option<SuspendedInvocation> {
        let suspended = self.entries.remove(id)?;
        let size = self.sizes.remove(id).unwrap_or(0);
        self.bytes -= size;
        let caller = Caller::of(&suspended.user);
        if let Some(held) = self.per_caller.get_mut(&caller) {
            held.calls -= 1;
            held.bytes -= size;
            if held.calls == 0 {
                self.per_caller.remove(&caller);
            }
        }
        Some(suspended)
    }
}

impl Outcomes {
    fn remove_expired(&mut self, now: SystemTime, keep: std::time::Duration) {
        while let Some((_, decided_at)) = self.order.front()
            && decided_at
                .checked_add(keep)
                .is_none_or(|until| until <= now)
        {
            self.remove_oldest();
        }
    }

    /// Removes the outcome `id`, from every order; `false` when none is kept.
    fn remove(&mut self, id: &str) -> bool {
        self.running.remove(id);
        let Some(outcome) = self.by_id.remove(id) else {
            return false;
        };
        if let Some(at) = self.order.iter().position(|(kept, _)| kept == id) {
            self.order.remove(at);
        }
        self.forget_for_caller(&outcome);
        true
    }

    /// Removes the first kept of all; `false` when none is.
    fn remove_oldest(&mut self) -> bool {
        let Some((id, _)) = self.order.pop_front() else {
            return false;
        };
        self.running.remove(&id);
        if let Some(outcome) = self.by_id.remove(&id) {
            self.forget_for_caller(&outcome);
        }
        true
    }

    /// Removes the first kept of `caller`'s until they have fewer than `max`.
    fn make_room_for(&mut self, caller: &Caller, max: usize) {
        while let Some(mine) = self.per_caller.get(caller)
            && mine.len() >= max
            && let Some((oldest, _)) = mine.front().cloned()
        {
            self.remove_or_uncount(caller, &oldest);
        }
    }

    /// Removes the first kept of the caller who holds the most (of callers who hold as
    /// many, the one whose first kept is the oldest), or the first kept of all when no
    /// caller is counted (never met while the orders agree); `false` when none is kept.
    fn remove_from_the_most(&mut self) -> bool {
        let Some((_, caller)) = self.by_rank.last_key_value() else {
            return self.remove_oldest();
        };
        let caller = caller.clone();
        let Some((oldest, _)) = self.per_caller.get(&caller).and_then(|mine| mine.front()) else {
            return false;
        };
        let oldest = oldest.clone();
        self.remove_or_uncount(&caller, &oldest);
        true
    }

    /// Removes the outcome `id`, the first kept of `caller`'s.
    fn remove_or_uncount(&mut self, caller: &Caller, id: &str) {
        if !self.remove(id) {
            // Not kept any more, so it no longer counts (never met while the orders
            // agree; guards the loops if they do not).
            self.change_for(caller, |mine| {
                mine.pop_front();
            });
        }
    }

    /// Takes `outcome` out of its caller's order (at most their cap of entries, as a rule:
    /// more only after a restore).
    fn forget_for_caller(&mut self, outcome: &DecidedCall) {
        self.change_for(&caller_of_outcome(outcome), |mine| {
            mine.retain(|(id, _)| *id != outcome.id);
        });
    }

    /// Changes `caller`'s order with `change` and keeps their rank in step: the one place
    /// `per_caller` changes. A caller left with none has no entry in either.
    fn change_for(
        &mut self,
        caller: &Caller,
        change: impl FnOnce(&mut VecDeque<(String, SystemTime)>),
    ) {
        let mine = self.per_caller.entry(caller.clone()).or_default();
        if let Some(rank) = rank_of(mine) {
            self.by_rank.remove(&rank);
        }
        change(mine);
        match rank_of(mine) {
            Some(rank) => {
                self.by_rank.insert(rank, caller.clone());
            }
            None => {
                self.per_caller.remove(caller);
            }
        }
    }
}

/// Where a caller whose order is `mine` ranks; `None` when they hold none.
fn rank_of(mine: &VecDeque<(String, SystemTime)>) -> Option<Rank> {
    let (id, decided_at) = mine.front()?;
    Some((mine.len(), Reverse((*decided_at, id.clone()))))
}

impl RetryApprovals {
    fn remove_expired(&mut self, now: SystemTime) {
        let mut gone: Vec<Caller> = Vec::new();
        self.by_key.retain(|_, queue| {
            queue.retain(|approval| {
                let live = approval.expires_at > now;
                if !live {
                    gone.push(caller_of_binding(&approval.binding));
                }
                live
            });
            !queue.is_empty()
        });
        for caller in &gone {
            self.forget_one(caller);
        }
    }

    fn forget_one(&mut self, caller: &Caller) {
        self.len -= 1;
        if let Some(count) = self.per_caller.get_mut(caller) {
            *count -= 1;
            if *count == 0 {
                self.per_caller.remove(caller);
            }
        }
    }
}

fn is_expired(suspended: &SuspendedInvocation, now: SystemTime) -> bool {
    suspended.expires_at.is_some_and(|at| at <= now)
}

/// The most recently expired ids, oldest forgotten first, each with who made the call: an
/// expired id answers "expired" rather than "unknown" for a while, in bounded memory (at
/// most `max` ids, as before owners were kept), and a host answers "expired" to the call's
/// owner only, "unknown" to anyone else.
#[derive(Clone, Debug, Default)]
struct ExpiredIds {
    order: VecDeque<String>,
    /// id → who made the call.
    ids: HashMap<String, Caller>,
}

impl ExpiredIds {
    fn insert(&mut self, id: String, owner: Caller, max: usize) {
        if max == 0 || self.ids.contains_key(&id) {
            return;
        }
        while self.ids.len() >= max
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.clone(), owner);
        self.order.push_back(id);
    }

    fn contains(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    fn owner(&self, id: &str) -> Option<&Caller> {
        self.ids.get(id)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use serde_json::{Map, json};

    use super::*;
    use crate::{Stage, User};

    /// A call of `user` waiting for approval, for the store tests of this module and its
    /// siblings.
    pub(in crate::suspension) fn call(id: &str, user: &str) -> SuspendedInvocation {
        SuspendedInvocation {
            id: id.into(),
            tool: "deploy".into(),
            tool_version: "1".into(),
            session_id: None,
            request_id: id.into(),
            user: User::new(user),
            input: json!({"target": "prod"}),
            output: None,
            metadata: Map::new(),
            stage: Stage::WillRedactInput,
            reason: "needs approval".into(),
            payload: json!(null),
            suspended_at: SystemTime::UNIX_EPOCH,
            expires_at: None,
            binding: None,
        }
    }

    /// A call of the caller `user` (an id in a tenant, or in none) waiting for approval.
    pub(in crate::suspension) fn call_by(id: &str, user: &User) -> SuspendedInvocation {
        SuspendedInvocation {
            user: user.clone(),
            ..call(id, &user.id)
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn limits(per_user: usize, total: usize, expire_secs: u64) -> SuspensionLimits {
        SuspensionLimits {
            max_per_user: per_user,
            max_total: total,
            expire_after: Duration::from_secs(expire_secs),
            ..SuspensionLimits::default()
        }
    }

    #[test]
    fn one_user_at_the_cap_is_refused_and_other_users_still_park() {
        let mut table = SuspensionTable::new(limits(2, 100, 60));
        table.insert(call("a1", "ann"), at(0)).unwrap();
        table.insert(call("a2", "ann"), at(0)).unwrap();

        let refused = table.insert(call("a3", "ann"), at(0)).unwrap_err();
        assert_eq!(
            refused,
            SuspensionStoreError::UserFull {
                user: "ann".into(),
                tenant: None,
                max: 2
            }
        );
        assert!(
            refused
                .to_string()
                .contains("wait until an approver decides")
        );
        table.insert(call("b1", "bob"), at(0)).unwrap();
        let waiting = |id: &str| table.waiting_for(&User::new(id));
        assert_eq!((waiting("ann"), waiting("bob")), (2, 1));

        // A decision frees a place.
        table.take("a1", at(1)).unwrap().expect("a1 waits");
        table.insert(call("a3", "ann"), at(1)).unwrap();
    }

    /// A call of `user` whose input is a string of `bytes` control characters, each six
    /// bytes once serialized.
    fn large_call(id: &str, user: &str, bytes: usize) -> SuspendedInvocation {
        SuspendedInvocation {
            input: json!({ "v": "\u{1}".repeat(bytes) }),
            ..call(id, user)
        }
    }

    #[test]
    fn a_user_past_the_byte_bound_is_refused_and_other_users_still_park() {
        let mut table = SuspensionTable::new(SuspensionLimits {
            max_bytes_per_user: 100_000,
            ..limits(100, 100, 60)
        });
        // 10,000 control characters: 10 KB in memory, 60 KB serialized.
        table
            .insert(large_call("a1", "ann", 10_000), at(0))
            .unwrap();
        let before = table.bytes_of(&User::new("ann"));

        let refused = table
            .insert(large_call("a2", "ann", 10_000), at(0))
            .unwrap_err();

        assert!(before > 60_000, "{before}");
        assert_eq!(
            refused,
            SuspensionStoreError::UserBytesFull {
                user: "ann".into(),
                tenant: None,
                max_bytes: 100_000
            }
        );
        assert!(
            refused.to_string().contains("smaller arguments"),
            "{refused}"
        );
        assert_eq!(crate::ToolError::from(refused).code(), "too_many_suspended");
        table
            .insert(large_call("b1", "bob", 10_000), at(0))
            .unwrap();
        assert_eq!(table.waiting_for(&User::new("ann")), 1);
        // A decision frees the bytes.
        table.take("a1", at(1)).unwrap().expect("a1 waits");
        assert_eq!(table.bytes_of(&User::new("ann")), 0);
        table
            .insert(large_call("a2", "ann", 10_000), at(1))
            .unwrap();
        assert_eq!(table.bytes(), 2 * before);
    }

    #[test]
    fn the_store_past_its_total_byte_bound_refuses_every_caller() {
        let mut table = SuspensionTable::new(SuspensionLimits {
            max_bytes_total: 100_000,
            ..limits(100, 100, 60)
        });
        table
            .insert(large_call("a1", "ann", 10_000), at(0))
            .unwrap();

        let refused = table.insert(large_call("b1", "bob", 10_000), at(0));

        assert_eq!(
            refused,
            Err(SuspensionStoreError::BytesFull { max_bytes: 100_000 })
        );
        assert_eq!(
            crate::ToolError::from(refused.unwrap_err()).code(),
            "suspensions_full"
        );
        table.insert(call("b2", "bob"), at(0)).unwrap();
    }

    #[test]
    fn a_flood_from_ann_of_globex_does_not_take_the_places_of_ann_of_acme() {
        let mut table = SuspensionTable::new(limits(2, 100, 60));
        let globex = User::new("ann").with_tenant("globex");
        let acme = User::new("ann").with_tenant("acme");
        for i in 0..2 {
            table
                .insert(call_by(&format!("g{i}"), &globex), at(0))
                .unwrap();
        }

        let flood = table.insert(call_by("g2", &globex), at(0)).unwrap_err();

        assert_eq!(flood, SuspensionStoreError::user_full(&globex, 2));
        assert!(
            flood
                .to_string()
                .starts_with("user `ann` of tenant `globex` already has 2 calls waiting"),
            "{flood}"
        );
        table.insert(call_by("a0", &acme), at(0)).unwrap();
        table.insert(call_by("a1", &acme), at(0)).unwrap();
        table.insert(call("n0", "ann"), at(0)).unwrap();
        let waiting = [&globex, &acme, &User::new("ann")].map(|u| table.waiting_for(u));
        assert_eq!(waiting, [2, 2, 1]);
        let roles_differ = acme.clone().with_roles(["admin"]);
        assert_eq!(table.waiting_for(&roles_differ), 2, "the same caller");
    }

    #[test]
    fn an_expired_call_is_owned_by_its_caller_in_its_tenant_not_by_ann_of_another() {
        let mut table = SuspensionTable::new(limits(5, 10, 60));
        let acme = User::new("ann").with_tenant("acme").with_roles(["ops"]);
        table.insert(call_by("swept", &acme), at(0)).unwrap();
        assert_eq!(table.remove_expired(at(60)), 1);
        table.insert(call_by("waits_past", &acme), at(50)).unwrap();
        table.restore(call_by("restored", &acme), at(100));

        for id in ["swept", "waits_past", "restored"] {
            let owner = table.expired_owner(id, at(110)).expect(id);
            assert!(owner.is_same_caller(&acme), "{id}: {owner:?}");
            assert!(!owner.is_same_caller(&User::new("ann").with_tenant("globex")));
            assert!(!owner.is_same_caller(&User::new("ann")), "{id}");
            assert!(owner.roles.is_empty(), "roles are not kept");
        }
    }

    #[test]
    fn the_total_cap_refuses_past_it() {
        let mut table = SuspensionTable::new(limits(10, 2, 60));
        table.insert(call("a", "ann"), at(0)).unwrap();
        table.insert(call("b", "bob"), at(0)).unwrap();
        assert_eq!(
            table.insert(call("c", "cid"), at(0)),
            Err(SuspensionStoreError::Full { max: 2 })
        );
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_kept_call_is_stamped_with_its_expiry() {
        let mut table = SuspensionTable::new(limits(10, 10, 60));
        table.insert(call("a", "ann"), at(100)).unwrap();
        let mut sooner = call("b", "ann");
        sooner.expires_at = Some(at(110));
        table.insert(sooner, at(100)).unwrap();

        assert_eq!(
            table.get("a", at(100)).unwrap().unwrap().expires_at,
            Some(at(160))
        );
        assert_eq!(
            table.get("b", at(100)).unwrap().unwrap().expires_at,
            Some(at(110))
        );
    }

    #[test]
    fn expired_calls_stop_counting_are_removed_and_answer_expired() {
        let mut table = SuspensionTable::new(limits(1, 10, 60));
        table.insert(call("old", "ann"), at(0)).unwrap();
        assert!(table.insert(call("new", "ann"), at(59)).is_err());

        table.insert(call("new", "ann"), at(60)).unwrap();

        assert_eq!(table.len(), 1, "the expired call was removed");
        let expired = SuspensionStoreError::Expired { id: "old".into() };
        assert_eq!(table.get("old", at(60)).unwrap_err(), expired);
        assert_eq!(table.take("old", at(61)).unwrap_err(), expired);
        assert!(expired.to_string().contains("expired"), "{expired}");
        assert_eq!(table.take("never", at(61)), Ok(None));
    }

    #[test]
    fn a_look_up_past_the_expiry_removes_the_call_and_answers_expired() {
        let mut table = SuspensionTable::new(limits(5, 10, 60));
        table.insert(call("a", "ann"), at(0)).unwrap();

        assert!(table.get("a", at(59)).unwrap().is_some());
        assert_eq!(
            table.take("a", at(60)),
            Err(SuspensionStoreError::Expired { id: "a".into() })
        );
        assert_eq!((table.len(), table.waiting_for(&User::new("ann"))), (0, 0));
    }

    #[test]
    fn remembered_expired_ids_are_bounded_oldest_first() {
        let mut table = SuspensionTable::new(limits(100, 3, 10));
        for i in 0..3 {
            table.insert(call(&format!("a{i}"), "ann"), at(0)).unwrap();
        }
        assert_eq!(table.remove_expired(at(10)), 3);
        for i in 0..3 {
            table.insert(call(&format!("b{i}"), "ann"), at(10)).unwrap();
        }
        assert_eq!(table.remove_expired(at(20)), 3);

        assert_eq!(table.take("a0", at(20)), Ok(None), "forgotten: unknown now");
        assert!(matches!(
            table.take("b2", at(20)),
            Err(SuspensionStoreError::Expired { .. })
        ));
        assert!(table.expired.ids.len() <= 3);
    }

    #[test]
    fn an_expired_id_is_remembered_with_who_made_the_call_and_no_longer_than_before() {
        let mut table = SuspensionTable::new(limits(5, 2, 60));
        table.insert(call("looked_up", "ann"), at(0)).unwrap();
        table.insert(call("swept", "bob"), at(0)).unwrap();
        assert_eq!(table.expired_owner("looked_up", at(59)), None, "it waits");
        assert_eq!(
            table.expired_owner("looked_up", at(60)),
            Some(User::new("ann")),
            "past its expiry, not yet removed"
        );

        assert!(table.get("looked_up", at(60)).is_err());
        assert_eq!(table.remove_expired(at(60)), 1);
        table.restore(call("restored", "cid"), at(100));

        assert_eq!(table.expired_owner("looked_up", at(100)), None, "forgotten");
        assert_eq!(
            table.expired_owner("swept", at(100)),
            Some(User::new("bob"))
        );
        assert_eq!(
            table.expired_owner("restored", at(100)),
            Some(User::new("cid"))
        );
        assert_eq!(table.expired_owner("never", at(100)), None);
        assert_eq!(table.expired.ids.len(), 2, "still at most max_total");
    }

    #[test]
    fn restored_calls_skip_the_caps_and_expired_ones_are_dropped() {
        let mut table = SuspensionTable::new(limits(1, 1, 60));
        let waiting = |id: &str, suspended_secs: u64| {
            let mut restored = call(id, "ann");
            restored.suspended_at = at(suspended_secs);
            restored
        };
        table.restore(waiting("fresh", 100), at(100));
        table.restore(waiting("also_fresh", 90), at(100));
        table.restore(waiting("stale", 0), at(100));

        assert_eq!(table.len(), 2, "admitted before: kept over the caps");
        assert_eq!(
            table.get("fresh", at(100)).unwrap().unwrap().expires_at,
            Some(at(160))
        );
        assert_eq!(
            table.get("stale", at(100)),
            Err(SuspensionStoreError::Expired { id: "stale".into() })
        );
    }

    #[test]
    fn retry_approvals_of_ann_of_globex_do_not_take_the_places_of_ann_of_acme() {
        let mut table = SuspensionTable::new(limits(1, 10, 60));
        let of = |tenant: Option<&str>| {
            let mut approval = retry_approval("ann", json!(tenant), 30);
            approval.binding.tenant = tenant.map(str::to_owned);
            approval
        };
        table
            .keep_retry_approval(of(Some("globex")), at(0))
            .unwrap();

        let flood = table.keep_retry_approval(of(Some("globex")), at(0));

        let globex = User::new("ann").with_tenant("globex");
        assert_eq!(flood, Err(SuspensionStoreError::user_full(&globex, 1)));
        assert_eq!(table.keep_retry_approval(of(Some("acme")), at(0)), Ok(()));
        assert_eq!(table.keep_retry_approval(of(None), at(0)), Ok(()));
        let used = of(Some("acme")).binding.key();
        assert!(table.use_retry_approval(&used, at(1)).is_some());
        assert_eq!(table.keep_retry_approval(of(Some("acme")), at(1)), Ok(()));
    }

    fn retry_approval(user: &str, input: serde_json::Value, expires: u64) -> RetryApproval {
        RetryApproval {
            binding: crate::approval::CallBinding {
                user: user.into(),
                tenant: None,
                tool: "deploy".into(),
                definition: "sha256:d".into(),
                input: crate::approval::digest(&input),
                generation: String::new(),
            },
            suspension_id: "s".into(),
            decided_by: Some("boss".into()),
            decided_by_tenant: None,
            decided_at: at(0),
            expires_at: at(expires),
        }
    }

    #[test]
    fn a_retry_approval_is_used_once_by_its_key_only_and_not_past_its_expiry() {
        let mut table = SuspensionTable::new(limits(5, 10, 60));
        let approval = retry_approval("ann", json!({"n": 1}), 30);
        let key = approval.binding.key();
        table.keep_retry_approval(approval.clone(), at(0)).unwrap();
        table
            .keep_retry_approval(retry_approval("ann", json!({"n": 2}), 10), at(0))
            .unwrap();

        let other = retry_approval("bob", json!({"n": 1}), 30).binding.key();
        assert_eq!(table.use_retry_approval(&other, at(1)), None);
        assert_eq!(table.use_retry_approval(&key, at(1)), Some(approval));
        assert_eq!(table.use_retry_approval(&key, at(1)), None, "used up");
        let late = retry_approval("ann", json!({"n": 2}), 10).binding.key();
        assert_eq!(table.use_retry_approval(&late, at(10)), None, "expired");
        assert_eq!(table.retry_approvals(), 0);
    }

    #[test]
    fn retry_approvals_are_capped_per_user_and_expired_ones_free_their_place() {
        let mut table = SuspensionTable::new(limits(2, 3, 60));
        for n in 0..2 {
            table
                .keep_retry_approval(retry_approval("ann", json!(n), 10), at(0))
                .unwrap();
        }

        let refused = table.keep_retry_approval(retry_approval("ann", json!(9), 10), at(0));
        table
            .keep_retry_approval(retry_approval("bob", json!(1), 10), at(0))
            .unwrap();
        let full = table.keep_retry_approval(retry_approval("cat", json!(1), 10), at(0));
        let after_expiry = table.keep_retry_approval(retry_approval("ann", json!(9), 20), at(10));

        assert!(matches!(
            refused,
            Err(SuspensionStoreError::UserFull { max: 2, .. })
        ));
        assert!(matches!(full, Err(SuspensionStoreError::Full { max: 3 })));
        assert_eq!(after_expiry, Ok(()));
        assert_eq!(table.retry_approvals(), 1);
    }

    fn decided(id: &str, secs: u64) -> DecidedCall {
        DecidedCall {
            id: id.into(),
            user: "ann".into(),
            tenant: None,
            result: json!({"output": id}),
            decided_at: at(secs),
            suspended_at: None,
        }
    }

    #[test]
    fn outcomes_are_listed_in_id_order_filtered_paged_and_not_past_expire_after() {
        let mut table = SuspensionTable::new(limits(5, 10, 50));
        let outcome = |id: &str, user: &str, tool: &str, secs: u64| DecidedCall {
            id: id.into(),
            user: user.into(),
            tenant: None,
            result: serde_json::json!({"tool_name": tool}),
            decided_at: at(secs),
            suspended_at: None,
        };
        table.keep_outcome(outcome("c", "ann", "wipe", 0), at(0));
        table.keep_outcome(outcome("a", "bob", "wipe", 10), at(10));
        table.keep_outcome(outcome("b", "ann", "read", 20), at(20));
        let ids = |listed: Vec<DecidedCall>| listed.into_iter().map(|d| d.id).collect::<Vec<_>>();
        let every = SuspensionFilter::default();
        assert_eq!(
            ids(table.list_outcomes(&every, None, 10, at(20))),
            ["a", "b", "c"]
        );
        assert_eq!(
            ids(table.list_outcomes(&every, Some("a"), 1, at(20))),
            ["b"]
        );
        let anns_wipes = SuspensionFilter {
            tool: Some("wipe".into()),
            user: Some("ann".into()),
            ..SuspensionFilter::default()
        };
        assert_eq!(
            ids(table.list_outcomes(&anns_wipes, None, 10, at(20))),
            ["c"]
        );
        let since = SuspensionFilter {
            since: Some(at(10)),
            ..SuspensionFilter::default()
        };
        assert_eq!(
            ids(table.list_outcomes(&since, None, 10, at(20))),
            ["a", "b"]
        );
        // `c`, decided at 0, is kept for 50 s only.
        assert_eq!(
            ids(table.list_outcomes(&every, None, 10, at(55))),
            ["a", "b"]
        );
    }

    #[test]
    fn a_callers_listing_leaves_out_the_same_user_id_of_another_tenant_or_of_none() {
        let mut table = SuspensionTable::new(limits(5, 10, 60));
        let acme = User::new("ann").with_tenant("acme");
        let globex = User::new("ann").with_tenant("globex");
        for (id, user) in [("a", &acme), ("g", &globex), ("n", &User::new("ann"))] {
            let mut waiting = call(id, "ann");
            waiting.user = user.clone();
            table.insert(waiting, at(0)).unwrap();
            table.keep_outcome(DecidedCall::new(format!("d{id}"), user, json!({})), at(0));
        }
        let waiting = |user: &User| -> Vec<String> {
            let filter = SuspensionFilter::of_caller(user);
            table
                .list(&filter, None, 10, at(1))
                .into_iter()
                .map(|s| s.id)
                .collect()
        };
        assert_eq!(waiting(&acme), ["a"]);
        assert_eq!(waiting(&globex), ["g"]);
        assert_eq!(waiting(&User::new("ann")), ["n"]);
        let decided = |user: &User| -> Vec<String> {
            let filter = SuspensionFilter::of_caller(user);
            let now = SystemTime::now();
            table
                .list_outcomes(&filter, None, 10, now)
                .into_iter()
                .map(|d| d.id)
                .collect()
        };
        assert_eq!(decided(&acme), ["da"]);
        assert_eq!(decided(&User::new("ann")), ["dn"]);
    }

    #[test]
    fn a_take_keeps_its_record_over_one_left_behind_but_never_over_an_outcome() {
        let mut table = SuspensionTable::new(limits(5, 10, 60));
        let running = |id: &str, by: &str| DecidedCall {
            result: json!({"status": "running", "by": by}),
            ..decided(id, 0)
        };
        table.insert(call("left", "ann"), at(0)).unwrap();
        table.insert(call("ended", "ann"), at(0)).unwrap();
        assert!(table.keep_running(running("left", "carol"), "carols", at(0)));
        table.keep_outcome(decided("ended", 0), at(0));

        let took = table.take_running("left", running("left", "alice"), "alices", at(1));
        let ended = table.take_running("ended", running("ended", "alice"), "alices", at(1));

        assert!(took.unwrap().is_some() && ended.unwrap().is_some());
        assert_eq!(table.outcome("left", at(1)).unwrap().result["by"], "alice");
        assert!(
            !table.remove_running("left", "carols", at(1)),
            "not carol's"
        );
        assert_eq!(table.outcome("ended", at(1)), Some(&decided("ended", 0)));
        assert!(table.remove_running("left", "alices", at(1)));
    }

    #[test]
    fn outcomes_are_kept_for_expire_after_and_the_oldest_go_past_the_cap() {
        let mut table = SuspensionTable::new(limits(5, 2, 60));
        table.keep_outcome(decided("a", 0), at(0));
        table.keep_outcome(decided("b", 10), at(10));
        table.keep_outcome(decided("c", 20), at(20));

        assert_eq!(
            table.outcome("a", at(20)),
            None,
            "the oldest went past the cap"
        );
        assert_eq!(table.outcome("b", at(69)), Some(&decided("b", 10)));
        assert_eq!(table.outcome("b", at(70)), None, "kept for expire_after");
        assert_eq!(table.outcome("c", at(70)), Some(&decided("c", 20)));
    }

    /// An outcome of `user`, decided at `secs`.
    fn decided_by(id: &str, user: &User, secs: u64) -> DecidedCall {
        DecidedCall {
            decided_at: at(secs),
            ..DecidedCall::new(id, user, json!({"output": id}))
        }
    }

    fn outcome_ids_of(table: &SuspensionTable, user: &User, now: SystemTime) -> Vec<String> {
        let filter = SuspensionFilter::of_caller(user);
        let listed = table.list_outcomes(&filter, None, 100, now);
        listed.into_iter().map(|d| d.id).collect()
    }

    #[test]
    fn a_flood_of_one_callers_outcomes_does_not_evict_another_callers_outcome() {
        let mut table = SuspensionTable::new(limits(3, 10, 60));
        let bob = User::new("bob").with_tenant("globex");
        let dave = User::new("dave");
        table.keep_outcome(decided_by("bobs", &bob, 0), at(0));

        for i in 0..50 {
            let secs = 1 + i / 10;
            table.keep_outcome(decided_by(&format!("d{i:02}"), &dave, secs), at(secs));
        }

        assert_eq!(
            table.outcome("bobs", at(10)),
            Some(&decided_by("bobs", &bob, 0)),
            "dave's flood left bob's outcome alone"
        );
        assert_eq!(
            outcome_ids_of(&table, &dave, at(10)),
            ["d47", "d48", "d49"],
            "dave lost his own oldest, down to max_per_user"
        );
    }

    #[test]
    fn a_flood_of_ann_of_globexs_outcomes_does_not_evict_those_of_ann_of_acme_or_of_none() {
        let mut table = SuspensionTable::new(limits(2, 10, 60));
        let acme = User::new("ann").with_tenant("acme");
        let globex = User::new("ann").with_tenant("globex");
        let none = User::new("ann");
        table.keep_outcome(decided_by("acme", &acme, 0), at(0));
        table.keep_outcome(decided_by("none", &none, 0), at(0));

        for i in 0..20 {
            table.keep_outcome(decided_by(&format!("g{i:02}"), &globex, 1), at(1));
        }

        assert_eq!(outcome_ids_of(&table, &acme, at(2)), ["acme"]);
        assert_eq!(outcome_ids_of(&table, &none, at(2)), ["none"]);
        assert_eq!(outcome_ids_of(&table, &globex, at(2)), ["g18", "g19"]);
    }

    #[test]
    fn past_the_total_cap_among_callers_holding_as_many_the_oldest_outcome_goes() {
        let mut table = SuspensionTable::new(limits(2, 3, 60));
        let [ann, bob, cid] = ["ann", "bob", "cid"].map(User::new);
        table.keep_outcome(decided_by("a", &ann, 0), at(0));
        table.keep_outcome(decided_by("b", &bob, 1), at(1));
        table.keep_outcome(decided_by("c", &cid, 2), at(2));
        table.keep_outcome(decided_by("b2", &bob, 3), at(3));

        assert_eq!(
            table.outcome("a", at(3)),
            None,
            "all hold one: the oldest of all went"
        );
        assert_eq!(outcome_ids_of(&table, &ann, at(3)), Vec::<String>::new());
        assert_eq!(outcome_ids_of(&table, &bob, at(3)), ["b", "b2"]);
        // ann's outcome that went no longer counts against her; bob is at his cap.
        table.keep_outcome(decided_by("b3", &bob, 4), at(4));
        assert_eq!(outcome_ids_of(&table, &bob, at(4)), ["b2", "b3"]);
        assert_eq!(outcome_ids_of(&table, &cid, at(4)), ["c"]);
    }

    #[test]
    fn past_the_total_cap_the_caller_holding_the_most_loses_their_oldest_never_another() {
        let mut table = SuspensionTable::new(limits(100, 5, 60));
        let erin = User::new("erin").with_tenant("globex");
        let bob = User::new("bob").with_tenant("acme");
        table.keep_outcome(decided_by("erins", &erin, 0), at(0));

        for i in 0..10 {
            table.keep_outcome(decided_by(&format!("b{i}"), &bob, 1 + i), at(1 + i));
        }

        assert_eq!(
            table.outcome("erins", at(11)),
            Some(&decided_by("erins", &erin, 0)),
            "bob's withdrawals left erin's outcome alone"
        );
        assert_eq!(
            outcome_ids_of(&table, &bob, at(11)),
            ["b6", "b7", "b8", "b9"],
            "bob, who holds the most, lost his own oldest"
        );
        // Once erin holds the most, her own oldest goes for her next.
        for i in 0..4 {
            table.keep_outcome(decided_by(&format!("e{i}"), &erin, 20 + i), at(20 + i));
        }
        assert_eq!(outcome_ids_of(&table, &erin, at(23)), ["e1", "e2", "e3"]);
        assert_eq!(outcome_ids_of(&table, &bob, at(23)), ["b8", "b9"]);
    }

    #[test]
    fn a_replaced_or_expired_outcome_no_longer_counts_against_its_caller() {
        let mut table = SuspensionTable::new(limits(2, 10, 60));
        let ann = User::new("ann");
        table.keep_outcome(decided_by("a", &ann, 0), at(0));
        table.keep_outcome(decided_by("a", &ann, 1), at(1));
        table.keep_outcome(decided_by("b", &ann, 2), at(2));
        assert_eq!(
            outcome_ids_of(&table, &ann, at(2)),
            ["a", "b"],
            "a kept again is one"
        );

        table.keep_outcome(decided_by("c", &ann, 61), at(61));
        assert_eq!(
            outcome_ids_of(&table, &ann, at(61)),
            ["b", "c"],
            "`a` expired"
        );
        table.keep_outcome(decided_by("d", &ann, 70), at(70));
        assert_eq!(outcome_ids_of(&table, &ann, at(70)), ["c", "d"]);
    }

    #[test]
    fn restored_outcomes_count_against_their_caller_and_the_oldest_go_first() {
        let mut table = SuspensionTable::new(limits(2, 10, 60));
        let ann = User::new("ann");
        let bob = User::new("bob");
        for (id, secs) in [("r3", 30), ("r1", 10), ("r2", 20)] {
            table.restore_outcome(decided_by(id, &ann, secs), at(40));
        }
        table.restore_outcome(decided_by("bobs", &bob, 5), at(40));
        assert_eq!(
            outcome_ids_of(&table, &ann, at(40)),
            ["r1", "r2", "r3"],
            "restored over her cap"
        );

        table.keep_outcome(decided_by("new", &ann, 41), at(41));

        assert_eq!(outcome_ids_of(&table, &ann, at(41)), ["new", "r3"]);
        assert_eq!(outcome_ids_of(&table, &bob, at(41)), ["bobs"]);
    }

    #[test]
    fn live_retry_approvals_are_listed_by_key_each_queue_in_order_without_expired_ones() {
        let mut table = SuspensionTable::new(limits(5, 10, 60));
        let first = retry_approval("ann", json!(1), 30);
        let mut second = retry_approval("ann", json!(1), 40);
        second.suspension_id = "s-second".into();
        let expired = retry_approval("ann", json!(2), 10);
        let bobs = retry_approval("bob", json!(1), 30);
        for approval in [&first, &expired, &second, &bobs] {
            table.keep_retry_approval(approval.clone(), at(0)).unwrap();
        }

        let live: Vec<&RetryApproval> = table.live_retry_approvals(at(10)).collect();

        let mut by_key = vec![
            (first.binding.key(), vec![&first, &second]),
            (bobs.binding.key(), vec![&bobs]),
        ];
        by_key.sort_by(|a, b| a.0.cmp(&b.0));
        let expected: Vec<&RetryApproval> = by_key.into_iter().flat_map(|(_, q)| q).collect();
        assert_eq!(live, expected);
        assert_eq!(table.retry_approvals(), 4, "listing removes nothing");
    }

    #[test]
    fn restored_retry_approvals_skip_the_caps_count_against_new_ones_and_expired_ones_are_dropped()
    {
        let mut table = SuspensionTable::new(limits(1, 2, 60));
        let first = retry_approval("ann", json!(1), 30);
        let mut second = retry_approval("ann", json!(1), 40);
        second.suspension_id = "s-second".into();
        table.restore_retry_approval(first.clone(), at(10));
        table.restore_retry_approval(second.clone(), at(10));
        table.restore_retry_approval(retry_approval("bob", json!(1), 30), at(10));
        table.restore_retry_approval(retry_approval("cat", json!(1), 10), at(10));

        assert_eq!(
            table.retry_approvals(),
            3,
            "admitted before: kept over the caps"
        );
        let refused = table.keep_retry_approval(retry_approval("dan", json!(1), 30), at(10));
        assert_eq!(refused, Err(SuspensionStoreError::Full { max: 2 }));
        let key = first.binding.key();
        assert_eq!(table.use_retry_approval(&key, at(10)), Some(first));
        assert_eq!(table.use_retry_approval(&key, at(10)), Some(second));
        let cats = retry_approval("cat", json!(1), 10).binding.key();
        assert_eq!(table.use_retry_approval(&cats, at(5)), None, "not kept");
        let anns = table.keep_retry_approval(retry_approval("ann", json!(3), 30), at(10));
        assert_eq!(anns, Ok(()), "ann's used-up approvals freed her place");
    }

    #[test]
    fn restored_outcomes_skip_the_cap_take_their_place_by_decision_and_expired_ones_are_dropped() {
        let mut table = SuspensionTable::new(limits(5, 2, 60));
        table.restore_outcome(decided("late", 30), at(40));
        table.restore_outcome(decided("early", 10), at(40));
        table.restore_outcome(decided("middle", 20), at(40));
        table.restore_outcome(decided("stale", 0), at(60));
        let ids = |table: &SuspensionTable| -> Vec<String> {
            let every = SuspensionFilter::default();
            let listed = table.list_outcomes(&every, None, 10, at(60));
            listed.into_iter().map(|d| d.id).collect()
        };

        assert_eq!(ids(&table), ["early", "late", "middle"], "over the cap");
        assert_eq!(
            table.outcome("stale", at(59)),
            None,
            "expired when read back"
        );
        table.keep_outcome(decided("new", 50), at(50));
        assert_eq!(
            ids(&table),
            ["late", "new"],
            "the oldest by decision went first"
        );
        table.restore_outcome(decided("late", 45), at(50));
        assert_eq!(table.outcome("late", at(50)), Some(&decided("late", 45)));
    }
}
