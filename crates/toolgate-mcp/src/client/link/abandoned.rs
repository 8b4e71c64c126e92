//! What becomes of a request sent upstream on a caller's behalf when the caller stops
//! waiting for it — it cancelled, its deadline passed, or it went away.
//!
//! One upstream connection is shared by many callers, and what a request holds there (the
//! upstream's work, the request's response stream and the HTTP connection under it) is
//! no single caller's to keep once its own caller is gone: otherwise a caller that starts
//! requests and drops them at once makes the gateway hold any number of them, past every
//! per-caller cap (those are released as the caller's invocation ends). So a request
//! given up before its answer is cancelled upstream (`notifications/cancelled`), and its
//! response stream is taken from rmcp [`LET_GO`](crate::client::response_stream::LET_GO)
//! later, whether the upstream honours the cancellation or not. Its place among the
//! upstream's requests in flight, and in its caller's share, is kept while the upstream
//! may still run it, up to a hold limit ([`cancelled`](crate::client::cancelled)): the
//! caller's next request does not run beside it past the share. `tools/call` is sent
//! this way ([`calls`](super::calls)), and so is every other request of a caller's through
//! [`cancellable`].

use rmcp::RoleClient;
use rmcp::model::{
    CancelledNotificationParam, ClientRequest, GetExtensions, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};

use crate::client::places::Seat;
use crate::client::relay::Relay;

/// Sends `request` on `peer` with `options` and awaits its answer, as a caller's request:
/// dropped before the answer, the upstream is told the request is cancelled
/// ([`CancelOnDrop`]), and its response stream is taken from rmcp a grace later (its
/// [`RouteTicket`](crate::client::relay::RouteTicket) is over), its place kept while the
/// upstream may still run it.
///
/// The request's route has no caller: progress and log messages the upstream sends about
/// it are its own, and dropped without being counted as unattributed.
///
/// With a `seat` (an HTTP upstream's), the request first takes its place among the
/// upstream's requests in flight, from here ([`Seat`]); the seat tells whether it still
/// waits for one when its caller's deadline comes.
///
/// # Errors
///
/// As [`Peer::send_request_with_option`] and `RequestHandle::await_response`: what the
/// caller sees on an answer or an error is as if the request were sent without this.
pub(super) async fn cancellable(
    peer: &Peer<RoleClient>,
    mut request: ClientRequest,
    options: PeerRequestOptions,
    seat: Option<&Seat>,
) -> Result<ServerResult, ServiceError> {
    // Nothing is sent yet: a request given up while it waits was never the upstream's.
    if let Some(seat) = seat
        && let Some(reserved) = seat.reserve().await
    {
        request.extensions_mut().insert(reserved);
    }
    // The stream is held while `_relay` lives: until the answer, or this future's drop.
    let (_relay, ticket) = Relay::new(None);
    request.extensions_mut().insert(ticket);
    let handle = peer.send_request_with_option(request, options).await?;
    let mut cancel = CancelOnDrop::new(peer.clone(), handle.id.clone());
    let answer = handle.await_response().await;
    cancel.answered();
    answer
}

/// Tells the upstream a request was abandoned (deadline, cancellation, the caller gone)
/// when dropped before [`answered`](Self::answered): the notification is sent from a task
/// of its own, since the one that dropped it is going away.
pub(super) struct CancelOnDrop {
    peer: Peer<RoleClient>,
    /// `None` once answered.
    id: Option<RequestId>,
}

impl CancelOnDrop {
    /// Cancels request `id` of `peer` when dropped unanswered.
    pub(super) fn new(peer: Peer<RoleClient>, id: RequestId) -> Self {
        CancelOnDrop { peer, id: Some(id) }
    }

    /// The request was answered (or never went out): nothing to cancel.
    pub(super) fn answered(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the call was cancelled at toolgate".to_owned()),
                    ))
                    .await;
            });
        }
    }
}
