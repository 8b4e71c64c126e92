//! Suspension ids: unguessable, and in the order the calls were suspended.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// A new suspension id: `susp-` and 32 lowercase hexadecimal digits, the first 12 the
/// milliseconds since the Unix epoch and the other 20 (80 bits) unpredictable.
///
/// The stores list calls in id order, so listings — an approver's queue first of all —
/// show the oldest calls first, and a page's cursor (its last id) stays valid as calls
/// come and go. The time says when the call was suspended, which its record says anyway;
/// the unpredictable part keeps one id from being guessed from another. Unique per
/// process: the unpredictable part mixes in a counter.
pub(crate) fn new_suspension_id() -> String {
    new_suspension_id_at(SystemTime::now())
}

/// [`new_suspension_id`] for a call suspended at `now`.
fn new_suspension_id_at(now: SystemTime) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let millis = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    // 48 bits of milliseconds last until the year 10889.
    let time = (millis as u64) & 0xffff_ffff_ffff;
    let high = (crate::random::random_u64() ^ n) & 0xffff;
    format!(
        "susp-{time:012x}{high:04x}{:016x}",
        crate::random::random_u64()
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    fn at(millis: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
    }

    #[test]
    fn an_id_is_susp_and_32_lowercase_hexadecimal_digits() {
        let id = new_suspension_id();
        let hex = id.strip_prefix("susp-").unwrap();
        assert_eq!(hex.len(), 32, "{id}");
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{id}"
        );
    }

    #[test]
    fn ids_sort_in_the_order_their_calls_were_suspended() {
        // A millisecond apart, and across a change in the number of digits the time needs.
        let times = [0x0fff_ffff_ffff, 0x1000_0000_0000 - 1, 1_764_000_000_000];
        let mut earlier = new_suspension_id_at(at(1));
        for millis in [2, 0xfff, 0x1000, 1_764_000_000_000, 1_764_000_000_001] {
            let later = new_suspension_id_at(at(millis));
            assert!(earlier < later, "{earlier} sorts after {later}");
            earlier = later;
        }
        for millis in times {
            assert!(new_suspension_id_at(at(millis)).starts_with(&format!("susp-{millis:012x}")));
        }
    }

    #[test]
    fn ids_made_in_the_same_millisecond_differ_and_cannot_be_told_from_each_other() {
        let now = at(1_764_000_000_000);
        let ids: HashSet<String> = (0..10_000).map(|_| new_suspension_id_at(now)).collect();
        assert_eq!(ids.len(), 10_000);
        // The unpredictable part is not a counter: consecutive ids differ in many places.
        let a = new_suspension_id_at(now);
        let b = new_suspension_id_at(now);
        let differing = a[17..].bytes().zip(b[17..].bytes()).filter(|(x, y)| x != y);
        assert!(
            differing.count() >= 8,
            "{a} and {b} differ in too few digits"
        );
    }

    #[test]
    fn a_clock_before_the_epoch_gives_a_valid_id() {
        let id = new_suspension_id_at(SystemTime::UNIX_EPOCH - Duration::from_secs(5));
        assert!(id.starts_with("susp-000000000000"), "{id}");
        assert_eq!(id.len(), 37);
    }
}
