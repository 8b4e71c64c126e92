//! [`RedisSuspensions`]: calls waiting for approval, approvals for a retry and decided
//! outcomes on Redis, shared by every replica and kept across restarts.
//!
//! * `mod.rs` — the store, its settings, and what every operation shares;
//! * `store.rs` — the operations ([`SuspensionStore`]), each one script or command;
//! * `values.rs` — how a value is written (JSON, sealed when there is a key) and read;
//! * the `.lua` files — the scripts; AES-256-GCM is the crate's `seal.rs`.

mod store;
mod values;

use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{FromRedisValue, Script, ScriptInvocation};
use toolgate_core::suspension::{EXPIRY_TOLD_WITHIN, SuspensionLimits, SuspensionStoreError};
#[cfg(doc)]
use toolgate_core::suspension::{SuspendedInvocation, SuspensionStore};

use crate::link::{Failure, Link};
use crate::seal::Seal;
use crate::{RedisError, keys};

static SAVE: LazyLock<Script> = LazyLock::new(|| script(include_str!("save.lua")));
static LOOKUP: LazyLock<Script> = LazyLock::new(|| outcome_script(include_str!("lookup.lua")));
static FETCH: LazyLock<Script> = LazyLock::new(|| script(include_str!("fetch.lua")));
static EXPIRED_OWNER: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("expired_owner.lua")));
static KEEP_RETRY: LazyLock<Script> = LazyLock::new(|| script(include_str!("keep_retry.lua")));
static USE_RETRY: LazyLock<Script> = LazyLock::new(|| script(include_str!("use_retry.lua")));
static KEEP_OUTCOME: LazyLock<Script> =
    LazyLock::new(|| outcome_script(include_str!("keep_outcome.lua")));
static REMOVE_RUNNING: LazyLock<Script> =
    LazyLock::new(|| outcome_script(include_str!("remove_running.lua")));
static CLAIM_EXPIRED: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("claim_expired.lua")));
static UNDO: LazyLock<Script> = LazyLock::new(|| outcome_script(include_str!("undo.lua")));
static UNKEEP_RETRY: LazyLock<Script> = LazyLock::new(|| script(include_str!("unkeep_retry.lua")));

/// A script of the store: the server's clock, what the store's scripts share, then its own
/// body.
fn script(body: &str) -> Script {
    crate::server_clock::script(&[include_str!("common.lua"), body])
}

/// A script of the store that keeps or removes outcomes: as [`script`], with how that is
/// done (`outcome.lua`) before its own body.
fn outcome_script(body: &str) -> Script {
    crate::server_clock::script(&[
        include_str!("common.lua"),
        include_str!("outcome.lua"),
        body,
    ])
}

/// When a replica tries to undo a save or a take whose answer it did not get (see
/// `undo.lua`), after the deadline: at once, then again in case the command was still on
/// its way. The last try comes well before a taken row's hold ends.
const UNDO_PAUSES: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
];

/// How long a taken call's row is held for an undo (ms).
const HOLD_MS: u64 = 120_000;

/// How long a call's expiry notice is kept past its expiry for a replica to claim (ms),
/// when calls wait at most `expire_after`: as long as its id is remembered as expired, and
/// [`EXPIRY_TOLD_WITHIN`] at least.
fn told_within(expire_after: Duration) -> u64 {
    span_ms(expire_after.max(EXPIRY_TOLD_WITHIN))
}

/// How many ids a listing reads from Redis at a time, at most: a listing reads as many as
/// it still needs plus [`SPARE`].
const PAGE: usize = 200;

/// The ids a listing reads past those it still needs, for the calls its filter leaves out.
const SPARE: usize = 8;

/// How many ids one run of `fetch.lua` reads, at most.
const FETCH_IDS: usize = 16;

/// The bytes of stored calls past which one run of `fetch.lua` stops (after the call that
/// crosses it): one reply holds at most this plus one call (`body_limit` bounds a call), so
/// that a caller parking large calls cannot make a listing hold Redis for every replica.
const FETCH_BYTES: usize = 256 * 1024;

/// The latest instant the store writes, in ms since the epoch (the year 3237): Lua prints
/// numbers up to 14 digits as integers, and every expiry the scripts compute stays below.
const LATEST_MS: u64 = 40_000_000_000_000;

/// The longest span (`expire_after`) the store applies: 100 years.
const LONGEST_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// The suspension store on Redis: the calls waiting for a person, the approvals for a
/// retry and the outcomes of decided calls, shared by every replica on the same Redis
/// (and [key prefix](crate::RedisConfigBuilder::key_prefix)) and kept across restarts. A
/// call parked on one replica is listed and decided on another, and its caller reads the
/// outcome on a third.
///
/// It keeps the bounds of [`SuspensionLimits`] exactly across replicas, as the in-memory
/// store does in one process ([`SuspensionTable`](toolgate_core::suspension::SuspensionTable)):
///
/// * `max_per_user` and `max_total` — each save is one Lua script that counts the calls
///   not expired on the Redis server's clock and adds the call, atomically: 40 saves at
///   once from two replicas at a cap of 5 keep exactly 5. A caller is a user id in a
///   tenant, each with an index of their own: `ann` of `globex` never takes the places of
///   `ann` of `acme`. Approvals for a retry are capped the same way, counted apart.
/// * `max_bytes_per_user` and `max_bytes_total` — the same script sums the sizes
///   ([`stored_size`](toolgate_core::suspension::stored_size)) of the caller's calls not
///   expired, and reads those of all waiting calls from a counter (`:bytes`, the sum of
///   `:sizes`, id → size) that every script adding or removing a call keeps in step.
///   Before refusing with [`SuspensionStoreError::BytesFull`], the save removes every
///   expired call and counts the bytes again from the sizes (at most once a second: that
///   count reads every waiting call's size), so that a counter gone wrong — lost, or left
///   too high by an earlier version's replicas, which remove calls without their sizes —
///   heals. A call an earlier version saved has no size there, and counts nothing in all.
/// * `expire_after` — a call expires at the sooner of its own `expires_at` and the save's
///   time plus `expire_after`, both on the Redis server's clock (the `expires_at` of a call
///   read back is that expiry). An expired call is not listed, frees its place, and answers
///   [`SuspensionStoreError::Expired`] for `expire_after` after its expiry (for the most
///   recent `max_total` ids), with who made it (id and tenant) kept as long
///   ([`expired_owner`](SuspensionStore::expired_owner)) so that a host tells only them. An
///   id remembered as expired by an earlier version, which kept no owner, has none: a host
///   answers it as unknown to everyone but approvers.
///
/// # Callers in keys
///
/// A caller without a tenant is written in key names and fields as their user id, as every
/// earlier version wrote every caller, so that what those versions kept is counted, listed
/// and taken as before; a caller with a tenant as `0xFF <tenant> 0xFF <user id>`, bytes that
/// no user id (UTF-8 text) can be. A call an earlier version kept for a caller with a
/// tenant stays in the index of the id alone until it is decided or expires: it counts
/// against the `ann` of no tenant meanwhile, is listed to its own caller still, and, once
/// expired, its owner reads as the `ann` of no tenant (that version kept no tenant).
/// * Outcomes ([`keep_outcome`](SuspensionStore::keep_outcome)) are kept until
///   `decided_at` plus `expire_after` (as it was when kept), at most `max_per_user` per
///   caller — each with an index of their own, as for waiting calls — and `max_total` in
///   all. A caller at their cap loses their own oldest, never another caller's; past
///   `max_total`, the caller who holds the most outcomes (counted in `:outcome_counts`; of
///   callers who hold as many, any) loses their own oldest, never a caller who holds
///   fewer. During a rolling upgrade,
///   replicas of an earlier version keep outcomes without the caller's index: those read
///   and list as any other (reads never use the index) but are not counted against their
///   caller, and an id left in an index after its outcome went another way stops counting
///   (`keep_outcome.lua`).
/// * Running records are outcomes kept by the take of the call, in the take's script
///   ([`take_running`](SuspensionStore::take_running): over nothing or a running record,
///   never over an outcome), or only when nothing is kept for the id
///   ([`keep_running`](SuspensionStore::keep_running)), checked and written in the same
///   script, and counted as outcomes. A take whose answer was lost is undone with its
///   record. Each is marked with its decision's token and a digest of the
///   value written (`:outcome_run:<id>`, expiring with it), so that
///   [`remove_running`](SuspensionStore::remove_running) removes only that decision's
///   record, and never an outcome kept over it — by an earlier version too, which replaces
///   the value and leaves the mark. During a rolling upgrade, replicas of an earlier
///   version keep their running records unconditionally, as they did.
///
/// * Expiry notices ([`claim_expired`](SuspensionStore::claim_expired)): each saved call
///   leaves one — the call without its input, output, payload and metadata, sealed as the
///   call is — kept until `expire_after` after its expiry (ten minutes at least), at most
///   `max_total` of calls expired. One script claims a notice and removes it, so of every replica asking, one
///   gets it; a notice of a call decided before it expired is dropped untold.
///
/// Every key has an expiry (see `docs/scaling.md`, "Waiting calls on Redis"): nothing stays
/// once its calls, approvals and outcomes are gone.
///
/// # What is stored
///
/// A waiting call is stored as [`SuspendedInvocation`] JSON: the validated, redacted input
/// the tool would run with (never the raw input), the payload for the approver, the
/// binding. With an [encryption key](Self::with_encryption_key) that JSON — and the JSON of
/// approvals for a retry and of outcomes — is sealed with AES-256-GCM. What stays in clear,
/// because the caps and the look-ups need it: call ids, user ids and tenants (in key names
/// and as fields), binding keys (SHA-256 digests), expiry times, the calls' sizes in bytes,
/// random tokens of the saves and takes, and a fingerprint of the key (so that a replica
/// with another key leaves calls it cannot read in place).
///
/// # Redis Cluster
///
/// Every key of the store carries one hash tag (`{<prefix>:susp}`), so each script runs on
/// one slot — which exact caps across the whole store require. The store's traffic
/// therefore goes to one primary (and its replicas), whatever the cluster's size.
///
/// # When Redis is away
///
/// Every Redis call has the state's [deadline](crate::RedisConfigBuilder::deadline) (or the
/// store's own, [`deadline`](Self::deadline)). Past it, or when Redis fails, the store
/// answers [`SuspensionStoreError::Unavailable`] with what to check: a call that needs
/// approval is then refused rather than left waiting where nobody can decide it. It never
/// panics.
///
/// A save or take whose answer did not come in time may still reach Redis (a slow or hung
/// Redis runs it later). The store then undoes it, in the background, by a token only that
/// save or take wrote: a call whose caller was told it failed does not wait for an
/// approver, and a call taken without anyone receiving it waits again. A taken call's row
/// is held for two minutes for this, out of every index; the undo is tried at once and
/// over the next half minute. An approval for a retry whose keep was not answered in time
/// is undone the same way, by its id: its call goes back to wait for a decision, and must
/// not also run by a retry. (An approval for a retry used without the answer arriving is
/// used up: the call waits for approval again.)
///
/// Built by [`RedisState::suspensions`](crate::RedisState::suspensions). Cloning is cheap:
/// clones share the connection and the limits ([`set_limits`](Self::set_limits) on one
/// changes them for all).
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use toolgate_core::suspension::SuspensionLimits;
/// use toolgate_core::{tool_fn, Pipeline, ToolError};
/// use toolgate_redis::{RedisConfig, RedisState};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let state = RedisState::connect("redis://127.0.0.1:6379", RedisConfig::default()).await?;
/// let limits = SuspensionLimits { expire_after: Duration::from_secs(3600), ..SuspensionLimits::default() };
/// // The same 64 hex digits on every replica, from `openssl rand -hex 32`.
/// let key = std::env::var("TOOLGATE_SUSPENSIONS_KEY")?;
/// let store = state.suspensions(limits).with_encryption_key(key.as_bytes())?;
///
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .suspension_store(Arc::new(store.clone()))
///     .build()?;
/// // A reload with other bounds: calls saved from now on get them.
/// store.set_limits(SuspensionLimits { max_per_user: 20, ..limits });
/// # let _ = pipeline;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisSuspensions {
    link: Link,
    /// Every key starts with it: `<prefix>:{<prefix>:susp}`.
    base: Arc<str>,
    limits: Arc<Mutex<SuspensionLimits>>,
    seal: Option<Arc<Seal>>,
    /// Which key seals the values (`plain` for none): stored with each call and approval,
    /// so that a replica with another key never removes what it cannot read.
    seal_id: Arc<str>,
}

impl std::fmt::Debug for RedisSuspensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSuspensions")
            .field("link", &self.link)
            .field("base", &self.base)
            .field("limits", &self.limits())
            .field("encrypted", &self.seal.is_some())
            .finish()
    }
}

impl RedisSuspensions {
    pub(crate) fn new(link: Link, limits: SuspensionLimits) -> Self {
        RedisSuspensions {
            base: keys::suspensions(link.prefix()).into(),
            link,
            limits: Arc::new(Mutex::new(limits)),
            seal: None,
            seal_id: "plain".into(),
        }
    }

    /// The same store, sealing what it writes with AES-256-GCM under `key`, and reading
    /// only what was sealed with it. Give every replica the same key.
    ///
    /// `key` is the key itself, 32 bytes, or its 64 hexadecimal digits as
    /// `openssl rand -hex 32` prints them (whitespace around them, such as a file's final
    /// newline, is ignored). Each value gets a random nonce, and is bound to its id: a
    /// sealed call copied under another id does not open.
    ///
    /// A value that this key cannot open — sealed with another key, altered, or written
    /// without a key — answers [`SuspensionStoreError::Unavailable`] saying so, and is left
    /// in place (a replica with the wrong key never uses up a call); a listing leaves such
    /// calls out and logs a warning for each. Turning encryption on or changing the key
    /// therefore leaves the calls waiting before unreadable until they expire.
    ///
    /// # Errors
    ///
    /// [`RedisError::InvalidEncryptionKey`] when `key` is neither 32 bytes nor 64
    /// hexadecimal digits.
    ///
    /// # Examples
    ///
    /// ```
    /// use toolgate_core::suspension::SuspensionLimits;
    /// use toolgate_redis::{RedisConfig, RedisError, RedisState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let state = RedisState::connect_lazy("redis://127.0.0.1:6379", RedisConfig::default())?;
    /// let hex = "8f3c1e0a9b7d5f2e4c6a8b0d1f3e5a7c9b2d4f6e8a0c1e3b5d7f9a2c4e6b8d0f";
    /// let store = state.suspensions(SuspensionLimits::default()).with_encryption_key(hex.as_bytes())?;
    /// assert!(store.is_encrypted());
    ///
    /// let short = state.suspensions(SuspensionLimits::default()).with_encryption_key(b"secret");
    /// let error = short.unwrap_err();
    /// assert!(matches!(error, RedisError::InvalidEncryptionKey { .. }));
    /// assert!(error.to_string().contains("openssl rand -hex 32"));
    /// # Ok(()) }
    /// ```
    pub fn with_encryption_key(mut self, key: &[u8]) -> Result<Self, RedisError> {
        let seal = Seal::new(key)?;
        self.seal_id = seal.fingerprint().into();
        self.seal = Some(Arc::new(seal));
        Ok(self)
    }

    /// Whether the store seals what it writes ([`with_encryption_key`](Self::with_encryption_key)).
    pub fn is_encrypted(&self) -> bool {
        self.seal.is_some()
    }

    /// The bounds calls are saved under.
    pub fn limits(&self) -> SuspensionLimits {
        *self.limits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the bounds (a configuration reload), for this store and its clones. The caps
    /// apply to saves from now on and `expire_after` to calls saved from now on; calls
    /// already waiting keep their expiry and stay even if they are now over a cap.
    pub fn set_limits(&self, limits: SuspensionLimits) {
        *self.limits.lock().unwrap_or_else(PoisonError::into_inner) = limits;
    }

    /// The same store with its own per-call deadline, in place of the state's
    /// [`deadline`](crate::RedisConfigBuilder::deadline): the longest each save, look-up
    /// and listing page may wait for Redis before the store answers
    /// [`SuspensionStoreError::Unavailable`]. A zero deadline is taken as 1 ms.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.link = self.link.with_deadline(deadline);
        self
    }

    /// The per-call deadline.
    pub fn call_deadline(&self) -> Duration {
        self.link.deadline()
    }

    /// The start of every key of the store, `<prefix>:{<prefix>:susp}` (braces in the
    /// prefix left out of the hash tag): for operators looking at Redis.
    pub fn key_base(&self) -> &str {
        &self.base
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.base)
    }

    /// Runs one script under the deadline.
    async fn run<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, SuspensionStoreError> {
        self.try_run(invocation).await.map_err(unavailable)
    }

    /// Runs one script under the deadline, telling a failure apart.
    async fn try_run<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, Failure> {
        let mut connection = self.link.connection();
        self.link
            .within(invocation.invoke_async(&mut connection))
            .await
    }

    /// Undoes, in the background, the save or take (`what`) of the call `id` marked with
    /// `token`, whose answer this replica did not get: if Redis did it after all, the call
    /// its caller was told failed is removed, and the call nobody received waits again.
    fn undo_later(&self, id: &str, what: &'static str, token: String) {
        let call = id.to_owned();
        self.undo_in_background(id, what, move |store| {
            let limits = store.limits();
            let mut invocation = UNDO.prepare_invoke();
            invocation
                .key(store.key("calls"))
                .key(store.key("outcomes"))
                .arg(&*store.base)
                .arg(&call)
                .arg(what)
                .arg(&token)
                .arg(limits.max_total)
                .arg(span_ms(limits.expire_after))
                .arg(told_within(limits.expire_after));
            invocation
        });
    }

    /// Undoes, in the background, the keep of the approval for a retry of the call
    /// `suspension_id` — `approval` its id in the store, for the caller written as
    /// `caller` and the binding key `binding` — whose answer this replica did not get: the
    /// call goes back to wait (see `Pipeline::approve_retry`), and if Redis kept the
    /// approval after all, the call would run twice — by a retry, and again when the call
    /// waiting again is approved.
    fn unkeep_retry_later(
        &self,
        suspension_id: &str,
        approval: String,
        caller: Vec<u8>,
        binding: String,
    ) {
        self.undo_in_background(suspension_id, "keep_retry", move |store| {
            let mut invocation = UNKEEP_RETRY.prepare_invoke();
            invocation
                .key(store.key("retries"))
                .arg(&*store.base)
                .arg(&approval)
                .arg(&caller)
                .arg(&binding);
            invocation
        });
    }

    /// Runs the undo script that `undo` prepares until it answers `undone` or the tries
    /// run out: tried at once (on the same connection, so after the command if it is still
    /// on its way) and a few times more over half a minute.
    fn undo_in_background(
        &self,
        id: &str,
        what: &'static str,
        undo: impl Fn(&RedisSuspensions) -> ScriptInvocation<'static> + Send + 'static,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.clone();
        let id = id.to_owned();
        runtime.spawn(async move {
            for pause in UNDO_PAUSES {
                tokio::time::sleep(pause).await;
                if let Ok(status) = store.try_run::<String>(&undo(&store)).await
                    && status == "undone"
                {
                    tracing::info!(
                        suspension_id = %id,
                        what,
                        "a suspension store change whose answer Redis did not give in time was undone"
                    );
                    return;
                }
            }
        });
    }
}

/// Redis gave no answer in time, or failed.
fn unavailable(failure: Failure) -> SuspensionStoreError {
    SuspensionStoreError::Unavailable(format!(
        "{failure}; calls that wait for approval are kept on Redis, and none can be kept, read or decided until it answers: check that Redis runs and that this replica can reach it"
    ))
}

/// A script answered what none of them answers: a Redis that runs other scripts under
/// their names.
fn unexpected(status: &str) -> SuspensionStoreError {
    SuspensionStoreError::Unavailable(format!(
        "Redis answered `{status}` to a suspension store script: check that nothing else writes under the store's key prefix"
    ))
}

/// Milliseconds since the epoch (0 before it).
fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// A span in milliseconds, at most [`LONGEST_MS`].
fn span_ms(span: Duration) -> u64 {
    u64::try_from(span.as_millis())
        .unwrap_or(u64::MAX)
        .min(LONGEST_MS)
}

fn instant(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}
