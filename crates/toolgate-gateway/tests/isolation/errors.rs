//! What a caller reads and what a log shows: an upstream that is down is 503
//! `upstream_unavailable` with `Retry-After`; no answer names a Rust type, whatever fails;
//! control characters an upstream writes are escaped in the log; a message too large to
//! read and a body declared over the limit are answered at once, not at a deadline.
//!
//! The upstream is `tests/upstreams/faulty.py` (official Python MCP SDK), over stdio and
//! over streamable HTTP.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{
    Answer, Gateway, client, key, mcp, mcp_2026, open_session, python, python_mcp_available,
    user_yaml,
};

const FAULTY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/faulty.py");

/// `faulty.py` serving streamable HTTP on a free loopback port; killed on drop (or by
/// [`stop`](Self::stop), to be an upstream that is down).
struct FaultyHttp {
    child: Child,
    url: String,
}

impl FaultyHttp {
    fn start() -> FaultyHttp {
        let mut child = Command::new(python())
            .args([FAULTY, "http"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting faulty.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("faulty.py prints its address");
        let url = line
            .trim()
            .strip_prefix("faulty listening on ")
            .unwrap_or_else(|| panic!("unexpected output {line:?}"))
            .to_owned();
        FaultyHttp { child, url }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FaultyHttp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `upstreams:` entry of `faulty.py` over stdio, its tools prefixed `local_`.
fn stdio_upstream() -> String {
    format!(
        "  - {{ name: local, command: \"{}\", args: [\"{FAULTY}\"], prefix: local_, call_timeout: 60s }}\n",
        python()
    )
}

/// The `upstreams:` entry of `faulty.py` over HTTP at `url`, its tools prefixed `web_`.
fn http_upstream(url: &str) -> String {
    format!(
        "  - {{ name: web, url: \"{url}\", prefix: web_, call_timeout: 60s, connect_timeout: 2s }}\n"
    )
}

/// What in `text` reads as a Rust type or path: `a::b`, a generic `Name<T>`, a crate name
/// of the workspace or of rmcp, rmcp's "Transport [" prefix, or a primitive type's name.
fn type_name_in(text: &str) -> Option<String> {
    for marker in ["Transport [", "rmcp", "toolgate_", "reqwest::", "tokio::"] {
        if text.contains(marker) {
            return Some(marker.to_owned());
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for i in 1..chars.len().saturating_sub(2) {
        if chars[i] == ':' && chars[i + 1] == ':' && ident(chars[i - 1]) && ident(chars[i + 2]) {
            return Some(
                chars[i.saturating_sub(20)..(i + 20).min(chars.len())]
                    .iter()
                    .collect(),
            );
        }
        if chars[i] == '<' && ident(chars[i - 1]) && chars[i + 1].is_ascii_alphabetic() {
            return Some(
                chars[i.saturating_sub(20)..(i + 20).min(chars.len())]
                    .iter()
                    .collect(),
            );
        }
    }
    let words: Vec<&str> = text.split(|c: char| !ident(c)).collect();
    if let Some(pair) = words.windows(2).find(|pair| {
        ["struct", "enum"].contains(&pair[0]) && pair[1].starts_with(|c: char| c.is_uppercase())
    }) {
        return Some(pair.join(" "));
    }
    words
        .into_iter()
        .find(|word| {
            [
                "u8", "u16", "u32", "u64", "usize", "i32", "i64", "isize", "f32", "f64",
            ]
            .contains(word)
        })
        .map(str::to_owned)
}

/// Asserts that nothing of `answer` a caller reads — body and headers — names a Rust type.
fn assert_plain(what: &str, status: u16, headers: &reqwest::header::HeaderMap, body: &str) {
    let mut read = body.to_owned();
    for (name, value) in headers {
        read.push_str(&format!("\n{name}: {}", value.to_str().unwrap_or_default()));
    }
    if let Some(found) = type_name_in(&read) {
        panic!("{what} ({status}) names a Rust type ({found:?}):\n{read}");
    }
}

/// Sends `request` and checks the answer; its status and body.
async fn plain(what: &str, request: reqwest::RequestBuilder) -> (u16, String) {
    let response = request.send().await.expect("the gateway answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.expect("the answer's body");
    assert_plain(what, status, &headers, &body);
    (status, body)
}

#[tokio::test]
async fn a_down_http_upstream_is_answered_503_upstream_unavailable_with_retry_after() {
    let test = "a_down_http_upstream_is_answered_503_upstream_unavailable_with_retry_after";
    if !python_mcp_available(test) {
        return;
    }
    let mut upstream = FaultyHttp::start();
    let gateway = Gateway::start(&format!(
        "users:\n{}upstreams:\n{}",
        user_yaml("alice", &["admin"]),
        http_upstream(&upstream.url)
    ));
    let up = crate::common::invoke(&gateway, "alice", "web_ping", json!({})).await;
    assert_eq!(up.status, 200, "{:?}", up.body);

    upstream.stop();
    // The first call after it went down finds the connection gone; the next ones find the
    // upstream still unreachable. Each is the same answer.
    for attempt in 1..=3 {
        let answer = crate::common::invoke(&gateway, "alice", "web_ping", json!({})).await;
        assert_eq!(answer.status, 503, "call {attempt}: {:?}", answer.body);
        assert_eq!(
            answer.error_code(),
            "upstream_unavailable",
            "{:?}",
            answer.body
        );
        let retry_after: u64 = answer
            .header("retry-after")
            .unwrap_or_else(|| panic!("call {attempt}: no Retry-After: {:?}", answer.body))
            .parse()
            .expect("whole seconds");
        assert!((1..=60).contains(&retry_after), "{retry_after}");
        assert_plain(
            "a call of a down upstream",
            answer.status,
            &answer.headers,
            &answer.body.to_string(),
        );
        assert!(
            answer.error_message().contains("`web`"),
            "the message names the upstream: {:?}",
            answer.body
        );
    }
}

#[tokio::test]
async fn an_http_upstream_refusing_the_credential_is_a_502_saying_so() {
    let test = "an_http_upstream_refusing_the_credential_is_a_502_saying_so";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = FaultyHttp::start();
    let gateway = Gateway::start(&format!(
        "users:\n{}upstreams:\n{}",
        user_yaml("alice", &["admin"]),
        http_upstream(&upstream.url)
    ));
    let revoked = crate::common::invoke(&gateway, "alice", "web_revoke", json!({})).await;
    assert_eq!(revoked.status, 200, "{:?}", revoked.body);
    // Reached, and refused: not "unavailable", as waiting does not help.
    let answer = crate::common::invoke(&gateway, "alice", "web_ping", json!({})).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert!(
        answer
            .error_message()
            .contains("MCP server `web` refused the credential toolgate sent it"),
        "{:?}",
        answer.body
    );
    assert_plain(
        "a refused credential",
        answer.status,
        &answer.headers,
        &answer.body.to_string(),
    );
}

#[tokio::test]
async fn control_characters_an_upstream_writes_are_escaped_in_the_log() {
    let test = "control_characters_an_upstream_writes_are_escaped_in_the_log";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = Gateway::start(&format!(
        "users:\n{}upstreams:\n{}",
        user_yaml("alice", &["admin"]),
        stdio_upstream()
    ));
    let answer = crate::common::invoke(&gateway, "alice", "local_forge_log", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    gateway
        .wait_for_log("harmless", 1, Duration::from_secs(30))
        .await;
    let log = gateway.stderr();
    let line = log
        .lines()
        .find(|line| line.contains("harmless"))
        .expect("the upstream's line");
    // The forged "log line" stays inside the upstream's, visibly.
    assert!(
        line.contains(r"harmless\r2026-11-27T19:00:00.000000Z  WARN toolgate::pins"),
        "{line:?}"
    );
    let raw: Vec<char> = log
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        raw.is_empty(),
        "the log holds control characters {raw:?}:\n{log:?}"
    );
}

#[tokio::test]
async fn a_message_too_large_from_a_stdio_upstream_is_answered_at_once() {
    let test = "a_message_too_large_from_a_stdio_upstream_is_answered_at_once";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = Gateway::start(&format!(
        "server:\n  request_timeout: 120s\nusers:\n{}upstreams:\n{}",
        user_yaml("alice", &["admin"]),
        stdio_upstream()
    ));
    // The call's deadline is 60 s (`call_timeout`); a loaded machine reads 16 MiB of a pipe
    // in far less than 20.
    let bound = Duration::from_secs(20);
    let client = reqwest::Client::builder()
        .timeout(bound)
        .build()
        .expect("a client");
    let started = Instant::now();
    let response = client
        .post(gateway.url("/v1/tools/local_huge/invoke"))
        .bearer_auth(key("alice"))
        .json(&json!({}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("no answer within {bound:?} ({e})"));
    let answer = Answer::read(response).await;
    let took = started.elapsed();
    println!("a 100 MB line answered in {took:?} (call_timeout 60 s)");
    assert!(took < bound, "answered after {took:?}");
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert!(
        answer
            .error_message()
            .contains("sent a message of more than 16 MiB"),
        "{:?}",
        answer.body
    );
    assert_plain(
        "a message too large",
        answer.status,
        &answer.headers,
        &answer.body.to_string(),
    );
    // The connection that carried it was closed; the next call gets a new one.
    let next = crate::common::invoke(&gateway, "alice", "local_ping", json!({})).await;
    assert_eq!(next.status, 200, "{:?}", next.body);
}

/// A gateway with one stdio upstream (faulty.py) shared by alice and bob; bob's slow call
/// is waiting on its connection when alice calls `tool`. Bob's call must answer, whatever
/// alice's did: the gateway and alice's answer. `None` when the test is skipped.
async fn beside_a_slow_call(test: &str, tool: &str) -> Option<(Gateway, Answer)> {
    if !python_mcp_available(test) {
        return None;
    }
    let gateway = Gateway::start(&format!(
        "server:\n  request_timeout: 120s\nusers:\n{}{}upstreams:\n{}",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["admin"]),
        stdio_upstream()
    ));
    // The connection is up before either call, so both go on the same one.
    let ping = crate::common::invoke(&gateway, "bob", "local_ping", json!({})).await;
    assert_eq!(ping.status, 200, "{:?}", ping.body);
    let slow = crate::common::invoke(&gateway, "bob", "local_slow", json!({"seconds": 3}));
    let alices = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        crate::common::invoke(&gateway, "alice", tool, json!({})).await
    };
    let (slow, alices) = tokio::join!(slow, alices);
    assert_eq!(
        (
            slow.status,
            &slow.body["output"]["structuredContent"]["result"]
        ),
        (200, &json!("done")),
        "bob's call is not alice's: {:?}",
        slow.body
    );
    Some((gateway, alices))
}

/// An answer too long to read fails its own call only: a call of another caller waiting
/// on the same stdio connection gets its answer, and the connection stays.
#[tokio::test]
async fn an_answer_too_long_to_read_fails_its_own_call_and_not_the_others_on_its_connection() {
    let test = "an_answer_too_long_to_read_fails_its_own_call_and_not_the_others_on_its_connection";
    let Some((_gateway, huge)) = beside_a_slow_call(test, "local_huge_answer").await else {
        return;
    };
    assert_eq!(huge.status, 502, "{:?}", huge.body);
    assert!(
        huge.error_message()
            .contains("answered with more than 16 MiB"),
        "{:?}",
        huge.body
    );
}

/// A notification too long to read (a log message carrying 20 MB) is dropped: it is nobody's
/// answer, so neither its own call nor another caller's call waiting on the same stdio
/// connection fails, and the connection stays.
#[tokio::test]
async fn a_notification_too_long_to_read_is_dropped_and_no_call_on_its_connection_fails() {
    let test = "a_notification_too_long_to_read_is_dropped_and_no_call_on_its_connection_fails";
    let Some((gateway, logged)) = beside_a_slow_call(test, "local_huge_log").await else {
        return;
    };
    assert_eq!(logged.status, 200, "{:?}", logged.body);
    assert_eq!(
        logged.body["output"]["structuredContent"]["result"], "logged",
        "{:?}",
        logged.body
    );
    // The same program serves on: the connection was not restarted.
    let again = crate::common::invoke(&gateway, "alice", "local_huge_log", json!({})).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    let log = gateway.stderr();
    assert!(
        log.contains("a request or notification too long to read"),
        "{log}"
    );
    assert!(!log.contains("MCP server reconnected"), "{log}");
}

/// Sends `head` (a request's line and headers) on a new connection and reads the answer's
/// status line, within `bound`.
async fn status_line(gateway: &Gateway, head: &str, bound: Duration) -> String {
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connecting");
    stream.write_all(head.as_bytes()).await.expect("writing");
    let mut read = Vec::new();
    let mut buffer = [0u8; 4096];
    let reading = async {
        while !read.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await.expect("reading");
            if n == 0 {
                break;
            }
            read.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(bound, reading)
        .await
        .unwrap_or_else(|_| panic!("no answer within {bound:?} to:\n{head}"));
    String::from_utf8_lossy(&read)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_body_declared_over_the_limit_is_answered_413_at_once() {
    let gateway = Gateway::start(&format!(
        "server:\n  body_limit: 1MiB\n  body_timeout: 30s\ntools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    ));
    // The body never comes: the answer must not wait for it (30 s) to say it is too large.
    let bound = Duration::from_secs(5);
    for path in ["/v1/tools/echo/invoke", "/mcp"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             content-length: 50000000\r\n\r\n",
            key("alice")
        );
        let status = status_line(&gateway, &head, bound).await;
        assert!(status.starts_with("HTTP/1.1 413"), "{path}: {status}");
    }
}

/// `/mcp` with a raw body (and headers) as `user`, in `session` if given.
fn mcp_raw(
    gateway: &Gateway,
    credential: Option<&str>,
    session: Option<&str>,
    method: Method,
    body: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut request = client()
        .request(method, gateway.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(credential) = credential {
        request = request.bearer_auth(credential);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    if let Some(body) = body {
        request = request.body(body.to_owned());
    }
    request
}

#[tokio::test]
async fn no_error_answer_names_a_rust_type() {
    let test = "no_error_answer_names_a_rust_type";
    if !python_mcp_available(test) {
        return;
    }
    let mut web = FaultyHttp::start();
    let gateway = Gateway::start(&format!(
        "server:\n  body_limit: 4KiB\ntools:\n  builtin: [echo, calculator, sleep]\nusers:\n{}{}\
         upstreams:\n{}{}\
         policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, roles: [admin] }}\n  \
         rate_limits:\n    - {{ name: once, rate: 1/minute, tools: [calculator] }}\n",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &[]),
        stdio_upstream(),
        http_upstream(&web.url),
    ));
    let http = client();
    let alice = key("alice");
    let invoke = |tool: &str| gateway.url(&format!("/v1/tools/{tool}/invoke"));
    let mut statuses = Vec::new();

    // /v1: the caller's mistakes.
    let v1: Vec<(&str, reqwest::RequestBuilder)> = vec![
        (
            "bad JSON",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .header("content-type", "application/json")
                .body("{not json"),
        ),
        (
            "JSON of the wrong type",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .json(&json!([1, 2])),
        ),
        (
            "a field of the wrong type",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .json(&json!({"text": 5})),
        ),
        (
            "a number where a whole number goes",
            http.post(invoke("sleep"))
                .bearer_auth(&alice)
                .json(&json!({"ms": "soon"})),
        ),
        (
            "a negative whole number",
            http.post(invoke("sleep"))
                .bearer_auth(&alice)
                .json(&json!({"ms": -1})),
        ),
        (
            "an unknown field",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .json(&json!({"text": "x", "extra": true})),
        ),
        (
            "a bad expression",
            http.post(invoke("calculator"))
                .bearer_auth(&alice)
                .json(&json!({"expression": "1 +* 2"})),
        ),
        (
            "an unknown tool",
            http.post(invoke("no_such_tool"))
                .bearer_auth(&alice)
                .json(&json!({})),
        ),
        (
            "no key",
            http.post(invoke("echo")).json(&json!({"text": "x"})),
        ),
        (
            "a bad key",
            http.post(invoke("echo"))
                .bearer_auth("tg_not_a_key")
                .json(&json!({"text": "x"})),
        ),
        (
            "a key that looks like a token",
            http.post(invoke("echo"))
                .bearer_auth("a.b.c")
                .json(&json!({"text": "x"})),
        ),
        (
            "a caller without the role",
            http.post(invoke("echo"))
                .bearer_auth(key("bob"))
                .json(&json!({"text": "x"})),
        ),
        (
            "an oversized body",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .json(&json!({"text": "a".repeat(8192)})),
        ),
        (
            "a wrong content type",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .header("content-type", "text/plain")
                .body("hello"),
        ),
        (
            "a wrong method",
            http.get(invoke("echo")).bearer_auth(&alice),
        ),
        (
            "an unknown path",
            http.get(gateway.url("/v1/nothing")).bearer_auth(&alice),
        ),
        (
            "a bad timeout header",
            http.post(invoke("echo"))
                .bearer_auth(&alice)
                .header("x-toolgate-timeout-ms", "soon")
                .json(&json!({"text": "x"})),
        ),
        (
            "an unknown listing format",
            http.get(gateway.url("/v1/tools?format=klingon"))
                .bearer_auth(&alice),
        ),
        (
            "a batch that is not a message",
            http.post(gateway.url("/v1/tool-calls?format=openai"))
                .bearer_auth(&alice)
                .json(&json!({"nope": 1})),
        ),
        (
            "a batch of an unknown format",
            http.post(gateway.url("/v1/tool-calls?format=klingon"))
                .bearer_auth(&alice)
                .json(&json!({})),
        ),
        (
            "a batch with bad arguments",
            http.post(gateway.url("/v1/tool-calls?format=openai"))
                .bearer_auth(&alice)
                .json(&json!({"role": "assistant", "tool_calls": [
                    {"id": "1", "type": "function",
                     "function": {"name": "sleep", "arguments": "{\"ms\": \"x\"}"}},
                    {"id": "2", "type": "function",
                     "function": {"name": "nope", "arguments": "not json"}},
                ]})),
        ),
        (
            "an unknown suspension",
            http.get(gateway.url("/v1/suspensions/nope"))
                .bearer_auth(&alice),
        ),
        (
            "a resume of an unknown suspension",
            http.post(gateway.url("/v1/suspensions/nope/resume"))
                .bearer_auth(&alice)
                .json(&json!({"decision": "maybe"})),
        ),
        (
            "pins for a caller who is not an admin",
            http.get(gateway.url("/v1/admin/pins"))
                .bearer_auth(key("bob")),
        ),
        (
            "accepting the pin of an unknown tool",
            http.post(gateway.url("/v1/admin/pins/nope/accept"))
                .bearer_auth(&alice)
                .json(&json!({})),
        ),
        // The upstreams' failures.
        (
            "an upstream refusing",
            http.post(invoke("local_refuse"))
                .bearer_auth(&alice)
                .json(&json!({})),
        ),
        (
            "an upstream refusing over HTTP",
            http.post(invoke("web_refuse"))
                .bearer_auth(&alice)
                .json(&json!({})),
        ),
        (
            "arguments an upstream's schema refuses",
            http.post(invoke("local_slow"))
                .bearer_auth(&alice)
                .json(&json!({"seconds": "a while"})),
        ),
        (
            "an upstream too slow",
            http.post(invoke("local_slow"))
                .bearer_auth(&alice)
                .header("x-toolgate-timeout-ms", "300")
                .json(&json!({"seconds": 5})),
        ),
        (
            "a message too large",
            http.post(invoke("local_huge"))
                .bearer_auth(&alice)
                .json(&json!({})),
        ),
    ];
    for (what, request) in v1 {
        let (status, _) = plain(what, request).await;
        statuses.push((what, status));
    }
    // Over the rate limit.
    for n in 0..2 {
        let (status, _) = plain(
            "over the rate limit",
            http.post(invoke("calculator"))
                .bearer_auth(&alice)
                .json(&json!({"expression": "1+1"})),
        )
        .await;
        statuses.push(("over the rate limit", status));
        assert!(n == 0 || status == 429, "{status}");
    }

    // /mcp: protocol errors and calls that fail.
    let session = open_session(&gateway, "alice").await;
    let raw: Vec<(&str, reqwest::RequestBuilder)> = vec![
        (
            "/mcp: not JSON",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some(&session),
                Method::POST,
                Some("{oops"),
            ),
        ),
        (
            "/mcp: JSON, not JSON-RPC",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some(&session),
                Method::POST,
                Some("[1, 2]"),
            ),
        ),
        (
            "/mcp: a request of the wrong shape",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some(&session),
                Method::POST,
                Some(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 7}"#),
            ),
        ),
        (
            "/mcp: no key",
            mcp_raw(&gateway, None, None, Method::POST, Some("{}")),
        ),
        (
            "/mcp: a bad key",
            mcp_raw(&gateway, Some("tg_nope"), None, Method::POST, Some("{}")),
        ),
        (
            "/mcp: an unknown session",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some("no-such-session"),
                Method::POST,
                Some(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#),
            ),
        ),
        (
            "/mcp: no session",
            mcp_raw(
                &gateway,
                Some(&alice),
                None,
                Method::POST,
                Some(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#),
            ),
        ),
        (
            "/mcp: another user's session",
            mcp_raw(
                &gateway,
                Some(&key("bob")),
                Some(&session),
                Method::POST,
                Some(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#),
            ),
        ),
        (
            "/mcp: GET of an unknown session",
            mcp_raw(&gateway, Some(&alice), Some("nope"), Method::GET, None),
        ),
        (
            "/mcp: DELETE of an unknown session",
            mcp_raw(&gateway, Some(&alice), Some("nope"), Method::DELETE, None),
        ),
        (
            "/mcp: an oversized body",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some(&session),
                Method::POST,
                Some(
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "a".repeat(8192)}}})
                    .to_string(),
                ),
            ),
        ),
        (
            "/mcp: an unknown protocol version",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some(&session),
                Method::POST,
                Some(r#"{"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}"#),
            )
            .header("mcp-protocol-version", "1999-01-01"),
        ),
        (
            "/mcp: a PUT",
            mcp_raw(
                &gateway,
                Some(&alice),
                Some(&session),
                Method::PUT,
                Some("{}"),
            ),
        ),
    ];
    for (what, request) in raw {
        let (status, _) = plain(what, request).await;
        statuses.push((what, status));
    }
    let calls: Vec<(&str, &str, Value)> = vec![
        ("unknown method", "no/such/method", json!({})),
        (
            "unknown tool",
            "tools/call",
            json!({"name": "nope", "arguments": {}}),
        ),
        (
            "arguments of the wrong type",
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": "soon"}}),
        ),
        (
            "arguments not an object",
            "tools/call",
            json!({"name": "echo", "arguments": [1]}),
        ),
        (
            "a field of the wrong type",
            "tools/call",
            json!({"name": "echo", "arguments": {"text": 1}}),
        ),
        (
            "an upstream refusing",
            "tools/call",
            json!({"name": "local_refuse", "arguments": {}}),
        ),
        (
            "arguments an upstream's schema refuses",
            "tools/call",
            json!({"name": "web_slow", "arguments": {"seconds": "x"}}),
        ),
        ("an unknown prompt", "prompts/get", json!({"name": "nope"})),
        (
            "an unknown resource",
            "resources/read",
            json!({"uri": "file:///nope"}),
        ),
        (
            "a completion of nothing",
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "nope"},
                   "argument": {"name": "a", "value": "b"}}),
        ),
        (
            "a bad log level",
            "logging/setLevel",
            json!({"level": "loud"}),
        ),
    ];
    for (what, method, params) in &calls {
        let request = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params});
        let (status, _, body) = mcp(
            &gateway,
            Method::POST,
            "alice",
            Some(&session),
            Some(request),
        )
        .await;
        assert_plain(
            &format!("/mcp 2025: {what}"),
            status,
            &Default::default(),
            &body,
        );
        let (status, answer) = mcp_2026(&gateway, "alice", method, None, params.clone()).await;
        assert_plain(
            &format!("/mcp 2026: {what}"),
            status,
            &Default::default(),
            &answer.to_string(),
        );
    }

    // An upstream that is down, over both routes.
    web.stop();
    for attempt in 0..2 {
        let (status, _) = plain(
            "an upstream that is down",
            http.post(invoke("web_ping"))
                .bearer_auth(&alice)
                .json(&json!({})),
        )
        .await;
        statuses.push(("an upstream that is down", status));
        let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                          "params": {"name": "web_ping", "arguments": {}}});
        let (status, _, body) =
            mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
        assert_plain(
            &format!("/mcp: an upstream that is down ({attempt})"),
            status,
            &Default::default(),
            &body,
        );
    }
    let (status, _) = plain(
        "a batch calling an upstream that is down",
        http.post(gateway.url("/v1/tool-calls?format=openai"))
            .bearer_auth(&alice)
            .json(&json!({"role": "assistant", "tool_calls": [
                {"id": "1", "type": "function",
                 "function": {"name": "web_ping", "arguments": "{}"}},
            ]})),
    )
    .await;
    statuses.push(("a batch calling an upstream that is down", status));

    // Nearly all of them were refused: the corpus is of errors, not of passes.
    for (what, status) in &statuses {
        assert!(*status >= 400 || *status == 200, "{what}: {status}");
    }
    assert!(
        statuses.iter().filter(|(_, status)| *status >= 400).count() >= 30,
        "{statuses:?}"
    );
}
