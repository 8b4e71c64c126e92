//! `subscriptions/listen` (2026-07-28): acknowledged only once its resources are
//! subscribed.
//!
//! The acknowledgment of a listen request (`notifications/subscriptions/acknowledged`)
//! tells the client that the subscription is established and which resources it honours:
//! a client that changes a watched resource as soon as it is acknowledged must be told of
//! the change, and a client that may not read one of them must be refused without being
//! told first that it is honoured. rmcp sends the acknowledgment before it hands the
//! request to the handler, which only then subscribes the upstreams; so the
//! acknowledgment is kept from the client until the subscriptions are made:
//!
//! - over streamable HTTP, the endpoint gives the request a
//!   [`ListenGate`](super::listen_gate::ListenGate) and holds the response's stream
//!   ([`acknowledged_once_subscribed`](super::listen_gate::acknowledged_once_subscribed))
//!   until the handler's `listen` has subscribed every resource (the stream then goes out
//!   as rmcp wrote it) or was refused (the stream goes out without its acknowledgment,
//!   ending in the refusal);
//! - over stdio, rmcp serves the connection as [`Served`], which subscribes a listen
//!   request's resources before it lets rmcp acknowledge the request; the handler's
//!   `listen` then opens the request's [`ListenStream`], where the updates that came
//!   meanwhile waited.
//!
//! Either way the resources are subscribed as `resources/subscribe` would subscribe them
//! (authorization and audit apply) and unsubscribed when the request is over.

use std::borrow::Cow;

use rmcp::model::{
    ClientNotification, ClientRequest, ErrorData, ProtocolVersion, ServerConfig, ServerResult,
    SubscriptionFilter, SubscriptionsListenRequest,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler, Service};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::connection::{Connection, takes_input_required};
use super::listen_gate::Subscribed;
use super::listens::ListenPermit;
use crate::listen_stream::ListenStream;

/// The subscriptions of one listen request, made: unsubscribed with
/// [`Connection::unsubscribe_listen`].
pub(super) struct Listening {
    pub(super) subscribed: Subscribed,
    /// The URIs subscribed.
    uris: Vec<String>,
    /// Counts the request against its user's open listen requests until dropped.
    _open: ListenPermit,
}

impl Connection {
    /// Subscribes each of `uris` for listen request `context`, its updates to go to a
    /// [`ListenStream`] not open yet, in turn. A URI the caller may not read, or that no
    /// upstream has, refuses the whole request (the URIs subscribed before it are
    /// unsubscribed), as does a user with the server's
    /// [`listens_per_user`](crate::McpServer::listens_per_user) listen requests open
    /// already (`too_many_listens`).
    pub(super) async fn subscribe_listen(
        &self,
        uris: &[String],
        context: &RequestContext<RoleServer>,
    ) -> Result<Listening, ErrorData> {
        let open = self.server().listens.open(&self.caller(context))?;
        let mut listening = Listening {
            subscribed: Subscribed {
                stream: ListenStream::new(context.id.clone()),
                ended: CancellationToken::new(),
            },
            uris: Vec::with_capacity(uris.len()),
            _open: open,
        };
        // A URI named twice is subscribed once: a request naming one URI thousands of
        // times would otherwise run that many calls through the pipeline (and its audit).
        let mut named = std::collections::HashSet::with_capacity(uris.len());
        for uri in uris {
            if !named.insert(uri.as_str()) {
                continue;
            }
            let input = json!({ "subscribe": uri });
            let subscribed = Some(&listening.subscribed);
            match self.on_subscription(input, uri, context, subscribed).await {
                Ok(_) => listening.uris.push(uri.clone()),
                Err(error) => {
                    self.unsubscribe_listen(listening, context).await;
                    return Err(error);
                }
            }
        }
        Ok(listening)
    }

    /// Ends `listening`'s subscriptions: its stream is closed, and each URI unsubscribed
    /// (on a token of its own: the request is over).
    pub(super) async fn unsubscribe_listen(
        &self,
        listening: Listening,
        context: &RequestContext<RoleServer>,
    ) {
        listening.subscribed.stream.close();
        let mut after = context.clone();
        after.ct = CancellationToken::new();
        for uri in &listening.uris {
            let input = json!({ "unsubscribe": uri });
            let subscribed = Some(&listening.subscribed);
            let _ = self.on_subscription(input, uri, &after, subscribed).await;
        }
    }
}

/// A connection as rmcp serves it over stdio: every request and notification goes to the
/// connection's handler, a 2026-07-28 `subscriptions/listen` request once its resources
/// are subscribed.
pub(crate) struct Served(pub(crate) Connection);

impl Service<RoleServer> for Served {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        match request {
            ClientRequest::SubscriptionsListenRequest(listen) if takes_input_required(&context) => {
                self.0.listen_subscribed(listen, context).await
            }
            request => Service::handle_request(&self.0, request, context).await,
        }
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Service::handle_notification(&self.0, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.0)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        ServerHandler::supported_protocol_versions(&self.0)
    }
}

impl Connection {
    /// Serves listen `request` over stdio: subscribes each resource rmcp will acknowledge,
    /// then lets rmcp acknowledge the request and run the handler's `listen` (which finds
    /// the [`Subscribed`] request in its extensions) until the caller ends it, then
    /// unsubscribes them. Refused, the request is answered its refusal, unacknowledged.
    async fn listen_subscribed(
        &self,
        request: SubscriptionsListenRequest,
        mut context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let uris = self
            .acknowledged(&request.params.notifications)
            .resource_subscriptions
            .unwrap_or_default();
        let listening = self.subscribe_listen(&uris, &context).await?;
        let after = context.clone();
        context.extensions.insert(listening.subscribed.clone());
        let request = ClientRequest::SubscriptionsListenRequest(request);
        let answer = Service::handle_request(self, request, context).await;
        self.unsubscribe_listen(listening, &after).await;
        answer
    }

    /// What rmcp acknowledges of `requested`: what was asked, of what this server accepts
    /// and advertises.
    fn acknowledged(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let advertised = requested.supported_by(&ServerHandler::get_info(self).capabilities);
        ServerHandler::accepted_subscription_filter(self, requested)
            .map(|accepted| requested.intersection(&accepted).intersection(&advertised))
            .unwrap_or_default()
    }
}
