//! Resource subscriptions: made, ended and handed over to the next configuration's
//! connection. Whoever changes the subscribers of a resource then brings the upstream in
//! line with them ([`Link::sync_upstream`]), one at a time per resource.

// Resource subscriptions are deprecated by SEP-2577 for the 2026-07-28 revision (which
// listens instead); upstreams and clients on 2025-11-25 subscribe.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::{
    ClientRequest, ServerResult, SubscribeRequest, SubscribeRequestParams, UnsubscribeRequest,
    UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::{ToolError, User};

use super::abandoned::cancellable;
use super::errors::RESOURCE_NOT_FOUND;
use super::{Channel, Link};
use crate::caller::{CallerRequest, ResourceCheck};
use crate::client::places::Seat;
use crate::client::relay::{MAX_SUBSCRIPTIONS, Subscriber};

/// The error code of a subscription asked of an upstream that did not declare
/// `resources.subscribe`: it is not sent there.
pub(crate) const SUBSCRIPTIONS_UNSUPPORTED: &str = "subscriptions_unsupported";
/// The error code of an unsubscription from an upstream the caller's session is not
/// subscribed to the resource on: it is not sent there.
pub(crate) const NOT_SUBSCRIBED: &str = "not_subscribed";
/// The error code of a subscription past the most one session may hold on an upstream
/// ([`MAX_SUBSCRIPTIONS`]): it is not sent there.
pub(crate) const TOO_MANY_SUBSCRIPTIONS: &str = "too_many_subscriptions";

/// Why the upstream could not be brought in line with the subscribers of a resource
/// ([`Link::sync_upstream`]).
struct Unsynced {
    /// Whether it was to be subscribed (someone here watches the resource): the error is
    /// the subscribers'. Otherwise it was to be unsubscribed, or the resource's turn did
    /// not come in time.
    subscribing: bool,
    /// What failed, for whoever waits on the change.
    error: ToolError,
}

impl Link {
    /// Subscribes `caller`'s session to resource `uri`; `notifications/resources/updated`
    /// for it is relayed to every session subscribed. `Ok` once the upstream is
    /// subscribed on its live connection, for every subscriber, the first or not
    /// ([`sync_upstream`]): one that comes while the first's subscription is on its way
    /// is answered after the upstream answered it, and one that comes after the
    /// connection was made again has the upstream subscribed on the new one. When the
    /// upstream cannot be subscribed, a session subscribed just now is not subscribed
    /// here either, and gets the error. A subscription lasts until unsubscribed, or the
    /// session ends (then the upstream is unsubscribed from a resource nobody else
    /// watches). It outlives the upstream connection: while anyone watches a resource,
    /// a connection lost is made again without waiting for a request to need it, and the
    /// upstream is subscribed again on it ([`keeper`](super::keeper)); updates the
    /// upstream sent in between are lost. One session holds at most
    /// [`MAX_SUBSCRIPTIONS`] here: past it, [`TOO_MANY_SUBSCRIPTIONS`], before the
    /// upstream is asked anything (a session at its cap costs the upstream nothing).
    ///
    /// The upstream is asked only when it declared `resources.subscribe`
    /// ([`SUBSCRIPTIONS_UNSUPPORTED`] otherwise) and has the resource, as the caller's
    /// [`ResourceCheck`](crate::ResourceCheck) finds out ([`serves`](Self::serves);
    /// [`RESOURCE_NOT_FOUND`] otherwise): no subscription to a URI goes to an upstream
    /// that does not serve it.
    ///
    /// [`sync_upstream`]: Self::sync_upstream
    pub async fn subscribe(
        self: &Arc<Self>,
        uri: &str,
        caller: &CallerRequest,
        user: Arc<User>,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let channel = self.subscription_channel();
        // Refused before the upstream is asked anything; `subscribe` below checks again
        // as it counts (another subscription of the session may come meanwhile).
        if channel.routes.at_cap(uri, &caller.session_id) {
            return Err(self.too_many_subscriptions());
        }
        // A resource someone here is subscribed to is known to be the upstream's.
        if !channel.routes.watched(uri) {
            if !self.takes_subscriptions(deadline).await? {
                return Err(ToolError::abort(
                    format!(
                        "MCP server `{}` does not support resource subscriptions",
                        self.config.name
                    ),
                    SUBSCRIPTIONS_UNSUPPORTED,
                    404,
                ));
            }
            if !self.serves(uri, caller, &user, deadline).await? {
                return Err(ToolError::abort(
                    self.scrubbed(format!(
                        "MCP server `{}` does not have resource `{uri}`",
                        self.config.name
                    )),
                    RESOURCE_NOT_FOUND,
                    404,
                ));
            }
        }
        let added = channel
            .routes
            .subscribe(uri, caller, Arc::clone(&user))
            .map_err(|_| self.too_many_subscriptions())?;
        self.end_with_session(channel, &caller.session_id, &caller.session_ended);
        self.keep(channel);
        let synced = self.sync_upstream(channel, uri, Some(&user), deadline);
        let Err(unsynced) = synced.await else {
            return Ok(());
        };
        if added {
            self.withdraw(channel, uri, &caller.session_id);
        }
        Err(unsynced.error)
    }

    /// The refusal of a subscription past [`MAX_SUBSCRIPTIONS`].
    fn too_many_subscriptions(&self) -> ToolError {
        ToolError::abort(
            format!(
                "this session (or `subscriptions/listen` request) is subscribed to {MAX_SUBSCRIPTIONS} resources of MCP server `{}` already, the most one may be: unsubscribe from one it no longer needs, or subscribe in another session",
                self.config.name
            ),
            TOO_MANY_SUBSCRIPTIONS,
            429,
        )
    }

    /// Unsubscribes `caller`'s session from resource `uri` (the upstream too, when no
    /// session is left, once the resource's turn comes: [`sync_upstream`]);
    /// [`NOT_SUBSCRIBED`], and nothing sent, when the session is not subscribed to it
    /// here. An error: the upstream was to be unsubscribed and failed to be (or the turn
    /// did not come by `deadline`); the session is unsubscribed here either way.
    ///
    /// [`sync_upstream`]: Self::sync_upstream
    pub async fn unsubscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
        user: &User,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        let channel = self.subscription_channel();
        if !channel.routes.is_subscribed(uri, &caller.session_id) {
            return Err(ToolError::abort(
                self.scrubbed(format!(
                    "not subscribed to resource `{uri}` on MCP server `{}`",
                    self.config.name
                )),
                NOT_SUBSCRIBED,
                404,
            ));
        }
        if !channel.routes.unsubscribe(uri, &caller.session_id) {
            return Ok(());
        }
        match self.sync_upstream(channel, uri, Some(user), deadline).await {
            Err(unsynced) if !unsynced.subscribing => Err(unsynced.error),
            // Someone subscribed meanwhile, and the upstream was subscribed (or failed to
            // be) for them: theirs to hear about.
            _ => Ok(()),
        }
    }

    /// Brings the upstream in line with the subscribers of `uri` on `channel`: subscribed
    /// on the live connection while anyone here watches the resource, not subscribed
    /// otherwise. It waits for the resource's turn ([`Told`]) until `deadline`, then
    /// compares who watches now with what the upstream was last told, and sends at most
    /// one request: `resources/subscribe` when watched and not subscribed on the live
    /// connection (never told, unsubscribed since, or subscribed on a connection that is
    /// gone — connecting again if needed); `resources/unsubscribe` when nobody watches and
    /// it is subscribed on the live connection. A subscription on a connection that is
    /// gone is forgotten, and nothing is connected for it.
    ///
    /// Whoever changes the subscribers of a resource calls this after the change: each
    /// call takes the turn after its change and reads who watches within the turn, so the
    /// call of the last change sees the last state, and one pass each suffices. The
    /// request sent is `user`'s, in the user's share of the upstream's requests in flight
    /// (`None`: a change no caller waits on, in nobody's).
    ///
    /// # Errors
    ///
    /// [`Unsynced`]: the turn did not come by `deadline` (a timeout; nothing was sent), the
    /// request was still waiting for a place among an HTTP upstream's requests in flight
    /// at `deadline` (503 `upstream_busy`, or `upstream_share_used` while it waits for
    /// `user`'s share; nothing was sent), or the request sent failed.
    /// A failed request leaves the upstream recorded unsubscribed, whichever it was: a
    /// subscription too many later is harmless, a missing one loses updates.
    ///
    /// [`Told`]: crate::client::told::Told
    async fn sync_upstream(
        &self,
        channel: &Channel,
        uri: &str,
        user: Option<&User>,
        deadline: Instant,
    ) -> Result<(), Unsynced> {
        let started = Instant::now();
        let Some(mut told) = channel.routes.told.turn(uri, deadline).await else {
            return Err(Unsynced {
                subscribing: false,
                error: self.timed_out(started),
            });
        };
        let watched = channel.routes.watched(uri);
        let live = match *told {
            Some(generation) => self
                .open_peer(channel, generation)
                .await
                .map(|peer| (peer, generation)),
            None => None,
        };
        *told = None;
        match (watched, live) {
            (true, Some((_, generation))) => {
                *told = Some(generation);
                Ok(())
            }
            (true, None) => {
                let subscribed = async {
                    let connection = self.peer(channel, deadline).await?;
                    let generation = connection.1;
                    let request = ClientRequest::SubscribeRequest(SubscribeRequest::new(
                        SubscribeRequestParams::new(uri.to_owned()),
                    ));
                    self.request_on(
                        channel,
                        connection,
                        user,
                        started,
                        deadline,
                        |peer, seat| async move { told_upstream(&peer, request, seat).await },
                    )
                    .await?;
                    Ok::<_, ToolError>(generation)
                };
                *told = Some(subscribed.await.map_err(|error| Unsynced {
                    subscribing: true,
                    error,
                })?);
                Ok(())
            }
            (false, Some(connection)) => {
                let request = ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                    UnsubscribeRequestParams::new(uri.to_owned()),
                ));
                self.request_on(
                    channel,
                    connection,
                    user,
                    started,
                    deadline,
                    |peer, seat| async move { told_upstream(&peer, request, seat).await },
                )
                .await
                .map_err(|error| Unsynced {
                    subscribing: false,
                    error,
                })
            }
            (false, None) => Ok(()),
        }
    }

    /// [`sync_upstream`](Self::sync_upstream) for a change no caller waits on: within the
    /// call timeout, a failure only logged (whoever it was for is gone, or was told).
    async fn sync_upstream_unwaited(&self, channel: &Channel, uri: &str) {
        let deadline = Instant::now() + self.config.call_timeout;
        if let Err(unsynced) = self.sync_upstream(channel, uri, None, deadline).await {
            tracing::warn!(server = %self.config.name, %uri, error = %unsynced.error.bounded_message(), "the MCP server could not be brought in line with who watches a resource on this connection");
        }
    }

    /// Takes subscriber `key` — added for `uri` just now, for whom the upstream could not
    /// be subscribed — out of its subscribers again. When it was the last, the upstream
    /// is brought in line once more, in a task of its own (someone's turn may have
    /// subscribed it for this subscriber meanwhile).
    fn withdraw(self: &Arc<Self>, channel: &Channel, uri: &str, key: &str) {
        if !channel.routes.unsubscribe(uri, key) {
            return;
        }
        let legacy = std::ptr::eq(channel, &self.legacy);
        let (link, uri) = (Arc::clone(self), uri.to_owned());
        tokio::spawn(async move {
            let channel = if legacy { &link.legacy } else { &link.current };
            link.sync_upstream_unwaited(channel, &uri).await;
        });
    }

    /// Whether the upstream declared `resources.subscribe` (on the connection
    /// subscriptions go on).
    async fn takes_subscriptions(&self, deadline: Instant) -> Result<bool, ToolError> {
        let (peer, _) = self.peer(self.subscription_channel(), deadline).await?;
        Ok(peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        }))
    }

    /// Whether the upstream has resource `uri`, by what it answers `caller`: it lists it,
    /// or else answers `resources/read` for it (as a read is routed: an upstream that
    /// answers "not found" does not have it; another failure is the answer) — or only
    /// one of the two, as the caller's [`ResourceCheck`](crate::ResourceCheck) says.
    async fn serves(
        &self,
        uri: &str,
        caller: &CallerRequest,
        user: &User,
        deadline: Instant,
    ) -> Result<bool, ToolError> {
        if caller.resource_check != ResourceCheck::Read {
            // An upstream that lists nothing (or fails to) may still serve it from a
            // template.
            let listed = self
                .list_resources(Some(caller), Some(user), deadline)
                .await;
            if listed.is_ok_and(|resources| resources.iter().any(|r| r.uri == uri)) {
                return Ok(true);
            }
        }
        if caller.resource_check == ResourceCheck::Listed {
            return Ok(false);
        }
        match self
            .read_resource(uri, Some(caller), Some(user), deadline)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.code() == RESOURCE_NOT_FOUND => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves the resource subscriptions made through this connection to `next` — the
    /// same upstream's connection in the configuration that replaces this one — for the
    /// subscribers `may_read` still allows; the others end (no update reaches them any
    /// more). Nobody is left here, so the upstream is unsubscribed here from every
    /// resource it is subscribed to on the live connection; on `next`, it is subscribed
    /// to each resource someone moved to. How many subscriptions moved, and how many
    /// ended.
    pub async fn hand_over_subscriptions(
        &self,
        next: Option<&Arc<Link>>,
        may_read: &(dyn Fn(&User) -> bool + Sync),
    ) -> (usize, usize) {
        let (mut moved, mut ended) = (0, 0);
        for channel in [&self.current, &self.legacy] {
            for (uri, subscribers) in channel.routes.take_all() {
                for subscriber in subscribers {
                    let allowed = next.filter(|_| may_read(subscriber.user()));
                    match allowed {
                        Some(next) if next.adopt(&uri, subscriber.clone()).await => moved += 1,
                        _ => {
                            subscriber.end();
                            ended += 1;
                        }
                    }
                }
                self.sync_upstream_unwaited(channel, &uri).await;
            }
        }
        (moved, ended)
    }

    /// Ends the resource subscriptions of the subscribers `may_read` refuses (a new
    /// configuration withdrew their access): no update reaches them any more, and the
    /// upstream is unsubscribed from a resource left without subscribers. How many
    /// subscriptions ended.
    pub async fn end_subscriptions_unless(
        &self,
        may_read: &(dyn Fn(&User) -> bool + Sync),
    ) -> usize {
        let mut ended = 0;
        for channel in [&self.current, &self.legacy] {
            let (unsubscribe, n) = channel.routes.end_unless(may_read);
            ended += n;
            for uri in unsubscribe {
                self.sync_upstream_unwaited(channel, &uri).await;
            }
        }
        ended
    }

    /// Takes in a subscription to `uri` made on another connection to this upstream,
    /// and has the upstream subscribed on this one (within the call timeout); whether it
    /// holds. One taken in just now, for which the upstream could not be subscribed, is
    /// taken out again; one held here already stays.
    async fn adopt(self: &Arc<Self>, uri: &str, subscriber: Subscriber) -> bool {
        let channel = self.subscription_channel();
        let key: Arc<str> = Arc::from(subscriber.key());
        let session_ended = subscriber.session_ended().clone();
        let added = channel.routes.adopt(uri, subscriber);
        self.end_with_session(channel, &key, &session_ended);
        self.keep(channel);
        let deadline = Instant::now() + self.config.call_timeout;
        let Err(unsynced) = self.sync_upstream(channel, uri, None, deadline).await else {
            return true;
        };
        if !added {
            return true;
        }
        tracing::warn!(server = %self.config.name, %uri, error = %unsynced.error.bounded_message(), "a subscription could not be moved to the new configuration's connection; it ended");
        self.withdraw(channel, uri, &key);
        false
    }

    /// Ends the subscriptions of subscriber `key` made on `channel` when its session
    /// ends (`session_ended`): nothing of a session outlives it, and the upstream is
    /// unsubscribed from a resource nobody else watches. One watch per subscriber while
    /// it holds a subscription on `channel` (it ends when the subscriber holds nothing
    /// there any more); it holds the link weakly, so that a link replaced on a reload is
    /// not kept for it.
    fn end_with_session(
        self: &Arc<Self>,
        channel: &Channel,
        key: &Arc<str>,
        session_ended: &CancellationToken,
    ) {
        let Some(unwatched) = channel.routes.watch(key) else {
            return;
        };
        let link = Arc::downgrade(self);
        let (key, session_ended) = (Arc::clone(key), session_ended.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = session_ended.cancelled() => {}
                () = unwatched.cancelled() => return,
            }
            if let Some(link) = link.upgrade() {
                link.end_session_subscriptions(&key).await;
            }
        });
    }

    /// Ends every subscription of subscriber `key`, whose session ended, unsubscribing
    /// the upstream from each resource nobody watches any more.
    async fn end_session_subscriptions(&self, key: &str) {
        for channel in [&self.current, &self.legacy] {
            for uri in channel.routes.end_session(key) {
                tracing::debug!(server = %self.config.name, %uri, "the last session subscribed to a resource ended; unsubscribing the MCP server");
                self.sync_upstream_unwaited(channel, &uri).await;
            }
        }
    }
}

/// Sends `request` — `resources/subscribe` or `resources/unsubscribe` of a caller's — on
/// `peer` as every other request of a caller's is sent ([`cancellable`]): with a `seat`
/// (an HTTP upstream's), it takes its place among the upstream's requests in flight before
/// it is sent, so that one still waiting at its deadline is told the upstream is busy
/// (503 `upstream_busy`) and is never sent; given up, the upstream is told so and the
/// place goes back with the request's stream. An answer other than an empty one is a
/// failure of the connection, as rmcp's `subscribe` has it.
async fn told_upstream(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    seat: Option<Seat>,
) -> Result<(), ServiceError> {
    let options = PeerRequestOptions::no_options();
    match cancellable(peer, request, options, seat.as_ref()).await? {
        ServerResult::EmptyResult(_) => Ok(()),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}
