//! Decisions whose answer from Redis is lost on the way: the approver is told the decision
//! failed, and the call runs at most once all the same. A proxy in front of Redis holds
//! back one chosen request past the gateway's Redis deadline and then lets it through, as
//! a slow Redis or network does: Redis carries it out, the gateway never hears of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{decide, suspension_id};
use crate::common::{Gateway, client, get, invoke, random_u32, redis_or_skip, user_yaml};

/// The gateway's deadline for each Redis call in these tests.
const DEADLINE: Duration = Duration::from_millis(300);

/// How long the proxy holds the chosen request: past [`DEADLINE`], so the gateway gives
/// up on it, but by less than another deadline, so that what the gateway sends next (on
/// the same connection, queued behind it) is still answered in time.
const HOLD: Duration = Duration::from_millis(450);

/// A TCP proxy in front of Redis that, once armed, holds the next request keeping an
/// approval for a retry (`keep_retry.lua`) for [`HOLD`] — and everything sent after it on
/// that connection, so the order Redis sees is kept — then passes it on.
struct HoldingProxy {
    port: u16,
    armed: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
}

impl HoldingProxy {
    async fn start(redis_url: &str) -> HoldingProxy {
        let upstream = redis_url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicUsize::new(0));
        let (armed_in, held_in) = (armed.clone(), held.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(async move {
                    let mut server_read = server_read;
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let (armed, held) = (armed_in.clone(), held_in.clone());
                tokio::spawn(async move {
                    forward_requests(&mut client_read, server_write, &armed, &held).await;
                });
            }
        });
        HoldingProxy { port, armed, held }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds the next keep of an approval for a retry.
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}

/// Passes the client's requests on to Redis one at a time, holding the one the proxy is
/// armed for.
async fn forward_requests(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    armed: &AtomicBool,
    held: &AtomicUsize,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let Ok(read) = from.read(&mut chunk).await else {
            return;
        };
        if read == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..read]);
        while let Some((length, keeps_retry)) = request(&buffer) {
            if keeps_retry && armed.swap(false, Ordering::SeqCst) {
                held.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(HOLD).await;
            }
            if to.write_all(&buffer[..length]).await.is_err() {
                return;
            }
            buffer.drain(..length);
        }
    }
}

/// The first complete request in `buffer` (a RESP array of bulk strings): its length in
/// bytes, and whether it runs `keep_retry.lua` (`EVALSHA sha 1 <base>:retries` and nine
/// arguments; using an approval has three). `None` while it is incomplete.
fn request(buffer: &[u8]) -> Option<(usize, bool)> {
    fn line(buffer: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = at + buffer.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&buffer[at..end], end + 2))
    }
    let number = |text: &[u8]| std::str::from_utf8(text).ok()?.parse::<usize>().ok();
    let (header, mut at) = line(buffer, 0)?;
    let count = number(header.strip_prefix(b"*").expect("clients send arrays"))?;
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        let (header, start) = line(buffer, at)?;
        let length = number(header.strip_prefix(b"$").expect("of bulk strings"))?;
        let end = start + length;
        if buffer.len() < end + 2 {
            return None;
        }
        parts.push(&buffer[start..end]);
        at = end + 2;
    }
    let keeps_retry = parts.len() == 13
        && (parts[0].eq_ignore_ascii_case(b"EVALSHA") || parts[0].eq_ignore_ascii_case(b"EVAL"))
        && parts[3].ends_with(b":retries");
    Some((at, keeps_retry))
}

// Two threads: starting the gateway blocks one while the proxy answers its first commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_for_a_retry_redis_kept_without_answering_lets_the_call_run_once_not_twice() {
    let test =
        "an_approval_for_a_retry_redis_kept_without_answering_lets_the_call_run_once_not_twice";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    let proxy = HoldingProxy::start(&redis).await;
    let prefix = format!("tglostretry{}x{:x}", std::process::id(), random_u32());
    let gateway = Gateway::start(&format!(
        "state:\n  url: {}\n  key_prefix: {prefix}\n  deadline: {}ms\n\
tools:\n  builtin: [echo]\nusers:\n{}{}\
policies:\n  approval:\n    tools: [echo]\n",
        proxy.url(),
        DEADLINE.as_millis(),
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["analyst"]),
    ));
    let echo = |text: &'static str| invoke(&gateway, "bob", "echo", json!({ "text": text }));
    let approve_retry = |id: String| {
        let gateway = &gateway;
        async move { decide(gateway, "alice", &id, json!({"decision": "approve_retry"})).await }
    };

    // Once as usual, so that Redis knows the script and the held request is the keep itself.
    let first = suspension_id(&echo("first").await);
    let approved = approve_retry(first).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(echo("first").await.status, 200);

    let id = suspension_id(&echo("once").await);
    proxy.arm();
    let lost = approve_retry(id.clone()).await;
    assert_eq!(proxy.held.load(Ordering::SeqCst), 1, "the keep was held");
    assert_eq!(
        lost.status, 503,
        "the approver is told it failed: {}",
        lost.body
    );
    let waiting = get(
        &client(),
        &gateway.url(&format!("/v1/suspensions/{id}")),
        Some("alice"),
    )
    .await;
    assert_eq!(
        waiting.body["status"], "waiting",
        "the call waits again: {}",
        waiting.body
    );
    // Past the undo's first tries (at once, and a second later).
    tokio::time::sleep(Duration::from_millis(2000)).await;

    let retried = echo("once").await;
    let approved = decide(&gateway, "alice", &id, json!({"decision": "approve"})).await;
    let runs = [&retried, &approved]
        .iter()
        .filter(|answer| answer.status == 200)
        .count();
    assert_eq!(
        runs, 1,
        "the call ran {runs} times: the retry answered {} {}, approving the waiting call {} {}",
        retried.status, retried.body, approved.status, approved.body
    );
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(retried.status, 202, "{}", retried.body);
}
