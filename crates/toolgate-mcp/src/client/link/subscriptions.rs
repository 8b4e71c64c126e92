//! Resource subscriptions: made, ended and handed over to the next configuration's
//! connection.

// Resource subscriptions are deprecated by SEP-2577 for the 2026-07-28 revision (which
// listens instead); upstreams and clients on 2025-11-25 subscribe.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::{ToolError, User};

use super::errors::RESOURCE_NOT_FOUND;
use super::{Channel, Link};
use crate::caller::{CallerRequest, ResourceCheck};
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

impl Link {
    /// Subscribes `caller`'s session to resource `uri` (the upstream once, for its first
    /// subscriber); `notifications/resources/updated` for it is relayed to every session
    /// subscribed. A subscription lasts until unsubscribed, the session ends (then the
    /// upstream is unsubscribed from a resource nobody else watches), or the upstream
    /// connection is re-established (subscribe again then). One session holds at most
    /// [`MAX_SUBSCRIPTIONS`] here: past it, [`TOO_MANY_SUBSCRIPTIONS`], before the
    /// upstream is asked anything (a session at its cap costs the upstream nothing).
    ///
    /// The upstream is asked only when it declared `resources.subscribe`
    /// ([`SUBSCRIPTIONS_UNSUPPORTED`] otherwise) and has the resource, as the caller's
    /// [`ResourceCheck`](crate::ResourceCheck) finds out ([`serves`](Self::serves);
    /// [`RESOURCE_NOT_FOUND`] otherwise): no subscription to a URI goes to an upstream
    /// that does not serve it.
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
            if !self.serves(uri, caller, deadline).await? {
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
        let first = channel
            .routes
            .subscribe(uri, caller, user)
            .map_err(|_| self.too_many_subscriptions())?;
        self.end_with_session(channel, &caller.session_id, &caller.session_ended);
        if !first {
            return Ok(());
        }
        let params = SubscribeRequestParams::new(uri.to_owned());
        let subscribed = self
            .request(channel, deadline, |peer| async move {
                peer.subscribe(params).await
            })
            .await;
        if subscribed.is_err() {
            channel.routes.unsubscribe(uri, &caller.session_id);
        }
        subscribed
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
    /// session is left); [`NOT_SUBSCRIBED`], and nothing sent, when the session is not
    /// subscribed to it here.
    pub async fn unsubscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
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
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        self.request(channel, deadline, |peer| async move {
            peer.unsubscribe(params).await
        })
        .await
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
        deadline: Instant,
    ) -> Result<bool, ToolError> {
        if caller.resource_check != ResourceCheck::Read {
            // An upstream that lists nothing (or fails to) may still serve it from a
            // template.
            let listed = self.list_resources(Some(caller), deadline).await;
            if listed.is_ok_and(|resources| resources.iter().any(|r| r.uri == uri)) {
                return Ok(true);
            }
        }
        if caller.resource_check == ResourceCheck::Listed {
            return Ok(false);
        }
        match self.read_resource(uri, Some(caller), deadline).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == RESOURCE_NOT_FOUND => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves the resource subscriptions made through this connection to `next` — the
    /// same upstream's connection in the configuration that replaces this one — for the
    /// subscribers `may_read` still allows; the others end (no update reaches them any
    /// more). Nobody is left here, so the upstream is unsubscribed here from every
    /// resource; on `next`, it is subscribed to each resource someone moved to. How many
    /// subscriptions moved, and how many ended.
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
                self.unsubscribe_upstream(channel, &uri).await;
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
                self.unsubscribe_upstream(channel, &uri).await;
            }
        }
        ended
    }

    /// Takes in a subscription to `uri` made on another connection to this upstream,
    /// subscribing the upstream when it is the first; whether it holds.
    async fn adopt(self: &Arc<Self>, uri: &str, subscriber: Subscriber) -> bool {
        let channel = self.subscription_channel();
        let key: Arc<str> = Arc::from(subscriber.key());
        let session_ended = subscriber.session_ended().clone();
        let first = channel.routes.adopt(uri, subscriber);
        self.end_with_session(channel, &key, &session_ended);
        if !first {
            return true;
        }
        let deadline = Instant::now() + self.config.call_timeout;
        let params = SubscribeRequestParams::new(uri.to_owned());
        let subscribed = self
            .request(channel, deadline, |peer| async move {
                peer.subscribe(params).await
            })
            .await;
        if let Err(e) = &subscribed {
            tracing::warn!(server = %self.config.name, %uri, error = %e, "a subscription could not be moved to the new configuration's connection; it ended");
            channel.routes.unsubscribe(uri, &key);
        }
        subscribed.is_ok()
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
                self.unsubscribe_upstream(channel, &uri).await;
            }
        }
    }

    /// Unsubscribes the upstream from `uri` on `channel`, where nobody watches it any
    /// more; a failure is only logged (the subscribers are gone either way).
    async fn unsubscribe_upstream(&self, channel: &Channel, uri: &str) {
        let deadline = Instant::now() + self.config.call_timeout;
        let params = UnsubscribeRequestParams::new(uri.to_owned());
        let unsubscribed = self
            .request(channel, deadline, |peer| async move {
                peer.unsubscribe(params).await
            })
            .await;
        if let Err(e) = unsubscribed {
            tracing::warn!(server = %self.config.name, %uri, error = %e, "the MCP server could not be unsubscribed from a resource nobody watches on this connection any more");
        }
    }
}
