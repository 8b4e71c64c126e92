//! The drain before the gateway stops: what the server and every request share about it.
//!
//! A drain has two moments. It **starts** on SIGTERM or SIGINT: from then on `/readyz`
//! answers 503, new calls are refused with 503 `shutting_down`, and the calls already in
//! flight go on. It is **cut** when `server.shutdown_grace` ends with calls still running:
//! each of them is cancelled through its pipeline cancellation token, so its tail runs
//! (`on_error`, the audit record, the releases) and its caller is answered 503
//! `shutting_down`.
//!
//! Which requests count as calls in flight is up to the HTTP layer: it [admits](Drain::admit)
//! each one and holds the [`CallInFlight`] until the answer has been sent, so that
//! [`calls_finished`](Drain::calls_finished) means "every caller has its answer".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolgate_agent::{ResultError, ToolResult};
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};
use toolgate_mcp::HostShutdown;

/// The machine code of every answer the drain gives.
pub const SHUTTING_DOWN: &str = "shutting_down";

/// How long a caller refused during the drain is told to wait (`Retry-After`) — on
/// another replica, which a load balancer sends it to once `/readyz` here is 503.
const RETRY_ELSEWHERE_AFTER: Duration = Duration::from_secs(1);

/// The drain of one gateway process. Cheap to clone (one `Arc`); clones share the drain.
#[derive(Clone, Debug)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Set when the drain starts; read on every call, hence an atomic and not the token.
    started: AtomicBool,
    /// Cancelled when the drain starts, for what waits for it.
    start: CancellationToken,
    /// Cancelled when the grace ends: the calls in flight hold children of it.
    cut: CancellationToken,
    calls: AtomicUsize,
    /// Woken when the last call in flight ends during the drain.
    idle: Notify,
    /// The cut, as the MCP server sees it.
    mcp: HostShutdown,
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    /// A drain that has not started.
    pub fn new() -> Self {
        let cut = CancellationToken::new();
        Drain {
            inner: Arc::new(Inner {
                started: AtomicBool::new(false),
                start: CancellationToken::new(),
                mcp: HostShutdown::new(cut.clone(), cut_error()),
                cut,
                calls: AtomicUsize::new(0),
                idle: Notify::new(),
            }),
        }
    }

    /// Starts the drain: calls admitted from now on are refused.
    pub fn start(&self) {
        self.inner.started.store(true, SeqCst);
        self.inner.start.cancel();
    }

    /// Whether the drain has started.
    pub fn is_draining(&self) -> bool {
        self.inner.started.load(SeqCst)
    }

    /// Waits until the drain starts.
    pub async fn started(&self) {
        self.inner.start.cancelled().await;
    }

    /// Ends the grace: cancels every call in flight.
    pub fn cut(&self) {
        self.inner.cut.cancel();
    }

    /// Whether the grace has ended and the calls in flight were cancelled.
    pub fn is_cut(&self) -> bool {
        self.inner.cut.is_cancelled()
    }

    /// The error a call's caller is told: a call the cut cancelled gets [`cut_error`];
    /// any other error is the call's own.
    pub fn explain(&self, error: ToolError) -> ToolError {
        match error {
            ToolError::Cancelled if self.is_cut() => cut_error(),
            other => other,
        }
    }

    /// [`explain`](Self::explain) for the result of a call of a batch or a resume.
    pub fn explain_result(&self, result: &mut ToolResult) {
        if let Some(error) = &mut result.error
            && error.code == ToolError::Cancelled.code()
            && self.is_cut()
        {
            *error = ResultError::from(&cut_error());
        }
    }

    /// The cancellation token of one call: cancelled by the cut. A child token, so that a
    /// tool cancelling its own call cannot cancel the others.
    pub fn call_token(&self) -> CancellationToken {
        self.inner.cut.child_token()
    }

    /// The cut, for the MCP server to put in the extensions of each `/mcp` request.
    pub fn mcp_shutdown(&self) -> &HostShutdown {
        &self.inner.mcp
    }

    /// Counts a call in flight until the returned guard is dropped.
    ///
    /// # Errors
    ///
    /// [`Refused`] once the drain has started.
    pub fn admit(&self) -> Result<CallInFlight, Refused> {
        // Counted before the check: a drain that starts in between sees this call.
        self.inner.calls.fetch_add(1, SeqCst);
        let call = CallInFlight {
            inner: self.inner.clone(),
        };
        if self.is_draining() {
            return Err(Refused);
        }
        Ok(call)
    }

    /// Counts, until the returned guard is dropped, the work an admitted call hands to a
    /// task of its own so that it ends whatever becomes of the request (a decided call
    /// runs and is recorded even when its approver goes away).
    ///
    /// Never refused, not even during the drain: the call handing the work off is still
    /// counted while it does, so the drain cannot have seen no call in flight in between.
    pub fn hand_off(&self) -> CallInFlight {
        self.inner.calls.fetch_add(1, SeqCst);
        CallInFlight {
            inner: self.inner.clone(),
        }
    }

    /// How many calls are in flight.
    pub fn calls_in_flight(&self) -> usize {
        self.inner.calls.load(SeqCst)
    }

    /// Waits until no call is in flight (at once when none is). Meant for after
    /// [`start`](Self::start): before it, new calls keep coming.
    pub async fn calls_finished(&self) {
        loop {
            let idle = self.inner.idle.notified();
            let mut idle = std::pin::pin!(idle);
            // Registered before the count is read, so that the last call's wake-up
            // cannot fall in between.
            idle.as_mut().enable();
            if self.calls_in_flight() == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One call in flight, counted by its [`Drain`] until dropped.
#[derive(Debug)]
pub struct CallInFlight {
    inner: Arc<Inner>,
}

impl Drop for CallInFlight {
    fn drop(&mut self) {
        let last = self.inner.calls.fetch_sub(1, SeqCst) == 1;
        if last && self.inner.started.load(SeqCst) {
            self.inner.idle.notify_waiters();
        }
    }
}

/// A call arrived after the drain started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the gateway is shutting down and takes no new calls: send the call to another replica")]
pub struct Refused;

impl From<Refused> for ToolError {
    /// 503 `shutting_down` with a `Retry-After`: the call never started, so sending it
    /// again elsewhere is always safe.
    fn from(refused: Refused) -> Self {
        ToolError::RetryAfter {
            delay: RETRY_ELSEWHERE_AFTER,
            reason: refused.to_string(),
            code: SHUTTING_DOWN.into(),
            status: 503,
        }
    }
}

/// Makes the record of a call cut at the end of the grace say what its caller is told:
/// at `on_error`, before the audit record is taken, a cancellation by the cut becomes
/// [`cut_error`] (`shutting_down`, 503) instead of a plain `cancelled`.
pub(crate) struct ExplainCut(pub(crate) Drain);

#[hook]
impl Hook for ExplainCut {
    fn name(&self) -> &str {
        "drain"
    }

    fn on_error(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if self.0.is_cut()
            && let Some(error) = ctx.error_mut()
            && matches!(error, ToolError::Cancelled)
        {
            *error = cut_error();
        }
        Ok(())
    }
}

/// What the caller of a call cut at the end of the grace is told: 503 `shutting_down`,
/// without `Retry-After` — the call may have had effects, so only its caller can tell
/// whether sending it again is safe.
pub fn cut_error() -> ToolError {
    ToolError::abort(
        "the gateway shut down before the call finished: it may or may not have had effects; \
         send it again (to another replica) only if the tool is idempotent",
        SHUTTING_DOWN,
        503,
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn calls_are_admitted_until_the_drain_starts() {
        let drain = Drain::new();
        let call = drain.admit().expect("admitted before the drain");
        assert_eq!(drain.calls_in_flight(), 1);
        drain.start();
        assert_eq!(drain.admit().unwrap_err(), Refused);
        assert_eq!(drain.calls_in_flight(), 1, "a refused call is not counted");
        drop(call);
        assert_eq!(drain.calls_in_flight(), 0);
    }

    #[test]
    fn work_handed_off_during_the_drain_is_counted_until_it_ends() {
        let drain = Drain::new();
        let call = drain.admit().unwrap();
        drain.start();
        let handed_off = drain.hand_off();
        drop(call);
        assert_eq!(drain.calls_in_flight(), 1, "the drain waits for it");
        drop(handed_off);
        assert_eq!(drain.calls_in_flight(), 0);
    }

    #[tokio::test]
    async fn calls_finished_waits_for_the_last_call_in_flight() {
        let drain = Drain::new();
        let call = drain.admit().unwrap();
        drain.start();
        let waiting = tokio::spawn({
            let drain = drain.clone();
            async move { drain.calls_finished().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "a call is still in flight");
        drop(call);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the last call")
            .unwrap();
    }

    #[test]
    fn only_a_call_cancelled_by_the_cut_is_told_the_gateway_shut_down() {
        let drain = Drain::new();
        assert_eq!(drain.explain(ToolError::Cancelled), ToolError::Cancelled);
        let token = drain.call_token();
        drain.cut();
        assert!(token.is_cancelled());
        assert_eq!(drain.explain(ToolError::Cancelled).code(), SHUTTING_DOWN);
        let timeout = ToolError::Timeout {
            after: Duration::from_secs(1),
        };
        assert_eq!(drain.explain(timeout.clone()), timeout);
    }

    #[test]
    fn a_refusal_asks_to_retry_elsewhere() {
        let error = ToolError::from(Refused);
        assert_eq!(error.status(), 503);
        assert_eq!(error.code(), SHUTTING_DOWN);
        assert!(error.retry_after_delay().is_some());
        assert!(cut_error().retry_after_delay().is_none());
    }
}
