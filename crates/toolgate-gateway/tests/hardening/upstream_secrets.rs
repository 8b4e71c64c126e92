//! An imported MCP server that echoes the credential the gateway gives it: the credential
//! reaches neither the caller (over `/v1` and `/mcp`, in outputs and in errors), nor the
//! audit file, nor the log, in any encoding.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::Method;
use serde_json::json;

use crate::common::{Gateway, invoke, mcp, open_session, python, python_mcp_available, user_yaml};

/// The credential: distinctive, with characters that URL encoding changes.
const TOKEN: &str = "upstream-s3cret/token+42";

fn config(audit: &std::path::Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/leaky.py");
    format!(
        "logging:\n  level: debug\n\
upstreams:\n  - name: leaky\n    command: {python}\n    args: [\"{script}\"]\n    credential_env: LEAKY_TOKEN\n\
audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n  include_values: true\n\
users:\n{alice}",
        python = python(),
        audit = audit.display(),
        alice = user_yaml("alice", &["admin"]),
    )
}

/// Every form of the token an answer could carry it in.
fn assert_no_token(what: &str, text: &str) {
    let forms = [
        TOKEN.to_owned(),
        STANDARD.encode(TOKEN),
        "upstream-s3cret%2Ftoken%2B42".to_owned(),
    ];
    for form in forms {
        assert!(
            !text.contains(&form),
            "{what} carries the credential ({form}):\n{text}"
        );
    }
}

#[tokio::test]
async fn an_upstream_that_echoes_its_credential_leaks_it_nowhere() {
    if !python_mcp_available("an_upstream_that_echoes_its_credential_leaks_it_nowhere") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gateway = Gateway::start_with_env(&config(&audit), &[("LEAKY_TOKEN", TOKEN)]);

    let text = invoke(&gateway, "alice", "leak_text", json!({})).await;
    assert_eq!(text.status, 200, "{}", text.body);
    assert_no_token("the text output over /v1", &text.body.to_string());
    assert!(
        text.body["output"]
            .to_string()
            .contains("raw=[REDACTED:secret] b64=[REDACTED:secret] url=[REDACTED:secret]"),
        "{}",
        text.body
    );

    let structured = invoke(&gateway, "alice", "leak_structured", json!({})).await;
    assert_eq!(structured.status, 200, "{}", structured.body);
    assert_no_token(
        "the structured output over /v1",
        &structured.body.to_string(),
    );
    assert!(
        structured.body["output"]
            .to_string()
            .contains("[REDACTED:secret]"),
        "{}",
        structured.body
    );

    let failed = invoke(&gateway, "alice", "leak_error", json!({})).await;
    assert!(failed.status >= 400, "{}", failed.body);
    assert_no_token("the error over /v1", &failed.body.to_string());
    assert!(
        failed.body.to_string().contains("[REDACTED:secret]"),
        "{}",
        failed.body
    );

    let session = open_session(&gateway, "alice").await;
    for (id, tool) in [(3, "leak_text"), (4, "leak_structured"), (5, "leak_error")] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}});
        let (status, _, body) =
            mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("[REDACTED:secret]"),
            "{tool} over /mcp: {body}"
        );
        assert_no_token(&format!("{tool} over /mcp"), &body);
    }

    let records = std::fs::read_to_string(&audit).expect("the audit file");
    assert_eq!(records.lines().count(), 6, "{records}");
    assert_no_token("the audit file", &records);
    assert_no_token("the log", &gateway.stderr());
}
