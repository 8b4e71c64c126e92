//! The stream of a caller's `subscriptions/listen` request (2026-07-28), where the
//! resource updates of the subscriptions the request makes go.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    RequestId, ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerNotification,
};
use rmcp::service::{SubscriptionSendError, SubscriptionSink};

/// The stream of a caller's `subscriptions/listen` request (2026-07-28): the resource
/// updates of the subscriptions the request makes are sent there, tagged with the
/// request's id.
///
/// A listen request's resources are subscribed before the request is acknowledged —
/// the acknowledgment tells the client they are — and the stream opens only once it is.
/// An update that comes in between waits here (the latest one per resource) and is sent
/// when the stream opens, right after the acknowledgment; once the request is over, the
/// stream is closed and an update is refused, which ends the subscription.
#[derive(Clone)]
pub struct ListenStream(Arc<Inner>);

struct Inner {
    id: RequestId,
    state: Mutex<Opening>,
}

/// Where a listen stream stands.
enum Opening {
    /// Not acknowledged yet: the updates that came meanwhile, one per resource.
    Waiting(Vec<ResourceUpdatedNotificationParam>),
    /// Acknowledged: updates go to the request's stream.
    Open(SubscriptionSink),
    /// The request is over.
    Closed,
}

/// The stream of a listen request is gone: the subscriber is to be dropped.
#[derive(Debug)]
pub(crate) struct StreamGone;

impl ListenStream {
    /// The stream of listen request `id`, not acknowledged yet.
    pub(crate) fn new(id: RequestId) -> Self {
        ListenStream(Arc::new(Inner {
            id,
            state: Mutex::new(Opening::Waiting(Vec::new())),
        }))
    }

    /// The JSON-RPC id of the listen request.
    pub fn id(&self) -> &RequestId {
        &self.0.id
    }

    /// Opens the stream on `sink`, once the request is acknowledged, and sends the
    /// updates that waited. Nothing happens when the stream is closed already.
    pub(crate) async fn open(&self, sink: SubscriptionSink) {
        let waited = {
            let mut state = self.lock();
            match &mut *state {
                Opening::Waiting(waited) => {
                    let waited = std::mem::take(waited);
                    *state = Opening::Open(sink.clone());
                    waited
                }
                Opening::Open(_) | Opening::Closed => return,
            }
        };
        for update in waited {
            if send(&sink, update).await.is_err() {
                return;
            }
        }
    }

    /// Sends one update (holds it while the request is not acknowledged yet).
    ///
    /// # Errors
    ///
    /// [`StreamGone`] when the request is over or its stream cannot be written to.
    pub(crate) async fn send(
        &self,
        update: ResourceUpdatedNotificationParam,
    ) -> Result<(), StreamGone> {
        let sink = {
            let mut state = self.lock();
            match &mut *state {
                Opening::Waiting(waited) => {
                    waited.retain(|held| held.uri != update.uri);
                    waited.push(update);
                    return Ok(());
                }
                Opening::Open(sink) => sink.clone(),
                Opening::Closed => return Err(StreamGone),
            }
        };
        send(&sink, update).await
    }

    /// Closes the stream: the request is over, and no update is sent any more.
    pub(crate) fn close(&self) {
        *self.lock() = Opening::Closed;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Opening> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sends `update` on `sink`. An update for a resource the acknowledgment did not name is
/// dropped (the subscription holds); a closed request or a broken stream is [`StreamGone`].
async fn send(
    sink: &SubscriptionSink,
    update: ResourceUpdatedNotificationParam,
) -> Result<(), StreamGone> {
    let notification =
        ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(update));
    match sink.send(notification).await {
        Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => Ok(()),
        Err(_) => Err(StreamGone),
    }
}

impl std::fmt::Debug for ListenStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenStream")
            .field("id", &self.0.id)
            .finish_non_exhaustive()
    }
}
