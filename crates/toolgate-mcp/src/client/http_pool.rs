//! The HTTP client every streamable-HTTP upstream connection shares: its TCP connections
//! are kept alive and pooled, so a `tools/call` costs no handshake.
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
const MAX_REDIRECTS: usize = 10;

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
