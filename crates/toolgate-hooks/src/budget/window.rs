//! [`Window`]: how long an allowance lasts, aligned on UTC.

use std::fmt;
use std::time::Duration;

/// The period of a budget: fixed windows of whole seconds, aligned on the Unix epoch, so a
/// day runs from 00:00 to 24:00 UTC and an hour from one full hour to the next, on every
/// replica alike. The allowance starts afresh when a window begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    seconds: u64,
}

/// A window that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// Shorter than a second, or not whole seconds.
    #[error("a budget window is whole seconds, at least one (`1h`, `1d`): `{0:?}` is not")]
    NotWholeSeconds(Duration),
    /// Longer than [`Window::LONGEST`].
    #[error("a budget window is at most 100 years long: `{0:?}` is longer")]
    TooLong(Duration),
}

impl Window {
    /// The longest window: 100 years (its end in milliseconds since the epoch must fit
    /// the counters it is kept in).
    pub const LONGEST: Duration = Duration::from_secs(100 * 365 * 86_400);

    /// A window of `length`, aligned on the epoch.
    ///
    /// # Errors
    ///
    /// [`WindowError::NotWholeSeconds`] when `length` is under a second or has a fraction,
    /// [`WindowError::TooLong`] past [`Window::LONGEST`].
    pub fn new(length: Duration) -> Result<Window, WindowError> {
        if length.subsec_nanos() != 0 || length.as_secs() == 0 {
            return Err(WindowError::NotWholeSeconds(length));
        }
        if length > Self::LONGEST {
            return Err(WindowError::TooLong(length));
        }
        Ok(Window {
            seconds: length.as_secs(),
        })
    }

    /// From one full hour to the next (UTC).
    pub fn hour() -> Window {
        Window { seconds: 3600 }
    }

    /// From 00:00 UTC to the next 00:00 UTC.
    pub fn day() -> Window {
        Window { seconds: 86_400 }
    }

    /// The window's length.
    pub fn length(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }

    /// The window's length in milliseconds.
    pub fn millis(&self) -> u64 {
        self.seconds * 1000
    }

    /// The end (exclusive) of the window that holds `now_ms` (milliseconds since the epoch).
    pub fn end_after(&self, now_ms: u64) -> u64 {
        (now_ms / self.millis() + 1) * self.millis()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seconds {
            86_400 => f.write_str("day"),
            3600 => f.write_str("hour"),
            s if s.is_multiple_of(86_400) => write!(f, "{} days", s / 86_400),
            s if s.is_multiple_of(3600) => write!(f, "{} hours", s / 3600),
            s if s.is_multiple_of(60) => write!(f, "{} minutes", s / 60),
            s => write!(f, "{s} seconds"),
        }
    }
}

/// `HH:MM UTC` for an instant (milliseconds since the epoch) — `HH:MM:SS UTC` when it is
/// not on a whole minute (a window of seconds) — with the date in front
/// (`2026-11-30 00:00 UTC`) when it lies more than a day after `now_ms`.
pub(crate) fn utc_time(at_ms: u64, now_ms: u64) -> String {
    let seconds = at_ms.div_ceil(1000);
    let (days, in_day) = (seconds / 86_400, seconds % 86_400);
    let clock = match in_day % 60 {
        0 => format!("{:02}:{:02} UTC", in_day / 3600, in_day % 3600 / 60),
        s => format!("{:02}:{:02}:{s:02} UTC", in_day / 3600, in_day % 3600 / 60),
    };
    if at_ms.saturating_sub(now_ms) <= 86_400_000 {
        return clock;
    }
    let midnight = std::time::UNIX_EPOCH + std::time::Duration::from_secs(days * 86_400);
    let date = humantime::format_rfc3339_seconds(midnight).to_string();
    format!("{} {clock}", &date[..10])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_ends_at_midnight_utc() {
        // 2026-11-28 10:56:42 UTC.
        let now = 1_795_863_402_000;
        let end = Window::day().end_after(now);
        assert_eq!(end % 86_400_000, 0);
        assert_eq!(utc_time(end, now), "00:00 UTC");
        assert_eq!(utc_time(Window::hour().end_after(now), now), "11:00 UTC");
    }

    #[test]
    fn a_window_of_seconds_ends_at_a_time_with_its_seconds() {
        // 2026-11-28 10:56:42 UTC; a window of 10 seconds ends at 10:56:50.
        let now = 1_795_863_402_000;
        let ten = Window::new(Duration::from_secs(10)).unwrap();
        assert_eq!(utc_time(ten.end_after(now), now), "10:56:50 UTC");
    }

    #[test]
    fn a_reset_more_than_a_day_away_names_its_date() {
        let now = 1_795_863_402_000;
        let week = Window::new(Duration::from_secs(7 * 86_400)).unwrap();
        // The epoch began on a Thursday, so weeks do.
        assert_eq!(utc_time(week.end_after(now), now), "2026-12-03 00:00 UTC");
    }

    #[test]
    fn a_window_past_a_century_is_refused_and_the_longest_ends_in_range() {
        assert_eq!(
            Window::new(Duration::from_secs(u64::MAX)),
            Err(WindowError::TooLong(Duration::from_secs(u64::MAX)))
        );
        let longest = Window::new(Window::LONGEST).unwrap();
        assert!(longest.end_after(4_000_000_000_000) > 4_000_000_000_000);
    }

    #[test]
    fn a_window_is_whole_seconds() {
        assert!(Window::new(Duration::from_millis(1500)).is_err());
        assert!(Window::new(Duration::ZERO).is_err());
        assert_eq!(
            Window::new(Duration::from_secs(3600)).unwrap(),
            Window::hour()
        );
    }
}
