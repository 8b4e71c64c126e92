//! [`RetryBudget`]: retries at most a set fraction of calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Caps retries at a fraction of calls, so that an upstream that fails for everyone gets
/// `ratio` more load, not `max_attempts` times the load.
///
/// A token bucket counted in thousandths: every call that may retry deposits `ratio` of a
/// token, every retry withdraws one whole token, and the bucket starts with `reserve`
/// tokens (so that a quiet service can still retry) and never holds more than `max`. Over
/// any run of `n` calls there are at most `reserve + ratio × n` retries.
///
/// Clones share the same bucket.
///
/// ```
/// use toolgate_hooks::retry::RetryBudget;
///
/// let budget = RetryBudget::new(0.1, 5, 100)?; // 10% of calls, 5 in reserve, at most 100 banked
/// assert_eq!(budget.available(), 5);
/// # Ok::<(), toolgate_hooks::retry::RetryConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RetryBudget {
    milli_tokens: Arc<AtomicI64>,
    deposit: i64,
    max: i64,
}

const WHOLE: i64 = 1000;

impl RetryBudget {
    /// Retries at most `ratio` (0.0 to 1.0… or more) of calls, plus `reserve`, banking at
    /// most `max` retries.
    ///
    /// # Errors
    ///
    /// [`RetryConfigError::BadBudget`](super::RetryConfigError::BadBudget) for a negative
    /// or non-finite ratio, or `max` below `reserve`.
    pub fn new(ratio: f64, reserve: u32, max: u32) -> Result<Self, super::RetryConfigError> {
        if !ratio.is_finite() || ratio < 0.0 || max < reserve {
            return Err(super::RetryConfigError::BadBudget {
                ratio,
                reserve,
                max,
            });
        }
        let max = i64::from(max) * WHOLE;
        Ok(RetryBudget {
            milli_tokens: Arc::new(AtomicI64::new(i64::from(reserve) * WHOLE)),
            // More than the bucket holds fills it, whatever the ratio (`as` saturates).
            deposit: ((ratio * WHOLE as f64).round() as i64).min(max),
            max,
        })
    }

    /// A budget that never refuses (for tests and for tools whose upstream you own).
    pub fn unlimited() -> Self {
        RetryBudget {
            milli_tokens: Arc::new(AtomicI64::new(i64::MAX / 2)),
            deposit: 0,
            max: i64::MAX / 2,
        }
    }

    /// Whole retries the bucket holds now.
    pub fn available(&self) -> u64 {
        u64::try_from(self.milli_tokens.load(Ordering::Acquire) / WHOLE).unwrap_or(0)
    }

    /// Records a call that may retry.
    pub(crate) fn deposit(&self) {
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(self.deposit).min(self.max))
            });
    }

    /// Takes one retry, if the bucket has one.
    pub(crate) fn withdraw(&self) -> bool {
        self.milli_tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t >= WHOLE).then_some(t - WHOLE)
            })
            .is_ok()
    }
}

impl Default for RetryBudget {
    /// 20% of calls, 10 in reserve, at most 100 banked.
    fn default() -> Self {
        RetryBudget {
            milli_tokens: Arc::new(AtomicI64::new(10 * WHOLE)),
            deposit: 200,
            max: 100 * WHOLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_past_any_count_fills_the_bucket_instead_of_overflowing_it() {
        for ratio in [1e17, 1e300, f64::MAX] {
            let budget = RetryBudget::new(ratio, 0, 10).unwrap();
            for _ in 0..3 {
                budget.deposit();
                assert_eq!(budget.available(), 10, "ratio {ratio}");
            }
            assert!(budget.withdraw());
            assert_eq!(budget.available(), 9);
        }
    }
}
