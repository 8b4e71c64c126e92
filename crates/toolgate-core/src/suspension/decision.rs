//! Decision tokens: what tags the running record a decision keeps, so that only that
//! decision removes it.

use std::sync::atomic::{AtomicU64, Ordering};

/// A new token for one decision on a waiting call, to tag the running record it keeps
/// ([`SuspensionStore::take_running`]) and to remove that record only
/// ([`SuspensionStore::remove_running`]): unique in this process and, drawn at random,
/// across replicas.
///
/// ```
/// use toolgate_core::suspension::decision_token;
///
/// assert_ne!(decision_token(), decision_token());
/// ```
///
/// [`SuspensionStore::take_running`]: super::SuspensionStore::take_running
/// [`SuspensionStore::remove_running`]: super::SuspensionStore::remove_running
pub fn decision_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "decision-{:016x}{:016x}",
        crate::random::random_u64() ^ n,
        crate::random::random_u64()
    )
}
