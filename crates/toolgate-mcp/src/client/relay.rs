//! What an upstream sends during a call, relayed to the caller the call serves: progress
//! notifications, and sampling and elicitation requests.

// Sampling and logging are deprecated by SEP-2577 for the 2026-07-28 revision, which asks
// for input with `input_required` results instead. Upstreams on 2025-11-25 still send
// `sampling/createMessage` and `notifications/message`; relaying them is what keeps them
// working behind toolgate.
#![allow(deprecated)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ErrorData, Implementation, InputRequest, InputRequests, InputResponses,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestId,
    ResourceUpdatedNotificationParam, ServerRequest,
};
use rmcp::model::{JsonRpcMessage, ResourceUpdatedNotification, ServerNotification};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, Peer, RequestContext, RxJsonRpcMessage,
    SubscriptionSink, TxJsonRpcMessage,
};
use rmcp::transport::Transport;
use rmcp::{ClientHandler, RoleClient, RoleServer};
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolgate_core::{ToolError, User};

use crate::caller::CallerRequest;

/// The calls in flight on one upstream connection, by the progress token and the request
/// id toolgate gave each upstream request.
#[derive(Default)]
pub(crate) struct Routes {
    table: Mutex<Table>,
    /// Woken when a call is added, for a request of the upstream that came first.
    added: Notify,
    /// The callers subscribed to each resource (by URI), with their sessions.
    subscribers: Mutex<HashMap<String, Vec<Subscriber>>>,
}

struct Route {
    id: RequestId,
    token: ProgressToken,
    caller: Arc<CallerRequest>,
    /// The call's queue of what to relay, in the order the upstream sent it.
    queue: mpsc::Sender<Relayed>,
}

/// A notification of the upstream for the caller of a call.
pub(crate) enum Relayed {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// A subscriber to a resource.
#[derive(Clone)]
pub(crate) struct Subscriber {
    /// A 2025-11-25 session, or one `subscriptions/listen` request.
    key: Arc<str>,
    /// Who subscribed: authorized again when the configuration changes.
    user: Arc<User>,
    /// Where its updates go.
    delivery: Delivery,
    /// Cancelled when its subscription is ended for it (access withdrawn).
    ended: CancellationToken,
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
}

/// Where a subscriber's resource updates go.
#[derive(Clone)]
enum Delivery {
    /// `notifications/resources/updated` on a 2025-11-25 session's connection.
    Session(Peer<RoleServer>),
    /// The stream of a 2026-07-28 `subscriptions/listen` request.
    Listen(SubscriptionSink),
}

impl Delivery {
    /// Delivers one update; an error means the subscriber is gone.
    async fn send(&self, update: ResourceUpdatedNotificationParam) -> Result<(), ()> {
        match self {
            Delivery::Session(peer) => peer.notify_resource_updated(update).await.map_err(drop),
            Delivery::Listen(sink) => sink
                .send(ServerNotification::ResourceUpdatedNotification(
                    ResourceUpdatedNotification::new(update),
                ))
                .await
                .map_err(drop),
        }
    }
}

/// The calls in flight, and progress that came before its call was added.
#[derive(Default)]
struct Table {
    calls: Vec<Route>,
    /// Progress for a token no call has yet: the upstream may answer before the call that
    /// sent the request is added (a loaded machine). Claimed when the call is added.
    unclaimed: VecDeque<ProgressNotificationParam>,
}

/// How many progress notifications wait for their call at most (the oldest go first).
const UNCLAIMED: usize = 256;

/// How long a request of the upstream waits for the call it belongs to be added.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How many notifications of one call may wait to be relayed; past that, newer ones are
/// dropped (progress and log messages are advisory, and a flood must not grow memory).
const RELAY_QUEUE: usize = 64;

/// A call's side of its route: what to relay, and where.
pub(crate) struct Relay {
    caller: Arc<CallerRequest>,
    queue: mpsc::Receiver<Relayed>,
    _guard: RouteGuard,
}

impl Relay {
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
        let sent = match relayed {
            Relayed::Progress(mut progress) => {
                let Some(token) = self.caller.progress_token.clone() else {
                    return;
                };
                progress.progress_token = token;
                self.caller.peer.notify_progress(progress).await
            }
            Relayed::Log(message) => {
                if !self.caller.wants_log(message.level) {
                    return;
                }
                self.caller.peer.notify_logging_message(message).await
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "a notification could not be relayed to the caller");
        }
    }
}

impl Routes {
    /// Routes what the upstream sends about request `id` (progress token `token`) to
    /// `caller`, until the returned relay is dropped.
    pub(crate) fn add(
        self: &Arc<Self>,
        id: RequestId,
        token: ProgressToken,
        caller: Arc<CallerRequest>,
    ) -> Relay {
        let (sender, receiver) = mpsc::channel(RELAY_QUEUE);
        {
            let mut table = self.lock();
            let unclaimed = std::mem::take(&mut table.unclaimed);
            for progress in unclaimed {
                if progress.progress_token == token {
                    let _ = sender.try_send(Relayed::Progress(progress));
                } else {
                    table.unclaimed.push_back(progress);
                }
            }
            table.calls.push(Route {
                id: id.clone(),
                token,
                caller: Arc::clone(&caller),
                queue: sender,
            });
        }
        self.added.notify_waiters();
        Relay {
            caller,
            queue: receiver,
            _guard: RouteGuard {
                routes: Arc::clone(self),
                id,
            },
        }
    }

    /// Queues a progress notification for the call it belongs to (if any is in flight).
    fn queue_progress(&self, progress: &ProgressNotificationParam) {
        let mut table = self.lock();
        match table
            .calls
            .iter()
            .find(|r| r.token == progress.progress_token)
        {
            Some(route) => {
                let _ = route.queue.try_send(Relayed::Progress(progress.clone()));
            }
            None => {
                if table.unclaimed.len() == UNCLAIMED {
                    table.unclaimed.pop_front();
                }
                table.unclaimed.push_back(progress.clone());
            }
        }
    }

    /// Queues a log message for the call in flight, when there is exactly one: a log
    /// message names no request, and one caller must never see another's.
    fn queue_log(&self, message: &LoggingMessageNotificationParam) {
        if let [only] = self.lock().calls.as_slice() {
            let _ = only.queue.try_send(Relayed::Log(message.clone()));
        }
    }

    /// Subscribes `caller`'s session, for `user`, to `uri`; whether it is the first
    /// subscriber (then the upstream is to be subscribed).
    pub(crate) fn subscribe(&self, uri: &str, caller: &CallerRequest, user: Arc<User>) -> bool {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let sessions = subscribers.entry(uri.to_owned()).or_default();
        let first = sessions.is_empty();
        if !sessions.iter().any(|s| s.key == caller.session_id) {
            let delivery = match &caller.listener {
                Some(sink) => Delivery::Listen(sink.clone()),
                None => Delivery::Session(caller.peer.clone()),
            };
            sessions.push(Subscriber {
                key: Arc::clone(&caller.session_id),
                user,
                delivery,
                ended: caller.subscription_ended.clone(),
            });
        }
        first
    }

    /// Every subscription, each resource with its subscribers, taken out: for them to
    /// move to the connection of a new configuration.
    pub(crate) fn take_all(&self) -> Vec<(String, Vec<Subscriber>)> {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.drain().collect()
    }

    /// Takes in `subscriber`'s subscription to `uri`, made on another connection; whether
    /// it is the first subscriber (then the upstream is to be subscribed).
    pub(crate) fn adopt(&self, uri: &str, subscriber: Subscriber) -> bool {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let sessions = subscribers.entry(uri.to_owned()).or_default();
        let first = sessions.is_empty();
        if !sessions.iter().any(|s| s.key == subscriber.key) {
            sessions.push(subscriber);
        }
        first
    }

    /// Ends the subscriptions of every subscriber `may_read` refuses: no update reaches
    /// them from now on, and a listen stream among them is told
    /// ([`CallerRequest::subscription_ended`]). The URIs left without a subscriber, for the
    /// upstream to be unsubscribed from, and how many subscriptions ended.
    pub(crate) fn end_unless(&self, may_read: &dyn Fn(&User) -> bool) -> (Vec<String>, usize) {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let mut ended = 0;
        for sessions in subscribers.values_mut() {
            sessions.retain(|s| {
                let keep = may_read(&s.user);
                if !keep {
                    s.ended.cancel();
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

    /// Unsubscribes `session` from `uri`; whether no subscriber is left (then the
    /// upstream is to be unsubscribed).
    pub(crate) fn unsubscribe(&self, uri: &str, session: &str) -> bool {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sessions) = subscribers.get_mut(uri) else {
            return false;
        };
        sessions.retain(|s| &*s.key != session);
        let last = sessions.is_empty();
        if last {
            subscribers.remove(uri);
        }
        last
    }

    fn subscribers_of(&self, uri: &str) -> Vec<Subscriber> {
        let subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.get(uri).cloned().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The caller an upstream request belongs to, waiting up to [`CLAIM_WAIT`] for its
    /// call to be added (the request may come before).
    async fn for_request(
        &self,
        context: &RequestContext<RoleClient>,
    ) -> Option<Arc<CallerRequest>> {
        let waited = tokio::time::timeout(CLAIM_WAIT, async {
            loop {
                let added = self.added.notified();
                tokio::pin!(added);
                added.as_mut().enable();
                if let Some(caller) = self.caller_now(context) {
                    return caller;
                }
                added.await;
            }
        });
        waited.await.ok()
    }

    /// The caller an upstream request belongs to: the call whose response stream carried
    /// it (streamable HTTP tells), else the only call in flight (stdio does not tell).
    fn caller_now(&self, context: &RequestContext<RoleClient>) -> Option<Arc<CallerRequest>> {
        let table = self.lock();
        let calls = &table.calls;
        match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => calls
                .iter()
                .find(|r| &r.id == id)
                .map(|r| Arc::clone(&r.caller)),
            _ => match calls.as_slice() {
                [only] => Some(Arc::clone(&only.caller)),
                _ => None,
            },
        }
    }
}

/// Removes a call's route when the call ends, however it ends.
struct RouteGuard {
    routes: Arc<Routes>,
    id: RequestId,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.lock().calls.retain(|r| r.id != self.id);
    }
}

/// toolgate as the client of an upstream: it declares sampling and elicitation, and
/// relays them to the caller of the call in flight. (Progress is relayed by
/// [`OrderedProgress`], in order.)
pub(crate) struct UpstreamClient {
    pub(crate) routes: Arc<Routes>,
}

fn no_caller(what: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "toolgate cannot relay this {what} request: no call in flight on this connection is from an MCP client that accepts it"
        ),
        None,
    )
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
        capabilities.sampling = Some(Default::default());
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        for subscriber in self.routes.subscribers_of(&params.uri) {
            // Ended while this update was on its way: it is not hers any more.
            if subscriber.ended.is_cancelled() {
                continue;
            }
            if subscriber.delivery.send(params.clone()).await.is_err() {
                // The subscriber's session or listen stream is gone.
                self.routes.unsubscribe(&params.uri, &subscriber.key);
            }
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let caller = self
            .routes
            .for_request(&context)
            .await
            .filter(|c| c.can_sample())
            .ok_or_else(|| no_caller("sampling"))?;
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
        let caller = self
            .routes
            .for_request(&context)
            .await
            .filter(|c| c.can_elicit())
            .ok_or_else(|| no_caller("elicitation"))?;
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

/// Asks the caller of a 2025-11-25 connection, one by one, what an upstream's
/// `input_required` result asks (`requests`, the MCP `inputRequests` object): sampling,
/// elicitation and roots requests on the caller's connection, within `deadline`. The
/// answers are keyed as the requests were, for the upstream's next round.
pub(crate) async fn ask_caller(
    caller: &CallerRequest,
    requests: Value,
    deadline: Instant,
    server: &str,
) -> Result<InputResponses, ToolError> {
    let requests: InputRequests = serde_json::from_value(requests).map_err(|e| {
        ToolError::execution(format!(
            "MCP server `{server}` asked for input in a form toolgate cannot read: {e}"
        ))
    })?;
    let started = Instant::now();
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let (what, declared, request) = match request {
            InputRequest::CreateMessage(r) => (
                "sampling",
                caller.can_sample(),
                ServerRequest::CreateMessageRequest(r),
            ),
            InputRequest::Elicitation(r) => (
                "elicitation",
                caller.can_elicit(),
                ServerRequest::ElicitRequest(r),
            ),
            InputRequest::ListRoots(r) => (
                "roots",
                caller.can_list_roots(),
                ServerRequest::ListRootsRequest(r),
            ),
            _ => {
                return Err(ToolError::execution(format!(
                    "MCP server `{server}` asked for a kind of input toolgate does not know"
                )));
            }
        };
        if !declared {
            return Err(ToolError::execution(format!(
                "MCP server `{server}` asked for {what}, which this MCP client did not declare it can answer"
            )));
        }
        let answer =
            match tokio::time::timeout_at(deadline, caller.peer.send_request(request)).await {
                Err(_) => {
                    return Err(ToolError::Timeout {
                        after: started.elapsed(),
                    });
                }
                Ok(Err(rmcp::service::ServiceError::McpError(e))) => {
                    return Err(ToolError::execution(format!(
                        "the caller refused the {what} request of MCP server `{server}`: {}",
                        e.message
                    )));
                }
                Ok(Err(e)) => {
                    return Err(ToolError::transient(format!(
                        "the caller did not answer the {what} request of MCP server `{server}`: {e}"
                    )));
                }
                Ok(Ok(answer)) => answer,
            };
        let answer = serde_json::to_value(answer)
            .map_err(|e| ToolError::internal(format!("an answer could not be written: {e}")))?;
        responses.insert(key, answer);
    }
    Ok(responses)
}

/// The upstream transport, with each progress notification (and log message) queued for
/// its call as it is received. rmcp handles notifications in tasks of their own while it hands a response to
/// its caller at once, so progress sent just before the answer could be relayed after it —
/// and a client ignores progress for a request it has its answer to. Queued here, in the
/// order messages arrive, every progress notification is in its call's queue before the
/// call sees its answer ([`Relay::drain`]).
pub(crate) struct OrderedProgress<T> {
    inner: T,
    routes: Arc<Routes>,
}

impl<T> OrderedProgress<T> {
    pub(crate) fn new(inner: T, routes: Arc<Routes>) -> Self {
        OrderedProgress { inner, routes }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for OrderedProgress<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(notification) = &message {
            match &notification.notification {
                ServerNotification::ProgressNotification(progress) => {
                    self.routes.queue_progress(&progress.params)
                }
                ServerNotification::LoggingMessageNotification(message) => {
                    self.routes.queue_log(&message.params)
                }
                _ => {}
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
