//! [`FlagProvider`]: where feature flags come from.

use futures::future::BoxFuture;
use toolgate_core::User;

/// A flag provider could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the feature-flag provider failed: {0}")]
pub struct FlagError(pub String);

/// Where feature flags come from: an in-memory map by default
/// ([`InMemoryFlags`](super::InMemoryFlags)), a flag service or a shared store otherwise.
/// Object safe.
pub trait FlagProvider: Send + Sync + 'static {
    /// Whether `flag` is on for `user`; `None` when the provider does not know the flag.
    fn is_enabled<'a>(
        &'a self,
        flag: &'a str,
        user: &'a User,
    ) -> BoxFuture<'a, Result<Option<bool>, FlagError>>;
}
