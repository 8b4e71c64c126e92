//! Fixed per-caller credentials are per tenant: an upstream called as each caller with
//! `as_caller.credentials` (callers without a tenant) and `as_caller.tenant_credentials`
//! (callers of a tenant) receives the credential of the caller's own tenant only. `ann`
//! of tenant `globex` is refused before the upstream, never sent there with the
//! credential of `ann` of tenant `acme`, nor with that of `ann` without a tenant.

use serde_json::json;

use crate::common::{Gateway, python_mcp_available};
use crate::loopback::Issuer;
use crate::upstream::{HeadersUpstream, as_caller_config, said, sha256_hex};
use crate::{MCP_RESOURCE, RESOURCE, invoke, mcp_call};

/// A token of the admin `ann` in `tenant` (none: without a tenant), for `audience`.
fn ann_of(issuer: &Issuer, tenant: Option<&str>, audience: &str) -> String {
    issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("ann"));
        if let Some(tenant) = tenant {
            c.insert("tenant".to_owned(), json!(tenant));
        }
        c.insert("roles".to_owned(), json!(["admin"]));
        c.insert("aud".to_owned(), json!(audience));
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_credential_reaches_the_upstream_only_for_a_caller_of_its_own_tenant() {
    let test = "a_fixed_credential_reaches_the_upstream_only_for_a_caller_of_its_own_tenant";
    if !python_mcp_available(test) {
        return;
    }
    let issuer = Issuer::serve(true).await;
    let upstream = HeadersUpstream::start();
    // `ann` without a tenant has an entry under `credentials`, `ann` of acme
    // one under `tenant_credentials`; `ann` of globex has none.
    let yaml = as_caller_config(
        &issuer.url,
        &upstream.url,
        "{ credentials: { ann: \"${ANN_TOKEN}\" }, tenant_credentials: { acme: { ann: \"${ACME_ANN_TOKEN}\" } } }",
    );
    let gateway = Gateway::start_with_env(
        &yaml,
        &[
            ("ANN_TOKEN", "untenanted-ann-token"),
            ("ACME_ANN_TOKEN", "acme-ann-token"),
        ],
    );
    let acme_digest = sha256_hex("Bearer acme-ann-token");
    let untenanted_digest = sha256_hex("Bearer untenanted-ann-token");

    // ann of acme: the upstream gets acme's credential (its digest says so), scrubbed on
    // the way back.
    let acme = ann_of(&issuer, Some("acme"), RESOURCE);
    let answer = invoke(&gateway, Some(&acme), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let said_to_acme = said(&answer);
    assert!(
        said_to_acme.contains(&format!("sha256={acme_digest}")),
        "{said_to_acme}"
    );
    assert!(!said_to_acme.contains("acme-ann-token"), "{said_to_acme}");

    // ann of globex: refused before the upstream, with acme's credential nowhere, and
    // told who has no credential and where one goes.
    let globex = ann_of(&issuer, Some("globex"), RESOURCE);
    let answer = invoke(&gateway, Some(&globex), "whoami", json!({})).await;
    assert_eq!(answer.status, 403, "{:?}", answer.body);
    assert_eq!(answer.error_code(), "upstream_credential_missing");
    let message = answer.error_message();
    for words in [
        "user `ann` of tenant `globex` has no credential for this upstream",
        "`as_caller.tenant_credentials.globex.ann`",
    ] {
        assert!(message.contains(words), "{message}");
    }
    let body = answer.body.to_string();
    for digest in [&acme_digest, &untenanted_digest] {
        assert!(!body.contains(digest.as_str()), "{body}");
    }

    // The same over MCP: an error, never an answer of the upstream.
    let globex_mcp = ann_of(&issuer, Some("globex"), MCP_RESOURCE);
    let (status, _, body) = mcp_call(&gateway, Some(&globex_mcp), "whoami", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("upstream_credential_missing"), "{body}");
    assert!(!body.contains("sha256="), "{body}");
    let acme_mcp = ann_of(&issuer, Some("acme"), MCP_RESOURCE);
    let (status, _, body) = mcp_call(&gateway, Some(&acme_mcp), "whoami", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("sha256={acme_digest}")), "{body}");

    // ann without a tenant: the entry without one, never acme's.
    let ann = ann_of(&issuer, None, RESOURCE);
    let answer = invoke(&gateway, Some(&ann), "whoami", json!({})).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let said_to_ann = said(&answer);
    assert!(
        said_to_ann.contains(&format!("sha256={untenanted_digest}")),
        "{said_to_ann}"
    );

    let log = gateway.stderr();
    for credential in ["acme-ann-token", "untenanted-ann-token"] {
        assert!(!log.contains(credential), "a credential was logged: {log}");
    }
}
