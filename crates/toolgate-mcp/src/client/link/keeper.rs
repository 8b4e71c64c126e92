//! Resource subscriptions kept across the loss of the connection they were made on.
//!
//! An upstream forgets what it was told on a connection when the connection ends (it
//! restarted, a stdio program exited, the network failed) and, over streamable HTTP, when
//! it forgets the connection's session (it expired it, or restarted behind the same
//! address): rmcp then sets up a new session on the same connection, told nothing.
//! Subscribers of a resource would hear no update again, and nothing would tell them. So:
//!
//! - every new connection of a channel where someone watches a resource has the upstream
//!   subscribed again to each resource watched there ([`Link::resubscribe`]), in a task
//!   that takes each resource's turn ([`Told`]), as any subscription does;
//! - a channel where someone watches a resource has a keeper ([`Link::keep`]): a task that
//!   waits for the end of the channel's connection ([`Made::ended`]) and connects again
//!   by itself, without waiting for a caller's request to need the connection, through
//!   [`Link::connected`] and so with its backoff.
//!
//! What holds: at most one keeper per channel (`Channel::kept`, set by whoever starts
//! one, cleared by the keeper as it ends). A keeper holds the link weakly, and strongly
//! only while it looks at the channel or connects: a link replaced by a new
//! configuration is dropped, its connections with it, and the keeper, woken by their end,
//! ends. It waits only for a connection's end or for the backoff's next attempt, so it
//! never polls faster than the backoff; it ends the first time it wakes to find nobody
//! watching (at the latest when the connection it waits on ends).
//!
//! [`Told`]: crate::client::told::Told
//! [`Made::ended`]: super::Made::ended

// Resource subscriptions are deprecated by SEP-2577 for the 2026-07-28 revision (which
// listens instead); upstreams and clients on 2025-11-25 subscribe.
#![allow(deprecated)]

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use rmcp::RoleClient;
use rmcp::model::SubscribeRequestParams;
use rmcp::service::Peer;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Channel, Link};
use crate::client::failure::request_failure;

/// What a keeper does next.
enum Next {
    /// Waits for the end of the channel's live connection.
    Watch(CancellationToken),
    /// Waits for the backoff to allow the next attempt to connect.
    RetryAt(Instant),
    /// Ends: nobody watches a resource on the channel any more.
    Done,
}

impl Link {
    /// Starts the keeper of `channel` (the subscription channel, which someone watches a
    /// resource on now), unless it has one.
    pub(super) fn keep(self: &Arc<Self>, channel: &Channel) {
        if channel.kept.swap(true, Ordering::SeqCst) {
            return;
        }
        let legacy = std::ptr::eq(channel, &self.legacy);
        tokio::spawn(keep(Arc::downgrade(self), legacy));
    }

    /// What the keeper of the legacy channel (`legacy`) or the current one does next:
    /// wait for the end of its live connection, connecting again first if it has none
    /// (or has one whose HTTP session the upstream forgot), or wait for the backoff.
    async fn keep_step(&self, legacy: bool) -> Next {
        let channel = if legacy { &self.legacy } else { &self.current };
        loop {
            if !still_kept(channel) {
                return Next::Done;
            }
            {
                let mut state = channel.state.lock().await;
                if let Some(session) = &state.session {
                    if !state.ended.is_cancelled()
                        && !session.is_transport_closed()
                        && !session.is_closed()
                    {
                        return Next::Watch(state.ended.clone());
                    }
                    if !session.is_transport_closed() && !session.is_closed() {
                        // rmcp goes on in a session it set up again, which the upstream
                        // was told nothing on: a connection lost all the same.
                        tracing::warn!(server = %self.config.name, "the MCP server forgot the session of the connection resource subscriptions are on; reconnecting");
                        self.drop_session(&mut state);
                    }
                }
            }
            let deadline = Instant::now() + self.config.connect_timeout;
            if self.connected(channel, deadline).await.is_err() {
                let retry_at = channel.state.lock().await.retry_at;
                let next = Instant::now() + self.config.backoff.delay(1);
                return Next::RetryAt(retry_at.filter(|at| *at > Instant::now()).unwrap_or(next));
            }
        }
    }

    /// Has the upstream subscribed, on `channel`'s new connection `generation` (whose
    /// peer is `peer`), to every resource watched on the channel, in a task of its own:
    /// for each, once its turn comes ([`Told`]), while it is still watched and not
    /// recorded subscribed on this connection or a later one, within the call timeout.
    /// Recorded subscribed on this connection when the upstream agrees; otherwise
    /// recorded unsubscribed, and a warning logged (scrubbed): its subscribers hear
    /// nothing until one subscribes again or the channel connects again.
    ///
    /// [`Told`]: crate::client::told::Told
    pub(super) fn resubscribe(&self, channel: &Channel, peer: Peer<RoleClient>, generation: u64) {
        let routes = Arc::clone(&channel.routes);
        let (server, scrubber) = (self.config.name.clone(), self.scrubber.clone());
        let timeout = self.config.call_timeout;
        tokio::spawn(async move {
            for uri in routes.watched_uris() {
                let deadline = Instant::now() + timeout;
                let failed = match routes.told.turn(&uri, deadline).await {
                    None => "its turn did not come within the call timeout".to_owned(),
                    Some(mut told) => {
                        if !routes.watched(&uri) || told.is_some_and(|g| g >= generation) {
                            continue;
                        }
                        let params = SubscribeRequestParams::new(uri.clone());
                        let answer = tokio::time::timeout_at(deadline, peer.subscribe(params));
                        match answer.await {
                            Ok(Ok(())) => {
                                *told = Some(generation);
                                continue;
                            }
                            Ok(Err(e)) => {
                                *told = None;
                                request_failure(&e)
                            }
                            Err(_) => {
                                *told = None;
                                format!("no answer within {timeout:?}")
                            }
                        }
                    }
                };
                let mut failed = failed;
                scrubber.scrub_string(&mut failed);
                let failed = toolgate_core::error::error_text(format_args!("{failed}"));
                tracing::warn!(server = %server, %uri, error = %failed, "the MCP server could not be subscribed again, on its new connection, to a resource watched here; its subscribers hear no update until one subscribes again");
            }
        });
    }
}

/// The keeper of the legacy channel (`legacy`) or the current one of `link`, until nobody
/// watches a resource there or the link is gone.
async fn keep(link: Weak<Link>, legacy: bool) {
    loop {
        let next = match link.upgrade() {
            Some(link) => link.keep_step(legacy).await,
            None => return,
        };
        match next {
            Next::Watch(ended) => ended.cancelled().await,
            Next::RetryAt(at) => tokio::time::sleep_until(at).await,
            Next::Done => return,
        }
    }
}

/// Whether the keeper of `channel` goes on: someone watches a resource there. One that
/// ends clears `Channel::kept` first, then looks again: a subscriber that came meanwhile
/// found a keeper running and started none, so this one goes on, unless another keeper
/// was started since.
fn still_kept(channel: &Channel) -> bool {
    if channel.routes.watched_any() {
        return true;
    }
    channel.kept.store(false, Ordering::SeqCst);
    channel.routes.watched_any() && !channel.kept.swap(true, Ordering::SeqCst)
}
