//! [`SuspensionLimits`]: how many calls may wait, how many bytes they may take, and for
//! how long.

use std::time::Duration;

/// The bounds of a suspension store: no caller can fill it for everyone, and no call waits
/// for ever (DESIGN.md §10).
///
/// * `max_per_user` — calls one caller may have waiting at once (default 100): a caller is
///   a user id in a tenant, so `ann` of `globex` and `ann` of `acme` each have their own
///   places. Past it, that caller's next call that needs approval is refused with
///   [`SuspensionStoreError::UserFull`](super::SuspensionStoreError::UserFull); other
///   callers are unaffected. It also caps the outcomes of decided calls kept for one
///   caller to read ([`SuspensionStore::keep_outcome`](super::SuspensionStore::keep_outcome)):
///   a caller at it loses their own oldest outcome, never another caller's, so that one
///   who withdraws calls in a loop (each withdrawal keeps an outcome) cannot push out the
///   outcomes of everyone else.
/// * `max_total` — calls waiting in all (default 10 000), the backstop for memory: with
///   inputs bounded at `b` bytes a store holds at most `max_per_user × b` for one user and
///   `max_total × b` in all. Outcomes are kept at most `max_total` in all too; one caller
///   holds at most `max_per_user` of them. Past `max_total` the caller who holds the most
///   outcomes loses their own oldest (of callers who hold as many, the one whose oldest is
///   the oldest in memory and in a file; any of them on Redis), never a caller who holds
///   fewer: a flood only ever pushes out the flooder's own outcomes while they hold the
///   most.
/// * `max_bytes_per_user` — the bytes one caller's waiting calls may take in all (default
///   16 MiB), each call counted as its record serialized as compact JSON (input, output,
///   payload, metadata and the rest). The count bounds how many calls wait, this bounds how
///   large they are together: without it a caller whose inputs are each near the input
///   limit could make a store (and a file store's every rewrite) hold `max_per_user` times
///   that. Past it, that caller's next call that needs approval is refused with
///   [`SuspensionStoreError::UserBytesFull`](super::SuspensionStoreError::UserBytesFull)
///   (code `too_many_suspended`, as past the count); other callers are unaffected. A single
///   call larger than the bound never waits.
/// * `max_bytes_total` — the bytes all waiting calls may take (default 256 MiB), the
///   backstop beside `max_total`: past it a call is refused with
///   [`SuspensionStoreError::BytesFull`](super::SuspensionStoreError::BytesFull) (code
///   `suspensions_full`).
///
///   Both byte bounds are kept by the stores built on a
///   [`SuspensionTable`](super::SuspensionTable) (the in-memory store and the agent's JSON
///   file store) and by the Redis store, exactly across its replicas. Calls read back from
///   a file at start-up count towards them but are kept even past them, as past the
///   counts. `usize::MAX` turns a byte bound off.
/// * `expire_after` — how long a call may wait (default 24 h). An expired call no longer
///   counts against either cap, is removed, and answers
///   [`SuspensionStoreError::Expired`](super::SuspensionStoreError::Expired) for a while
///   after (the most recent `max_total` expired ids are remembered, each with who made the
///   call: [`SuspensionStore::expired_owner`](super::SuspensionStore::expired_owner)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::suspension::{InMemorySuspensionStore, SuspensionLimits};
///
/// let limits = SuspensionLimits {
///     max_per_user: 20,
///     expire_after: Duration::from_secs(3600),
///     ..SuspensionLimits::default()
/// };
/// let store = InMemorySuspensionStore::new(limits);
/// assert_eq!(store.limits().max_total, 10_000);
/// assert_eq!(store.limits().max_bytes_per_user, 16 * 1024 * 1024);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuspensionLimits {
    /// Calls one caller (a user id in a tenant) may have waiting at once, and outcomes
    /// kept for them.
    pub max_per_user: usize,
    /// Calls waiting in all, and outcomes kept in all.
    pub max_total: usize,
    /// The bytes one caller's waiting calls may take together (each as compact JSON).
    pub max_bytes_per_user: usize,
    /// The bytes all waiting calls may take together (each as compact JSON).
    pub max_bytes_total: usize,
    /// How long a call may wait before it expires.
    pub expire_after: Duration,
}

impl Default for SuspensionLimits {
    fn default() -> Self {
        SuspensionLimits {
            max_per_user: 100,
            max_total: 10_000,
            max_bytes_per_user: 16 * 1024 * 1024,
            max_bytes_total: 256 * 1024 * 1024,
            expire_after: Duration::from_secs(24 * 60 * 60),
        }
    }
}
