//! [`ApprovalStore`]: where recorded approvals live.

use futures::future::BoxFuture;

/// How long an approval lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// For the next call only: using it consumes it.
    Once,
    /// For every call of this user to this tool, until revoked ("always allow").
    Always,
}

/// An approval store failed. The [`Consent`](super::Consent) hook refuses the call when it
/// sees one (fail closed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalStoreError {
    /// The store holds as many approvals as it may.
    #[error("the approval store holds {max} approvals: revoke some, or raise its capacity")]
    Full {
        /// The configured cap.
        max: usize,
    },
    /// The store could not be reached or failed.
    #[error("the approval store failed: {0}")]
    Unavailable(String),
}

/// Where approvals per user and tool live. [`InMemoryApprovals`](super::InMemoryApprovals)
/// is the default; a shared store implements the same trait. Object safe.
pub trait ApprovalStore: Send + Sync + 'static {
    /// Records an approval for `user` calling `tool`. An `Always` is not downgraded by a
    /// later `Once`.
    fn grant<'a>(
        &'a self,
        user: &'a str,
        tool: &'a str,
        grant: Grant,
    ) -> BoxFuture<'a, Result<(), ApprovalStoreError>>;

    /// Uses an approval for `user` calling `tool`: a `Once` is removed, an `Always` stays.
    /// `None` when there is none.
    fn consume<'a>(
        &'a self,
        user: &'a str,
        tool: &'a str,
    ) -> BoxFuture<'a, Result<Option<Grant>, ApprovalStoreError>>;

    /// Removes the approval for `user` calling `tool`; whether there was one.
    fn revoke<'a>(
        &'a self,
        user: &'a str,
        tool: &'a str,
    ) -> BoxFuture<'a, Result<bool, ApprovalStoreError>>;
}
