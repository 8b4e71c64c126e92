//! A stdio upstream that echoes its connection settings — `DATABASE_URL`, a libpq
//! `PG_DSN` and a JSON `APP_CONFIG`, variables not named like credentials — in an error, in
//! a result and on its stderr: the passwords in them reach neither the caller (over `/v1`
//! and `/mcp`), nor the audit file, nor the log. The rest of the settings comes through.

mod common;

use reqwest::Method;
use serde_json::json;

use common::{Gateway, invoke, mcp, open_session, python, python_mcp_available, user_yaml};

/// The URL's password, percent-encoded as written in `DATABASE_URL`, and decoded.
const URL_PASSWORD: &str = "s3cr3t%40pa55word";
const URL_PASSWORD_DECODED: &str = "s3cr3t@pa55word";
/// The password in `PG_DSN`, single-quoted there.
const DSN_PASSWORD: &str = "dsn s3cret+99";
/// The password nested in the JSON blob `APP_CONFIG`.
const JSON_PASSWORD: &str = "js0n-pa55word";

fn config(audit: &std::path::Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/echoes_env.py");
    format!(
        "logging:\n  level: debug\n\
upstreams:\n  - name: db\n    command: {python}\n    args: [\"{script}\"]\n    env:\n      \
DATABASE_URL: \"postgres://app:{URL_PASSWORD}@db:5432/app\"\n      \
PG_DSN: \"host=db port=5432 user=app password='{DSN_PASSWORD}'\"\n      \
APP_CONFIG: '{{\"db\": {{\"host\": \"db\", \"password\": \"{JSON_PASSWORD}\"}}}}'\n\
audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n  include_values: true\n\
users:\n{alice}",
        python = python(),
        audit = audit.display(),
        alice = user_yaml("alice", &["admin"]),
    )
}

fn assert_no_password(what: &str, text: &str) {
    for form in [
        URL_PASSWORD,
        URL_PASSWORD_DECODED,
        DSN_PASSWORD,
        JSON_PASSWORD,
        "pa55word",
        "s3cr3t",
        "s3cret",
    ] {
        assert!(
            !text.contains(form),
            "{what} carries a password ({form}):\n{text}"
        );
    }
}

#[tokio::test]
async fn an_upstream_that_echoes_its_database_url_leaks_the_password_nowhere() {
    let test = "an_upstream_that_echoes_its_database_url_leaks_the_password_nowhere";
    if !python_mcp_available(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gateway = Gateway::start_with_env(&config(&audit), &[]);

    let failed = invoke(&gateway, "alice", "connect", json!({})).await;
    assert!(failed.status >= 400, "{}", failed.body);
    let body = failed.body.to_string();
    assert_no_password("the error over /v1", &body);
    assert!(
        body.contains("could not connect to postgres://app:[REDACTED:secret]@db:5432/app"),
        "{body}"
    );

    let settings = invoke(&gateway, "alice", "settings", json!({})).await;
    assert_eq!(settings.status, 200, "{}", settings.body);
    assert_no_password("the result over /v1", &settings.body.to_string());
    let output = settings.body["output"].to_string();
    for scrubbed in [
        "postgres://app:[REDACTED:secret]@db:5432/app",
        "host=db port=5432 user=app password='[REDACTED:secret]'",
        "logging in with [REDACTED:secret]",
        "and with [REDACTED:secret]",
        // The blob, a JSON string in the result's JSON text.
        r#"{\\\"db\\\": {\\\"host\\\": \\\"db\\\", \\\"password\\\": \\\"[REDACTED:secret]\\\"}}"#,
    ] {
        assert!(output.contains(scrubbed), "{scrubbed} in {output}");
    }

    let session = open_session(&gateway, "alice").await;
    for (id, tool) in [(3, "connect"), (4, "settings")] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}});
        let (status, _, body) =
            mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("[REDACTED:secret]"),
            "{tool} over /mcp: {body}"
        );
        assert_no_password(&format!("{tool} over /mcp"), &body);
    }

    let records = std::fs::read_to_string(&audit).expect("the audit file");
    assert_eq!(records.lines().count(), 4, "{records}");
    assert_no_password("the audit file", &records);
    let log = gateway.stderr();
    assert!(log.contains("connecting to postgres://app:"), "{log}");
    assert!(log.contains("with config {"), "{log}");
    assert_no_password("the log", &log);
}
