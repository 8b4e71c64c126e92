//! [`InMemoryFlags`]: flags in a map, switched at run time.

use std::sync::Arc;

use async_trait::async_trait;
use dashmap::DashMap;
use toolgate_core::User;

use super::{FlagError, FlagProvider};

/// Flags in memory, the same for every user. Clones share the flags, so keep one to switch
/// them while the pipeline runs.
///
/// ```
/// use toolgate_hooks::feature_flags::InMemoryFlags;
///
/// let flags = InMemoryFlags::new();
/// flags.set("search", false);
/// assert_eq!(flags.get("search"), Some(false));
/// ```
#[derive(Clone, Debug, Default)]
pub struct InMemoryFlags {
    flags: Arc<DashMap<String, bool>>,
}

impl InMemoryFlags {
    /// No flags set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Switches `flag` on or off.
    pub fn set(&self, flag: impl Into<String>, on: bool) {
        self.flags.insert(flag.into(), on);
    }

    /// Forgets `flag` (it is then unset).
    pub fn unset(&self, flag: &str) {
        self.flags.remove(flag);
    }

    /// The flag's value, if set.
    pub fn get(&self, flag: &str) -> Option<bool> {
        self.flags.get(flag).map(|v| *v)
    }
}

#[async_trait]
impl FlagProvider for InMemoryFlags {
    async fn is_enabled(&self, flag: &str, _user: &User) -> Result<Option<bool>, FlagError> {
        Ok(self.get(flag))
    }
}
