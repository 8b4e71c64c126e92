//! The HTTP clients every streamable-HTTP upstream connection shares: reqwest's, which
//! rmcp sends with, and hyper's alone ([`plain`]), which a `tools/call` to a plain-HTTP
//! upstream is sent with. Their TCP connections are kept alive and pooled, so a
//! `tools/call` costs no handshake.
//!
//! rmcp's own client (`StreamableHttpClientTransport::from_config`) turns pooling off
//! (`pool_max_idle_per_host(0)`), so every POST opened a TCP connection and left it in
//! TIME-WAIT when closed: one connection per call, and against a remote upstream the
//! ephemeral ports run out at a few hundred calls a second. A response's SSE stream is read
//! to its end by rmcp after the answer (for up to 50 ms), which is what lets hyper hand the
//! connection back; the pool below is what keeps it.
//!
//! One client for the whole process rather than one per upstream: hyper pools per host
//! (scheme, host and port), so upstreams do not share connections unless they share a
//! host, and per-caller links to one upstream reuse the same few connections. Nothing of a
//! caller rides on a connection: the credential is a header of each request.

use std::sync::OnceLock;
use std::time::Duration;

/// Idle connections kept per upstream host: more than the calls one gateway usually has
/// in flight to one host, so a burst's connections are all reused, while a host that
/// is called no more holds at most this many sockets, and only until [`IDLE_EXPIRY`].
pub const MAX_IDLE_PER_HOST: usize = 32;

/// How long an idle connection is kept. Below the 5 s after which common servers
/// (uvicorn, which Python MCP servers run on, and Node's `http`) close an idle
/// connection themselves, so toolgate never sends a request on a connection the server
/// is closing at that moment.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(4);

/// Idle time before TCP keepalive probes start on a connection: a long call's or an SSE
/// stream's connection whose peer vanished without a FIN (a host gone, a NAT entry
/// dropped) is found dead and closed instead of hanging on.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// Time between keepalive probes, once they start.
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Unanswered probes after which the connection is dead.
const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Redirects followed for one request, at most.
pub(super) const MAX_REDIRECTS: usize = 10;

/// The HTTP client could not be built (its TLS backend failed to start).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client for MCP servers ({0}); check the system's TLS setup")]
pub(crate) struct HttpClientError(#[source] reqwest::Error);

static SHARED: OnceLock<reqwest::Client> = OnceLock::new();

/// The shared client, built on first use. A failed build is not remembered: the next
/// connection attempt tries again.
///
/// # Errors
///
/// [`HttpClientError`] when the client cannot be built.
pub(crate) fn shared() -> Result<reqwest::Client, HttpClientError> {
    if let Some(client) = SHARED.get() {
        return Ok(client.clone());
    }
    let client = build()?;
    Ok(SHARED.get_or_init(|| client).clone())
}

fn build() -> Result<reqwest::Client, HttpClientError> {
    // A dead connection is never handed out: hyper drops a pooled connection as soon as
    // its peer closes it, and at checkout when it has been idle past `IDLE_EXPIRY`; a
    // request that finds its connection closed before it was written goes on a new one.
    reqwest::Client::builder()
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .pool_idle_timeout(IDLE_EXPIRY)
        .tcp_nodelay(true)
        .tcp_keepalive(TCP_KEEPALIVE)
        .tcp_keepalive_interval(TCP_KEEPALIVE_INTERVAL)
        .tcp_keepalive_retries(TCP_KEEPALIVE_RETRIES)
        .redirect(same_origin_redirects())
        .build()
        .map_err(HttpClientError)
}

/// Follows a redirect only when it keeps the request as it is: a 307 or 308 (a 301, 302
/// or 303 turns the POST into a GET without its JSON-RPC message) to the same origin (a
/// redirect elsewhere would hand the upstream's credential and session to another host).
/// Anything else comes back to rmcp as the redirect response, an error naming its status.
/// The same rule as rmcp's own client, so using this one changes nothing there.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_request = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_request || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// hyper's pooled client, without reqwest's layers over it: what a `tools/call` to a
/// plain-HTTP upstream is sent with ([`post`](super::post)). reqwest builds each request
/// through a redirect layer, a retry layer and a URL parse that a call does not need: on
/// loopback it spends 10–16 µs of CPU a request more than hyper's client alone (27 against
/// 17 µs at 16 connections; `cargo bench -p toolgate-mcp --bench upstream_client`). The pool keeps the same
/// bounds as reqwest's above: [`MAX_IDLE_PER_HOST`], [`IDLE_EXPIRY`] (enforced by a timer
/// the pool runs on tokio), and the same TCP settings.
pub(crate) type Plain = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

static PLAIN: OnceLock<Plain> = OnceLock::new();

/// The shared client of plain-HTTP upstreams, built on first use. It connects directly:
/// an upstream the environment sends through a proxy is left to reqwest ([`proxied`]).
pub(crate) fn plain() -> Plain {
    PLAIN.get_or_init(build_plain).clone()
}

static PROXIES: OnceLock<hyper_util::client::proxy::matcher::Matcher> = OnceLock::new();

/// Whether the environment's proxy settings send a request to `uri` through a proxy:
/// `HTTP_PROXY` or `ALL_PROXY` (in either case) names one, and `NO_PROXY` does not exempt
/// the host. This is reqwest's own rule (hyper-util's matcher, which reqwest's client
/// reads when it is built), read once as reqwest reads it: a proxied upstream's calls go
/// through reqwest, every other plain-HTTP upstream's on [`plain`].
pub(crate) fn proxied(uri: &http::Uri) -> bool {
    PROXIES
        .get_or_init(hyper_util::client::proxy::matcher::Matcher::from_system)
        .intercept(uri)
        .is_some()
}

pub(super) fn build_plain() -> Plain {
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_keepalive(Some(TCP_KEEPALIVE));
    connector.set_keepalive_interval(Some(TCP_KEEPALIVE_INTERVAL));
    connector.set_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .pool_idle_timeout(IDLE_EXPIRY)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}
