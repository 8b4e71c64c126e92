//! What an upstream sends during a call, relayed to the caller the call serves: progress
//! notifications, and sampling and elicitation requests.
//!
//! One upstream connection carries the calls of many callers, so every message the
//! upstream sends toward a caller is attributed by a protocol fact, never by a guess:
//! progress by its token, a request (sampling, elicitation) by the response stream it came
//! on (streamable HTTP tells: `InboundStreamOrigin`), a log message by the stream too.
//! Each call's route is keyed by the connection it was sent on and registered as its
//! request goes on the wire ([`Frames`](super::frames::Frames)), so nothing the upstream
//! sends can come before it, and a connection made again (whose tokens and request ids
//! start from 0 again) can never reach a route of the one before. What cannot be
//! attributed — a request over stdio or on the standalone stream, a log message that names
//! no stream, progress for a call that has ended — is dropped (a request is answered with
//! an error) and counted in [`UNATTRIBUTED`].

// Sampling and logging are deprecated by SEP-2577 for the 2026-07-28 revision, which asks
// for input with `input_required` results instead. Upstreams on 2025-11-25 still send
// `sampling/createMessage` and `notifications/message`; relaying them is what keeps them
// working behind toolgate.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ErrorData, Implementation, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, RequestId, ResourceUpdatedNotificationParam,
    ServerRequest,
};
use rmcp::service::{InboundStreamOrigin, NotificationContext, Peer, RequestContext};
use rmcp::{ClientHandler, RoleClient, RoleServer};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolgate_core::User;

use super::told::Told;
use crate::caller::CallerRequest;
use crate::listen_stream::ListenStream;

/// The counter of messages an upstream sent toward callers that toolgate could not
/// attribute to one by a protocol fact, and dropped (a request is answered with an
/// error). Labels: `server` (the upstream's configured name) and `kind` (`progress`,
/// `log`, `sampling`, `elicitation`, `unreadable`, `answer`).
pub const UNATTRIBUTED: &str = "toolgate_mcp_unattributed_total";

/// The counter of resource subscribers dropped while an update was relayed to them: their
/// session or listen stream was gone, or they fell [`UPDATE_QUEUE`] updates behind (they
/// do not read what is sent to them). Labels: `server` (the upstream's configured name) and
/// `reason` (`gone`, `behind`).
pub(crate) const SUBSCRIBERS_DROPPED: &str = "toolgate_mcp_subscribers_dropped_total";

/// What kind of message was dropped, for [`UNATTRIBUTED`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dropped {
    Progress,
    Log,
    Sampling,
    Elicitation,
    /// A message that could not be read: it did not read at all (an answer that names
    /// its request is answered in its place with an error, and counted too), or did not
    /// read back after scrubbing.
    Unreadable,
    /// An answer on a call's stream to a request other than that call, or an answer on
    /// the standalone stream (which answers no request).
    Answer,
}

impl Dropped {
    fn label(self) -> &'static str {
        match self {
            Dropped::Progress => "progress",
            Dropped::Log => "log",
            Dropped::Sampling => "sampling",
            Dropped::Elicitation => "elicitation",
            Dropped::Unreadable => "unreadable",
            Dropped::Answer => "answer",
        }
    }
}

/// The calls in flight on one upstream channel, by the connection each was sent on, its
/// request id and its progress token; and the resource subscriptions of the channel.
pub(crate) struct Routes {
    /// The upstream's configured name, for the metric (one label value per upstream).
    server: Arc<str>,
    calls: Mutex<Vec<Route>>,
    /// Numbers the channel's connections: a route belongs to exactly one.
    connections: AtomicU64,
    /// The callers subscribed to each resource (by URI), with their sessions.
    subscribers: Mutex<HashMap<String, Vec<Subscriber>>>,
    /// How many resources each subscriber (by key) is subscribed to here, at most
    /// [`MAX_SUBSCRIPTIONS`]. Only changed with `subscribers` locked.
    held: Mutex<HashMap<Arc<str>, usize>>,
    /// The subscribers (by key) whose session's end is watched, to end their
    /// subscriptions with it ([`watch`](Self::watch)), each with the token that ends the
    /// watch once it holds nothing here. Only changed with `held` locked.
    watched: Mutex<HashMap<Arc<str>, CancellationToken>>,
    /// What the upstream was last told about each resource, and whose turn it is to tell
    /// it more: subscriptions and unsubscriptions reach it one at a time, in order.
    pub(crate) told: Told,
}

/// How many resources one subscriber — a session, or one `subscriptions/listen` request —
/// may be subscribed to on one upstream connection: past it a new subscription is refused
/// ([`TooManySubscriptions`]), so that one key cannot make the gateway and the upstream
/// hold subscriptions without end (a resource template names resources without end).
pub(crate) const MAX_SUBSCRIPTIONS: usize = 256;

/// A subscription refused: the subscriber holds [`MAX_SUBSCRIPTIONS`] already.
#[derive(Debug)]
pub(crate) struct TooManySubscriptions;

struct Route {
    connection: u64,
    id: RequestId,
    token: Option<ProgressToken>,
    ticket: RouteTicket,
}

impl Route {
    /// Whether the call still waits for what the upstream sends (its [`Relay`] lives).
    fn live(&self) -> bool {
        !self.ticket.is_over()
    }
}

/// A notification of the upstream for the caller of a call.
pub(crate) enum Relayed {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// Rides in the (never serialized) extensions of a `tools/call` request, so that the
/// transport registers the call's route the moment the request goes on the wire, with the
/// request id and progress token rmcp gave it.
#[derive(Clone)]
pub(crate) struct RouteTicket(Arc<Ticket>);

impl RouteTicket {
    /// Whether the call is over (its [`Relay`] dropped: answered, failed, timed out or
    /// cancelled).
    pub(crate) fn is_over(&self) -> bool {
        self.0.queue.is_closed()
    }

    /// Completes when the call is over ([`is_over`](Self::is_over)).
    pub(crate) async fn over(&self) {
        self.0.queue.closed().await;
    }
}

struct Ticket {
    /// `None` for a call without an MCP caller (`/v1`, an agent): what the upstream sends
    /// about it is its own, and goes nowhere.
    caller: Option<Arc<CallerRequest>>,
    queue: mpsc::Sender<Relayed>,
}

impl Ticket {
    /// Queues `relayed` for the call's caller, if it has one.
    fn queue(&self, relayed: Relayed) {
        if self.caller.is_some() {
            let _ = self.queue.try_send(relayed);
        }
    }
}

/// A subscriber to a resource.
#[derive(Clone)]
pub(crate) struct Subscriber {
    /// A 2025-11-25 session, or one `subscriptions/listen` request.
    key: Arc<str>,
    /// Who subscribed: authorized again when the configuration changes.
    user: Arc<User>,
    /// Where its updates wait to be delivered, in order, by a task of its own.
    outbox: Arc<Outbox>,
    /// Cancelled when its subscription is ended for it (access withdrawn).
    ended: CancellationToken,
    /// Cancelled when the session it subscribed in ends: its subscriptions end with it.
    session_ended: CancellationToken,
}

impl Subscriber {
    /// Who subscribed.
    pub(crate) fn user(&self) -> &User {
        &self.user
    }

    /// Its key: a session, or one listen request.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Tells whoever waits on the subscription that it was ended for the subscriber.
    pub(crate) fn end(&self) {
        self.ended.cancel();
    }

    /// Cancelled when the session it subscribed in ends.
    pub(crate) fn session_ended(&self) -> &CancellationToken {
        &self.session_ended
    }
}

/// Where a subscriber's resource updates go.
#[derive(Clone)]
enum Delivery {
    /// `notifications/resources/updated` on a 2025-11-25 session's connection.
    Session(Peer<RoleServer>),
    /// The stream of a 2026-07-28 `subscriptions/listen` request.
    Listen(ListenStream),
}

impl Delivery {
    /// Delivers one update; an error means the subscriber is gone.
    async fn send(&self, update: ResourceUpdatedNotificationParam) -> Result<(), ()> {
        match self {
            Delivery::Session(peer) => peer.notify_resource_updated(update).await.map_err(drop),
            Delivery::Listen(stream) => stream.send(update).await.map_err(drop),
        }
    }
}

/// How many resource updates may wait for one subscriber (one resource of one session or
/// listen request) while the one before is being delivered. A subscriber that falls this
/// far behind does not read what is sent to it (its stream is stalled): it is dropped,
/// as one whose session is gone is, so that the updates it does not read neither pile up
/// in memory nor hold up the upstream's connection and the other subscribers.
pub(crate) const UPDATE_QUEUE: usize = 64;

/// A subscriber's updates on their way: queued by the handler of the upstream's
/// notifications, which never waits on a subscriber, and delivered one at a time, in
/// order, by a task of the subscriber's own ([`deliver`]). The task ends when the
/// subscriber's session ends, when a delivery fails (the subscriber is dropped then), or
/// when the last copy of the subscriber goes (unsubscribed, dropped, ended): then this
/// goes, and stops it.
struct Outbox {
    queue: mpsc::Sender<Queued>,
    _stop: DropGuard,
}

/// An update queued for a subscriber, with the connection it came on.
struct Queued {
    update: ResourceUpdatedNotificationParam,
    from: Arc<Source>,
}

/// The upstream connection an update came on: where a subscriber it cannot be delivered
/// to is dropped, and the upstream unsubscribed when it was the last.
struct Source {
    routes: Arc<Routes>,
    peer: Peer<RoleClient>,
    generation: u64,
    call_timeout: Duration,
}

impl Source {
    /// Drops subscriber `key` of `uri`, to whom an update could not be delivered (`why`),
    /// counted and logged; the last one leaves the resource to nobody, and the upstream
    /// is unsubscribed from it. Nothing when it was dropped already.
    fn drop_subscriber(&self, uri: &str, key: &str, why: Why) {
        let routes = &self.routes;
        if !routes.is_subscribed(uri, key) {
            return;
        }
        metrics::counter!(SUBSCRIBERS_DROPPED, "server" => routes.server.to_string(), "reason" => why.label())
            .increment(1);
        match why {
            Why::Gone => {
                tracing::debug!(server = %routes.server, %uri, "a subscriber to a resource is gone; dropped");
            }
            Why::Behind => {
                tracing::warn!(server = %routes.server, %uri, behind = UPDATE_QUEUE, "a subscriber to a resource does not read its updates; dropped");
            }
        }
        if routes.unsubscribe(uri, key) {
            unsubscribe_upstream(
                Arc::clone(routes),
                self.peer.clone(),
                self.generation,
                self.call_timeout,
                uri.to_owned(),
            );
        }
    }
}

impl Outbox {
    /// The outbox of subscriber `key`, delivering to `delivery`, whose session ends with
    /// `session_ended`; its task starts.
    fn new(key: Arc<str>, delivery: Delivery, session_ended: &CancellationToken) -> Arc<Outbox> {
        let (queue, updates) = mpsc::channel(UPDATE_QUEUE);
        let stop = session_ended.child_token();
        tokio::spawn(deliver(key, delivery, updates, stop.clone()));
        Arc::new(Outbox {
            queue,
            _stop: stop.drop_guard(),
        })
    }
}

/// Delivers the `updates` of subscriber `key` to `delivery`, in order, until `stop` or the
/// end of the queue; an update that cannot be delivered (the subscriber is gone) drops the
/// subscriber where it came from, and ends the task.
async fn deliver(
    key: Arc<str>,
    delivery: Delivery,
    mut updates: mpsc::Receiver<Queued>,
    stop: CancellationToken,
) {
    stop.run_until_cancelled(async move {
        while let Some(Queued { update, from }) = updates.recv().await {
            let uri = update.uri.clone();
            if delivery.send(update).await.is_err() {
                from.drop_subscriber(&uri, &key, Why::Gone);
                return;
            }
        }
    })
    .await;
}

/// Why a subscriber was dropped, for [`SUBSCRIBERS_DROPPED`].
#[derive(Clone, Copy, Debug)]
enum Why {
    /// Its session or listen stream is gone.
    Gone,
    /// It fell [`UPDATE_QUEUE`] updates behind.
    Behind,
}

impl Why {
    fn label(self) -> &'static str {
        match self {
            Why::Gone => "gone",
            Why::Behind => "behind",
        }
    }
}

/// How many notifications of one call may wait to be relayed; past that, newer ones are
/// dropped (progress and log messages are advisory, and a flood must not grow memory).
const RELAY_QUEUE: usize = 64;

/// A call's side of its route: what to relay, and where. The route lives as long as this
/// does: dropped (the call answered, failed, timed out or was cancelled), the route is
/// dead, and what the upstream still sends about the call is dropped and counted.
pub(crate) struct Relay {
    caller: Option<Arc<CallerRequest>>,
    queue: mpsc::Receiver<Relayed>,
}

impl Relay {
    /// A relay to `caller` (none: the call's route only keeps what the upstream sends
    /// about it from counting as unattributed), and the ticket to attach to the call's
    /// request.
    pub(crate) fn new(caller: Option<Arc<CallerRequest>>) -> (Relay, RouteTicket) {
        let (sender, receiver) = mpsc::channel(RELAY_QUEUE);
        let ticket = RouteTicket(Arc::new(Ticket {
            caller: caller.clone(),
            queue: sender,
        }));
        let relay = Relay {
            caller,
            queue: receiver,
        };
        (relay, ticket)
    }

    /// Whether the call has an MCP caller to relay to.
    pub(crate) fn has_caller(&self) -> bool {
        self.caller.is_some()
    }

    /// The next notification the upstream sent; pending forever when there is none.
    /// Cancel-safe (for `select!`): relay what it returns with [`relay`](Self::relay)
    /// outside the `select!`, so that a relay under way is never dropped.
    pub(crate) async fn next(&mut self) -> Relayed {
        match self.queue.recv().await {
            Some(relayed) => relayed,
            None => std::future::pending().await,
        }
    }

    /// Relays every notification that arrived before the answer: the transport queued
    /// them before the answer was handed over, so none is left behind.
    pub(crate) async fn drain(&mut self) {
        while let Ok(relayed) = self.queue.try_recv() {
            self.relay(relayed).await;
        }
    }

    /// Sends one notification to the caller.
    pub(crate) async fn relay(&self, relayed: Relayed) {
        let Some(caller) = &self.caller else {
            return;
        };
        let sent = match relayed {
            Relayed::Progress(mut progress) => {
                let Some(token) = caller.progress_token.clone() else {
                    return;
                };
                progress.progress_token = token;
                caller.peer.notify_progress(progress).await
            }
            Relayed::Log(message) => {
                if !caller.wants_log(message.level) {
                    return;
                }
                caller.peer.notify_logging_message(message).await
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "a notification could not be relayed to the caller");
        }
    }
}

impl Routes {
    /// The routes of a channel to upstream `server`.
    pub(crate) fn new(server: &str) -> Self {
        Routes {
            server: Arc::from(server),
            calls: Mutex::default(),
            connections: AtomicU64::new(0),
            subscribers: Mutex::default(),
            held: Mutex::default(),
            watched: Mutex::default(),
            told: Told::default(),
        }
    }

    /// The upstream's configured name.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// A number for a new connection of the channel, never given before.
    pub(crate) fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Counts a message dropped because no caller could be told it was theirs.
    pub(crate) fn dropped(&self, kind: Dropped) {
        metrics::counter!(UNATTRIBUTED, "server" => self.server.to_string(), "kind" => kind.label())
            .increment(1);
        tracing::debug!(server = %self.server, kind = kind.label(), "a message of the MCP server could not be attributed to a caller; dropped");
    }

    /// Registers the route of request `id` (progress token `token`) on `connection`, as
    /// the request goes on the wire. Dead routes go at the same time.
    pub(crate) fn register(
        &self,
        connection: u64,
        id: RequestId,
        token: Option<ProgressToken>,
        ticket: RouteTicket,
    ) {
        let mut calls = self.lock();
        calls.retain(Route::live);
        calls.push(Route {
            connection,
            id,
            token,
            ticket,
        });
    }

    /// Queues a progress notification that came on `connection` for the live call its
    /// token names; anything else is dropped and counted.
    pub(crate) fn queue_progress(&self, connection: u64, progress: &ProgressNotificationParam) {
        let queued = {
            let calls = self.lock();
            calls
                .iter()
                .find(|r| {
                    r.connection == connection
                        && r.token.as_ref() == Some(&progress.progress_token)
                        && r.live()
                })
                .map(|route| route.ticket.0.queue(Relayed::Progress(progress.clone())))
        };
        if queued.is_none() {
            self.dropped(Dropped::Progress);
        }
    }

    /// Queues a log message that came on `connection` for the live call whose response
    /// stream carried it (`origin`). A log message names no request: without the stream
    /// (stdio, the standalone stream) it is no caller's, and is dropped and counted.
    pub(crate) fn queue_log(
        &self,
        connection: u64,
        origin: Option<&RequestId>,
        message: &LoggingMessageNotificationParam,
    ) {
        let queued = origin.and_then(|id| {
            let calls = self.lock();
            calls
                .iter()
                .find(|r| r.connection == connection && &r.id == id && r.live())
                .map(|route| route.ticket.0.queue(Relayed::Log(message.clone())))
        });
        if queued.is_none() {
            self.dropped(Dropped::Log);
        }
    }

    /// The live call on `connection` whose response stream carried an upstream's request,
    /// as its caller (`Some(None)`: a call without an MCP caller); `None` for a request
    /// over stdio or on the standalone stream, which names no call.
    fn caller_of(
        &self,
        connection: u64,
        context: &RequestContext<RoleClient>,
    ) -> Option<Option<Arc<CallerRequest>>> {
        let Some(InboundStreamOrigin::OutboundRequest(id)) =
            context.extensions.get::<InboundStreamOrigin>()
        else {
            return None;
        };
        let calls = self.lock();
        calls
            .iter()
            .find(|r| r.connection == connection && &r.id == id && r.live())
            .map(|r| r.ticket.0.caller.clone())
    }

    /// Whether subscriber `key` holds [`MAX_SUBSCRIPTIONS`] here already and is not
    /// subscribed to `uri`: a subscription to it would be refused. Asked before the
    /// upstream is, so that a subscriber at its cap costs the upstream nothing.
    pub(crate) fn at_cap(&self, uri: &str, key: &str) -> bool {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let subscribed = subscribers
            .get(uri)
            .is_some_and(|sessions| sessions.iter().any(|s| &*s.key == key));
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        !subscribed && held.get(key).is_some_and(|n| *n >= MAX_SUBSCRIPTIONS)
    }

    /// Ends the watch of subscriber `key`'s session end, if there is one (with `held`
    /// locked, as the watch is only changed then).
    fn end_watch(&self, key: &str) {
        let watched = self
            .watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if let Some(watch) = watched {
            watch.cancel();
        }
    }

    /// Counts one subscription less for subscriber `key` (`held` is the locked count);
    /// when it holds nothing any more, the watch of its session's end ends too.
    fn release(&self, held: &mut HashMap<Arc<str>, usize>, key: &str) {
        let Some(count) = held.get_mut(key) else {
            return;
        };
        *count = count.saturating_sub(1);
        if *count == 0 {
            held.remove(key);
            self.end_watch(key);
        }
    }

    /// Subscribes `caller`'s session, for `user`, to `uri`; whether it was newly added
    /// (`false`: it was subscribed already). The upstream is to be brought in line then
    /// ([`Told`]), whichever it is: the first subscriber's subscription may still be on
    /// its way, or may have been made on a connection that is gone.
    ///
    /// # Errors
    ///
    /// [`TooManySubscriptions`] when the session is subscribed to [`MAX_SUBSCRIPTIONS`]
    /// other resources here already.
    pub(crate) fn subscribe(
        &self,
        uri: &str,
        caller: &CallerRequest,
        user: Arc<User>,
    ) -> Result<bool, TooManySubscriptions> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let key = &caller.session_id;
        let subscribed = subscribers
            .get(uri)
            .is_some_and(|sessions| sessions.iter().any(|s| &s.key == key));
        if !subscribed {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if held.get(key).is_some_and(|n| *n >= MAX_SUBSCRIPTIONS) {
                return Err(TooManySubscriptions);
            }
            *held.entry(Arc::clone(key)).or_default() += 1;
        }
        let sessions = subscribers.entry(uri.to_owned()).or_default();
        if !subscribed {
            let delivery = match &caller.listener {
                Some(sink) => Delivery::Listen(sink.clone()),
                None => Delivery::Session(caller.peer.clone()),
            };
            sessions.push(Subscriber {
                key: Arc::clone(&caller.session_id),
                user,
                outbox: Outbox::new(Arc::clone(key), delivery, &caller.session_ended),
                ended: caller.subscription_ended.clone(),
                session_ended: caller.session_ended.clone(),
            });
        }
        Ok(!subscribed)
    }

    /// Every subscription, each resource with its subscribers, taken out: for them to
    /// move to the connection of a new configuration.
    pub(crate) fn take_all(&self) -> Vec<(String, Vec<Subscriber>)> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.clear();
        let watched = std::mem::take(&mut *self.watched.lock().unwrap_or_else(|e| e.into_inner()));
        for watch in watched.into_values() {
            watch.cancel();
        }
        drop(held);
        subscribers.drain().collect()
    }

    /// Takes in `subscriber`'s subscription to `uri`, made on another connection; whether
    /// it was newly added (`false`: it was subscribed here already). The upstream is to
    /// be brought in line then, as after [`subscribe`](Self::subscribe).
    pub(crate) fn adopt(&self, uri: &str, subscriber: Subscriber) -> bool {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let sessions = subscribers.entry(uri.to_owned()).or_default();
        let added = !sessions.iter().any(|s| s.key == subscriber.key);
        if added {
            // Held already: counted, never refused.
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            *held.entry(Arc::clone(&subscriber.key)).or_default() += 1;
            sessions.push(subscriber);
        }
        added
    }

    /// Ends the subscriptions of every subscriber `may_read` refuses: no update reaches
    /// them from now on, and a listen stream among them is told
    /// ([`CallerRequest::subscription_ended`]). The URIs left without a subscriber, for the
    /// upstream to be unsubscribed from, and how many subscriptions ended.
    pub(crate) fn end_unless(&self, may_read: &dyn Fn(&User) -> bool) -> (Vec<String>, usize) {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut ended = 0;
        for sessions in subscribers.values_mut() {
            sessions.retain(|s| {
                let keep = may_read(&s.user);
                if !keep {
                    s.ended.cancel();
                    self.release(&mut held, &s.key);
                    ended += 1;
                }
                keep
            });
        }
        let mut left = Vec::new();
        subscribers.retain(|uri, sessions| {
            if sessions.is_empty() {
                left.push(uri.clone());
            }
            !sessions.is_empty()
        });
        (left, ended)
    }

    /// Whether anyone is subscribed to `uri` here.
    pub(crate) fn watched(&self, uri: &str) -> bool {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers
            .get(uri)
            .is_some_and(|sessions| !sessions.is_empty())
    }

    /// The resources someone is subscribed to here: none when nobody watches anything.
    pub(crate) fn watched_uris(&self) -> Vec<String> {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers
            .iter()
            .filter(|(_, sessions)| !sessions.is_empty())
            .map(|(uri, _)| uri.clone())
            .collect()
    }

    /// Whether anyone is subscribed to any resource here.
    pub(crate) fn watched_any(&self) -> bool {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.values().any(|sessions| !sessions.is_empty())
    }

    /// Whether `session` is subscribed to `uri` here.
    pub(crate) fn is_subscribed(&self, uri: &str, session: &str) -> bool {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers
            .get(uri)
            .is_some_and(|sessions| sessions.iter().any(|s| &*s.key == session))
    }

    /// Unsubscribes `session` from `uri`; whether no subscriber is left (then the
    /// upstream is to be unsubscribed).
    pub(crate) fn unsubscribe(&self, uri: &str, session: &str) -> bool {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sessions) = subscribers.get_mut(uri) else {
            return false;
        };
        let before = sessions.len();
        sessions.retain(|s| &*s.key != session);
        if sessions.len() < before {
            self.release(
                &mut self.held.lock().unwrap_or_else(|e| e.into_inner()),
                session,
            );
        }
        let last = sessions.is_empty();
        if last {
            subscribers.remove(uri);
        }
        last
    }

    /// Whether the end of subscriber `key`'s session is to be watched now — while it
    /// holds a subscription here and is not watched already — with the token cancelled
    /// when the watch is no longer needed: it holds nothing here any more (so that a
    /// subscriber that left, such as a listen request that ended, leaves no watch behind).
    pub(crate) fn watch(&self, key: &Arc<str>) -> Option<CancellationToken> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if !held.contains_key(key) {
            return None;
        }
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if watched.contains_key(key) {
            return None;
        }
        let watch = CancellationToken::new();
        watched.insert(Arc::clone(key), watch.clone());
        Some(watch)
    }

    /// Ends every subscription of subscriber `key`, whose session ended; the URIs left
    /// without a subscriber (then the upstream is to be unsubscribed from them).
    pub(crate) fn end_session(&self, key: &str) -> Vec<String> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.remove(key);
        self.end_watch(key);
        drop(held);
        let mut left = Vec::new();
        subscribers.retain(|uri, sessions| {
            let before = sessions.len();
            sessions.retain(|s| &*s.key != key);
            if sessions.is_empty() && before > 0 {
                left.push(uri.clone());
            }
            !sessions.is_empty()
        });
        left
    }

    fn subscribers_of(&self, uri: &str) -> Vec<Subscriber> {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.get(uri).cloned().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Route>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// toolgate as the client of an upstream, on one connection: where it serves callers that
/// can answer them, it declares sampling and elicitation, and relays them to the caller of
/// the call whose stream carried them. (Progress and log messages are queued by
/// [`Frames`](super::frames::Frames), in order.)
pub(crate) struct UpstreamClient {
    pub(crate) routes: Arc<Routes>,
    /// The connection this client serves ([`Routes::next_connection`]).
    pub(crate) connection: u64,
    /// The generation of the channel's connections that this one is, once made (what
    /// [`Told`] records a subscription on).
    pub(crate) generation: u64,
    /// Whether it declares sampling and elicitation; without, a request for them is still
    /// refused as it would be for a caller that cannot answer it.
    pub(crate) asks_callers: bool,
    /// How long the upstream has to answer a request toolgate makes of its own accord
    /// (an unsubscription from a resource nobody watches any more).
    pub(crate) call_timeout: Duration,
}

impl UpstreamClient {
    /// The caller an upstream's `what` request is for, if a protocol fact names one that
    /// declared it can answer; else the request is counted and refused.
    fn caller_for(
        &self,
        what: Dropped,
        context: &RequestContext<RoleClient>,
    ) -> Result<Arc<CallerRequest>, ErrorData> {
        let call = self.routes.caller_of(self.connection, context);
        let name = what.label();
        let Some(caller) = call else {
            self.routes.dropped(what);
            return Err(ErrorData::invalid_request(
                format!(
                    "toolgate cannot relay this {name} request: it did not come on the response stream of a call in progress, so no caller can be told it is theirs (requests over stdio and on the standalone stream are not relayed on a connection shared by many callers)"
                ),
                None,
            ));
        };
        let declared = |caller: &CallerRequest| match what {
            Dropped::Sampling => caller.can_sample(),
            Dropped::Elicitation => caller.can_elicit(),
            _ => false,
        };
        match caller {
            Some(caller) if declared(&caller) => Ok(caller),
            _ => Err(ErrorData::invalid_request(
                format!(
                    "toolgate cannot relay this {name} request: the caller of the call is not an MCP client that declared it can answer {name}"
                ),
                None,
            )),
        }
    }
}

/// Unsubscribes the upstream (on the connection `peer`, of `generation`, it sent an update
/// on) from `uri`, which nobody watches any more, in a task of its own: the handler of the
/// upstream's notifications does not wait on the upstream, and the task waits at
/// most the call timeout, for the resource's turn ([`Told`]) and the answer. A
/// subscriber who came before the turn keeps the upstream subscribed (its own
/// subscription waits for the turn too, so it is not undone by this one). The
/// upstream is recorded unsubscribed when the record named this connection, whatever
/// it answers: a subscription too many later is harmless, one missing loses updates.
/// A failure is only logged (the subscribers are gone either way).
fn unsubscribe_upstream(
    routes: Arc<Routes>,
    peer: Peer<RoleClient>,
    generation: u64,
    timeout: Duration,
    uri: String,
) {
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let Some(mut told) = routes.told.turn(&uri, deadline).await else {
            tracing::warn!(server = %routes.server, %uri, "the MCP server could not be unsubscribed from a resource nobody watches on this connection any more: its turn did not come within the call timeout");
            return;
        };
        if routes.watched(&uri) {
            return;
        }
        tracing::debug!(server = %routes.server, %uri, "the last subscriber to a resource is gone; unsubscribing the MCP server");
        let params = rmcp::model::UnsubscribeRequestParams::new(uri.clone());
        let answer = tokio::time::timeout_at(deadline, peer.unsubscribe(params)).await;
        if *told == Some(generation) {
            *told = None;
        }
        drop(told);
        let failed = match answer {
            Ok(Ok(())) => return,
            // The upstream's words, of any length: within the bound of an error's.
            Ok(Err(e)) => toolgate_core::error::error_text(format_args!(
                "{}",
                crate::client::failure::request_failure(&e)
            )),
            Err(_) => format!("no answer within {timeout:?}"),
        };
        tracing::warn!(server = %routes.server, %uri, error = %failed, "the MCP server could not be unsubscribed from a resource nobody watches on this connection any more");
    });
}

fn relay_failed(what: &str, e: rmcp::service::ServiceError) -> ErrorData {
    match e {
        rmcp::service::ServiceError::McpError(error) => error,
        other => ErrorData::internal_error(
            format!("the caller did not answer the {what} request: {other}"),
            None,
        ),
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.asks_callers {
            capabilities.sampling = Some(Default::default());
            capabilities.elicitation = Some(Default::default());
        }
        ClientConfig::new(
            capabilities,
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let from = Arc::new(Source {
            routes: Arc::clone(&self.routes),
            peer: context.peer,
            generation: self.generation,
            call_timeout: self.call_timeout,
        });
        // Only queued: a subscriber that does not read holds up neither the upstream's
        // connection nor the other subscribers.
        for subscriber in self.routes.subscribers_of(&params.uri) {
            // Ended while this update was on its way: it is not hers any more.
            if subscriber.ended.is_cancelled() {
                continue;
            }
            let queued = Queued {
                update: params.clone(),
                from: Arc::clone(&from),
            };
            let why = match subscriber.outbox.queue.try_send(queued) {
                Ok(()) => continue,
                // Its delivery ended: its session is gone.
                Err(mpsc::error::TrySendError::Closed(_)) => Why::Gone,
                Err(mpsc::error::TrySendError::Full(_)) => Why::Behind,
            };
            from.drop_subscriber(&params.uri, &subscriber.key, why);
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let caller = self.caller_for(Dropped::Sampling, &context)?;
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match caller.peer.send_request(request).await {
            Ok(ClientResult::CreateMessageResult(result)) => Ok(*result),
            Ok(_) => Err(ErrorData::internal_error(
                "the caller answered the sampling request with something else",
                None,
            )),
            Err(e) => Err(relay_failed("sampling", e)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let caller = self.caller_for(Dropped::Elicitation, &context)?;
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match caller.peer.send_request(request).await {
            Ok(ClientResult::ElicitResult(result)) => Ok(result),
            Ok(_) => Err(ErrorData::internal_error(
                "the caller answered the elicitation request with something else",
                None,
            )),
            Err(e) => Err(relay_failed("elicitation", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{
        ClientCapabilities, Implementation, InitializeRequestParams, ResourcesCapability,
        ServerCapabilities, ServerConfig, UnsubscribeRequestParams,
    };
    use rmcp::{ErrorData, ServerHandler, ServiceExt};

    use super::*;

    /// An upstream that tells each unsubscription it is sent.
    struct Upstream(mpsc::UnboundedSender<String>);

    impl ServerHandler for Upstream {
        fn get_info(&self) -> ServerConfig {
            let mut capabilities = ServerCapabilities::default();
            let mut resources = ResourcesCapability::default();
            resources.subscribe = Some(true);
            capabilities.resources = Some(resources);
            ServerConfig::new(capabilities)
        }

        async fn unsubscribe(
            &self,
            request: UnsubscribeRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<(), ErrorData> {
            let _ = self.0.send(request.uri);
            Ok(())
        }
    }

    /// A server that serves nothing, for a caller's connection.
    struct Nothing;

    impl ServerHandler for Nothing {}

    /// A caller whose connection is closed: what is sent to it fails at once. Its
    /// session never ends.
    fn gone_caller(key: &str) -> CallerRequest {
        let transport = (
            futures::sink::drain::<rmcp::service::TxJsonRpcMessage<RoleServer>>(),
            futures::stream::empty(),
        );
        let info =
            InitializeRequestParams::new(ClientCapabilities::default(), Implementation::default());
        let running = rmcp::service::serve_directly(Nothing, transport, Some(info));
        CallerRequest::new(running.peer().clone(), Arc::from(key))
    }

    /// A caller that never reads what is sent to it: its connection takes one message,
    /// then stalls. Keep the receiver: dropped, the connection would be gone instead.
    fn stalled_caller(
        key: &str,
    ) -> (
        CallerRequest,
        futures::channel::mpsc::Receiver<rmcp::service::TxJsonRpcMessage<RoleServer>>,
    ) {
        let (sink, unread) = futures::channel::mpsc::channel(0);
        (caller_on(sink, key), unread)
    }

    /// A caller that reads everything sent to it, from the receiver.
    fn reading_caller(
        key: &str,
    ) -> (
        CallerRequest,
        futures::channel::mpsc::UnboundedReceiver<rmcp::service::TxJsonRpcMessage<RoleServer>>,
    ) {
        let (sink, read) = futures::channel::mpsc::unbounded();
        (caller_on(sink, key), read)
    }

    /// A caller whose connection sends to `sink`, and never sends anything itself.
    fn caller_on<S, E>(sink: S, key: &str) -> CallerRequest
    where
        S: futures::Sink<rmcp::service::TxJsonRpcMessage<RoleServer>, Error = E>
            + Send
            + Unpin
            + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let transport = (
            sink,
            futures::stream::pending::<rmcp::service::RxJsonRpcMessage<RoleServer>>(),
        );
        let info =
            InitializeRequestParams::new(ClientCapabilities::default(), Implementation::default());
        let running = rmcp::service::serve_directly(Nothing, transport, Some(info));
        let peer = running.peer().clone();
        // The service lives as long as the test.
        std::mem::forget(running);
        CallerRequest::new(peer, Arc::from(key))
    }

    /// An upstream serving `routes`'s client on a connection of its own, which tells each
    /// unsubscription it is sent.
    async fn connected(
        routes: &Arc<Routes>,
    ) -> (
        rmcp::service::RunningService<RoleServer, Upstream>,
        rmcp::service::RunningService<RoleClient, UpstreamClient>,
        mpsc::UnboundedReceiver<String>,
    ) {
        let (unsubscribed, unsubscriptions) = mpsc::unbounded_channel();
        let (upstream_io, client_io) = tokio::io::duplex(64 * 1024);
        let client = UpstreamClient {
            routes: Arc::clone(routes),
            connection: 1,
            generation: 1,
            asks_callers: false,
            call_timeout: Duration::from_secs(10),
        };
        let (upstream, client) = tokio::join!(
            Upstream(unsubscribed).serve(upstream_io),
            client.serve(client_io)
        );
        (upstream.unwrap(), client.unwrap(), unsubscriptions)
    }

    /// Whether `message` is a resource update.
    fn is_update(message: &rmcp::service::TxJsonRpcMessage<RoleServer>) -> bool {
        serde_json::to_value(message)
            .is_ok_and(|message| message["method"] == "notifications/resources/updated")
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_does_not_read_is_dropped_and_holds_up_nobody() {
        use futures::StreamExt;

        let routes = Arc::new(Routes::new("up"));
        let (upstream, _client, mut unsubscriptions) = connected(&routes).await;
        let uri = "res://flooded";
        // Bob comes first: before, every update waited on him.
        let (bob, _unread) = stalled_caller("bob");
        let (alice, mut read) = reading_caller("alice");
        routes
            .subscribe(uri, &bob, Arc::new(User::new("bob")))
            .unwrap();
        routes
            .subscribe(uri, &alice, Arc::new(User::new("alice")))
            .unwrap();
        let bobs = routes.subscribers_of(uri)[0].outbox.queue.clone();
        assert_eq!(bobs.max_capacity(), UPDATE_QUEUE, "bob's queue is bounded");

        let updates = 4 * UPDATE_QUEUE;
        let sent = async {
            for _ in 0..updates {
                upstream
                    .peer()
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                    .unwrap();
            }
        };
        let received = async {
            let mut received = 0;
            while received < updates {
                let Some(message) = read.next().await else {
                    break;
                };
                received += usize::from(is_update(&message));
            }
            received
        };
        let (_, received) = tokio::time::timeout(Duration::from_secs(60), async {
            tokio::join!(sent, received)
        })
        .await
        .expect("alice is not held up by bob");
        assert_eq!(received, updates, "alice gets every update");

        assert!(
            !routes.is_subscribed(uri, "bob"),
            "bob, who does not read, is dropped"
        );
        assert!(routes.is_subscribed(uri, "alice"));
        tokio::time::timeout(Duration::from_secs(60), bobs.closed())
            .await
            .expect("bob's delivery ends with him, its queue with it");
        assert_eq!(routes.held.lock().unwrap().get("bob"), None);
        assert!(
            unsubscriptions.try_recv().is_err(),
            "alice still watches the resource: the upstream stays subscribed"
        );
    }

    #[tokio::test]
    async fn subscribing_and_unsubscribing_leaves_no_delivery_behind() {
        let routes = Arc::new(Routes::new("up"));
        let (_upstream, client, _unsubscriptions) = connected(&routes).await;
        let from = Arc::new(Source {
            routes: Arc::clone(&routes),
            peer: client.peer().clone(),
            generation: 1,
            call_timeout: Duration::from_secs(10),
        });
        let uri = "res://churned";
        let (caller, _unread) = stalled_caller("bob");
        let user = Arc::new(User::new("bob"));
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        let mut queues = Vec::new();
        for i in 0..1000 {
            let mut caller = caller.clone();
            caller.session_ended = CancellationToken::new();
            routes.subscribe(uri, &caller, Arc::clone(&user)).unwrap();
            let queue = routes.subscribers_of(uri)[0].outbox.queue.clone();
            // Its delivery stalls on a caller that does not read, or waits for more.
            for _ in 0..(i % 3) {
                let queued = Queued {
                    update: ResourceUpdatedNotificationParam::new(uri),
                    from: Arc::clone(&from),
                };
                assert!(queue.try_send(queued).is_ok());
            }
            if i % 2 == 0 {
                assert!(routes.unsubscribe(uri, "bob"));
            } else {
                caller.session_ended.cancel();
                assert_eq!(routes.end_session("bob"), vec![uri.to_owned()]);
            }
            queues.push(queue);
        }
        tokio::time::timeout(Duration::from_secs(10), async {
            for queue in &queues {
                queue.closed().await;
            }
            while alive() > before {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("every delivery ends with its subscriber");
        assert!(!routes.watched_any());
        assert!(routes.held.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_last_subscriber_dropped_after_a_failed_delivery_unsubscribes_the_upstream() {
        let routes = Arc::new(Routes::new("up"));
        let (upstream, _client, mut unsubscriptions) = connected(&routes).await;

        let caller = gone_caller("session-1");
        let uri = "res://watched";
        let added = routes
            .subscribe(uri, &caller, Arc::new(User::new("alice")))
            .unwrap();
        assert!(added);
        let watch = routes.watch(&caller.session_id).expect("a watch to start");

        upstream
            .peer()
            .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
            .await
            .unwrap();
        let sent = tokio::time::timeout(Duration::from_secs(10), unsubscriptions.recv()).await;
        assert_eq!(
            sent.ok().flatten().as_deref(),
            Some(uri),
            "the upstream is unsubscribed from the resource nobody watches any more"
        );
        assert!(!routes.watched(uri));
        assert!(routes.held.lock().unwrap().is_empty(), "no count is left");
        assert!(
            watch.is_cancelled() && routes.watched.lock().unwrap().is_empty(),
            "the watch of the gone subscriber's session ends"
        );
    }
}
