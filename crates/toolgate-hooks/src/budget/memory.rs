//! [`InMemoryBudget`]: budgets in this process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{BudgetBackend, BudgetBackendError, BudgetDecision, BudgetRequest, BudgetState};

type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Budgets in this process, on its wall clock: exact for one replica. Memory is bounded:
/// budgets of windows that are over are dropped when room is needed, and past `max_keys`
/// budgets in the current window a charge fails ([`BudgetBackendError::Full`]).
#[derive(Clone)]
pub struct InMemoryBudget {
    spent: Arc<Mutex<HashMap<String, (u64, u64)>>>,
    max_keys: usize,
    clock: Clock,
}

impl Default for InMemoryBudget {
    fn default() -> Self {
        InMemoryBudget::new(100_000)
    }
}

impl std::fmt::Debug for InMemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryBudget")
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

impl InMemoryBudget {
    /// A store of at most `max_keys` budgets at once.
    pub fn new(max_keys: usize) -> Self {
        InMemoryBudget {
            spent: Arc::default(),
            max_keys: max_keys.max(1),
            clock: Arc::new(SystemTime::now),
        }
    }

    /// The same store on another clock (tests step a clock of their own across windows).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    fn now_ms(&self) -> u64 {
        let since = (self.clock)()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }
}

#[async_trait]
impl BudgetBackend for InMemoryBudget {
    async fn charge(
        &self,
        request: BudgetRequest<'_>,
    ) -> Result<BudgetDecision, BudgetBackendError> {
        let now = self.now_ms();
        let end = request.window.end_after(now);
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        if !spent.contains_key(request.key) && spent.len() >= self.max_keys {
            spent.retain(|_, (window_end, _)| *window_end > now);
            if spent.len() >= self.max_keys {
                return Err(BudgetBackendError::Full {
                    max_keys: self.max_keys,
                });
            }
        }
        let entry = spent.entry(request.key.to_owned()).or_insert((end, 0));
        // A later window begins afresh. A clock stepped back by less than a window finds
        // the next window already charged, and charges that one: going back does not give
        // a caller a fresh allowance for the window before. Further back (or after a clock
        // that was set far ahead, then corrected), the stored window is not trusted, and the
        // present one begins afresh: no budget stays refused for longer than a window.
        //
        // A stored window that ended after the present one began (the window's length
        // changed on a reload) holds spending of the present window: it is kept, and counts
        // until the present window ends, so a reload gives no fresh allowance. A window
        // made shorter may so carry spending from before the present window began: that
        // errs on the side of refusing.
        let begun = end.saturating_sub(request.window.millis());
        if entry.0 <= begun || entry.0.saturating_sub(end) > request.window.millis() {
            *entry = (end, 0);
        } else if entry.0 < end {
            entry.0 = end;
        }
        let end = entry.0;
        let state = |used| BudgetState {
            used,
            window_end_ms: end,
            resets_in: Duration::from_millis(end - now),
        };
        let after = entry.1.saturating_add(request.cost);
        if after > request.limit {
            return Ok(BudgetDecision::Refused(state(entry.1)));
        }
        entry.1 = after;
        Ok(BudgetDecision::Charged(state(after)))
    }

    async fn adjust(
        &self,
        key: &str,
        window_end_ms: u64,
        delta: i64,
    ) -> Result<Option<u64>, BudgetBackendError> {
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        match spent.get_mut(key) {
            Some((end, used)) if *end == window_end_ms => {
                *used = used.saturating_add_signed(delta);
                Ok(Some(*used))
            }
            _ => Ok(None),
        }
    }
}
