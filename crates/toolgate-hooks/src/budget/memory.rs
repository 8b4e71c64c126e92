//! [`InMemoryBudget`]: budgets in this process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{BudgetBackend, BudgetBackendError, BudgetDecision, BudgetRequest, BudgetState};

type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// What one budget spent, and in which window (times in milliseconds since the epoch).
#[derive(Clone, Copy, Debug)]
struct Spent {
    /// The end of the window it counts in, which also names that window.
    end: u64,
    /// The units spent in it.
    used: u64,
    /// The window's length when it was last charged: a reload that changes it is told
    /// apart from a wrong clock by it.
    len: u64,
    /// The earliest end of a window whose spending a reload (one that changed the
    /// window's length) carried into this one, however many reloads carried it: a
    /// correction of a charge made in any window that ended then or later still applies
    /// (see [`Spent::counts`]).
    carried_from: Option<u64>,
}

impl Spent {
    fn fresh(end: u64, len: u64) -> Self {
        Spent {
            end,
            used: 0,
            len,
            carried_from: None,
        }
    }

    /// Whether a charge made in the window that ends at `window_end_ms` counts in this
    /// spending: one made in the present window, or in any window a reload carried into
    /// it. Those all end at or after the earliest carried-from end: each overlaps the next,
    /// and the present one holds now. A window that was over before this spending began
    /// ended at or before the first one's start, so its late corrections stay ignored.
    fn counts(&self, window_end_ms: u64) -> bool {
        self.end == window_end_ms || self.carried_from.is_some_and(|from| window_end_ms >= from)
    }
}

/// Budgets in this process, on its wall clock: exact for one replica. Memory is bounded:
/// budgets of windows that are over are dropped when room is needed, and past `max_keys`
/// budgets in the current window a charge fails ([`BudgetBackendError::Full`]).
#[derive(Clone)]
pub struct InMemoryBudget {
    spent: Arc<Mutex<HashMap<String, Spent>>>,
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
        let len = request.window.millis();
        let end = request.window.end_after(now);
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        if !spent.contains_key(request.key) && spent.len() >= self.max_keys {
            spent.retain(|_, stored| stored.end > now);
            if spent.len() >= self.max_keys {
                return Err(BudgetBackendError::Full {
                    max_keys: self.max_keys,
                });
            }
        }
        let entry = spent
            .entry(request.key.to_owned())
            .or_insert(Spent::fresh(end, len));
        let begun = end - len;
        if entry.len == len {
            // The same length: windows are aligned on the epoch, so the stored one is the
            // present window, a later one or an earlier one. An earlier window is over,
            // and the present one begins afresh. A clock stepped back by less than a
            // window finds the next window already charged, and charges that one: going
            // back does not give a caller a fresh allowance for the window before.
            // Further ahead (a clock that was set far ahead, then corrected), the stored
            // window is not trusted, and the present one begins afresh: no budget stays
            // refused for longer than a window.
            if entry.end <= begun || entry.end.saturating_sub(end) > len {
                *entry = Spent::fresh(end, len);
            }
        } else {
            // The window's length changed (a reload). Spending made in a window that
            // overlaps the present one was made during the present window, or may have
            // been: it is carried into the present window and counts until that ends, so
            // a reload gives no fresh allowance whether the window was made longer
            // (`1h` to `1d`) or shorter (`1d` to `1h`). Carrying spending from before the
            // present window began errs on the side of refusing, for at most that window.
            // A stored window that does not overlap the present one is over, or lies
            // ahead by a wrong clock: the present window begins afresh.
            let stored_begun = entry.end.saturating_sub(entry.len);
            if stored_begun < end && begun < entry.end {
                if entry.end != end {
                    // A budget carried before keeps its earliest carried-from end, so the
                    // corrections of charges made in its first window still apply.
                    let from = entry
                        .carried_from
                        .map_or(entry.end, |from| from.min(entry.end));
                    entry.carried_from = Some(from);
                    entry.end = end;
                }
                entry.len = len;
            } else {
                *entry = Spent::fresh(end, len);
            }
        }
        let end = entry.end;
        let state = |used| BudgetState {
            used,
            window_end_ms: end,
            resets_in: Duration::from_millis(end - now),
        };
        let after = entry.used.saturating_add(request.cost);
        if after > request.limit {
            return Ok(BudgetDecision::Refused(state(entry.used)));
        }
        entry.used = after;
        Ok(BudgetDecision::Charged(state(after)))
    }

    async fn adjust(
        &self,
        key: &str,
        window_end_ms: u64,
        delta: i64,
    ) -> Result<Option<BudgetState>, BudgetBackendError> {
        let now = self.now_ms();
        let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        // A charge made in a window whose spending a reload carried into the present one
        // counts there: its correction applies there too, and the answer names the
        // present window.
        match spent.get_mut(key) {
            Some(stored) if stored.counts(window_end_ms) => {
                stored.used = stored.used.saturating_add_signed(delta);
                Ok(Some(BudgetState {
                    used: stored.used,
                    window_end_ms: stored.end,
                    resets_in: Duration::from_millis(stored.end.saturating_sub(now)),
                }))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::budget::Window;

    const HOUR: u64 = 3600;
    /// 00:00 UTC of a day.
    const DAY: u64 = 20_000 * 86_400;

    /// A store on a clock at `seconds` since the epoch, and what sets that clock.
    fn store_at(seconds: u64) -> (InMemoryBudget, Arc<AtomicU64>) {
        let clock = Arc::new(AtomicU64::new(seconds));
        let read = clock.clone();
        let store = InMemoryBudget::default()
            .with_clock(move || UNIX_EPOCH + Duration::from_secs(read.load(Ordering::SeqCst)));
        (store, clock)
    }

    async fn charge(store: &InMemoryBudget, cost: u64, window: Window) -> BudgetDecision {
        let request = BudgetRequest {
            key: "ann",
            cost,
            limit: 20,
            window,
        };
        store.charge(request).await.unwrap()
    }

    /// A used-up daily budget reloaded as an hourly one keeps what was spent until the
    /// present hour ends (the spending was made during a day that holds this hour), and
    /// the next hour begins afresh.
    #[tokio::test]
    async fn a_used_up_day_made_an_hour_stays_refused_until_the_hour_ends() {
        let (store, clock) = store_at(DAY + 10 * HOUR + 30 * 60);
        assert!(matches!(
            charge(&store, 20, Window::day()).await,
            BudgetDecision::Charged(s) if s.window_end_ms == (DAY + 24 * HOUR) * 1000
        ));
        // 10:40, reloaded with a window of an hour (10:00 to 11:00).
        clock.store(DAY + 10 * HOUR + 40 * 60, Ordering::SeqCst);
        let refused = charge(&store, 1, Window::hour()).await;
        let BudgetDecision::Refused(state) = refused else {
            panic!("a reload gave a fresh allowance: {refused:?}");
        };
        assert_eq!(state.used, 20);
        assert_eq!(state.window_end_ms, (DAY + 11 * HOUR) * 1000);
        assert_eq!(state.resets_in, Duration::from_secs(20 * 60));
        // 10:59:59: still the same hour.
        clock.store(DAY + 11 * HOUR - 1, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::hour()).await,
            BudgetDecision::Refused(s) if s.used == 20
        ));
        // 11:00: the next hour begins afresh.
        clock.store(DAY + 11 * HOUR, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 1 && s.window_end_ms == (DAY + 12 * HOUR) * 1000
        ));
    }

    /// A correction of a charge made before the reload names the window it was charged in:
    /// that spending now counts in the present window, so the correction applies there.
    #[tokio::test]
    async fn a_correction_of_a_charge_carried_by_a_reload_applies_in_the_present_window() {
        let (store, clock) = store_at(DAY + 10 * HOUR + 30 * 60);
        let BudgetDecision::Charged(first) = charge(&store, 5, Window::day()).await else {
            panic!("the first charge");
        };
        assert!(matches!(
            charge(&store, 15, Window::day()).await,
            BudgetDecision::Charged(s) if s.used == 20
        ));
        clock.store(DAY + 10 * HOUR + 40 * 60, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::hour()).await,
            BudgetDecision::Refused(s) if s.used == 20
        ));
        // The first call's tool never ran: its 5 units come back, in the present hour.
        assert_eq!(
            store
                .adjust("ann", first.window_end_ms, -5)
                .await
                .map(|s| s.map(|s| s.used)),
            Ok(Some(15))
        );
        assert!(matches!(
            charge(&store, 5, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 20
        ));
        // Once the hour is over, so is the day's spending: a late correction changes nothing.
        clock.store(DAY + 11 * HOUR, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 1
        ));
        assert_eq!(store.adjust("ann", first.window_end_ms, -5).await, Ok(None));
    }

    /// A correction of a charge carried by a reload answers the present window: its end
    /// and the time left until then, not the window the charge was made in.
    #[tokio::test]
    async fn a_correction_of_a_carried_charge_names_the_present_window() {
        let (store, clock) = store_at(DAY + 10 * HOUR + 30 * 60);
        let BudgetDecision::Charged(first) = charge(&store, 5, Window::day()).await else {
            panic!("the first charge");
        };
        // 10:40, reloaded with a window of an hour (10:00 to 11:00).
        clock.store(DAY + 10 * HOUR + 40 * 60, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 6
        ));
        let corrected = store.adjust("ann", first.window_end_ms, -5).await;
        assert_eq!(
            corrected,
            Ok(Some(BudgetState {
                used: 1,
                window_end_ms: (DAY + 11 * HOUR) * 1000,
                resets_in: Duration::from_secs(20 * 60),
            }))
        );
    }

    /// A budget carried twice in one window — a day made an hour, then half an hour —
    /// still takes the corrections of charges made in each window carried into the
    /// present one, the first included; a correction of a charge made in a window that was
    /// over before (the day before) is still ignored.
    #[tokio::test]
    async fn a_budget_carried_twice_takes_corrections_of_charges_made_in_its_first_window() {
        let half_hour = Window::new(Duration::from_secs(30 * 60)).unwrap();
        let (store, clock) = store_at(DAY + 10 * HOUR + 5 * 60);
        let BudgetDecision::Charged(in_day) = charge(&store, 5, Window::day()).await else {
            panic!("the charge in the day");
        };
        // 10:10, an hour (10:00 to 11:00): the day's 5 units carried.
        clock.store(DAY + 10 * HOUR + 10 * 60, Ordering::SeqCst);
        let BudgetDecision::Charged(in_hour) = charge(&store, 10, Window::hour()).await else {
            panic!("the charge in the hour");
        };
        assert_eq!(in_hour.used, 15);
        // 10:20, half an hour (10:00 to 10:30): carried again, 5 more.
        clock.store(DAY + 10 * HOUR + 20 * 60, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 5, half_hour).await,
            BudgetDecision::Charged(s) if s.used == 20 && s.window_end_ms == (DAY + 10 * HOUR + 30 * 60) * 1000
        ));
        // The day's call never ran, and the hour's reported 4 of its 10: both corrections
        // apply in the present half hour, and name it.
        let present = (DAY + 10 * HOUR + 30 * 60) * 1000;
        let corrected = store.adjust("ann", in_day.window_end_ms, -5).await;
        assert!(
            matches!(corrected, Ok(Some(s)) if s.used == 15 && s.window_end_ms == present),
            "{corrected:?}"
        );
        let corrected = store.adjust("ann", in_hour.window_end_ms, -6).await;
        assert!(
            matches!(corrected, Ok(Some(s)) if s.used == 9 && s.window_end_ms == present),
            "{corrected:?}"
        );
        // The day before was over before this spending began: its correction is ignored.
        let day_before = in_day.window_end_ms - 86_400_000;
        assert_eq!(store.adjust("ann", day_before, -5).await, Ok(None));
        // Back to a day at 10:25: carried a third time, the first window still counts.
        clock.store(DAY + 10 * HOUR + 25 * 60, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::day()).await,
            BudgetDecision::Charged(s) if s.used == 10
        ));
        let corrected = store.adjust("ann", in_hour.window_end_ms, -1).await;
        assert!(
            matches!(corrected, Ok(Some(s)) if s.used == 9),
            "{corrected:?}"
        );
        // The next day begins afresh: the corrections of the windows carried are over.
        clock.store(DAY + 86_400 + HOUR, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::day()).await,
            BudgetDecision::Charged(s) if s.used == 1
        ));
        assert_eq!(
            store.adjust("ann", in_hour.window_end_ms, -1).await,
            Ok(None)
        );
        assert_eq!(
            store.adjust("ann", in_day.window_end_ms, -1).await,
            Ok(None)
        );
    }

    /// A stored window that does not overlap the present one starts afresh when the length
    /// changed, as when it did not: one a clock set far ahead charged, or one that is over.
    #[tokio::test]
    async fn a_window_of_another_length_that_does_not_overlap_begins_afresh() {
        // A clock set a year ahead charges a day of then, and is corrected.
        let (store, clock) = store_at(DAY + 365 * 86_400 + 10 * HOUR);
        assert!(matches!(
            charge(&store, 20, Window::day()).await,
            BudgetDecision::Charged(_)
        ));
        clock.store(DAY + 10 * HOUR, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 1, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 1 && s.window_end_ms == (DAY + 11 * HOUR) * 1000
        ));
        // The same length: a clock set far ahead is not trusted either.
        clock.store(DAY + 365 * 86_400 + 10 * HOUR, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 19, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 19
        ));
        clock.store(DAY + 10 * HOUR + 30 * 60, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 20, Window::hour()).await,
            BudgetDecision::Charged(s) if s.used == 20
        ));
        // An hour that ended before the present day began.
        clock.store(DAY + 86_400 + 5 * HOUR, Ordering::SeqCst);
        assert!(matches!(
            charge(&store, 20, Window::day()).await,
            BudgetDecision::Charged(s) if s.used == 20
        ));
    }
}
