//! Guards a capacity hook holds for an invocation, kept in the context's scratchpad.
//!
//! Several instances of one policy may stack on a call (two quotas, say), so each guard is
//! kept under the id of the hook instance that took it. Dropping the context drops the
//! guards, so what was acquired comes back on every path, cancellation included.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use toolgate_core::{ToolInvokeContext, TypeMapKey};

/// The scratchpad key for guards of type `G`, by owning hook instance.
struct Held<G>(PhantomData<G>);

impl<G: Send + Sync + 'static> TypeMapKey for Held<G> {
    type Value = Vec<(u64, G)>;
}

/// A new id for a hook instance, unique in this process.
pub(crate) fn next_owner_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Keeps `guard` for the rest of the invocation, on behalf of hook instance `owner`.
pub(crate) fn keep<G: Send + Sync + 'static>(ctx: &mut ToolInvokeContext, owner: u64, guard: G) {
    ctx.scratch_mut()
        .entry::<Held<G>>()
        .or_default()
        .push((owner, guard));
}

/// Drops (and so releases) the guards of type `G` that hook instance `owner` holds, if any.
pub(crate) fn release<G: Send + Sync + 'static>(ctx: &mut ToolInvokeContext, owner: u64) {
    if let Some(held) = ctx.scratch_mut().get_mut::<Held<G>>() {
        held.retain(|(id, _)| *id != owner);
    }
}
