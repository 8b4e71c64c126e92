//! [`Rules`]: allow and deny rules over user id, tenant, roles, tool name and tags.

use toolgate_core::User;
use toolgate_core::tool::ToolDefinition;

use super::{AuthorizeError, Authorizer, Verdict};

/// Whether a rule lets a call through or stops it: `allow` or `deny` in a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The call may go on.
    Allow,
    /// The call is refused.
    Deny,
}

/// One rule: an effect, and the calls it matches.
///
/// A rule matches a call when every condition it has matches: the user id is one of
/// [`users`](Rule::user), the user's tenant is one of [`tenants`](Rule::tenant), the user
/// has one of [`roles`](Rule::role), the tool name is one of [`tools`](Rule::tool) (a
/// trailing `*` matches a prefix: `fs.*`), the tool carries one of [`tags`](Rule::tag). A
/// rule with no conditions matches every call.
///
/// A user id alone names that id in every tenant: `ann` of `acme` and `ann` of `globex`
/// are different callers, and `Rule::allow().user("ann")` matches both. Where callers have
/// tenants, add the tenant to rules that name users.
///
/// ```
/// use toolgate_core::User;
/// use toolgate_core::tool::{ToolAnnotations, ToolDefinition, ToolSource};
/// use toolgate_hooks::authorize::Rule;
///
/// let admins_everything = Rule::allow().role("admin");
/// let nobody_deletes = Rule::deny().tag("destructive").role("intern");
/// # let _ = (admins_everything, nobody_deletes);
///
/// # let tool = ToolDefinition { name: "report".into(), title: None, description: String::new(),
/// #     version: "1".into(), input_schema: serde_json::json!({}), output_schema: None,
/// #     annotations: ToolAnnotations::default(), tags: vec![], source: ToolSource::Local };
/// let ann_of_acme = Rule::allow().user("ann").tenant("acme");
/// assert!(ann_of_acme.matches(&User::new("ann").with_tenant("acme"), &tool));
/// assert!(!ann_of_acme.matches(&User::new("ann").with_tenant("globex"), &tool));
/// assert!(!ann_of_acme.matches(&User::new("ann"), &tool));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    effect: Effect,
    users: Vec<String>,
    tenants: Vec<String>,
    roles: Vec<String>,
    tools: Vec<String>,
    tags: Vec<String>,
}

impl Rule {
    /// A rule that allows what it matches.
    pub fn allow() -> Self {
        Rule::new(Effect::Allow)
    }

    /// A rule that denies what it matches (a deny always wins over an allow).
    pub fn deny() -> Self {
        Rule::new(Effect::Deny)
    }

    fn new(effect: Effect) -> Self {
        Rule {
            effect,
            users: Vec::new(),
            tenants: Vec::new(),
            roles: Vec::new(),
            tools: Vec::new(),
            tags: Vec::new(),
        }
    }

    /// Matches this user id (any of those given).
    #[must_use]
    pub fn user(mut self, id: impl Into<String>) -> Self {
        self.users.push(id.into());
        self
    }

    /// Matches users of this tenant (any of those given). A user without a tenant matches
    /// no rule that names tenants.
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenants.push(tenant.into());
        self
    }

    /// Matches users with this role (any of those given).
    #[must_use]
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.roles.push(role.into());
        self
    }

    /// Matches this tool name, or a prefix ending in `*` (any of those given).
    #[must_use]
    pub fn tool(mut self, name: impl Into<String>) -> Self {
        self.tools.push(name.into());
        self
    }

    /// Matches tools with this tag (any of those given).
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// The rule's effect.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// Whether the rule matches this user calling this tool.
    pub fn matches(&self, user: &User, tool: &ToolDefinition) -> bool {
        let any = |list: &[String], hit: &dyn Fn(&str) -> bool| {
            list.is_empty() || list.iter().any(|v| hit(v))
        };
        any(&self.users, &|id| user.id == id)
            && any(&self.tenants, &|tenant| {
                user.tenant.as_deref() == Some(tenant)
            })
            && any(&self.roles, &|role| user.has_role(role))
            && any(&self.tools, &|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => tool.name.starts_with(prefix),
                None => tool.name == pattern,
            })
            && any(&self.tags, &|tag| tool.has_tag(tag))
    }
}

/// An ordered set of [`Rule`]s with a default: any matching deny refuses, else any matching
/// allow lets through, else the default applies (deny unless set otherwise).
///
/// ```
/// use toolgate_core::User;
/// use toolgate_core::tool::{ToolAnnotations, ToolDefinition, ToolSource};
/// use toolgate_hooks::authorize::{Effect, Rule, Rules};
///
/// let rules = Rules::new(Effect::Deny)
///     .rule(Rule::allow().role("staff"))
///     .rule(Rule::deny().tool("admin.*").user("mallory"));
/// # let tool = ToolDefinition { name: "admin.reset".into(), title: None, description: String::new(),
/// #     version: "1".into(), input_schema: serde_json::json!({}), output_schema: None,
/// #     annotations: ToolAnnotations::default(), tags: vec![], source: ToolSource::Local };
/// let mallory = User::new("mallory").with_roles(["staff"]);
/// assert!(!rules.allows(&mallory, &tool));
/// assert!(rules.allows(&User::new("ann").with_roles(["staff"]), &tool));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    rules: Vec<Rule>,
    default: Effect,
}

impl Rules {
    /// No rules; `default` applies to every call.
    pub fn new(default: Effect) -> Self {
        Rules {
            rules: Vec::new(),
            default,
        }
    }

    /// The same rules with one more.
    #[must_use]
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// The effect for this user calling this tool.
    pub fn effect_for(&self, user: &User, tool: &ToolDefinition) -> Effect {
        let mut allowed = false;
        for rule in self.rules.iter().filter(|r| r.matches(user, tool)) {
            match rule.effect {
                Effect::Deny => return Effect::Deny,
                Effect::Allow => allowed = true,
            }
        }
        if allowed { Effect::Allow } else { self.default }
    }

    /// Whether this user may call this tool.
    pub fn allows(&self, user: &User, tool: &ToolDefinition) -> bool {
        self.effect_for(user, tool) == Effect::Allow
    }
}

impl Authorizer for Rules {
    fn authorize(&self, user: &User, tool: &ToolDefinition) -> Result<Verdict, AuthorizeError> {
        Ok(match self.effect_for(user, tool) {
            Effect::Allow => Verdict::Allow,
            Effect::Deny => Verdict::deny(format!(
                "user {} may not call `{}`: ask an administrator for access or use another tool",
                user.named(),
                tool.name
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use toolgate_core::tool::{ToolAnnotations, ToolSource};

    use super::*;

    fn tool(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            title: None,
            description: String::new(),
            version: "1".into(),
            input_schema: serde_json::json!({}),
            output_schema: None,
            annotations: ToolAnnotations::default(),
            tags: vec![],
            source: ToolSource::Local,
        }
    }

    fn ann_of(tenant: &str) -> User {
        User::new("ann").with_tenant(tenant)
    }

    #[test]
    fn a_rule_with_tenants_matches_only_callers_of_one_of_them() {
        let report = tool("report");
        let rule = Rule::allow().user("ann").tenant("acme").tenant("initech");
        assert!(rule.matches(&ann_of("acme"), &report));
        assert!(rule.matches(&ann_of("initech"), &report));
        assert!(!rule.matches(&ann_of("globex"), &report));
        assert!(
            !rule.matches(&User::new("ann"), &report),
            "a caller without a tenant is of none of them"
        );
        assert!(!rule.matches(&User::new("bob").with_tenant("acme"), &report));

        let anyone_of_acme = Rule::allow().tenant("acme");
        assert!(anyone_of_acme.matches(&User::new("bob").with_tenant("acme"), &report));
    }

    #[test]
    fn a_rule_without_tenants_matches_the_id_in_every_tenant_and_none() {
        let report = tool("report");
        let rule = Rule::allow().user("ann");
        for ann in [ann_of("acme"), ann_of("globex"), User::new("ann")] {
            assert!(rule.matches(&ann, &report), "{ann:?}");
        }
    }

    #[test]
    fn a_denial_names_the_caller_with_its_tenant_and_a_caller_without_one_as_before() {
        let rules = Rules::new(Effect::Deny).rule(Rule::allow().user("ann").tenant("acme"));
        let report = tool("report");
        assert_eq!(
            rules.authorize(&ann_of("acme"), &report),
            Ok(Verdict::Allow)
        );
        assert_eq!(
            rules.authorize(&ann_of("globex"), &report),
            Ok(Verdict::deny(
                "user `ann` of tenant `globex` may not call `report`: ask an administrator for access or use another tool"
            ))
        );
        assert_eq!(
            rules.authorize(&User::new("ann"), &report),
            Ok(Verdict::deny(
                "user `ann` may not call `report`: ask an administrator for access or use another tool"
            ))
        );
    }
}
