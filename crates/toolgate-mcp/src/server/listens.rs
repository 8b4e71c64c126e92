//! How many `subscriptions/listen` requests each user has open, at most
//! [`McpServer::listens_per_user`](crate::McpServer::listens_per_user)
//! ([`DEFAULT_LISTENS_PER_USER`] unless set).
//!
//! A listen request (2026-07-28) is a subscriber of its own: it may hold
//! [`MAX_SUBSCRIPTIONS`](crate::client::relay::MAX_SUBSCRIPTIONS) on each upstream, and it
//! belongs to no session, so the per-principal cap on sessions does not bound it. Without a
//! bound of their own, one key opening listen request after listen request would make the
//! gateway and its upstreams hold subscriptions without end.

use std::num::NonZeroUsize;
use std::sync::Arc;

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::json;
use toolgate_core::{CallerId, User};
use toolgate_hooks::concurrency::{KeyedShare, SharePlace};

/// How many `subscriptions/listen` requests one user may have open at once, over every
/// connection of the server, unless the host sets another bound with
/// [`McpServer::listens_per_user`](crate::McpServer::listens_per_user) (the gateway's
/// `server.mcp_sessions.listens_per_user`): past it a new one is refused
/// (`too_many_listens`, 429) until one ends — answered, cancelled, or dropped by a client
/// that went away.
///
/// Eight, a quarter of the 32 sessions the gateway lets one user hold by default
/// (`server.mcp_sessions.per_user`): a listen request, which may hold as many
/// subscriptions on each upstream as a session, is open for as long as the stream it feeds
/// is shown, and one request may listen to many resources, so an application needs no
/// more than one per stream it shows.
pub const DEFAULT_LISTENS_PER_USER: usize = 8;

/// The open listen requests of each user (an id in a tenant), and how many each may have.
/// Clones share the table; an endpoint keeps it across the servers it serves in turn (a
/// reload does not free a user's open requests), each server bringing its own bound
/// ([`bounded_as`](Self::bounded_as)).
#[derive(Clone)]
pub(crate) struct Listens(Arc<KeyedShare<CallerId>>);

impl Default for Listens {
    fn default() -> Self {
        Listens(KeyedShare::new(DEFAULT_LISTENS_PER_USER))
    }
}

/// One open listen request, counted against its user until dropped: held by the request's
/// future, so that it is released however the request ends.
pub(crate) type ListenPermit = SharePlace<CallerId>;

impl Listens {
    /// A table of its own, each user having at most `max` requests open.
    pub(crate) fn new(max: NonZeroUsize) -> Self {
        Listens(KeyedShare::new(max.get()))
    }

    /// This table, its requests still counted, bounding each user by `next`'s bound from
    /// now on: what the endpoint keeps when it serves a server bound by `next`. A user
    /// with more open than the new bound keeps them, and opens no other until under it.
    pub(crate) fn bounded_as(&self, next: &Listens) -> Listens {
        self.0.set_max(next.0.max());
        self.clone()
    }

    /// Counts a listen request of `user` open until the permit is dropped.
    ///
    /// # Errors
    ///
    /// [`too_many_listens`] when the user has as many open as it may already.
    pub(crate) fn open(&self, user: &User) -> Result<ListenPermit, ErrorData> {
        self.0
            .take(CallerId::of(user))
            .ok_or_else(|| too_many_listens(self.0.max()))
    }
}

/// The refusal of a listen request past `max`, the most one user may have open.
pub(crate) fn too_many_listens(max: usize) -> ErrorData {
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "too many open `subscriptions/listen` requests: you have {max} open already, the most one user may; end one you no longer need, or listen to several resources in one request"
        ),
        Some(json!({ "code": "too_many_listens", "status": 429 })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_past_the_bound_is_refused_until_one_of_its_listens_ends_and_others_are_not() {
        let listens = Listens::default();
        let alice = User::new("alice");
        let mut open: Vec<_> = (0..DEFAULT_LISTENS_PER_USER)
            .map(|_| listens.open(&alice).expect("within the bound"))
            .collect();
        let refused = listens.open(&alice).expect_err("past the bound");
        assert_eq!(refused.data.unwrap()["code"], "too_many_listens");
        assert!(
            listens.open(&User::new("bob")).is_ok(),
            "bob is not held back"
        );
        open.pop();
        assert!(listens.open(&alice).is_ok(), "an ended listen makes room");
    }

    #[test]
    fn every_permit_dropped_leaves_nothing_behind() {
        let listens = Listens::default();
        let permits: Vec<_> = (0..3)
            .map(|_| listens.open(&User::new("alice")).unwrap())
            .collect();
        drop(permits);
        assert_eq!(listens.0.keys(), 0);
    }
}
