//! [`FlagProvider`]: where feature flags come from.

use async_trait::async_trait;
use toolgate_core::User;

/// A flag provider could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the feature-flag provider failed: {0}")]
pub struct FlagError(pub String);

/// Where feature flags come from: an in-memory map by default
/// ([`InMemoryFlags`](super::InMemoryFlags)), a flag service or a shared store otherwise.
///
/// Object safe: the [`FeatureFlags`](super::FeatureFlags) hook holds an
/// `Arc<dyn FlagProvider>`. Write `is_enabled` as an `async fn` under
/// [`#[async_trait]`](crate::async_trait), re-exported by this crate so that an
/// implementer needs no dependency of their own.
///
/// # Examples
///
/// A new tool rolled out to its beta testers only, gating `search` through a
/// [`FeatureFlags`](super::FeatureFlags) hook:
///
/// ```
/// use std::collections::HashSet;
///
/// use serde_json::json;
/// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::feature_flags::{FeatureFlags, FlagError, FlagProvider};
///
/// struct BetaTesters(HashSet<String>);
///
/// #[async_trait]
/// impl FlagProvider for BetaTesters {
///     async fn is_enabled(&self, flag: &str, user: &User) -> Result<Option<bool>, FlagError> {
///         // Flags other than the rollout's are left to the hook's default.
///         Ok((flag == "new-search").then(|| self.0.contains(&user.id)))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let testers = BetaTesters(HashSet::from(["ann".to_owned()]));
/// let flags = FeatureFlags::builder(testers).tool("search", "new-search").build();
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("search", "Searches.", |_: ()| async { Ok::<_, ToolError>("found") }))
///     .hook(flags)
///     .build()?;
///
/// let as_user = |id: &str| InvokeOptions::new().user(User::new(id));
/// assert_eq!(pipeline.invoke("search", json!(null), as_user("ann")).await?, json!("found"));
/// let err = pipeline.invoke("search", json!(null), as_user("bob")).await.unwrap_err();
/// assert_eq!(err.code(), "feature_disabled");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait FlagProvider: Send + Sync + 'static {
    /// Whether `flag` is on for `user`; `None` when the provider does not know the flag.
    async fn is_enabled(&self, flag: &str, user: &User) -> Result<Option<bool>, FlagError>;
}
