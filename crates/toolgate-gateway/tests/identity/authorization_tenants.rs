//! Authorization rules and tenants: a rule with `tenants:` admits the subject it names in
//! those tenants only, and refuses the same subject of another tenant naming that tenant;
//! a rule that names users but no tenants, where callers carry tenants, is warned of by
//! `toolgate check` and at start-up.

use serde_json::json;

use crate::common::{Gateway, check};
use crate::loopback::Issuer;
use crate::{RESOURCE, config, invoke};

/// The rules of [`config`] replaced by `rules` (one YAML list item a line).
fn with_rules(issuer: &Issuer, rules: &[&str]) -> String {
    let yaml = config(&issuer.url, "", "");
    let (head, _) = yaml
        .split_once("    rules:\n")
        .expect("the configuration has rules");
    let rules: String = rules.iter().map(|r| format!("      - {r}\n")).collect();
    format!("{head}    rules:\n{rules}")
}

/// A `/v1` token of the reader `ann` in `tenant`.
fn ann_of(issuer: &Issuer, tenant: &str) -> String {
    issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("ann"));
        c.insert("tenant".to_owned(), json!(tenant));
        c.insert("aud".to_owned(), json!(RESOURCE));
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_naming_ann_of_acme_admits_her_and_refuses_ann_of_globex_naming_the_tenant() {
    let issuer = Issuer::serve(true).await;
    let gateway = Gateway::start(&with_rules(
        &issuer,
        &["{ effect: allow, users: [ann], tenants: [acme] }"],
    ));

    let acme = invoke(
        &gateway,
        Some(&ann_of(&issuer, "acme")),
        "echo",
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(acme.status, 200, "{:?}", acme.body);

    let globex = invoke(
        &gateway,
        Some(&ann_of(&issuer, "globex")),
        "echo",
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(globex.status, 403, "{:?}", globex.body);
    assert_eq!(globex.error_code(), "forbidden", "{:?}", globex.body);
    let message = globex.error_message();
    assert!(
        message.contains("user `ann` of tenant `globex` may not call `echo`"),
        "{message}"
    );
    assert!(message.contains("ask an administrator"), "{message}");

    // Ann with no tenant in her token is of no tenant the rule names.
    let untenanted = issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("ann"));
    });
    let none = invoke(&gateway, Some(&untenanted), "echo", json!({"text": "hi"})).await;
    assert_eq!(none.status, 403, "{:?}", none.body);
    assert!(
        none.error_message().contains("user `ann` may not call"),
        "{:?}",
        none.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_naming_users_but_no_tenants_is_warned_of_by_check_and_at_start_up() {
    let issuer = Issuer::serve(true).await;
    let warned = "`policies.authorization.rules[1]` lists `users:` but no `tenants:`, so it matches `ann` in every tenant";
    let yaml = with_rules(
        &issuer,
        &[
            "{ effect: allow, roles: [admin] }",
            "{ effect: allow, users: [ann] }",
            "{ effect: allow, users: [bob], tenants: [acme] }",
        ],
    );

    let (status, stdout, stderr) = check(&yaml);
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(&format!("warning: {warned}")), "{stderr}");
    assert!(stderr.contains("add `tenants:` to the rule"), "{stderr}");
    assert_eq!(stderr.matches("warning:").count(), 1, "{stderr}");

    let gateway = Gateway::start(&yaml);
    gateway
        .wait_for_log(warned, 1, std::time::Duration::from_secs(30))
        .await;

    // Without a tenant claim and with no user of a tenant, the same rule is not warned of.
    let plain = yaml.replace("    tenant_claim: tenant\n", "");
    assert_ne!(plain, yaml);
    let (status, stdout, stderr) = check(&plain);
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("warning:"), "{stderr}");
}
