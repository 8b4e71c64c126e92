//! The caller's token stays at the gateway: an upstream receives its own configured
//! credential, never the token the caller presented.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::common::{BIN, Gateway, python, python_mcp_available};
use crate::provider::Provider;
use crate::{RESOURCE, config, invoke};

/// `tests/upstreams/headers.py`: an HTTP MCP server whose `whoami` tells the
/// `Authorization` header it was sent. Killed on drop.
struct HeadersUpstream {
    child: Child,
    url: String,
}

impl HeadersUpstream {
    fn start() -> HeadersUpstream {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/headers.py");
        let mut child = Command::new(python())
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting headers.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("headers.py prints its address");
        let url = line
            .trim()
            .strip_prefix("headers listening on ")
            .unwrap_or_else(|| panic!("unexpected output {line:?}"))
            .to_owned();
        HeadersUpstream { child, url }
    }
}

impl Drop for HeadersUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_upstream_gets_its_own_credential_never_the_callers_token() {
    let test = "an_upstream_gets_its_own_credential_never_the_callers_token";
    if !python_mcp_available(test) {
        return;
    }
    let Some(provider) = Provider::start(test) else {
        return;
    };
    let upstream = HeadersUpstream::start();
    let yaml = format!(
        "{}upstreams:\n  - {{ name: headers, url: \"{}\", credential_env: UPSTREAM_TOKEN }}\n",
        config(&provider.issuer, "", ""),
        upstream.url
    );
    let gateway =
        Gateway::start_with_env(&yaml, &[("UPSTREAM_TOKEN", "static-upstream-credential")]);
    let token = provider
        .token("agent", RESOURCE, "tools:read tools:admin")
        .await;
    let answer = invoke(&gateway, Some(&token), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let said = answer.body["output"].to_string();
    // The upstream was sent the configured credential (which the gateway scrubs from
    // whatever comes back), and nothing of the caller's token.
    assert!(said.contains("authorization=Bearer [REDACTED"), "{said}");
    let signature = token.rsplit('.').next().expect("a JWT");
    assert!(!said.contains(signature), "{said}");
    assert!(
        !gateway.stderr().contains(signature),
        "the token was logged"
    );
}

#[tokio::test]
async fn check_says_what_an_upstream_receives() {
    let test = "check_says_what_an_upstream_receives";
    if !python_mcp_available(test) {
        return;
    }
    let upstream = HeadersUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.yaml");
    let yaml = format!(
        "{}upstreams:\n  - {{ name: headers, url: \"{}\", credential_env: UPSTREAM_TOKEN }}\n",
        config("http://127.0.0.1:9", "", ""),
        upstream.url
    );
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env("UPSTREAM_TOKEN", "static-upstream-credential")
        .env_remove("RUST_LOG")
        .output()
        .expect("running toolgate check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "  upstream headers: a static bearer credential from $UPSTREAM_TOKEN, the same for every caller; a caller's own token is never forwarded\n"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("static-upstream-credential"), "{stdout}");
}
