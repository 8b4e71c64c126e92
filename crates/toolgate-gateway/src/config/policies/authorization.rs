//! `policies.authorization:` — allow and deny rules over users, roles, tools and tags,
//! made into an [`Authorize`] hook.

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

/// One rule: it matches a call when every list it sets contains the call's user id, one of
/// the user's roles, the tool's name, or one of the tool's tags. An empty list matches
/// anything.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// `allow` or `deny`.
    pub effect: Effect,
    /// User ids.
    #[serde(default)]
    pub users: Vec<String>,
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
        let rule = entry
            .roles
            .iter()
            .fold(rule, |r, role| r.role(role.clone()));
        let rule = entry.tools.iter().fold(rule, |r, t| r.tool(t.clone()));
        entry.tags.iter().fold(rule, |r, t| r.tag(t.clone()))
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
}
