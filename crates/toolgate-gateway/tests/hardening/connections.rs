//! Slow, idle and surplus connections, on raw sockets: the header, body and idle timeouts,
//! the connection cap and the limits on headers of `server:`.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Gateway, key, user_yaml};

/// Longer than any wait below, even on a loaded machine: a connection still open after
/// this was not closed by the gateway.
const NEVER: Duration = Duration::from_secs(20);

fn config(server: &str) -> String {
    format!(
        "server:\n{server}tools:\n  builtin: [echo, sleep]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    )
}

async fn connect(gateway: &Gateway) -> TcpStream {
    let address = gateway.base.trim_start_matches("http://");
    TcpStream::connect(address).await.expect("connecting")
}

/// Everything the gateway sends until it closes the connection, and how long that took;
/// panics if it is still open after [`NEVER`].
async fn read_until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout(NEVER, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => panic!(
                "the connection is still open after {NEVER:?}; received: {}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

/// Reads one answer to `GET /healthz` (its length is known) and leaves the connection
/// open.
async fn read_health_answer(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    while !received.ends_with(br#"{"status":"ok"}"#) {
        let n = tokio::time::timeout(NEVER, stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .expect("reading the answer");
        assert!(
            n > 0,
            "closed before the answer: {}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n";

/// Connects with `connect` and asks for `/healthz` until a connection is answered 200 (the
/// gateway notices a closed connection a moment after the client closed it); panics with
/// `failure` after [`NEVER`].
async fn until_served<F: Future<Output = TcpStream>>(connect: impl Fn() -> F, failure: &str) {
    let deadline = Instant::now() + NEVER;
    loop {
        let mut stream = connect().await;
        let _ = stream.write_all(HEALTH).await;
        let mut first = [0u8; 12];
        let read = tokio::time::timeout(NEVER, stream.read_exact(&mut first)).await;
        if matches!(read, Ok(Ok(_))) && &first == b"HTTP/1.1 200" {
            return;
        }
        assert!(Instant::now() < deadline, "{failure} within {NEVER:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_request_head_that_stops_halfway_is_closed_after_the_header_timeout() {
    let gateway = Gateway::start(&config("  header_timeout: 300ms\n  idle_timeout: 1h\n"));
    let mut stream = connect(&gateway).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n")
        .await
        .unwrap();
    let (received, took) = read_until_closed(&mut stream).await;
    assert_eq!(received, "", "nothing is answered to half a head");
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_closed_after_the_header_timeout() {
    let gateway = Gateway::start(&config("  header_timeout: 500ms\n  idle_timeout: 1h\n"));
    let mut stream = connect(&gateway).await;
    let started = Instant::now();
    // Each byte comes well within the timeout; the head as a whole never does.
    for byte in b"GET /healthz HTTP/1.1\r\nhost: gateway\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    {
        if stream.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (received, _) = read_until_closed(&mut stream).await;
    let took = started.elapsed();
    assert_eq!(received, "");
    assert!(took >= Duration::from_millis(450), "closed after {took:?}");
    assert!(
        took < Duration::from_millis(50 * 60),
        "the drip reset the timeout: closed after {took:?}"
    );
}

#[tokio::test]
async fn a_body_that_never_comes_is_answered_408_and_the_connection_closed() {
    let gateway = Gateway::start(&config("  body_timeout: 300ms\n"));
    let mut stream = connect(&gateway).await;
    let head = format!(
        "POST /v1/tools/echo/invoke HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: 40\r\n\r\n{{\"text\":",
        key("alice")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (received, took) = read_until_closed(&mut stream).await;
    assert!(
        received.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{received}"
    );
    assert!(received.contains("connection: close\r\n"), "{received}");
    assert!(received.contains(r#""code":"body_timeout""#), "{received}");
    assert!(received.contains("server.body_timeout"), "{received}");
    assert!(
        took >= Duration::from_millis(250),
        "answered after {took:?}"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_not_the_header_one() {
    let gateway = Gateway::start(&config("  header_timeout: 200ms\n  idle_timeout: 2s\n"));
    let mut stream = connect(&gateway).await;
    stream.write_all(HEALTH).await.unwrap();
    let answer = read_health_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let (received, took) = read_until_closed(&mut stream).await;
    assert_eq!(received, "");
    // The gateway's clock starts as the answer leaves; this one once it has been read,
    // which a loaded machine may delay: a second of slack, still far past the header
    // timeout.
    assert!(
        took >= Duration::from_secs(1),
        "an idle connection was closed after {took:?}, before the idle timeout"
    );
}

#[tokio::test]
async fn requests_keep_a_connection_open_and_a_long_call_is_not_cut() {
    let gateway = Gateway::start(&config(
        "  header_timeout: 300ms\n  body_timeout: 300ms\n  idle_timeout: 1500ms\n",
    ));
    let mut stream = connect(&gateway).await;
    // Five requests 400 ms apart: each gap longer than the header timeout, all of them
    // longer than the idle timeout, and no gap near it.
    for _ in 0..5 {
        stream.write_all(HEALTH).await.unwrap();
        let answer = read_health_answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // A call that takes longer than every timeout is answered on the same connection.
    let body = r#"{"ms": 2000}"#;
    let request = format!(
        "POST /v1/tools/sleep/invoke HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        key("alice"),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (received, _) = read_until_closed(&mut stream).await;
    assert!(received.starts_with("HTTP/1.1 200 OK\r\n"), "{received}");
    assert!(received.contains(r#""slept_ms":2000"#), "{received}");
}

#[tokio::test]
async fn connections_past_the_cap_are_answered_503_and_closed() {
    let gateway = Gateway::start(&config("  max_connections: 3\n"));
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&gateway).await;
        stream.write_all(HEALTH).await.unwrap();
        read_health_answer(&mut stream).await;
        open.push(stream);
    }
    let mut surplus = connect(&gateway).await;
    let (received, _) = read_until_closed(&mut surplus).await;
    assert!(
        received.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{received}"
    );
    assert!(
        received.contains(r#""code":"too_many_connections""#),
        "{received}"
    );
    assert!(received.contains("server.max_connections"), "{received}");

    // A closed connection makes room for another.
    drop(open.pop());
    until_served(|| connect(&gateway), "no room was made").await;
}

/// A connection to the gateway from `source` (a loopback address: all of 127.0.0.0/8 is
/// this host's).
async fn connect_from(gateway: &Gateway, source: [u8; 4]) -> TcpStream {
    let address = gateway.base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .expect("binding a loopback source address");
    socket.connect(address).await.expect("connecting")
}

#[tokio::test]
async fn one_address_past_its_share_is_answered_429_while_other_addresses_still_connect() {
    // Loopback is a trusted proxy by default: here it is a client like any other.
    let gateway = Gateway::start(&config(
        "  max_connections: 10\n  max_connections_per_address: 2\n  trusted_proxies: [10.9.9.9]\n",
    ));
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from(&gateway, [127, 0, 0, 2]).await;
        stream.write_all(HEALTH).await.unwrap();
        read_health_answer(&mut stream).await;
        held.push(stream);
    }
    let mut surplus = connect_from(&gateway, [127, 0, 0, 2]).await;
    let (received, _) = read_until_closed(&mut surplus).await;
    assert!(
        received.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{received}"
    );
    assert!(received.contains("retry-after: 1\r\n"), "{received}");
    assert!(
        received.contains(r#""code":"too_many_connections_from_address""#),
        "{received}"
    );
    assert!(
        received.contains("server.max_connections_per_address"),
        "{received}"
    );

    let mut other = connect_from(&gateway, [127, 0, 0, 3]).await;
    other.write_all(HEALTH).await.unwrap();
    assert!(
        read_health_answer(&mut other)
            .await
            .starts_with("HTTP/1.1 200")
    );

    // A closed connection gives its address a place back.
    drop(held.pop());
    until_served(
        || connect_from(&gateway, [127, 0, 0, 2]),
        "no place was given back",
    )
    .await;
}

#[tokio::test]
async fn a_trusted_proxy_s_connections_have_no_share_per_address() {
    let gateway = Gateway::start(&config(
        "  max_connections: 10\n  max_connections_per_address: 1\n",
    ));
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect(&gateway).await;
        stream.write_all(HEALTH).await.unwrap();
        assert!(
            read_health_answer(&mut stream)
                .await
                .starts_with("HTTP/1.1 200")
        );
        held.push(stream);
    }
}

/// A request refused before its body is read (no key) is answered with `Connection: close`,
/// and the connection is closed: a client must not send its retry with a key on it.
#[tokio::test]
async fn a_request_refused_before_its_body_is_read_is_answered_connection_close() {
    let gateway = Gateway::start(&config(""));
    let mut stream = connect(&gateway).await;
    // The head now, the body later: the refusal cannot have read it.
    stream
        .write_all(
            b"POST /v1/tools/echo/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n",
        )
        .await
        .expect("writing the head");
    let (answer, _) = read_until_closed(&mut stream).await;
    let head = answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{answer}");
    assert!(head.contains("\r\nconnection: close"), "{answer}");
}

/// The head and the JSON body of one answer on a fresh connection to `gateway`, which
/// sends `request` (with a body still to come when it declares one it does not carry).
async fn answer_to(gateway: &Gateway, request: &str) -> (String, serde_json::Value) {
    let mut stream = connect(gateway).await;
    stream
        .write_all(request.as_bytes())
        .await
        .expect("writing the request");
    let (answer, _) = read_until_closed(&mut stream).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let body = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {answer}"));
    (head.to_ascii_lowercase(), body)
}

/// Refusals written before any handler of the gateway runs — a path no route serves, a
/// method its route does not take, a query string given a parameter twice — are JSON
/// errors like every other answer, and close a connection whose body they did not read.
#[tokio::test]
async fn refusals_made_before_any_handler_are_json_errors_that_close_a_connection_with_an_unread_body()
 {
    let gateway = Gateway::start(&config(""));
    let auth = format!("Authorization: Bearer {}\r\n", key("alice"));

    let (head, body) = answer_to(
        &gateway,
        "POST /v1/nothing-here HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert_eq!(body["error"]["code"], "not_found", "{body}");

    let (head, body) = answer_to(
        &gateway,
        &format!(
            "GET /v1/tools/echo/invoke HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(head.starts_with("http/1.1 405"), "{head}");
    assert!(head.contains("\r\nallow: post"), "{head}");
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");

    let (head, body) = answer_to(
        &gateway,
        &format!(
            "GET /v1/tools?format=openai&format=gemini HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert_eq!(body["error"]["code"], "bad_query", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("`format`"), "{message}");
}

/// A request to `/healthz` with `fields` headers of `value_len` bytes each besides `Host`
/// (and `Connection: close`, so that the gateway closes the connection after its answer).
fn health_with_headers(fields: usize, value_len: usize, body: bool) -> String {
    let value = "v".repeat(value_len);
    let mut request = String::from(if body {
        "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n"
    } else {
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    });
    for i in 0..fields {
        request.push_str(&format!("x-h{i}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request
}

/// A head over the gateway's 64 KiB of headers is answered 431 with a JSON error that
/// names the limit (not hyper's empty 431), and a connection whose body was not read is
/// closed. Over 100 fields, hyper's own bound, hyper answers its empty 431.
#[tokio::test]
async fn headers_over_the_gateways_limits_are_answered_431_with_a_json_error() {
    let gateway = Gateway::start(&config(""));

    let (head, body) = answer_to(&gateway, &health_with_headers(1, 70 * 1024, false)).await;
    assert!(head.starts_with("http/1.1 431"), "{head}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert_eq!(body["error"]["code"], "headers_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("limit of 64 KiB"), "{message}");
    assert!(message.contains("are 71 KiB"), "{message}");
    assert!(message.contains("`server.max_header_bytes`"), "{message}");

    // With a body still to come, the connection is closed after the answer.
    let (head, body) = answer_to(&gateway, &health_with_headers(1, 70 * 1024, true)).await;
    assert!(head.starts_with("http/1.1 431"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert_eq!(body["error"]["code"], "headers_too_large", "{body}");
}

/// A head just under both limits is served; `server.max_header_bytes` lets larger ones
/// through.
#[tokio::test]
async fn headers_under_the_limits_are_served_and_the_byte_limit_can_be_raised() {
    let gateway = Gateway::start(&config(""));
    // 100 fields in all: `Host`, `Connection` and 98 more, 64 KiB less a little in all.
    let value_len = (64 * 1024 - 200) / 98 - "x-h00: \r\n".len();
    let (head, body) = answer_to(&gateway, &health_with_headers(98, value_len, false)).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body["status"], "ok", "{body}");

    let gateway = Gateway::start(&config("  max_header_bytes: 128KiB\n"));
    let (head, body) = answer_to(&gateway, &health_with_headers(1, 70 * 1024, false)).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body["status"], "ok", "{body}");
}

/// A body refused part-way leaves the rest of it unread, so hyper closes the connection
/// after the answer: the answer must say `Connection: close`, or a keep-alive client sends
/// its next request on a connection being closed and gets no answer at all. A chunked body
/// declares no length, so `server.body_limit` refuses it (413) only once it is passed, on
/// `/v1` and on `/mcp` alike.
#[tokio::test]
async fn a_chunked_body_refused_part_way_is_answered_connection_close() {
    let gateway = Gateway::start(&config("  body_limit: 1KiB\n"));
    let auth = format!("authorization: Bearer {}\r\n", key("alice"));
    // 4 KiB of a body that goes on: the gateway stops reading past its limit.
    let chunk = format!("400\r\n{}\r\n", " ".repeat(1024));
    for (path, extra) in [
        ("/v1/tools/echo/invoke", ""),
        ("/v1/tool-calls?format=openai", ""),
        (
            "/mcp",
            "content-type: application/json\r\naccept: application/json, text/event-stream\r\n",
        ),
    ] {
        let mut stream = connect(&gateway).await;
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: gateway\r\n{auth}{extra}transfer-encoding: chunked\r\n\r\n{}",
            chunk.repeat(4)
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let (received, _) = read_until_closed(&mut stream).await;
        let head = received
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 413"), "{path}: {received}");
        assert!(head.contains("\r\nconnection: close"), "{path}: {received}");
    }
}
