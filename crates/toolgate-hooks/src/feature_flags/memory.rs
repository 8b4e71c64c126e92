//! [`InMemoryFlags`]: flags in a map, switched at run time.

use std::sync::Arc;

use dashmap::DashMap;
use futures::future::BoxFuture;
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

impl FlagProvider for InMemoryFlags {
    fn is_enabled<'a>(
        &'a self,
        flag: &'a str,
        _user: &'a User,
    ) -> BoxFuture<'a, Result<Option<bool>, FlagError>> {
        Box::pin(std::future::ready(Ok(self.get(flag))))
    }
}
