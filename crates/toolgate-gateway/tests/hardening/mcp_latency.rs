//! `tools/call` on `/mcp` over one kept-alive connection answers in about the time the
//! call takes, not in the 40 ms a delayed acknowledgement adds to an answer written in
//! pieces.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Gateway, key, user_yaml};

/// How many calls are timed.
const CALLS: u32 = 40;

/// What a delayed acknowledgement costs a call on Linux (its minimum delay).
const DELAYED_ACK: Duration = Duration::from_millis(40);

/// One HTTP/1.1 connection to the gateway that sends each request in one write (so that
/// the client's own writes never wait on an acknowledgement) and reads whole answers.
struct Connection {
    stream: TcpStream,
    address: String,
    buffer: Vec<u8>,
}

/// An answer: its head (status line and headers, lower-cased) and its body.
struct Answer {
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            (n.trim() == name).then(|| v.trim())
        })
    }
}

impl Connection {
    async fn open(gateway: &Gateway) -> Connection {
        let address = gateway.base.trim_start_matches("http://").to_owned();
        let stream = TcpStream::connect(&address).await.expect("connecting");
        Connection {
            stream,
            address,
            buffer: Vec::new(),
        }
    }

    async fn post(&mut self, session: Option<&str>, body: &serde_json::Value) -> Answer {
        let body = body.to_string();
        let session = session
            .map(|id| format!("mcp-session-id: {id}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             {session}content-length: {}\r\n\r\n{body}",
            self.address,
            key("alice"),
            body.len()
        );
        self.stream
            .write_all(request.as_bytes())
            .await
            .expect("sending");
        self.read_answer().await
    }

    /// More bytes into the buffer; panics when the connection closes or stalls for long.
    async fn fill(&mut self) {
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(20), self.stream.read(&mut chunk))
            .await
            .expect("an answer within 20 s")
            .expect("reading");
        assert!(n > 0, "the connection was closed");
        self.buffer.extend_from_slice(&chunk[..n]);
    }

    async fn read_answer(&mut self) -> Answer {
        let head_end = loop {
            if let Some(at) = find(&self.buffer, b"\r\n\r\n") {
                break at;
            }
            self.fill().await;
        };
        let head = String::from_utf8_lossy(&self.buffer[..head_end]).to_ascii_lowercase();
        self.buffer.drain(..head_end + 4);
        let mut answer = Answer {
            head,
            body: String::new(),
        };
        if let Some(length) = answer.header("content-length") {
            let length: usize = length.parse().expect("a length");
            while self.buffer.len() < length {
                self.fill().await;
            }
            answer.body = String::from_utf8_lossy(&self.buffer[..length]).into_owned();
            self.buffer.drain(..length);
        } else {
            assert_eq!(
                answer.header("transfer-encoding"),
                Some("chunked"),
                "{}",
                answer.head
            );
            loop {
                let line_end = loop {
                    if let Some(at) = find(&self.buffer, b"\r\n") {
                        break at;
                    }
                    self.fill().await;
                };
                let size = std::str::from_utf8(&self.buffer[..line_end]).expect("a chunk size");
                let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
                while self.buffer.len() < line_end + 2 + size + 2 {
                    self.fill().await;
                }
                let data = &self.buffer[line_end + 2..line_end + 2 + size];
                answer.body.push_str(&String::from_utf8_lossy(data));
                self.buffer.drain(..line_end + 2 + size + 2);
                if size == 0 {
                    break;
                }
            }
        }
        answer
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test]
async fn calls_on_one_kept_alive_mcp_connection_do_not_wait_for_delayed_acks() {
    let gateway = Gateway::start(&format!(
        "tools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    ));
    let mut connection = Connection::open(&gateway).await;
    let initialized = connection
        .post(
            None,
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "latency-test", "version": "0"}}}),
        )
        .await;
    assert!(
        initialized.head.starts_with("http/1.1 200"),
        "{}",
        initialized.head
    );
    let session = initialized
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let notified = connection
        .post(
            Some(&session),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
    assert!(
        notified.head.starts_with("http/1.1 202"),
        "{}",
        notified.head
    );

    let call = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": format!("call {id}")}}})
    };
    // The first call on a connection is fast anyway (the kernel acknowledges at once at
    // the start of a connection); the stall came from the second call on.
    connection.post(Some(&session), &call(1)).await;
    let started = Instant::now();
    for id in 2..2 + CALLS {
        let answer = connection.post(Some(&session), &call(id)).await;
        assert!(answer.head.starts_with("http/1.1 200"), "{}", answer.head);
        assert!(
            answer.body.contains(&format!("call {id}")) && answer.body.contains("\"result\""),
            "{}",
            answer.body
        );
    }
    let took = started.elapsed();
    // Half of what the stalls alone cost (40 × 40 ms), with room for a loaded machine and
    // a debug build (about 2 ms a call unloaded).
    assert!(
        took < DELAYED_ACK * CALLS / 2,
        "{CALLS} calls on one connection took {took:?} ({:?} a call)",
        took / CALLS
    );
}
