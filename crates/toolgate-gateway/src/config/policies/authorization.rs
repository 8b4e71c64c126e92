//! `policies.authorization:` — allow and deny rules over users, tenants, roles, tools and
//! tags, made into an [`Authorize`] hook.

use serde::Deserialize;
use toolgate_hooks::Authorize;
use toolgate_hooks::authorize::{Effect, Rule, Rules};

/// `authorization:` — rules evaluated for every call and every listing; a matching `deny`
/// wins over any `allow`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationPolicy {
    /// What happens when no rule matches (default `deny`).
    #[serde(default = "deny")]
    pub default: Effect,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<RuleEntry>,
}

fn deny() -> Effect {
    Effect::Deny
}

/// One rule: it matches a call when every list it sets contains the call's user id, the
/// user's tenant, one of the user's roles, the tool's name, or one of the tool's tags. An
/// empty list matches anything.
///
/// `users:` names ids, and an id is the same in every tenant: `ann` of `acme` and `ann` of
/// `globex` are different callers, and a rule with `users: [ann]` matches both unless it
/// also has `tenants: [acme]`. A caller without a tenant matches no rule with `tenants:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// `allow` or `deny`.
    pub effect: Effect,
    /// User ids (in every tenant, unless `tenants` is set too).
    #[serde(default)]
    pub users: Vec<String>,
    /// Tenants: the caller's tenant is one of them (a caller without a tenant is of none).
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Tool names.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Tool tags (labels become tags: `category:math`, `safety:dangerous`).
    #[serde(default)]
    pub tags: Vec<String>,
}

impl From<&RuleEntry> for Rule {
    fn from(entry: &RuleEntry) -> Self {
        let rule = match entry.effect {
            Effect::Allow => Rule::allow(),
            Effect::Deny => Rule::deny(),
        };
        let rule = entry.users.iter().fold(rule, |r, u| r.user(u.clone()));
        let rule = (entry.tenants.iter()).fold(rule, |r, t| r.tenant(t.clone()));
        let rule = entry
            .roles
            .iter()
            .fold(rule, |r, role| r.role(role.clone()));
        let rule = entry.tools.iter().fold(rule, |r, t| r.tool(t.clone()));
        entry.tags.iter().fold(rule, |r, t| r.tag(t.clone()))
    }
}

impl AuthorizationPolicy {
    /// What `toolgate check` and start-up warn of: each `allow` rule that lists `users:`
    /// but no `tenants:`, when `callers_have_tenants` (a configured user has `tenant:`, or
    /// `identity.oauth.tenant_claim` is set) — such a rule lets those ids in from every
    /// tenant. A `deny` rule naming ids in every tenant refuses more, not less, and is
    /// usually meant so: it is not warned of.
    pub fn warnings(&self, callers_have_tenants: bool) -> Vec<String> {
        if !callers_have_tenants {
            return Vec::new();
        }
        (self.rules.iter().enumerate())
            .filter(|(_, rule)| {
                rule.effect == Effect::Allow && !rule.users.is_empty() && rule.tenants.is_empty()
            })
            .map(|(i, rule)| {
                let users = (rule.users.iter())
                    .map(|u| format!("`{u}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!(
                    "`policies.authorization.rules[{i}]` lists `users:` but no `tenants:`, so it \
                     matches {users} in every tenant, while callers here have tenants (a user \
                     has `tenant:`, or `identity.oauth.tenant_claim` is set): add `tenants:` to \
                     the rule to name the tenants it is meant for"
                )
            })
            .collect()
    }
}

impl From<&AuthorizationPolicy> for Authorize {
    fn from(policy: &AuthorizationPolicy) -> Self {
        let rules = (policy.rules.iter()).fold(Rules::new(policy.default), |rules, entry| {
            rules.rule(entry.into())
        });
        Authorize::new(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_deny_and_effects_are_read_as_the_hook_s_own() {
        let policy: AuthorizationPolicy =
            serde_json::from_str(r#"{"rules": [{"effect": "allow", "roles": ["admin"]}]}"#)
                .unwrap();
        assert_eq!(policy.default, Effect::Deny);
        assert_eq!(policy.rules[0].effect, Effect::Allow);
        assert_eq!(
            Rule::from(&policy.rules[0]),
            Rule::allow().role("admin".to_owned())
        );

        let error =
            crate::config::parse("policies:\n  authorization:\n    default: maybe\n").unwrap_err();
        assert_eq!(error.field(), "policies.authorization.default");
        assert!(error.to_string().contains("`allow` or `deny`"), "{error}");
    }

    #[test]
    fn tenants_are_read_into_the_rule() {
        let config = crate::config::parse(
            "policies:\n  authorization:\n    rules:\n      - { effect: allow, users: [ann], tenants: [acme, initech] }\n",
        )
        .unwrap();
        let policy = config.policies.authorization.as_ref().unwrap();
        assert_eq!(policy.rules[0].tenants, ["acme", "initech"]);
        assert_eq!(
            Rule::from(&policy.rules[0]),
            Rule::allow().user("ann").tenant("acme").tenant("initech")
        );
        assert!(
            parsed_rule("{ effect: allow, users: [ann] }")
                .tenants
                .is_empty()
        );

        let error = crate::config::parse(
            "policies:\n  authorization:\n    rules:\n      - { effect: allow, tenants: acme }\n",
        )
        .unwrap_err();
        assert_eq!(
            error.field(),
            "policies.authorization.rules[0].tenants",
            "{error}"
        );
    }

    fn parsed_rule(rule: &str) -> RuleEntry {
        let text = format!("policies:\n  authorization:\n    rules:\n      - {rule}\n");
        let config = crate::config::parse(&text).unwrap();
        config.policies.authorization.unwrap().rules.remove(0)
    }

    #[test]
    fn a_rule_naming_users_but_no_tenants_is_warned_of_where_callers_have_tenants() {
        let policy: AuthorizationPolicy = serde_json::from_value(serde_json::json!({"rules": [
            {"effect": "allow", "roles": ["admin"]},
            {"effect": "allow", "users": ["ann"], "tenants": ["acme"]},
            {"effect": "allow", "users": ["bob", "carol"], "tools": ["fs.*"]},
            {"effect": "deny", "users": ["mallory"]},
        ]}))
        .unwrap();
        assert!(policy.warnings(false).is_empty());
        let warnings = policy.warnings(true);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("`policies.authorization.rules[2]` lists `users:` but no `tenants:`, so it matches `bob`, `carol` in every tenant"),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[0].contains("add `tenants:` to the rule"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn the_configuration_warns_when_a_user_has_a_tenant_or_tokens_carry_one() {
        let rules =
            "policies:\n  authorization:\n    rules:\n      - { effect: allow, users: [ann] }\n";
        let user = |tenant: &str| {
            format!(
                "users:\n  - {{ id: ann, key_sha256: \"{}\"{tenant} }}\n",
                "a".repeat(64)
            )
        };
        let oauth = |claim: &str| {
            format!(
                "identity:\n  oauth:\n    issuer: https://issuer.test\n    resource: https://tools.test\n{claim}"
            )
        };
        let warned = |text: String| crate::config::parse(&text).unwrap().warnings();

        assert!(warned(format!("{}{rules}", user(""))).is_empty());
        assert!(warned(format!("{}{rules}", oauth(""))).is_empty());
        let with_tenant = warned(format!("{}{rules}", user(", tenant: acme")));
        assert_eq!(with_tenant.len(), 1, "{with_tenant:?}");
        assert!(
            with_tenant[0].contains("`policies.authorization.rules[0]`"),
            "{with_tenant:?}"
        );
        let with_claim = warned(format!("{}{rules}", oauth("    tenant_claim: tenant\n")));
        assert_eq!(with_claim, with_tenant);
        assert!(
            warned(user(", tenant: acme")).is_empty(),
            "no rules, no warning"
        );
    }
}
