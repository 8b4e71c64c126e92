//! The one place every frame of an upstream connection passes: the transport under rmcp.
//!
//! Going out, a `tools/call` that relays to a caller registers its route as it goes on the
//! wire, with the request id and progress token rmcp gave it, so nothing the upstream
//! sends about the call can come before its route. Coming in, every message — response,
//! error, notification or request, of every kind there is or will be — is first scrubbed
//! of the upstream's credentials, then progress and log messages are queued for the call
//! they belong to, in the order they arrived ([`Relay::drain`](super::relay::Relay)).
//! Scrubbing here, rather than where each kind is relayed, is what keeps a kind nobody
//! thought of from carrying a credential to a caller.

// Logging is deprecated by SEP-2577 for the 2026-07-28 revision; upstreams on 2025-11-25
// still send `notifications/message`, which is scrubbed and attributed here.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::{
    Extensions, GetExtensions, GetMeta, JsonRpcMessage, LoggingMessageNotification,
    NotificationMetaObject, ProgressToken, RequestId, ServerNotification,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolgate_hooks::secrets::Scrubber;

use super::relay::{Dropped, RouteTicket, Routes};
use super::streams::STREAM_KEY;

/// Fields of a result that are the upstream's own opaque state, sent back to it as they
/// were: scrubbing them would break the upstream's next round or page. A caller never
/// reads them: it holds `requestState` encrypted and signed by toolgate
/// (`server/rounds.rs`), and lists are answered to it in full (an upstream's
/// `nextCursor` is followed by toolgate, never handed on).
const OPAQUE: [&str; 2] = ["requestState", "nextCursor"];

/// The transport of one upstream connection (number `connection` of its channel), with
/// every frame passing through it as the module says.
pub(crate) struct Frames<T> {
    inner: T,
    inbound: Inbound,
    /// Messages that came to toolgate around rmcp, on the response stream of a call
    /// made from the calling task ([`Direct`](super::direct::Direct)), for rmcp to handle
    /// as if they had come through `inner`: the upstream's requests, which rmcp answers.
    side: Option<mpsc::Receiver<RxJsonRpcMessage<RoleClient>>>,
    /// Cancels its token when the transport is dropped: rmcp's session over it ended.
    ended: Option<DropGuard>,
}

/// What every message of one connection goes through as it comes in: scrubbing, and the
/// queueing of progress and log messages for the call they belong to.
#[derive(Clone)]
pub(crate) struct Inbound {
    routes: Arc<Routes>,
    connection: u64,
    scrubber: Scrubber,
    /// Whether the transport under it tags log messages with their stream
    /// ([`StreamTagging`](super::streams::StreamTagging)); where it does not (stdio), a
    /// tag is the upstream's own, and ignored.
    tagged_streams: bool,
}

/// How many messages of the side door may wait for rmcp; a call's stream that sends more
/// waits for rmcp to take them.
const SIDE_DOOR: usize = 64;

impl<T> Frames<T> {
    /// Connection number `connection` over `inner`. With `side_door`, a sender to hand
    /// messages to rmcp through it, as if they had come from `inner`.
    pub(crate) fn new(
        inner: T,
        routes: Arc<Routes>,
        connection: u64,
        scrubber: Scrubber,
        tagged_streams: bool,
        side_door: bool,
    ) -> (Self, Option<mpsc::Sender<RxJsonRpcMessage<RoleClient>>>) {
        let (sender, side) = if side_door {
            let (sender, receiver) = mpsc::channel(SIDE_DOOR);
            (Some(sender), Some(receiver))
        } else {
            (None, None)
        };
        let inbound = Inbound {
            routes,
            connection,
            scrubber,
            tagged_streams,
        };
        (
            Frames {
                inner,
                inbound,
                side,
                ended: None,
            },
            sender,
        )
    }

    /// What the connection's messages go through as they come in.
    pub(crate) fn inbound(&self) -> &Inbound {
        &self.inbound
    }

    /// Has `ended` cancelled when the connection ends: rmcp drops its transport when
    /// the session over it ends, however it ends.
    pub(crate) fn cancel_on_end(&mut self, ended: CancellationToken) {
        self.ended = Some(ended.drop_guard());
    }
}

impl Inbound {
    /// `message` scrubbed, and queued for its call if it is a progress or log message;
    /// `None` when it could not be scrubbed (it is dropped and counted).
    pub(crate) fn take(
        &self,
        message: RxJsonRpcMessage<RoleClient>,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let Some(mut message) = scrub(&self.scrubber, message) else {
            self.routes.dropped(Dropped::Unreadable);
            return None;
        };
        if let JsonRpcMessage::Notification(notification) = &mut message {
            match &mut notification.notification {
                ServerNotification::ProgressNotification(progress) => self
                    .routes
                    .queue_progress(self.connection, &progress.params),
                ServerNotification::LoggingMessageNotification(log) => {
                    let stream = take_stream(log).filter(|_| self.tagged_streams);
                    self.routes
                        .queue_log(self.connection, stream.as_ref(), &log.params)
                }
                _ => {}
            }
        }
        Some(message)
    }

    /// Counts a message of this connection dropped as nobody's.
    pub(crate) fn dropped(&self, kind: Dropped) {
        self.routes.dropped(kind);
    }

    /// Registers the route of request `id` (progress token `token`) of this connection.
    pub(crate) fn register(
        &self,
        id: RequestId,
        token: Option<ProgressToken>,
        ticket: RouteTicket,
    ) {
        self.routes.register(self.connection, id, token, ticket);
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Frames<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // The ticket stays with the request: the HTTP client under rmcp holds the
        // request's response stream only while the call lives
        // ([`StreamTagging`](super::streams::StreamTagging)).
        if let JsonRpcMessage::Request(request) = &item
            && let Some(ticket) = request.request.extensions().get::<RouteTicket>().cloned()
        {
            let token = request.request.get_meta().get_progress_token();
            self.inbound.register(request.id.clone(), token, ticket);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = match &mut self.side {
                None => self.inner.receive().await?,
                // Both receives are channel receives, which lose nothing when the other
                // one wins. A closed side door (the connection's `Direct` gone) is not
                // the end of the connection.
                Some(side) => tokio::select! {
                    message = self.inner.receive() => message?,
                    Some(message) = side.recv() => {
                        // Taken in already by the call whose stream carried it.
                        return Some(message);
                    }
                },
            };
            if let Some(message) = self.inbound.take(message) {
                return Some(message);
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Whether [`Inbound::take`] queues `notification` for its call (progress and log
/// messages): nothing else is left to do with it.
pub(crate) fn is_queued(notification: &ServerNotification) -> bool {
    matches!(
        notification,
        ServerNotification::ProgressNotification(_)
            | ServerNotification::LoggingMessageNotification(_)
    )
}

/// The stream a log message came on, as [`StreamTagging`](super::streams::StreamTagging)
/// wrote it; the tag is removed, so that no caller sees it.
fn take_stream(log: &mut LoggingMessageNotification) -> Option<RequestId> {
    let in_params = log
        .params
        .meta
        .as_mut()
        .and_then(|meta| meta.0.0.remove(STREAM_KEY));
    if log
        .params
        .meta
        .as_ref()
        .is_some_and(|meta| meta.0.0.is_empty())
    {
        log.params.meta = None;
    }
    let in_extensions = log
        .extensions
        .get_mut::<NotificationMetaObject>()
        .and_then(|meta| meta.0.0.remove(STREAM_KEY));
    in_params
        .or(in_extensions)
        .and_then(|id| serde_json::from_value(id).ok())
}

/// `message` with every form of the upstream's credentials replaced, its opaque state
/// ([`OPAQUE`]) and its extensions (the stream it came on) kept; `None` when a scrubbed
/// message does not read back (it is dropped rather than passed on raw).
fn scrub(
    scrubber: &Scrubber,
    message: RxJsonRpcMessage<RoleClient>,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    if scrubber.is_empty() {
        return Some(message);
    }
    let text = serde_json::to_string(&message).ok()?;
    // A string with a backslash in it is written with the backslash doubled, and a
    // credential escaped inside it (a JSON document that PHP or .NET wrote, carried as
    // text: `\/`, `\u002B`) escaped twice, which a search of the message's text does not
    // follow: such a message is searched string by string instead.
    let mut value = if text.contains(r"\\") {
        let value = serde_json::from_str::<Value>(&text).ok()?;
        if !scrubber.occurs_in_value(&value) {
            return Some(message);
        }
        value
    } else if scrubber.occurs_in(&text) {
        serde_json::from_str::<Value>(&text).ok()?
    } else {
        return Some(message);
    };
    let opaque: Vec<(&str, Value)> = match value.get_mut("result").and_then(Value::as_object_mut) {
        Some(result) => OPAQUE
            .iter()
            .filter_map(|key| result.remove(*key).map(|v| (*key, v)))
            .collect(),
        None => Vec::new(),
    };
    scrubber.scrub_value(&mut value);
    if let Some(result) = value.get_mut("result").and_then(Value::as_object_mut) {
        result.extend(opaque.into_iter().map(|(k, v)| (k.to_owned(), v)));
    }
    let mut clean: RxJsonRpcMessage<RoleClient> = serde_json::from_value(value).ok()?;
    let mut message = message;
    match (&mut message, &mut clean) {
        (JsonRpcMessage::Request(raw), JsonRpcMessage::Request(clean)) => {
            keep_extensions(raw.request.extensions_mut(), clean.request.extensions_mut())
        }
        (JsonRpcMessage::Notification(raw), JsonRpcMessage::Notification(clean)) => {
            keep_extensions(
                raw.notification.extensions_mut(),
                clean.notification.extensions_mut(),
            )
        }
        _ => {}
    }
    tracing::warn!(
        "an MCP server's message toward a caller contained its own credential; it was scrubbed"
    );
    Some(clean)
}

/// Gives `clean` the extensions of `raw` (what is not on the wire, such as the stream a
/// message came on), with `clean`'s own `_meta`, which is scrubbed.
fn keep_extensions(raw: &mut Extensions, clean: &mut Extensions) {
    let mut kept = std::mem::take(raw);
    kept.extend(std::mem::take(clean));
    *clean = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerRequest;
    use rmcp::service::InboundStreamOrigin;
    use serde_json::json;

    fn message(value: Value) -> RxJsonRpcMessage<RoleClient> {
        serde_json::from_value(value).expect("a server message")
    }

    fn leaked(message: &RxJsonRpcMessage<RoleClient>) -> bool {
        serde_json::to_string(message)
            .expect("serializes")
            .contains("UP-SECRET-1234")
    }

    #[test]
    fn every_kind_of_message_is_scrubbed_and_keeps_its_stream() {
        let scrubber = Scrubber::for_values(["UP-SECRET-1234"]);
        let kinds = [
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": {"token": "UP-SECRET-1234"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": 1, "progress": 1, "message": "UP-SECRET-1234"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/some_new_kind",
                   "params": {"said": "UP-SECRET-1234"}}),
            json!({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create",
                   "params": {"message": "token UP-SECRET-1234",
                              "requestedSchema": {"type": "object", "properties": {}}}}),
            json!({"jsonrpc": "2.0", "id": 8, "method": "sampling/createMessage",
                   "params": {"maxTokens": 5, "messages": [{"role": "user",
                              "content": {"type": "text", "text": "UP-SECRET-1234"}}]}}),
            json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -1, "message": "UP-SECRET-1234"}}),
        ];
        for kind in kinds {
            let mut raw = message(kind.clone());
            if let JsonRpcMessage::Request(request) = &mut raw {
                request
                    .request
                    .extensions_mut()
                    .insert(InboundStreamOrigin::OutboundRequest(RequestId::Number(3)));
            }
            assert!(leaked(&raw), "{kind}");
            let clean = scrub(&scrubber, raw).expect("reads back");
            assert!(!leaked(&clean), "{kind}");
            if let JsonRpcMessage::Request(request) = &clean {
                assert_eq!(
                    request.request.extensions().get::<InboundStreamOrigin>(),
                    Some(&InboundStreamOrigin::OutboundRequest(RequestId::Number(3))),
                    "the stream a request came on is kept: {kind}"
                );
                assert!(matches!(
                    request.request,
                    ServerRequest::ElicitRequest(_) | ServerRequest::CreateMessageRequest(_)
                ));
            }
        }
    }

    #[test]
    fn a_credential_escaped_inside_a_string_is_scrubbed() {
        let scrubber = Scrubber::for_values(["up-s3cret/relay+77"]);
        // A JSON document PHP wrote (`\/`) and one .NET wrote (`\u002B`), as text.
        for said in [
            r#"{"t":"up-s3cret\/relay+77"}"#,
            r#"{"t":"up-s3cret/relay\u002B77"}"#,
        ] {
            let raw = message(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1, "message": said}}));
            let clean = serde_json::to_value(scrub(&scrubber, raw).expect("reads back")).unwrap();
            assert_eq!(
                clean["params"]["message"],
                format!(r#"{{"t":"{}"}}"#, toolgate_hooks::secrets::SCRUBBED),
                "{said}"
            );
        }
    }

    #[test]
    fn an_upstreams_opaque_state_goes_back_to_it_unchanged() {
        let scrubber = Scrubber::for_values(["UP-SECRET-1234"]);
        let raw = message(json!({"jsonrpc": "2.0", "id": 4, "result": {
            "resultType": "input_required",
            "inputRequests": {"a": {"method": "elicitation/create", "params": {
                "message": "UP-SECRET-1234", "requestedSchema": {"type": "object", "properties": {}}}}},
            "requestState": "sealed-UP-SECRET-1234"
        }}));
        let clean = serde_json::to_value(scrub(&scrubber, raw).expect("reads back")).unwrap();
        assert_eq!(clean["result"]["requestState"], "sealed-UP-SECRET-1234");
        assert!(
            !clean["result"]["inputRequests"]
                .to_string()
                .contains("UP-SECRET-1234")
        );
    }
}
