//! Unpredictable ids, without a dependency on a random number crate.

use std::time::SystemTime;

/// 64 unpredictable bits: SipHash under the standard library's randomly seeded keys, over
/// the clock and the process id.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    h.finish()
}
