//! The upstream's credential never reaches a caller in any kind of answer, not only in the
//! text of a tool result: resource listings, templates and contents (a blob of a debug
//! dump among them), prompt listings and messages, completions, JSON-RPC errors and their
//! `data`, image, audio, link and embedded content, `structuredContent`, `_meta`, log and
//! progress messages — over `/mcp` and over `/v1`. `echoes_everywhere.py`, a malicious
//! upstream on the official Python SDK, echoes it into each, raw, inside base64 (wrapped
//! at 76 columns too, as MIME writes it) and inside JSON documents that PHP and .NET wrote:
//! over streamable HTTP, where the credential is the Bearer token the gateway sends, and
//! over stdio, where it is the variable the gateway sets in the program's environment.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    Gateway, HttpUpstream, client, get, invoke, mcp, mcp_rpc, open_session_declaring, python,
    python_mcp_available, user_yaml,
};

/// The credential: `/` and `+` are what JSON serializers, URL encoders and base64 change.
const TOKEN: &str = "up-s3cret/echo+42x";
const SCRUBBED: &str = "[REDACTED:secret]";

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/upstreams/echoes_everywhere.py"
);

/// A gateway in front of `upstream`, served over streamable HTTP, to which it sends the
/// credential as its Bearer token.
fn gateway(upstream: &HttpUpstream) -> Gateway {
    let yaml = format!(
        "upstreams:\n  - name: echoes\n    url: {url}\n    credential_env: UP_TOKEN\n    discover: false\n\
users:\n{alice}",
        url = upstream.url,
        alice = user_yaml("alice", &["admin"]),
    );
    Gateway::start_with_env(&yaml, &[("UP_TOKEN", TOKEN)])
}

fn upstream() -> HttpUpstream {
    HttpUpstream::start(SCRIPT, &[], &[("UP_TOKEN", TOKEN)])
}

/// A gateway that starts `echoes_everywhere.py --stdio` itself and gives it the credential
/// in its environment (`credential_env`).
fn stdio_gateway() -> Gateway {
    let yaml = format!(
        "upstreams:\n  - name: echoes\n    command: {python}\n    args: [\"{SCRIPT}\", \"--stdio\"]\n    \
credential_env: UP_TOKEN\n    discover: false\n\
users:\n{alice}",
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    );
    Gateway::start_with_env(&yaml, &[("UP_TOKEN", TOKEN)])
}

/// The base64 characters only the credential's bytes determine, at each alignment, in
/// both alphabets: what any base64 text holding it holds, once line breaks are removed.
fn base64_cores() -> Vec<String> {
    let mut cores = Vec::new();
    for lead in 0..3usize {
        let mut bytes = vec![b'x'; lead];
        bytes.extend_from_slice(TOKEN.as_bytes());
        let (first, end) = ((8 * lead).div_ceil(6), 8 * (lead + TOKEN.len()) / 6);
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            cores.push(engine.encode(&bytes)[first..end].to_owned());
        }
    }
    cores
}

/// `text` with `%XX` escapes decoded (bytes that do not make UTF-8 are dropped).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The form of the credential `text` holds, if any: raw in any case, JSON-escaped as PHP
/// and .NET write it, percent-escaped, in hex, or inside base64 (line breaks removed).
fn leaked_form(text: &str) -> Option<&'static str> {
    let lower = TOKEN.to_lowercase();
    let unescaped = text
        .replace("\\/", "/")
        .replace("\\u002B", "+")
        .replace("\\u002b", "+");
    let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    let unwrapped: String = text.replace("\\n", "").replace(['\n', '\r'], "");
    if text.to_lowercase().contains(&lower) {
        Some("raw")
    } else if unescaped.to_lowercase().contains(&lower) {
        Some("JSON-escaped")
    } else if percent_decoded(text).to_lowercase().contains(&lower) {
        Some("percent-escaped")
    } else if text.to_lowercase().contains(&hex) {
        Some("hex")
    } else if base64_cores().iter().any(|core| unwrapped.contains(core)) {
        Some("base64")
    } else {
        None
    }
}

/// Every string and key of `value` that holds the credential in some form, with its path.
fn leaks_in(value: &Value, path: &str, found: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            if let Some(form) = leaked_form(s) {
                found.push(format!("{path} ({form}): {s}"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                leaks_in(item, &format!("{path}[{i}]"), found);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                if let Some(form) = leaked_form(key) {
                    found.push(format!("{path} key ({form}): {key}"));
                }
                leaks_in(item, &format!("{path}.{key}"), found);
            }
        }
        _ => {}
    }
}

/// The JSON messages of an `/mcp` answer's body (plain JSON or server-sent events).
fn messages(body: &str) -> Vec<Value> {
    let events: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect();
    if events.is_empty() {
        serde_json::from_str(body).into_iter().collect()
    } else {
        events
    }
}

/// Asserts that none of `answers` (what was asked, and what came back) holds the
/// credential, listing every place that does.
fn assert_no_leak(answers: &[(String, Value)]) {
    let mut found = Vec::new();
    for (what, answer) in answers {
        leaks_in(answer, what, &mut found);
    }
    assert!(
        found.is_empty(),
        "the caller was sent the upstream's credential:\n{}",
        found.join("\n")
    );
}

/// A session of alice's that declares sampling and elicitation, as the clients that
/// follow an upstream's log and progress messages do.
async fn open_session_answering(gateway: &Gateway) -> String {
    let capabilities = json!({"sampling": {}, "elicitation": {}});
    open_session_declaring(gateway, "alice", capabilities).await
}

/// Asks `gateway`, over `/mcp`, for every kind of answer `echoes_everywhere.py` gives, and
/// follows the session's standalone stream: none holds the credential, and each kind
/// reached the caller, scrubbed, rather than being dropped. `logs_relayed`: the log
/// messages of `chatty` the caller gets, 2 over streamable HTTP, which tells the call they
/// belong to; none over stdio, which does not, where they are dropped (docs/mcp.md,
/// "session-only features are not relayed on shared connections").
async fn assert_no_mcp_caller_gets_it(gateway: &Gateway, logs_relayed: usize) {
    let session = open_session_answering(gateway).await;
    let level = mcp_rpc(
        gateway,
        "alice",
        &session,
        "logging/setLevel",
        json!({"level": "debug"}),
    )
    .await;
    assert!(level.get("error").is_none(), "{level}");
    // Log messages come on the session's standalone stream.
    let stream = client()
        .get(gateway.url("/mcp"))
        .bearer_auth(crate::common::key("alice"))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("the standalone stream opens");
    assert_eq!(stream.status(), 200);
    let listened = tokio::spawn(async move {
        let mut stream = stream;
        let mut text = String::new();
        while let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(std::time::Duration::from_secs(3), stream.chunk()).await
        {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    });

    let call = |name: &str| json!({"name": name, "arguments": {}, "_meta": {"progressToken": 1}});
    let read = |uri: &str| json!({"uri": uri});
    let requests = [
        ("tools/list", json!({})),
        ("tools/call", call("media")),
        ("tools/call", call("wrapped")),
        ("tools/call", call("escaped")),
        ("tools/call", call("chatty")),
        ("tools/call", call("refuse")),
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
        ("resources/read", read("debug://dump")),
        ("resources/read", read("debug://text")),
        ("resources/read", read("debug://escaped")),
        ("resources/read", read("debug://broken")),
        ("resources/read", read("debug://user/ann")),
        ("prompts/list", json!({})),
        (
            "prompts/get",
            json!({"name": "review", "arguments": {"topic": "x"}}),
        ),
        (
            "prompts/get",
            json!({"name": "failing", "arguments": {"topic": "x"}}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "review"},
                   "argument": {"name": "topic", "value": "r"}}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "debug://user/{name}"},
                   "argument": {"name": "name", "value": "a"}}),
        ),
    ];
    let mut answers = Vec::new();
    for (id, (method, params)) in requests.into_iter().enumerate() {
        let request = json!({"jsonrpc": "2.0", "id": id + 10, "method": method, "params": params});
        let (status, _, body) = mcp(
            gateway,
            Method::POST,
            "alice",
            Some(&session),
            Some(request),
        )
        .await;
        assert_eq!(status, 200, "{method} {params}: {body}");
        let seen = messages(&body);
        let answer = seen
            .iter()
            .find(|m| m["id"] == json!(id + 10))
            .unwrap_or_else(|| panic!("no answer to {method} {params}: {body}"));
        assert!(
            answer.get("result").is_some() || answer.get("error").is_some(),
            "{answer}"
        );
        answers.push((format!("{method} {params}"), Value::Array(seen)));
    }
    let listened = messages(&listened.await.expect("the stream was read"));
    let logs: Vec<&Value> = listened
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(
        logs.len(),
        logs_relayed,
        "the log messages relayed: {listened:?}"
    );
    answers.push((
        "the standalone stream".to_owned(),
        Value::Array(listened.clone()),
    ));
    assert_no_leak(&answers);

    // Each kind reached the caller, scrubbed, rather than being dropped.
    let of = |i: usize| answers[i].1.to_string();
    let media = &answers[1].1;
    let content = media
        .as_array()
        .and_then(|m| m.iter().find(|m| m["result"].is_object()))
        .map(|m| m["result"].clone())
        .unwrap_or_default();
    assert_eq!(
        content["content"].as_array().map(Vec::len),
        Some(5),
        "{media}"
    );
    assert_eq!(content["_meta"]["debug"]["token"], SCRUBBED, "{media}");
    let chatty = of(4);
    assert!(
        chatty.contains("notifications/progress"),
        "the progress message was relayed: {chatty}"
    );
    for i in [6, 7, 9, 13, 14, 16] {
        assert!(of(i).contains(SCRUBBED), "{}: {}", answers[i].0, of(i));
    }
}

/// Asks `gateway`, over `/v1`, for every kind of answer `echoes_everywhere.py` gives: none
/// holds the credential, and each reached the caller, scrubbed.
async fn assert_no_http_api_caller_gets_it(gateway: &Gateway) {
    let complete_prompt = json!({"complete": {
        "ref": {"type": "ref/prompt", "name": "review"},
        "argument": {"name": "topic", "value": "r"}}});
    let complete_template = json!({"complete": {
        "ref": {"type": "ref/resource", "uri": "debug://user/{name}"},
        "argument": {"name": "name", "value": "a"}}});
    let calls = [
        ("media", json!({})),
        ("wrapped", json!({})),
        ("escaped", json!({})),
        ("chatty", json!({})),
        ("refuse", json!({})),
        ("resources.echoes", json!({"list": "resources"})),
        ("resources.echoes", json!({"list": "templates"})),
        ("resources.echoes", json!({"uri": "debug://dump"})),
        ("resources.echoes", json!({"uri": "debug://text"})),
        ("resources.echoes", json!({"uri": "debug://escaped"})),
        ("resources.echoes", json!({"uri": "debug://broken"})),
        ("resources.echoes", json!({"uri": "debug://user/ann"})),
        ("prompt.review", json!({"topic": "x"})),
        ("prompt.failing", json!({"topic": "x"})),
        ("prompt.review", complete_prompt),
        ("resources.echoes", complete_template),
    ];
    let mut answers = Vec::new();
    for (tool, input) in calls {
        let answer = invoke(gateway, "alice", tool, input.clone()).await;
        assert!(
            answer.status == 200 || answer.status >= 400,
            "{tool} {input}: ({}) {}",
            answer.status,
            answer.body
        );
        answers.push((format!("{tool} {input}"), answer.body));
    }
    let listed = get(&client(), &gateway.url("/v1/tools"), Some("alice")).await;
    answers.push(("GET /v1/tools".to_owned(), listed.body));
    assert_no_leak(&answers);

    let media = &answers[0].1;
    assert_eq!(
        media["output"]["content"].as_array().map(Vec::len),
        Some(5),
        "{media}"
    );
    for (what, answer) in &answers[..answers.len() - 1] {
        if what.starts_with("chatty") {
            continue;
        }
        assert!(
            answer.to_string().contains(SCRUBBED),
            "{what} reached the caller scrubbed: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_credential_reaches_no_mcp_caller_in_any_kind_of_answer() {
    let test = "an_echoed_credential_reaches_no_mcp_caller_in_any_kind_of_answer";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = upstream();
    let gateway = gateway(&upstream);
    assert_no_mcp_caller_gets_it(&gateway, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_credential_reaches_no_http_api_caller_in_any_kind_of_answer() {
    let test = "an_echoed_credential_reaches_no_http_api_caller_in_any_kind_of_answer";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = upstream();
    let gateway = gateway(&upstream);
    assert_no_http_api_caller_gets_it(&gateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_credential_reaches_no_mcp_caller_from_a_stdio_upstream() {
    let test = "an_echoed_credential_reaches_no_mcp_caller_from_a_stdio_upstream";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = stdio_gateway();
    assert_no_mcp_caller_gets_it(&gateway, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_credential_reaches_no_http_api_caller_from_a_stdio_upstream() {
    let test = "an_echoed_credential_reaches_no_http_api_caller_from_a_stdio_upstream";
    if !python_mcp_available(test) {
        return;
    }
    let gateway = stdio_gateway();
    assert_no_http_api_caller_gets_it(&gateway).await;
}
