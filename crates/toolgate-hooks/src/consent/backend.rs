//! [`ApprovalStore`]: where recorded approvals live.

use async_trait::async_trait;

/// How long an approval lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// For the next call only: using it consumes it.
    Once,
    /// For every call of this caller to this tool, until revoked ("always allow").
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

/// Where approvals per caller and tool live. [`InMemoryApprovals`](super::InMemoryApprovals)
/// is the default; a shared store implements the same trait.
///
/// A caller is a user id in its tenant, and every `user` given to a store is the caller's
/// [`caller_key`](toolgate_core::User::caller_key): one text per caller, so a store keeps
/// it as it is and `ann` of `acme` never meets `ann` of `globex`. For a caller without a
/// tenant it is the user id, as it was before tenants counted, so approvals remembered
/// then are still found.
///
/// Object safe: the [`Consent`](super::Consent) hook holds an `Arc<dyn ApprovalStore>`.
/// Write the methods as `async fn` under [`#[async_trait]`](crate::async_trait),
/// re-exported by this crate so that an implementer needs no dependency of their own.
///
/// # Examples
///
/// Approvals in a map keyed by caller and tool, standing in for a database table:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
///
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::consent::{ApprovalStore, ApprovalStoreError, Consent, Grant};
///
/// #[derive(Default)]
/// struct Table(Mutex<HashMap<(String, String), Grant>>);
///
/// #[async_trait]
/// impl ApprovalStore for Table {
///     async fn grant(
///         &self,
///         user: &str,
///         tool: &str,
///         grant: Grant,
///     ) -> Result<(), ApprovalStoreError> {
///         let mut rows = self.0.lock().unwrap();
///         let row = rows.entry((user.to_owned(), tool.to_owned())).or_insert(grant);
///         if grant == Grant::Always {
///             *row = Grant::Always;
///         }
///         Ok(())
///     }
///
///     async fn consume(&self, user: &str, tool: &str) -> Result<Option<Grant>, ApprovalStoreError>
///     {
///         let mut rows = self.0.lock().unwrap();
///         let key = (user.to_owned(), tool.to_owned());
///         match rows.get(&key).copied() {
///             Some(Grant::Once) => Ok(rows.remove(&key)),
///             other => Ok(other),
///         }
///     }
///
///     async fn revoke(&self, user: &str, tool: &str) -> Result<bool, ApprovalStoreError> {
///         let key = (user.to_owned(), tool.to_owned());
///         Ok(self.0.lock().unwrap().remove(&key).is_some())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ApprovalStoreError> {
/// let store: Arc<dyn ApprovalStore> = Arc::new(Table::default());
/// store.grant("ann", "deploy", Grant::Once).await?;
/// assert_eq!(store.consume("ann", "deploy").await?, Some(Grant::Once));
/// assert_eq!(store.consume("ann", "deploy").await?, None, "a `Once` is used up");
///
/// let consent = Consent::builder().tool("deploy").store(store).build();
/// # let _ = consent;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait ApprovalStore: Send + Sync + 'static {
    /// Records an approval for `user` calling `tool`. An `Always` is not downgraded by a
    /// later `Once`.
    async fn grant(&self, user: &str, tool: &str, grant: Grant) -> Result<(), ApprovalStoreError>;

    /// Uses an approval for `user` calling `tool`: a `Once` is removed, an `Always` stays.
    /// `None` when there is none. The [`Consent`](super::Consent) hook gives a `Once` back
    /// with [`grant`](Self::grant) when the call that used it is refused before its tool
    /// runs: a store needs nothing more for that.
    async fn consume(&self, user: &str, tool: &str) -> Result<Option<Grant>, ApprovalStoreError>;

    /// Removes the approval for `user` calling `tool`; whether there was one.
    async fn revoke(&self, user: &str, tool: &str) -> Result<bool, ApprovalStoreError>;
}
