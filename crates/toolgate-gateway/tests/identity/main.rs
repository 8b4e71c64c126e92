//! The gateway as an OAuth 2.1 resource server, against a real identity provider
//! (oidc-provider on Node 22, see `provider.rs`): tokens it issues call tools on `/v1` and
//! `/mcp`; bad tokens of every kind are refused with a challenge; the issuer's keys are
//! cached, fetched again for a new key at most once per interval, and an issuer that is
//! down never lets a request through. Callers' tokens are exchanged (RFC 8693) for
//! per-caller upstream credentials, cached until shortly before they expire, once for
//! concurrent first calls, and upstreams configured `as_caller` receive them (or a fixed
//! credential per user, also when an approved call resumes; a call that needs the
//! caller's token is refused rather than parked for approval), from a single call and
//! from each call of a batch alike.

#[path = "../common/mod.rs"]
mod common;
mod provider;

mod approval;
mod authorization_tenants;
mod bad_tokens;
mod batch;
mod claims;
mod exchange;
mod keys;
mod loopback;
mod sdk_clients;
mod tenant_credentials;
mod tenants;
mod tokens;
mod upstream;

use common::{Answer, Gateway, client, user_yaml};
use provider::Provider;
use serde_json::{Value, json};

/// This gateway's resource identifier in the tests.
pub const RESOURCE: &str = "https://tools.test";
/// The resource of its MCP endpoint.
pub const MCP_RESOURCE: &str = "https://tools.test/mcp";

/// A configuration accepting API keys (alice, admin) and tokens of `issuer`, with `extra`
/// lines appended under `identity.oauth` (indented by four spaces) and an authorization
/// policy: `reader`s may call `echo`, `admin`s anything.
pub fn config(issuer: &str, oauth_extra: &str, routes: &str) -> String {
    format!(
        "tools:\n  builtin: [echo, calculator]\n\
         users:\n{users}\
         identity:\n  oauth:\n    issuer: {issuer}\n    resource: {RESOURCE}\n    tenant_claim: tenant\n    scope_roles: {{ \"tools:admin\": [admin] }}\n{oauth_extra}{routes}\
         policies:\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, roles: [reader], tools: [echo] }}\n      - {{ effect: allow, roles: [admin] }}\n",
        users = user_yaml("alice", &["admin"]),
    )
}

/// Starts a provider and a gateway in front of it; `None` when Node cannot be had
/// outside CI.
pub fn start(test: &str, oauth_extra: &str, routes: &str) -> Option<(Provider, Gateway)> {
    let provider = Provider::start(test)?;
    let gateway = Gateway::start(&config(&provider.issuer, oauth_extra, routes));
    Some((provider, gateway))
}

/// Invokes `tool` on `/v1` with `Authorization: Bearer <credential>`.
pub async fn invoke(
    gateway: &Gateway,
    credential: Option<&str>,
    tool: &str,
    input: Value,
) -> Answer {
    let mut request = client()
        .post(gateway.url(&format!("/v1/tools/{tool}/invoke")))
        .json(&input);
    if let Some(credential) = credential {
        request = request.bearer_auth(credential);
    }
    Answer::read(request.send().await.expect("the gateway answers")).await
}

/// One stateless MCP 2026-07-28 `tools/call` of `echo` with `credential`: the status,
/// the `WWW-Authenticate` header and the body's text.
pub async fn mcp_echo(
    gateway: &Gateway,
    credential: Option<&str>,
    text: &str,
) -> (u16, Option<String>, String) {
    mcp_call(gateway, credential, "echo", json!({"text": text})).await
}

/// One stateless MCP 2026-07-28 `tools/call` of `tool` with `credential`: the status,
/// the `WWW-Authenticate` header and the body's text.
pub async fn mcp_call(
    gateway: &Gateway,
    credential: Option<&str>,
    tool: &str,
    arguments: Value,
) -> (u16, Option<String>, String) {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": tool, "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "identity-tests", "version": "0"},
            },
        },
    });
    let mut request = client()
        .post(gateway.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string());
    if let Some(credential) = credential {
        request = request.bearer_auth(credential);
    }
    let response = request.send().await.expect("the gateway answers");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, challenge, response.text().await.expect("a body"))
}
