//! A held lease: renewed in the background while held, released when dropped.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{AsyncCommands, Script};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::link::{Link, millis_at_least_one};

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));

/// The counter of leases found expired by their own renewal (a holder that could not reach
/// Redis for a whole TTL): the cap may have been exceeded while they ran.
pub const LEASES_LOST: &str = "toolgate_redis_leases_lost_total";

/// Where a lease lives: the budget's set and the lease's id in it.
#[derive(Clone, Debug)]
pub(crate) struct LeaseId {
    pub(crate) set: String,
    pub(crate) id: String,
}

impl LeaseId {
    /// Removes the lease from its set, in a task on `runtime` so that it also runs from a
    /// `Drop`. Without a runtime (or with one shutting down) nothing is sent, and the lease
    /// expires at its TTL.
    pub(crate) fn release_on(self, link: &Link, runtime: Option<&Handle>) {
        let Some(runtime) = runtime else { return };
        let link = link.clone();
        // `spawn` on the handle of a runtime that has shut down drops the task, it does
        // not panic.
        drop(runtime.spawn(async move {
            let mut connection = link.connection();
            let removed = link
                .within(connection.zrem::<_, _, u32>(&self.set, &self.id))
                .await;
            if let Err(failure) = removed {
                tracing::debug!(lease = %self.id, %failure, "lease not released; it expires at its TTL");
            }
        }));
    }
}

/// The guard inside a [`Permit`](toolgate_hooks::concurrency::Permit) from
/// [`RedisConcurrency`](super::RedisConcurrency).
pub(crate) struct Lease {
    link: Link,
    lease: Option<LeaseId>,
    runtime: Option<Handle>,
    renewal: Option<JoinHandle<()>>,
}

impl Lease {
    /// Holds `lease`, renewing it every third of `ttl` until dropped.
    pub(crate) fn hold(link: Link, lease: LeaseId, ttl: Duration) -> Self {
        let runtime = Handle::try_current().ok();
        let renewal = runtime
            .as_ref()
            .map(|runtime| runtime.spawn(renew(link.clone(), lease.clone(), ttl)));
        Lease {
            link,
            lease: Some(lease),
            runtime,
            renewal,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        if let Some(lease) = self.lease.take() {
            lease.release_on(&self.link, self.runtime.as_ref());
        }
    }
}

async fn renew(link: Link, lease: LeaseId, ttl: Duration) {
    let every = ttl / 3;
    let ttl_ms = millis_at_least_one(ttl);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let mut invocation = RENEW.prepare_invoke();
        invocation.key(&lease.set).arg(&lease.id).arg(ttl_ms);
        let mut connection = link.connection();
        match link
            .within(invocation.invoke_async::<u8>(&mut connection))
            .await
        {
            Ok(1) => {}
            Ok(_) => {
                metrics::counter!(LEASES_LOST).increment(1);
                tracing::warn!(
                    lease = %lease.id,
                    "concurrency lease expired while its call still runs (Redis was out of reach for a whole lease TTL); the cap may be exceeded until the call ends"
                );
                return;
            }
            // Try again at the next tick: a third of the TTL is left for it.
            Err(failure) => {
                tracing::debug!(lease = %lease.id, %failure, "lease renewal failed; retrying");
            }
        }
    }
}
