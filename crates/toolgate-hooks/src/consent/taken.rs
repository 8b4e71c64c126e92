//! [`TakenOnces`]: the one-shot approvals that calls in flight have taken from the store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The one-shot approvals that calls in flight took from the store, by claim, with their
/// caller and tool (and whether the store has said it held one: a claim is made before
/// asking). A call refused before its tool ran gives its approval back — unless a
/// revoke came meanwhile: a revoke finds no approval in the store while a call holds it,
/// and must not see it come back once that call fails. Shared by a
/// [`Consent`](super::Consent) hook, its clones and the [`Approvals`](super::Approvals) it
/// hands out. An entry lives as long as its call: the table holds no more entries than
/// calls are in flight.
#[derive(Default)]
pub(crate) struct TakenOnces {
    next: AtomicU64,
    claims: Mutex<HashMap<u64, Taken>>,
}

/// Whose approval a claim is, and whether the store gave one.
struct Taken {
    caller: String,
    tool: String,
    once: bool,
}

/// A call's claim on the one-shot approval it took: forgotten when dropped, with the call.
pub(crate) struct Claim {
    id: u64,
    onces: Arc<TakenOnces>,
}

impl TakenOnces {
    /// Records that a call of `caller` is taking the one-shot approval for `tool`, if there
    /// is one ([`Claim::holds_once`] says there was).
    pub fn take(self: &Arc<Self>, caller: &str, tool: &str) -> Claim {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let taken = Taken {
            caller: caller.to_owned(),
            tool: tool.to_owned(),
            once: false,
        };
        self.lock().insert(id, taken);
        Claim {
            id,
            onces: Arc::clone(self),
        }
    }

    /// Revokes the approvals of `caller` for `tool` that calls in flight hold, so that none
    /// is given back; whether a call held one.
    pub fn revoke(&self, caller: &str, tool: &str) -> bool {
        let mut held = false;
        self.lock().retain(|_, taken| {
            let revoked = taken.caller == caller && taken.tool == tool;
            held |= revoked && taken.once;
            !revoked
        });
        held
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Taken>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Claim {
    /// The store gave the call a one-shot approval under this claim.
    pub fn holds_once(&self) {
        if let Some(taken) = self.onces.lock().get_mut(&self.id) {
            taken.once = true;
        }
    }

    /// Whether the approval is still the call's to give back: no revoke took it.
    pub fn stands(&self) -> bool {
        self.onces.lock().contains_key(&self.id)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.onces.lock().remove(&self.id);
    }
}
