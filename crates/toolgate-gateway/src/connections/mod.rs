//! Accepting connections and serving HTTP/1.1 on them, with the limits a server facing
//! careless or hostile clients needs: a cap on open connections, and header, body and
//! idle timeouts (`server.max_connections`, `max_connections_per_address`,
//! `header_timeout`, `body_timeout`, `idle_timeout`).
//!
//! - A connection past the cap is answered 503 and closed at once; it costs no task.
//! - A connection from an address that holds its share of the cap already
//!   ([`share`]) is answered 429 and closed at once, before it counts against the cap.
//! - A request whose line and headers do not arrive within the header timeout (from its
//!   first byte, or from connecting) has its connection closed.
//! - A body that does not arrive within the body timeout fails where it is read, and the
//!   request is answered 408 with `Connection: close`.
//! - A kept-alive connection with no request for the idle timeout is closed.
//! - While the gateway drains ([`Phase::Draining`]) connections are still accepted, so
//!   that health checks reach it; the connections open when the drain starts close once
//!   the answer they are sending is sent (idle ones at once), and every answer on a
//!   connection opened during the drain carries `Connection: close`. The cap and the
//!   timeouts hold as before.
//! - hyper buffers a request's head up to twice the gateway's own limit on headers
//!   (`server.max_header_bytes`) at least, so that a request over it reaches the router
//!   and is answered 431 with a JSON error that says so (`crate::http`), not with hyper's
//!   empty 431. See [`head_buffer`].
//! - Sockets are set to `TCP_NODELAY`. An answer written in pieces (a streamed MCP
//!   answer: its head and first event, the next event, the end of the stream) must not
//!   hold a piece back until the client acknowledges the previous one (Nagle's
//!   algorithm): on a kept-alive connection the client delays that acknowledgement by
//!   40 ms, so every call on a reused `/mcp` connection took 40 ms more.

mod body;
mod share;
mod watchdog;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tower_service::Service;

use body::{Answering, TimedBody};
use share::AddressShare;
use watchdog::{Activity, Expired, InFlight, Watchdog, WatchedIo};

use crate::config::{ServerConfig, TrustedProxy};

/// The limits every connection is held to.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// The most connections open at once.
    pub max_connections: u32,
    /// The most connections open at once from one client address (not counting a trusted
    /// proxy's).
    pub max_connections_per_address: u32,
    /// How long a request's line and headers may take to arrive.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// The most bytes of headers the gateway takes in a request (its router answers 431
    /// past it); hyper is let buffer more, see [`head_buffer`].
    pub max_header_bytes: usize,
}

impl From<&ServerConfig> for ConnectionLimits {
    fn from(server: &ServerConfig) -> Self {
        ConnectionLimits {
            max_connections: server.max_connections,
            max_connections_per_address: server.max_connections_per_address,
            header_timeout: server.header_timeout,
            body_timeout: server.body_timeout,
            idle_timeout: server.idle_timeout,
            max_header_bytes: server.max_header_bytes.0,
        }
    }
}

/// hyper's own bound on the bytes of a connection it buffers (`max_buf_size`, about
/// 408 KiB), which also bounds a request's head: past it hyper answers an empty 431
/// itself.
const HYPER_MAX_BUF_SIZE: usize = 8192 + 4096 * 100;

/// The most bytes hyper buffers of a connection (`max_buf_size`), and so of a request's
/// head: twice the gateway's own `max_header_bytes`, and never less than hyper's default,
/// so that a request in the ordinary range over the gateway's limit reaches the router
/// and is answered 431 with a JSON error that says so. Past this hyper still answers its
/// own empty 431 while parsing, before any of the gateway's code runs; so it does past
/// 100 header fields, its default, which is left as it is: a higher one would make hyper
/// parse every head into arrays on the heap instead of the stack.
///
/// It costs no memory up front: hyper's read buffer starts at 8 KiB and grows as a head or
/// body needs it, up to this bound, so a connection takes about that much at worst
/// (408 KiB with the default `max_header_bytes`, 512 KiB at its 256 KiB bound), times
/// `max_connections` for all of them.
fn head_buffer(max_header_bytes: usize) -> usize {
    (max_header_bytes * 2).max(HYPER_MAX_BUF_SIZE)
}

/// What a connection past the cap is told before it is closed.
static OVER_CAPACITY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let body = r#"{"error":{"code":"too_many_connections","message":"the gateway has all the connections it takes (`server.max_connections`): retry in a moment"}}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
});

/// What a connection from an address that holds its share is told before it is closed.
static OVER_SHARE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let body = r#"{"error":{"code":"too_many_connections_from_address","message":"this address holds all the connections the gateway takes from one address (`server.max_connections_per_address`): send requests on the connections it has open (keep-alive), or close some and retry"}}"#;
    format!(
        "HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
});

/// What the server is doing, as its connections see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Serving as usual.
    Serving,
    /// Draining for shutdown: still accepting, but every connection closes after its
    /// answer.
    Draining,
    /// Stopping: no more connections are accepted, and the open ones close once the
    /// answer they are sending is sent.
    Closing,
}

/// How long to wait before accepting again after an error such as running out of file
/// descriptors, which retrying at once would only repeat.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `router` on the connections of `listener` as `phase` says: as usual while
/// [`Serving`](Phase::Serving); while [`Draining`](Phase::Draining), still accepting but
/// closing every connection after its answer; once [`Closing`](Phase::Closing), no more
/// accepting: each connection finishes the answer it is sending (idle ones close at
/// once), and this returns when every connection is closed.
///
/// Connections from the `trusted_proxies` have no share per address.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    trusted_proxies: Vec<TrustedProxy>,
    mut phase: watch::Receiver<Phase>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections as usize));
    let share = AddressShare::new(limits.max_connections_per_address, trusted_proxies);
    let mut last_refusal_logged: Option<tokio::time::Instant> = None;
    let mut last_share_refusal_logged: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = phase.wait_for(|phase| *phase == Phase::Closing) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = share.enter(peer.ip()) else {
            refuse(&stream, &OVER_SHARE);
            metrics::counter!("toolgate_http_connections_refused_total", "reason" => "max_connections_per_address").increment(1);
            if once_in_10_s(&mut last_share_refusal_logged) {
                tracing::warn!(
                    client = %peer.ip(),
                    max_connections_per_address = limits.max_connections_per_address,
                    "refusing connections from an address that holds `server.max_connections_per_address`"
                );
            }
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refuse(&stream, &OVER_CAPACITY);
            metrics::counter!("toolgate_http_connections_refused_total", "reason" => "max_connections").increment(1);
            if once_in_10_s(&mut last_refusal_logged) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "refusing connections: `server.max_connections` are open"
                );
            }
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        let router = router.clone();
        let phase = phase.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, limits, phase).await;
            drop((permit, slot));
        });
    }
    drop(listener);
    // Every connection holds a permit until it is closed.
    let _all = permits.acquire_many(limits.max_connections).await;
}

/// Errors of one connection that came and went before it was accepted.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Tells a connection refused at once why (`answer`), if its socket takes the answer at
/// once (a fresh socket's send buffer is empty, so it does), and drops it.
fn refuse(stream: &TcpStream, answer: &[u8]) {
    let _ = stream.try_write(answer);
}

/// Whether a warning last said at `last` may be said again (at most once in 10 s, so that
/// a flood of refusals is not a flood of log lines); notes the time when it may.
fn once_in_10_s(last: &mut Option<tokio::time::Instant>) -> bool {
    let due = last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
    if due {
        *last = Some(tokio::time::Instant::now());
    }
    due
}

/// Serves one connection until it closes, its watchdog expires, or the server drains or
/// closes and the request it is answering is done.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    mut phase: watch::Receiver<Phase>,
) {
    // Opened during the drain: its answers say `Connection: close`, so that it serves a
    // health check and closes; shutting it down at once would close it before it reads
    // the check.
    let opened_draining = *phase.borrow_and_update() == Phase::Draining;
    let activity = Activity::new();
    let io = TokioIo::new(WatchedIo::new(stream, activity.clone()));
    let service = ConnectionService {
        router,
        peer: ConnectInfo(peer),
        activity: activity.clone(),
        body_timeout: limits.body_timeout,
        close_after_answer: opened_draining,
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watchdog keeps the header and idle timeouts; hyper's would be both at once.
    builder.header_read_timeout(None);
    builder.max_buf_size(head_buffer(limits.max_header_bytes));
    let connection = builder.serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    let mut watchdog = Watchdog::new(activity, limits.header_timeout, limits.idle_timeout);
    let mut stopping = std::pin::pin!(async move {
        let _ = phase
            .wait_for(|phase| match phase {
                Phase::Serving => false,
                Phase::Draining => !opened_draining,
                Phase::Closing => true,
            })
            .await;
    });
    let mut shutting_down = false;
    let expired = std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = connection.as_mut().poll(cx) {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return Poll::Ready(None);
        }
        if !shutting_down && stopping.as_mut().poll(cx).is_ready() {
            shutting_down = true;
            connection.as_mut().graceful_shutdown();
            // The connection may close at once (nothing in flight): poll it again.
            cx.waker().wake_by_ref();
        }
        watchdog.poll_expired(cx).map(Some)
    })
    .await;
    match expired {
        Some(Expired::Header) => tracing::debug!("closing a connection: header timeout"),
        Some(Expired::Idle) => tracing::debug!("closing an idle connection"),
        None => {}
    }
}

/// The router, as the hyper service of one connection.
#[derive(Clone)]
struct ConnectionService {
    router: Router,
    /// The client's address (or its proxy's), in every request's extensions as axum's
    /// routers served with connection information have it.
    peer: ConnectInfo<SocketAddr>,
    activity: Arc<Activity>,
    body_timeout: Duration,
    /// Whether every answer says `Connection: close`.
    close_after_answer: bool,
}

impl hyper::service::Service<http::Request<Incoming>> for ConnectionService {
    type Response = http::Response<body::AnswerBody>;
    type Error = Infallible;
    type Future = Answering<<Router as Service<http::Request<Body>>>::Future>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::enter(&self.activity);
        let timeout = self.body_timeout;
        let (parts, body) = request.into_parts();
        let (body, body_read) = TimedBody::new(body, timeout);
        let mut request = http::Request::from_parts(parts, Body::new(body));
        request.extensions_mut().insert(self.peer);
        // A router is always ready (`poll_ready` answers `Ready` without looking).
        let future = self.router.clone().call(request);
        Answering {
            future,
            in_flight: Some(in_flight),
            close_connection: self.close_after_answer,
            body_read,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_takes_heads_well_past_the_gateways_limit() {
        for bytes in [1024, 64 * 1024, 200 * 1024, 256 * 1024] {
            let buffer = head_buffer(bytes);
            // hyper panics below 8 KiB, and the head must fit with room to spare.
            assert!(
                buffer >= HYPER_MAX_BUF_SIZE && buffer >= 2 * bytes,
                "{bytes}"
            );
        }
        assert_eq!(head_buffer(256 * 1024), 512 * 1024);
    }
}
