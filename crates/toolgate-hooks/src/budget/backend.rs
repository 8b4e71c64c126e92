//! [`BudgetBackend`]: where the spending of budgets lives.

use std::time::Duration;

use async_trait::async_trait;

use super::Window;

/// One charge against a budget.
#[derive(Clone, Copy, Debug)]
pub struct BudgetRequest<'a> {
    /// The budget, already namespaced by the policy.
    pub key: &'a str,
    /// The units to charge.
    pub cost: u64,
    /// The allowance per window.
    pub limit: u64,
    /// The window the allowance lasts.
    pub window: Window,
}

/// A budget's spending in its current window, as a backend saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetState {
    /// Units spent in the window (may pass the limit after a reported cost).
    pub used: u64,
    /// The end of the window, in milliseconds since the epoch: it also names the window,
    /// so that a reconciliation never lands in the next one.
    pub window_end_ms: u64,
    /// How long until the window ends, on the backend's clock.
    pub resets_in: Duration,
}

impl BudgetState {
    /// The units left of `limit`.
    pub fn remaining(&self, limit: u64) -> u64 {
        limit.saturating_sub(self.used)
    }
}

/// What a backend answers to a charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetDecision {
    /// The cost was charged; the state includes it.
    Charged(BudgetState),
    /// The cost is more than is left: nothing was charged.
    Refused(BudgetState),
}

/// A budget backend could not decide.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetBackendError {
    /// The backend tracks as many budgets as it may in this window.
    #[error(
        "the budget store tracks {max_keys} budgets in this window: raise `max_keys` or partition more coarsely"
    )]
    Full {
        /// The configured cap.
        max_keys: usize,
    },
    /// The backend could not be reached or failed.
    #[error("the budget store failed: {0}")]
    Unavailable(String),
}

/// Where budgets live. [`InMemoryBudget`](super::InMemoryBudget) is the default; a shared
/// store (`toolgate_redis::RedisBudget`) implements the same trait so that replicas charge
/// one budget.
///
/// A backend must decide a charge atomically: however many callers charge one key at once,
/// the sum of the charged costs in a window never passes the limit (only a reconciliation
/// may take it past).
#[async_trait]
pub trait BudgetBackend: Send + Sync + 'static {
    /// Charges `request.cost` to `request.key` if that much is left in the current window.
    async fn charge(
        &self,
        request: BudgetRequest<'_>,
    ) -> Result<BudgetDecision, BudgetBackendError>;

    /// Adds `delta` (negative: gives back) to what `key` spent in the window that ends at
    /// `window_end_ms`, never going below zero; a window that is over is left alone. When
    /// a reload that changed the window's length carried that window's spending into the
    /// present window, the change applies there.
    ///
    /// Answers the budget's state after the change — its spending and the window it counts
    /// in now, which is the present window when the spending was carried — or `None` when
    /// the window is over.
    async fn adjust(
        &self,
        key: &str,
        window_end_ms: u64,
        delta: i64,
    ) -> Result<Option<BudgetState>, BudgetBackendError>;
}
