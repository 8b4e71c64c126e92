//! [`Rate`]: how many calls a key may make, and how fast the budget comes back.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

/// A rate limit: `count` calls per `period`, with bursts of up to `burst` calls (by default
/// `count`: the whole period's budget may be used at once).
///
/// Enforced as GCRA: one unit comes back every `period / count`, and a key that has been
/// idle can spend up to `burst` units at once.
///
/// ```
/// use std::time::Duration;
/// use toolgate_hooks::quota::Rate;
///
/// let rate = Rate::per_minute(60)?.with_burst(5)?;
/// assert_eq!(rate.emission_interval(), Duration::from_secs(1));
/// assert_eq!(rate.to_string(), "60 per 60s (burst 5)");
/// assert!(Rate::per_second(0).is_err());
/// # Ok::<(), toolgate_hooks::quota::RateError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    count: NonZeroU32,
    period: Duration,
    burst: NonZeroU32,
}

/// A [`Rate`] that cannot be enforced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// The count or burst is zero.
    #[error(
        "a rate limit needs a count and a burst of at least 1; to refuse every call, use authorization or a feature flag instead"
    )]
    Zero,
    /// The period is zero or so short that one unit would come back in under a nanosecond.
    #[error(
        "a rate limit of {count} per {period:?} is finer than one call per nanosecond: use a longer period"
    )]
    TooFine {
        /// The count asked for.
        count: u32,
        /// The period asked for.
        period: Duration,
    },
    /// A rested key's burst would take longer than [`Rate::LONGEST_REFILL`] to come
    /// back.
    #[error(
        "a rate limit of {count} per {period:?} with a burst of {burst} takes more than 100 years to refill: use a shorter period or a smaller burst"
    )]
    TooSlow {
        /// The count asked for.
        count: u32,
        /// The period asked for.
        period: Duration,
        /// The burst asked for.
        burst: u32,
    },
}

impl Rate {
    /// The longest a rested key's whole burst may take to come back: 100 years. Past a
    /// few hundred years the GCRA's arithmetic no longer fits in nanoseconds.
    pub const LONGEST_REFILL: Duration = Duration::from_secs(100 * 365 * 86_400);

    /// `count` calls per `period`, bursts up to `count`.
    ///
    /// # Errors
    ///
    /// [`RateError::Zero`] for a zero count, [`RateError::TooFine`] for a period shorter
    /// than `count` nanoseconds, [`RateError::TooSlow`] for a period over
    /// [`LONGEST_REFILL`](Self::LONGEST_REFILL).
    pub fn new(count: u32, period: Duration) -> Result<Rate, RateError> {
        let count_nz = NonZeroU32::new(count).ok_or(RateError::Zero)?;
        if (period / count).is_zero() {
            return Err(RateError::TooFine { count, period });
        }
        Rate {
            count: count_nz,
            period,
            burst: count_nz,
        }
        .refilled_in_time()
    }

    /// `self`, or [`RateError::TooSlow`] when its burst takes longer than
    /// [`LONGEST_REFILL`](Self::LONGEST_REFILL) to come back.
    fn refilled_in_time(self) -> Result<Rate, RateError> {
        let refill = self
            .emission_interval()
            .checked_mul(self.burst.get())
            .filter(|refill| *refill <= Self::LONGEST_REFILL);
        match refill {
            Some(_) => Ok(self),
            None => Err(RateError::TooSlow {
                count: self.count.get(),
                period: self.period,
                burst: self.burst.get(),
            }),
        }
    }

    /// `count` calls per second.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_second(count: u32) -> Result<Rate, RateError> {
        Rate::new(count, Duration::from_secs(1))
    }

    /// `count` calls per minute.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_minute(count: u32) -> Result<Rate, RateError> {
        Rate::new(count, Duration::from_secs(60))
    }

    /// `count` calls per hour.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_hour(count: u32) -> Result<Rate, RateError> {
        Rate::new(count, Duration::from_secs(3600))
    }

    /// The same rate with another burst size.
    ///
    /// # Errors
    ///
    /// [`RateError::Zero`] for a zero burst.
    pub fn with_burst(mut self, burst: u32) -> Result<Rate, RateError> {
        self.burst = NonZeroU32::new(burst).ok_or(RateError::Zero)?;
        self.refilled_in_time()
    }

    /// Calls per period.
    pub fn count(&self) -> u32 {
        self.count.get()
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The largest number of calls a rested key may make at once.
    pub fn burst(&self) -> u32 {
        self.burst.get()
    }

    /// How often one unit comes back: `period / count`.
    pub fn emission_interval(&self) -> Duration {
        self.period / self.count.get()
    }

    pub(crate) fn to_governor(self) -> governor::Quota {
        governor::Quota::with_period(self.emission_interval())
            .expect("Rate::new refuses a zero emission interval")
            .allow_burst(self.burst)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?}", self.count, self.period)?;
        if self.burst != self.count {
            write!(f, " (burst {})", self.burst)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_whose_burst_takes_over_a_century_to_come_back_is_refused() {
        let years = |n: u64| Duration::from_secs(n * 365 * 86_400);
        assert!(matches!(
            Rate::new(1, years(600)),
            Err(RateError::TooSlow { .. })
        ));
        assert!(matches!(
            Rate::new(1, Duration::MAX),
            Err(RateError::TooSlow { .. })
        ));
        // One a day with a burst of a million: 2,700 years to refill.
        let daily = Rate::new(1, Duration::from_secs(86_400)).unwrap();
        assert!(matches!(
            daily.with_burst(1_000_000),
            Err(RateError::TooSlow { .. })
        ));
        assert!(daily.with_burst(1000).is_ok());
        assert!(Rate::new(1, years(100)).is_ok());
        // Every rate accepted makes a governor quota without a panic.
        let _ = Rate::new(u32::MAX, years(100)).unwrap().to_governor();
        let _ = Rate::new(1, years(100)).unwrap().to_governor();
    }
}
