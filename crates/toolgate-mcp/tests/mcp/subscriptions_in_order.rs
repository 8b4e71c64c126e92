//! `resources/subscribe` and `resources/unsubscribe` reach an upstream one at a time per
//! resource, in the order toolgate decided them, whatever order the upstream would apply
//! requests sent side by side in (each is an HTTP POST of its own). A subscription made
//! right after the last subscriber left holds, even when the upstream takes its time over
//! the unsubscription before; and every subscriber is answered once the upstream answered
//! the subscription, not while the first subscriber's is still on its way.
//!
//! The upstream is an rmcp server on a loopback port with one resource, `slow://r`, that
//! holds each `resources/subscribe` or `resources/unsubscribe` for a while before it
//! applies it, and sends updates only while subscribed, as a real server does.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::within;
use rmcp::model::{
    ClientConfig, ErrorCode, ListResourcesResult, PaginatedRequestParams,
    ResourceUpdatedNotificationParam, ServerConfig, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::Notify;
use toolgate_mcp::{McpServer, UpstreamConfig};

/// The upstream's one resource.
const URI: &str = "slow://r";

/// How long the upstream holds a request it is slow to apply: long enough that a
/// request sent meanwhile arrives before it is applied.
const HOLD: Duration = Duration::from_millis(400);

/// An upstream that applies subscriptions (or refuses them) and unsubscriptions slowly,
/// as its configuration says, and records what it did.
#[derive(Clone, Default)]
struct Upstream {
    /// Whether it holds each subscription for [`HOLD`] before it answers.
    slow_subscribe: bool,
    /// Whether it refuses subscriptions (after holding them, when slow).
    refuses: bool,
    /// Whether it holds each unsubscription for [`HOLD`] before it applies it.
    slow_unsubscribe: bool,
    /// The connection subscribed to its resource, if any.
    subscribed: Arc<Mutex<Option<Peer<RoleServer>>>>,
    /// How many subscriptions it answered (either way).
    answered: Arc<AtomicUsize>,
    /// Whether it was sent a subscription or an unsubscription it has not answered yet.
    busy: Arc<AtomicBool>,
    /// Notified when a subscription or an unsubscription arrives.
    arrived: Arc<Notify>,
    /// Notified when an unsubscription is applied.
    unsubscribed: Arc<Notify>,
}

impl Upstream {
    /// Serves it over streamable HTTP on a loopback port; its `/mcp` URL.
    async fn serve(&self) -> String {
        common::rmcp_upstream::serve(self.clone()).await
    }

    fn is_subscribed(&self) -> bool {
        self.subscribed.lock().unwrap().is_some()
    }

    /// Tells the connection subscribed that its resource changed.
    async fn update(&self) {
        let peer = self.subscribed.lock().unwrap().clone();
        let peer = peer.expect("the upstream is subscribed");
        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(URI))
            .await
            .expect("the update is sent");
    }
}

#[allow(deprecated)]
impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        common::rmcp_upstream::takes_subscriptions()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            rmcp::model::Resource::new(URI, URI),
        ]))
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.busy.store(true, Ordering::SeqCst);
        self.arrived.notify_one();
        if self.slow_subscribe {
            tokio::time::sleep(HOLD).await;
        }
        let answer = if self.refuses {
            Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                "no subscriptions today",
                None,
            ))
        } else {
            *self.subscribed.lock().unwrap() = Some(context.peer);
            Ok(())
        };
        self.answered.fetch_add(1, Ordering::SeqCst);
        self.busy.store(false, Ordering::SeqCst);
        answer
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.busy.store(true, Ordering::SeqCst);
        self.arrived.notify_one();
        if self.slow_unsubscribe {
            tokio::time::sleep(HOLD).await;
        }
        *self.subscribed.lock().unwrap() = None;
        self.unsubscribed.notify_one();
        self.busy.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// toolgate serving the resource of `upstream`: its `/mcp` URL, and the upstream's
/// connection (kept for the test).
async fn gateway(upstream: &Upstream) -> (String, toolgate_mcp::Upstream) {
    let config =
        UpstreamConfig::http("slow", upstream.serve().await).call_timeout(Duration::from_secs(20));
    let (connected, pipeline) = common::imported(config).await;
    let service = McpServer::new(pipeline).http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", service);
    (
        format!("{}/mcp", common::serve_on_loopback(app).await),
        connected,
    )
}

/// A client of toolgate that counts the resource updates it is sent.
#[derive(Clone, Default)]
struct Updates {
    seen: Arc<AtomicUsize>,
    arrived: Arc<Notify>,
}

impl ClientHandler for Updates {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_resource_updated(
        &self,
        _params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.fetch_add(1, Ordering::SeqCst);
        self.arrived.notify_one();
    }
}

async fn client(url: &str) -> (RunningService<RoleClient, Updates>, Updates) {
    let updates = Updates::default();
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = within(20, "HTTP handshake", updates.clone().serve(transport))
        .await
        .expect("the MCP handshake succeeds");
    (client, updates)
}

#[allow(deprecated)]
async fn subscribe(client: &RunningService<RoleClient, Updates>) -> Result<(), ErrorData> {
    match within(
        20,
        "subscribe",
        client.subscribe(SubscribeRequestParams::new(URI)),
    )
    .await
    {
        Ok(()) => Ok(()),
        Err(rmcp::service::ServiceError::McpError(error)) => Err(error),
        Err(other) => panic!("a JSON-RPC answer, not {other:?}"),
    }
}

/// Waits until the upstream has a subscription or an unsubscription in hand.
async fn until_busy(upstream: &Upstream) {
    within(20, "the upstream's request", async {
        while !upstream.busy.load(Ordering::SeqCst) {
            upstream.arrived.notified().await;
        }
    })
    .await;
}

/// Waits until `updates` saw one update.
async fn until_updated(updates: &Updates) {
    within(10, "the update", async {
        while updates.seen.load(Ordering::SeqCst) == 0 {
            updates.arrived.notified().await;
        }
    })
    .await;
}

#[tokio::test]
#[allow(deprecated)]
async fn a_subscription_right_after_the_last_unsubscription_holds_though_the_upstream_applies_it_late()
 {
    let upstream = Upstream {
        slow_unsubscribe: true,
        ..Upstream::default()
    };
    let (url, _connected) = gateway(&upstream).await;
    let (first, _) = client(&url).await;
    let (second, updates) = client(&url).await;
    subscribe(&first).await.expect("the first subscription");

    let leaving = tokio::spawn(async move {
        let left = first.unsubscribe(UnsubscribeRequestParams::new(URI)).await;
        (first, left)
    });
    until_busy(&upstream).await;
    subscribe(&second).await.expect("the second subscription");
    let (first, left) = within(20, "unsubscribe", leaving).await.unwrap();
    left.expect("the first session is unsubscribed");

    assert!(
        upstream.is_subscribed(),
        "the subscription made after the unsubscription is the one the upstream holds"
    );
    upstream.update().await;
    until_updated(&updates).await;

    let _ = first.cancel().await;
    let _ = second.cancel().await;
}

#[tokio::test]
async fn a_subscription_right_after_the_last_subscribers_session_ended_holds_though_the_upstream_unsubscribes_late()
 {
    let upstream = Upstream {
        slow_unsubscribe: true,
        ..Upstream::default()
    };
    let (url, _connected) = gateway(&upstream).await;
    let (first, _) = client(&url).await;
    let (second, updates) = client(&url).await;
    subscribe(&first).await.expect("the first subscription");

    let unsubscribed = upstream.unsubscribed.notified();
    tokio::pin!(unsubscribed);
    unsubscribed.as_mut().enable();
    let _ = first.cancel().await;
    until_busy(&upstream).await;
    subscribe(&second).await.expect("the second subscription");
    within(20, "the unsubscription of the ended session", unsubscribed).await;

    // The second subscription came after the upstream was asked to unsubscribe: it is
    // sent after the upstream answered, so it is what the upstream holds.
    within(20, "the upstream subscribed again", async {
        while !upstream.is_subscribed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    upstream.update().await;
    until_updated(&updates).await;

    let _ = second.cancel().await;
}

#[tokio::test]
async fn a_second_subscriber_is_answered_only_once_the_upstream_answered_the_subscription() {
    let upstream = Upstream {
        slow_subscribe: true,
        ..Upstream::default()
    };
    let (url, _connected) = gateway(&upstream).await;
    let (first, _) = client(&url).await;
    let (second, updates) = client(&url).await;

    let subscribing = tokio::spawn(async move {
        let subscribed = subscribe(&first).await;
        (first, subscribed)
    });
    until_busy(&upstream).await;
    subscribe(&second).await.expect("the second subscription");
    assert!(
        upstream.answered.load(Ordering::SeqCst) >= 1,
        "the second subscriber was answered before the upstream answered the subscription"
    );
    let (first, subscribed) = within(20, "the first subscription", subscribing)
        .await
        .unwrap();
    subscribed.expect("the first subscription");

    upstream.update().await;
    until_updated(&updates).await;

    let _ = first.cancel().await;
    let _ = second.cancel().await;
}

#[tokio::test]
async fn a_second_subscriber_gets_the_refusal_of_an_upstream_that_fails_the_subscription_in_flight()
{
    let upstream = Upstream {
        slow_subscribe: true,
        refuses: true,
        ..Upstream::default()
    };
    let (url, _connected) = gateway(&upstream).await;
    let (first, _) = client(&url).await;
    let (second, _) = client(&url).await;

    let subscribing = tokio::spawn(async move {
        let subscribed = subscribe(&first).await;
        (first, subscribed)
    });
    until_busy(&upstream).await;
    let refused = subscribe(&second).await;
    assert!(
        upstream.answered.load(Ordering::SeqCst) >= 1,
        "the second subscriber was answered before the upstream answered the subscription"
    );
    assert!(refused.is_err(), "the upstream refuses every subscription");
    let (first, subscribed) = within(20, "the first subscription", subscribing)
        .await
        .unwrap();
    assert!(
        subscribed.is_err(),
        "the upstream refuses every subscription"
    );

    let _ = first.cancel().await;
    let _ = second.cancel().await;
}
