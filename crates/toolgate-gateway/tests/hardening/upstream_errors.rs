//! An upstream that fails a call with ten megabytes of text — as a JSON-RPC error or as a
//! result with `isError`, over stdio and over HTTP — reaches no caller whole: `/v1`,
//! `/mcp`, a batch and the audit file each get the start of it, within the bound of an
//! error's message, with a marker saying how long it was.

use reqwest::Method;
use serde_json::{Value, json};
use toolgate_core::error::MAX_ERROR_CHARS;

use crate::common::{Gateway, HttpUpstream, client, key, mcp, open_session, python, user_yaml};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/upstreams/loud_errors.py"
);

/// What ends every error the upstream sends, and must never be read.
const END: &str = "END-OF-THE-ERROR";

/// The most bytes an answer carrying one cut error may take: the message in ASCII, and
/// room for the JSON around it.
const MOST_BYTES: usize = MAX_ERROR_CHARS + 2_000;

fn config(audit: &std::path::Path, url: &str) -> String {
    format!(
        concat!(
            "upstreams:\n",
            "  - {{ name: raw, command: {python}, args: [\"{script}\"], prefix: stdio_ }}\n",
            "  - {{ name: rawhttp, url: \"{url}\", prefix: http_ }}\n",
            "policies:\n  output_limit:\n    max_bytes: 64KiB\n",
            "audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n  include_values: true\n",
            "users:\n{alice}",
        ),
        script = SCRIPT,
        url = url,
        python = python(),
        audit = audit.display(),
        alice = user_yaml("alice", &["admin"]),
    )
}

/// Checks one answer's text: within the bound, cut with the marker, without the end.
fn assert_cut(what: &str, text: &str) {
    assert!(
        text.len() <= MOST_BYTES,
        "{what}: {} bytes, over {MOST_BYTES}",
        text.len()
    );
    assert!(!text.contains(END), "{what} carries the end of the error");
    assert!(
        text.contains("characters; the first"),
        "{what} has no marker: {}",
        &text[text.len().saturating_sub(300)..]
    );
}

#[tokio::test]
async fn an_upstream_s_huge_error_reaches_every_caller_and_the_audit_file_cut() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let upstream = HttpUpstream::start(SCRIPT, &["http"], &[]);
    let gateway = Gateway::start(&config(&audit, &upstream.url));
    let tools = ["stdio_refuse", "stdio_fail", "http_refuse", "http_fail"];

    for tool in tools {
        let response = client()
            .post(gateway.url(&format!("/v1/tools/{tool}/invoke")))
            .bearer_auth(key("alice"))
            .json(&json!({}))
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(response.status(), 502, "{tool}");
        let text = response.text().await.unwrap();
        assert_cut(&format!("{tool} over /v1"), &text);
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["code"], "tool_error", "{tool}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.chars().count() <= MAX_ERROR_CHARS, "{tool}");
        assert!(
            message.contains("the message was 10,000,0"),
            "{tool}: {}",
            &message[message.len() - 200..]
        );
    }

    let calls: Vec<Value> = tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            json!({"id": format!("call_{i}"), "type": "function",
                   "function": {"name": tool, "arguments": "{}"}})
        })
        .collect();
    let batch = client()
        .post(gateway.url("/v1/tool-calls"))
        .bearer_auth(key("alice"))
        .json(&json!({"role": "assistant", "tool_calls": calls}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(batch.status(), 200);
    let text = batch.text().await.unwrap();
    // Each error twice: in its result, and in the tool message for the model.
    assert!(
        text.len() <= 2 * tools.len() * MOST_BYTES,
        "the batch: {} bytes",
        text.len()
    );
    assert!(!text.contains(END), "the batch carries the end of an error");
    let body: Value = serde_json::from_str(&text).unwrap();
    for result in body["results"].as_array().unwrap() {
        assert_eq!(result["status"], "error", "{}", result["error"]["code"]);
    }

    let session = open_session(&gateway, "alice").await;
    for (id, tool) in tools.iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": id + 10, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}});
        let (status, _, text) =
            mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
        assert_eq!(status, 200, "{tool}");
        assert_cut(&format!("{tool} over /mcp"), &text);
    }

    let records = std::fs::read_to_string(&audit).expect("the audit file");
    let lines: Vec<&str> = records.lines().collect();
    assert_eq!(lines.len(), 3 * tools.len());
    for line in lines {
        assert_cut("an audit record", line);
    }
}
