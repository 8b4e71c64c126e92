//! A real axum server on loopback, embedding a pipeline as `docs/embedding.md` shows,
//! attacked over raw TCP: hostile bodies, headers and paths, panics, disconnects and
//! concurrent callers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::{Router, routing::post};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate_core::external::TypeMapKey;
use toolgate_core::prelude::*;
use toolgate_core::provider::{Scope, bind_provider};
use toolgate_core::{Hook, HookResult, hook};
use toolgate_http::{CallOptions, Caller, JsonInput, invocation_response};

/// How often the tail hooks ran.
#[derive(Default)]
struct Tail {
    released: AtomicUsize,
    finalized: AtomicUsize,
}

struct CountTail(Arc<Tail>);

#[hook]
impl Hook for CountTail {
    fn will_acquire_semaphore(&self, _: &mut ToolInvokeContext) -> HookResult {
        Ok(())
    }
    fn did_release_semaphore(&self, _: &mut ToolInvokeContext) -> HookResult {
        self.0.released.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn will_finalize_invoke(&self, _: &mut ToolInvokeContext) -> HookResult {
        self.0.finalized.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A per-user value, bound once per session.
struct AllowedHost;
impl TypeMapKey for AllowedHost {
    type Value = String;
}

/// Counts its drops: the tool's future was dropped, or finished.
struct DropFlag(Arc<AtomicUsize>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Host {
    addr: SocketAddr,
    tail: Arc<Tail>,
    slow_dropped: Arc<AtomicUsize>,
}

/// The authentication of the guide: `Authorization: Bearer <user>` names the user.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("anonymous")
        .to_owned();
    request
        .extensions_mut()
        .insert(Caller::new(User::new(user)));
    next.run(request).await
}

async fn invoke(
    State(pipeline): State<Pipeline>,
    Path(tool): Path<String>,
    call: CallOptions,
    JsonInput(input): JsonInput,
) -> Response {
    let options = call.options.timeout(Duration::from_secs(10));
    invocation_response(&pipeline.invoke_detailed(&tool, input, options).await)
}

async fn serve() -> Host {
    let tail = Arc::new(Tail::default());
    let slow_dropped = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::clone(&slow_dropped);
    let pipeline = Pipeline::builder()
        .tool(tool_fn_with_context(
            "whoami",
            "Says who is calling.",
            |_: (), ctx: &ToolInvokeContext| {
                let answer = json!({
                    "user": ctx.user().id,
                    "session": ctx.session_id(),
                    "request": ctx.request_id().to_string(),
                });
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    Ok::<_, ToolError>(answer)
                })
            },
        ))
        .tool(tool_fn("slow", "Takes a minute.", move |_: ()| {
            let flag = DropFlag(Arc::clone(&dropped));
            async move {
                let _flag = flag;
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<_, ToolError>("done")
            }
        }))
        .tool(tool_fn("boom", "Panics.", |_: ()| async {
            if true {
                panic!("secret=hunter2 in src/secret.rs");
            }
            Ok::<_, ToolError>(())
        }))
        .tool(tool_fn(
            "refused_ok",
            "Refuses with a 200.",
            |_: ()| async { Err::<(), _>(ToolError::abort("not today", "refused", 200)) },
        ))
        .tool(tool_fn("busy", "Overloaded.", |_: ()| async {
            Err::<(), _>(ToolError::RetryAfter {
                delay: Duration::from_millis(2500),
                reason: "overloaded".into(),
                code: "overloaded".into(),
                status: 503,
            })
        }))
        .tool(tool_fn_with_context(
            "host",
            "The caller's host.",
            |_: (), ctx: &ToolInvokeContext| {
                let host = ctx.get::<AllowedHost>().map(|h| (*h).clone());
                Box::pin(async move { host.map_err(ToolError::from) })
            },
        ))
        .hook(bind_provider::<AllowedHost, _>(Scope::Session, |ctx| {
            Some(format!("{}.example.com", ctx.user().id))
        }))
        .hook(CountTail(Arc::clone(&tail)))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/tools/{tool}", post(invoke))
        .layer(middleware::from_fn(authenticate))
        .with_state(pipeline);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Host {
        addr,
        tail,
        slow_dropped,
    }
}

/// A request's bytes: `POST path` with these header lines (each `name: value\r\n`, raw
/// bytes allowed), `Connection: close`, and `body` with its `Content-Length` unless the
/// headers say how the body comes.
fn request(path: &str, headers: &[u8], body: &[u8]) -> Vec<u8> {
    let mut request =
        format!("POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n").into_bytes();
    request.extend_from_slice(headers);
    let lower = String::from_utf8_lossy(headers).to_ascii_lowercase();
    if !lower.contains("content-length:") && !lower.contains("transfer-encoding:") {
        request.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body);
    request
}

const JSON: &[u8] = b"Authorization: Bearer alice\r\nContent-Type: application/json\r\n";

/// An answer read off the wire.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The head, lowercased.
    head: String,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            (n == name).then(|| v.trim())
        })
    }

    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// Sends `request` and reads the answer until the server closes the connection.
async fn send(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_answer(&mut stream).await
}

async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut bytes = Vec::new();
    // A guard, past every timeout of the server (and instant under paused time).
    tokio::time::timeout(Duration::from_secs(120), stream.read_to_end(&mut bytes))
        .await
        .expect("no answer within 120 s")
        .unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head[9..12].parse().unwrap();
    let body =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body, got {status} {body:?}"));
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body,
    }
}

#[tokio::test]
async fn a_call_with_a_json_body_is_answered_200() {
    let host = serve().await;
    let answer = send(host.addr, &request("/tools/whoami", JSON, b"null")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body["output"]["user"], "alice");
}

#[tokio::test]
async fn a_body_not_sent_as_json_is_refused_415_with_a_json_error() {
    let host = serve().await;
    for headers in [
        &b"Authorization: Bearer alice\r\nContent-Type: text/plain\r\n"[..],
        &b"Authorization: Bearer alice\r\n"[..],
        &b"Authorization: Bearer alice\r\nContent-Type: application/x-www-form-urlencoded\r\n"[..],
    ] {
        let answer = send(host.addr, &request("/tools/whoami", headers, b"null")).await;
        assert_eq!(answer.status, 415, "{answer:?}");
        assert_eq!(answer.code(), "unsupported_media_type");
    }
    let vendor =
        b"Authorization: Bearer alice\r\nContent-Type: Application/Vnd.Api+JSON; charset=utf-8\r\n";
    let answer = send(host.addr, &request("/tools/whoami", vendor, b"null")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[tokio::test]
async fn a_compressed_body_is_refused_415_not_read_as_plain_json() {
    let host = serve().await;
    let headers = [JSON, b"Content-Encoding: gzip\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, b"null")).await;
    assert_eq!(answer.status, 415, "{answer:?}");
    assert_eq!(answer.code(), "unsupported_content_encoding");
    assert_eq!(answer.header("accept-encoding"), Some("identity"));
    assert_eq!(answer.header("connection"), Some("close"));
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_413_body_too_large_with_or_without_a_length() {
    let host = serve().await;
    // Declared 3 MB, 2.1 MB sent: past axum's default limit of 2 MB.
    let body = vec![b' '; 2_100_000];
    let headers = [JSON, b"Content-Length: 3000000\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, &body)).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(answer.code(), "body_too_large");
    assert_eq!(answer.header("connection"), Some("close"));

    // Chunked, with no end in sight.
    let mut chunks = Vec::new();
    for _ in 0..40 {
        chunks.extend_from_slice(format!("{:x}\r\n", 60_000).as_bytes());
        chunks.extend_from_slice(&[b' '; 60_000]);
        chunks.extend_from_slice(b"\r\n");
    }
    let headers = [JSON, b"Transfer-Encoding: chunked\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, &chunks)).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(answer.code(), "body_too_large");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_arrives_is_refused_408_after_the_body_timeout() {
    let host = serve().await;
    // Slowloris: a length of 100 MB, one byte sent.
    let headers = [JSON, b"Content-Length: 100000000\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, b"[")).await;
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.code(), "body_timeout");
    assert_eq!(answer.header("connection"), Some("close"));
}

#[tokio::test]
async fn an_empty_or_malformed_or_too_deep_body_is_refused_400_bad_json() {
    let host = serve().await;
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for body in [
        &b""[..],
        b"  \r\n",
        b"nul!",
        b"{\"a\":",
        deep.as_bytes(),
        b"null null",
    ] {
        let answer = send(host.addr, &request("/tools/whoami", JSON, body)).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert_eq!(answer.code(), "bad_json", "{answer:?}");
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.len() < 200, "{message}");
    }
}

#[tokio::test]
async fn an_x_session_id_sent_twice_is_refused_400_bad_session_id() {
    let host = serve().await;
    let headers = [JSON, b"x-session-id: mine\r\nx-session-id: yours\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, b"null")).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(answer.code(), "bad_session_id");
}

#[tokio::test]
async fn an_unusable_x_session_id_is_refused_400_not_run_without_a_session() {
    let host = serve().await;
    let long = format!("x-session-id: {}\r\n", "s".repeat(50_000));
    for session in [
        &b"x-session-id: caf\xe9\r\n"[..],
        b"x-session-id: two words\r\n",
        b"x-session-id: \r\n",
        long.as_bytes(),
    ] {
        let headers = [JSON, session].concat();
        let answer = send(host.addr, &request("/tools/whoami", &headers, b"null")).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert_eq!(answer.code(), "bad_session_id");
        assert!(answer.body.to_string().len() < 400);
    }
    let headers = [JSON, b"x-session-id: chat-1\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, b"null")).await;
    assert_eq!(
        answer.body["output"]["session"],
        r#"[null,"alice","chat-1"]"#
    );
}

#[tokio::test]
async fn an_x_request_id_with_spaces_is_replaced_by_a_generated_one() {
    let host = serve().await;
    let headers = [JSON, b"x-request-id: a b\tc\r\n"].concat();
    let answer = send(host.addr, &request("/tools/whoami", &headers, b"null")).await;
    let request = answer.body["output"]["request"].as_str().unwrap();
    assert!(!request.contains([' ', '\t']), "{request}");
}

#[tokio::test]
async fn a_refusal_with_a_success_status_is_answered_500_not_200() {
    let host = serve().await;
    let answer = send(host.addr, &request("/tools/refused_ok", JSON, b"null")).await;
    assert_eq!(answer.status, 500, "{answer:?}");
    assert_eq!(answer.code(), "refused");
}

#[tokio::test]
async fn an_overloaded_answer_is_503_with_retry_after() {
    let host = serve().await;
    let answer = send(host.addr, &request("/tools/busy", JSON, b"null")).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.header("retry-after"), Some("3"));
    assert_eq!(answer.body["error"]["retry_after_ms"], 2500);
}

#[tokio::test]
async fn a_panicking_tool_is_answered_500_without_its_panic_and_the_server_stays_up() {
    let host = serve().await;
    let answer = send(host.addr, &request("/tools/boom", JSON, b"null")).await;
    assert_eq!(answer.status, 500, "{answer:?}");
    assert_eq!(answer.code(), "internal");
    let text = answer.body.to_string();
    assert!(!text.contains("hunter2") && !text.contains(".rs"), "{text}");
    let again = send(host.addr, &request("/tools/whoami", JSON, b"null")).await;
    assert_eq!(again.status, 200);
}

#[tokio::test]
async fn hostile_tool_names_are_answered_404_or_400_as_json() {
    let host = serve().await;
    for (path, status) in [
        ("/tools/..%2F..%2Fetc%2Fpasswd", 404),
        ("/tools/a%0D%0AX-Injected:%20yes", 404),
        ("/tools/nul%00", 404),
    ] {
        let answer = send(host.addr, &request(path, JSON, b"null")).await;
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert_eq!(answer.code(), "unknown_tool");
        assert!(answer.header("x-injected").is_none());
    }
}

#[tokio::test]
async fn a_client_that_disconnects_mid_call_cancels_the_tool_and_the_tail_hooks_run() {
    let host = serve().await;
    let mut stream = TcpStream::connect(host.addr).await.unwrap();
    stream
        .write_all(&request("/tools/slow", JSON, b"null"))
        .await
        .unwrap();
    // The call is running once the tool sleeps; then the client goes away.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(host.slow_dropped.load(Ordering::SeqCst), 0);
    drop(stream);
    for _ in 0..500 {
        if host.tail.finalized.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        host.slow_dropped.load(Ordering::SeqCst),
        1,
        "the tool ran on"
    );
    assert_eq!(host.tail.released.load(Ordering::SeqCst), 1);
    assert_eq!(host.tail.finalized.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_each_get_their_own_user_session_and_request_id() {
    let host = serve().await;
    let calls = (0..64).map(|i| {
        let addr = host.addr;
        tokio::spawn(async move {
            let headers = format!(
                "Authorization: Bearer user-{i}\r\nContent-Type: application/json\r\nx-session-id: s-{i}\r\nx-request-id: r-{i}\r\n"
            );
            let answer = send(addr, &request("/tools/whoami", headers.as_bytes(), b"null")).await;
            (i, answer)
        })
    });
    for call in futures::future::join_all(calls).await {
        let (i, answer) = call.unwrap();
        assert_eq!(
            answer.body["output"],
            json!({"user": format!("user-{i}"), "session": json!([null, format!("user-{i}"), format!("s-{i}")]).to_string(), "request": format!("r-{i}")})
        );
    }
}

/// Bob names Ann's session and must not read the value bound for Ann in it.
#[tokio::test]
async fn a_session_id_of_another_user_does_not_share_that_users_session_providers() {
    let host = serve().await;
    let ann =
        b"Authorization: Bearer ann\r\nContent-Type: application/json\r\nx-session-id: s1\r\n";
    let bob =
        b"Authorization: Bearer bob\r\nContent-Type: application/json\r\nx-session-id: s1\r\n";
    let answer = send(host.addr, &request("/tools/host", ann, b"null")).await;
    assert_eq!(answer.body["output"], "ann.example.com");
    let answer = send(host.addr, &request("/tools/host", bob, b"null")).await;
    assert_eq!(answer.body["output"], "bob.example.com", "{answer:?}");
}
