//! What every Redis test needs: the Redis to use (or a reason to skip), a namespace of its
//! own, the check that it left no key without an expiry, and a TCP proxy that cuts or
//! hangs the way to Redis on command.
#![allow(dead_code)] // each test file uses its own part of this module

pub mod certificates;
pub mod cluster;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use toolgate_redis::{RedisConfig, RedisConfigBuilder, RedisState};

/// The Redis the tests use: `REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Says that `test` did not run, and why, where `cargo test` shows it: written straight to
/// the process's stderr, which libtest does not capture (it captures `eprintln!`, whose
/// output a passing test never shows).
pub fn report_skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
}

/// The Redis URL when Redis answers. Outside CI a missing Redis skips the test (with the
/// reason printed); with `CI=true` it fails it.
pub async fn redis_or_skip(test: &str) -> Option<String> {
    let url = redis_url();
    let reachable = async {
        let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map_err(|e| e.to_string())
    };
    let outcome = tokio::time::timeout(Duration::from_secs(2), reachable)
        .await
        .unwrap_or_else(|_| Err("no answer within 2 s".to_owned()));
    match outcome {
        Ok(_) => Some(url),
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "{test}: Redis at {url} is required in CI ({reason}): start it, or set REDIS_URL"
            )
        }
        Err(reason) => {
            report_skip(
                test,
                &format!("no Redis at {url} ({reason}); set REDIS_URL to run it"),
            );
            None
        }
    }
}

/// A key prefix no other test run uses, so tests run in parallel and again and again.
pub fn namespace() -> String {
    format!("tgtest-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

/// A tool name no other test run uses.
pub fn tool_name(base: &str) -> String {
    format!("{base}-{:08x}", fastrand::u32(..))
}

/// A configuration under `prefix`, for tests to adjust.
pub fn config(prefix: &str) -> RedisConfigBuilder {
    RedisConfig::builder().key_prefix(prefix)
}

/// A state on `url` (a replica of its own).
pub async fn connect(url: &str, config: RedisConfigBuilder) -> RedisState {
    RedisState::connect(url, config.build())
        .await
        .expect("Redis answered a moment ago")
}

/// A replica of its own: a new connection to Redis at `url` under `prefix`, with a
/// deadline a busy test machine meets.
pub async fn replica(url: &str, prefix: &str) -> RedisState {
    connect(url, config(prefix).deadline(Duration::from_secs(5))).await
}

/// A state under a fresh prefix whose way to Redis goes through a [`Proxy`] (to cut or
/// stall), with a 200 ms deadline; `None` when `test` is skipped for want of Redis.
pub async fn behind_proxy(test: &str) -> Option<(Proxy, RedisState)> {
    let url = redis_or_skip(test).await?;
    let proxy = Proxy::start(&url).await;
    let config = config(&namespace()).deadline(Duration::from_millis(200));
    let state = connect(&proxy.url(), config).await;
    Some((proxy, state))
}

/// A plain connection, to look at what the backends wrote.
pub async fn inspect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Every key under `prefix`. A key that is not UTF-8 (the index of a caller with a tenant
/// holds 0xFF bytes) is given with those bytes replaced, and so names no key.
pub async fn keys_under(url: &str, prefix: &str) -> Vec<String> {
    let mut connection = inspect(url).await;
    let mut keys = Vec::new();
    let mut iter = connection
        .scan_match::<_, Vec<u8>>(format!("{prefix}:*"))
        .await
        .unwrap();
    while let Some(key) = iter.next_item().await {
        keys.push(String::from_utf8_lossy(&key.unwrap()).into_owned());
    }
    keys
}

/// Removes every key under `prefix`: for stores whose keys never expire (pins), once a
/// test is done with them. Returns the keys it removed.
#[allow(dead_code)]
pub async fn remove_keys_under(url: &str, prefix: &str) -> Vec<String> {
    let keys = keys_under(url, prefix).await;
    let mut connection = inspect(url).await;
    for key in &keys {
        let _: () = connection.del(key).await.unwrap();
    }
    keys
}

/// Fails when a key under `prefix` has no expiry: nothing toolgate writes may stay forever.
pub async fn assert_every_key_expires(url: &str, prefix: &str) {
    let keys = keys_under(url, prefix).await;
    let mut connection = inspect(url).await;
    for key in keys {
        let pttl: i64 = connection.pttl(&key).await.unwrap();
        // -2: gone since the scan, which is fine; -1: no expiry.
        assert_ne!(pttl, -1, "`{key}` has no expiry");
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Every connection dropped, new ones closed at once.
    Cut,
    /// Connections accepted, bytes held: Redis looks hung.
    Stall,
    /// Every chunk held this long before it is passed on: Redis looks slow.
    Slow(Duration),
}

/// A TCP proxy in front of Redis that can cut or hang the way to it.
pub struct Proxy {
    port: u16,
    /// `user:password@|db`, from the URL proxied to.
    database: String,
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to the Redis at `url` (host:port taken from it).
    pub async fn start(url: &str) -> Proxy {
        let info: redis::ConnectionInfo =
            redis::IntoConnectionInfo::into_connection_info(url).expect("a valid Redis URL");
        let upstream = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            other => panic!("the proxy forwards TCP only, not {other:?}"),
        };
        let settings = info.redis_settings();
        let auth = match (settings.username(), settings.password()) {
            (user, Some(password)) => format!("{}:{password}@", user.unwrap_or_default()),
            _ => String::new(),
        };
        let database = format!("{auth}|{}", settings.db());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, _) = watch::channel(Mode::Forward);
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept(listener, upstream, mode.clone(), accepted.clone()));
        Proxy {
            port,
            database,
            mode,
            accepted,
            task,
        }
    }

    /// The URL that reaches Redis through the proxy.
    pub fn url(&self) -> String {
        let (auth, db) = self.database.split_once('|').unwrap_or_default();
        format!("redis://{auth}127.0.0.1:{}/{db}", self.port)
    }

    /// Drops every connection and closes new ones as they come.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Holds every byte, both ways, on every connection, old and new.
    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stall);
    }

    /// Holds every chunk, both ways, for `delay` before passing it on.
    pub fn slow(&self, delay: Duration) {
        self.mode.send_replace(Mode::Slow(delay));
    }

    /// Forwards again (held bytes included).
    pub fn heal(&self) {
        self.mode.send_replace(Mode::Forward);
    }

    /// How many connections clients opened so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Cut);
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: String,
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicUsize>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        if *mode.borrow() == Mode::Cut {
            drop(client);
            continue;
        }
        let upstream = upstream.clone();
        let mode = mode.subscribe();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            // Either direction ending (or a cut) drops both sockets.
            tokio::select! {
                () = pump(client_read, server_write, mode.clone()) => {}
                () = pump(server_read, client_write, mode) => {}
            }
        });
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = mode.wait_for(|m| *m == Mode::Cut) => {
                let _ = changed;
                return;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Hold the bytes while stalled; a cut ends the connection.
        let delay = match mode.wait_for(|m| *m != Mode::Stall).await {
            Ok(m) => match *m {
                Mode::Forward => None,
                Mode::Slow(delay) => Some(delay),
                Mode::Cut | Mode::Stall => return,
            },
            Err(_) => return,
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
