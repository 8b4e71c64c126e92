//! [`LimitReport`]: what a call learnt about the limits it passed, for the caller.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate_core::ToolInvokeContext;
use toolgate_core::external::TypeMapKey;

/// One limit as a call left it: the shape of the `RateLimit-Policy` and `RateLimit`
/// header fields of the IETF draft (`draft-ietf-httpapi-ratelimit-headers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitState {
    /// The policy's name (its identifier in the fields).
    pub policy: String,
    /// The quota of the policy per window (`q`).
    pub quota: u64,
    /// The window (`w`).
    pub window: Duration,
    /// The units left (`r`), when the policy knows them.
    pub remaining: Option<u64>,
    /// How long until units come back (`t`), when the policy knows it.
    pub resets_in: Option<Duration>,
}

/// A request-scope provider the host binds to a call to learn, after the call, the state
/// of every limit it passed or was refused by: the [`Budget`](super::Budget) and
/// [`Quota`](crate::quota::Quota) hooks write to it when it is bound, and do nothing more
/// when it is not. Clones share one report, so the host keeps a clone and reads it once
/// the call is over.
///
/// ```
/// use toolgate_core::InvokeOptions;
/// use toolgate_hooks::budget::LimitReport;
///
/// let report = LimitReport::default();
/// let options = InvokeOptions::new().provide::<LimitReport>(report.clone());
/// # let _ = options;
/// // … invoke, then read `report.states()`.
/// ```
#[derive(Clone, Debug, Default)]
pub struct LimitReport(Arc<Mutex<Vec<LimitState>>>);

impl TypeMapKey for LimitReport {
    type Value = LimitReport;
}

impl LimitReport {
    /// The limits the call met, in the order it met them; a limit seen twice keeps its
    /// latest state.
    pub fn states(&self) -> Vec<LimitState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records `state`, replacing an earlier state of the same policy.
    pub fn record(&self, state: LimitState) {
        let mut states = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match states.iter_mut().find(|s| s.policy == state.policy) {
            Some(earlier) => *earlier = state,
            None => states.push(state),
        }
    }

    /// Records `state` in the report bound to `ctx`, if there is one.
    pub fn record_in(ctx: &ToolInvokeContext, state: impl FnOnce() -> LimitState) {
        if let Some(report) = ctx.try_get::<LimitReport>() {
            report.record(state());
        }
    }
}
