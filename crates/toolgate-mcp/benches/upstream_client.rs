//! What an HTTP upstream's POST costs the gateway in CPU, three ways: through reqwest's
//! pooled client (what rmcp's transport sends with); through hyper's pooled client alone
//! (what toolgate sends a plain-HTTP `tools/call` with, `client/post.rs`), both with each
//! connection driven by a task of its own; and on a hyper HTTP/1 connection driven in the
//! calling task (no task of its own, so no wake-up between tasks per request), which
//! toolgate does not use (docs/performance.md, "The upstream client").
//!
//! The upstream is this binary in a child process: a hyper server that answers every POST
//! with one SSE event, as an MCP server answers `tools/call`. The callers are tasks on a
//! two-worker runtime, one connection each; the two clients alternate, three rounds.
//!
//! ```sh
//! cargo bench -p toolgate-mcp --bench upstream_client              # 1, 4 and 16 connections
//! UPSTREAM_CLIENT_CALLS=20000 cargo bench -p toolgate-mcp --bench upstream_client
//! ```

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const SERVE: &str = "UPSTREAM_CLIENT_SERVE";

const CALL: &str = r#"{"jsonrpc":"2.0","id":"toolgate-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#;
const ANSWER: &str = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"toolgate-1\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}}\n\n";

fn main() {
    if let Ok(address) = std::env::var(SERVE) {
        runtime(1).block_on(serve(address));
        return;
    }
    let calls: usize = std::env::var("UPSTREAM_CLIENT_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(80_000);
    let address = free_address();
    let mut upstream = spawn_upstream(&address);
    let runtime = runtime(2);
    runtime.block_on(wait_for(&address));
    println!("connections  client     calls/s  CPU µs per call");
    for connections in [1, 4, 16] {
        for _round in 0..3 {
            for client in [Client::Reqwest, Client::Hyper, Client::InTask] {
                let (rate, cpu) = runtime.block_on(measure(&address, connections, calls, client));
                println!(
                    "{connections:>11}  {:<8} {rate:>9.0}  {cpu:>15.1}",
                    client.name()
                );
            }
        }
    }
    let _ = upstream.kill();
    let _ = upstream.wait();
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").to_string()
}

fn spawn_upstream(address: &str) -> Child {
    Command::new(std::env::current_exe().expect("this bench's path"))
        .env(SERVE, address)
        .stdin(Stdio::null())
        .spawn()
        .expect("the upstream process")
}

async fn wait_for(address: &str) {
    for _ in 0..200 {
        if TcpStream::connect(address).await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the upstream did not listen on {address}");
}

async fn serve(address: String) {
    let listener = TcpListener::bind(&address)
        .await
        .expect("the upstream's port");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let answer = hyper::service::service_fn(|request: hyper::Request<Incoming>| async {
                let _ = request.into_body().collect().await;
                let response = hyper::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Full::new(Bytes::from_static(ANSWER.as_bytes())))
                    .expect("a response");
                Ok::<_, Infallible>(response)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), answer)
                .await;
        });
    }
}

/// The clients compared.
#[derive(Clone, Copy)]
enum Client {
    /// reqwest's pooled client.
    Reqwest,
    /// hyper's pooled client (`hyper_util`'s legacy client).
    Hyper,
    /// One hyper connection per caller, driven in the caller's task.
    InTask,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Reqwest => "reqwest",
            Client::Hyper => "hyper",
            Client::InTask => "in task",
        }
    }
}

type Pooled = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// Calls a second and CPU µs per call of `calls` POSTs over `connections` connections.
async fn measure(address: &str, connections: usize, calls: usize, kind: Client) -> (f64, f64) {
    let reqwest = reqwest::Client::builder()
        .pool_max_idle_per_host(32)
        .tcp_nodelay(true)
        .build()
        .expect("a reqwest client");
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(32)
        .build(connector);
    let each = calls / connections;
    let (cpu, start) = (cpu_seconds(), Instant::now());
    let callers: Vec<_> = (0..connections)
        .map(|_| {
            let address = address.to_owned();
            let (reqwest, hyper) = (reqwest.clone(), hyper.clone());
            tokio::spawn(async move {
                match kind {
                    Client::Reqwest => call_with_reqwest(&reqwest, &address, each).await,
                    Client::Hyper => call_with_hyper(&hyper, &address, each).await,
                    Client::InTask => call_in_task(&address, each).await,
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("a caller");
    }
    let done = (each * connections) as f64;
    (
        done / start.elapsed().as_secs_f64(),
        (cpu_seconds() - cpu) / done * 1e6,
    )
}

async fn call_with_reqwest(client: &reqwest::Client, address: &str, calls: usize) {
    let url = format!("http://{address}/mcp");
    for _ in 0..calls {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(CALL)
            .send()
            .await
            .expect("an answer");
        assert!(!response.bytes().await.expect("its body").is_empty());
    }
}

async fn call_with_hyper(client: &Pooled, address: &str, calls: usize) {
    let uri: hyper::Uri = format!("http://{address}/mcp").parse().expect("a URI");
    for _ in 0..calls {
        let request = hyper::Request::post(uri.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from_static(CALL.as_bytes())))
            .expect("a request");
        let response = client.request(request).await.expect("an answer");
        let body = response.into_body().collect().await.expect("its body");
        assert!(!body.to_bytes().is_empty());
    }
}

type Upstream = (
    SendRequest<Full<Bytes>>,
    Connection<TokioIo<TcpStream>, Full<Bytes>>,
);

/// One connection, its state machine polled beside each request by the calling task.
async fn call_in_task(address: &str, calls: usize) {
    let stream = TcpStream::connect(address).await.expect("a connection");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (mut sender, mut connection): Upstream =
        hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("an HTTP/1 handshake");
    let uri: hyper::Uri = format!("http://{address}/mcp").parse().expect("a URI");
    for _ in 0..calls {
        let request = hyper::Request::post(uri.clone())
            .header("host", address)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from_static(CALL.as_bytes())))
            .expect("a request");
        let mut answer = pin!(sender.send_request(request));
        let response = poll_fn(|cx| {
            if let std::task::Poll::Ready(ended) = Pin::new(&mut connection).poll(cx) {
                panic!("the connection ended: {ended:?}");
            }
            answer.as_mut().poll(cx)
        })
        .await
        .expect("an answer");
        let mut body = response.into_body();
        let mut read = 0;
        while let Some(frame) = poll_fn(|cx| {
            if let std::task::Poll::Ready(ended) = Pin::new(&mut connection).poll(cx) {
                panic!("the connection ended: {ended:?}");
            }
            Pin::new(&mut body).poll_frame(cx)
        })
        .await
        {
            read += frame.expect("a frame").data_ref().map_or(0, Bytes::len);
        }
        assert!(read > 0);
        // The connection reads the end of the message and is ready for the next request.
        poll_fn(|cx| {
            let _ = Pin::new(&mut connection).poll(cx);
            sender.poll_ready(cx)
        })
        .await
        .expect("the connection kept alive");
    }
}

/// CPU seconds this process has used, all its threads, user and system (`/proc/self/stat`,
/// in clock ticks of 10 ms: a round of 80,000 calls spends over a second).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat (Linux)");
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a command name") + 2..]
        .split(' ')
        .collect();
    let ticks = |field: usize| fields[field].parse::<f64>().expect("a tick count");
    // utime and stime are the 14th and 15th fields; the state, the 3rd, is fields[0].
    (ticks(11) + ticks(12)) / 100.0
}
