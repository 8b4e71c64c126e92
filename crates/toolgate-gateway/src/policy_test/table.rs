//! The table of `toolgate policy test`: calls, and the decision expected for each.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};
use toolgate_core::User;
use toolgate_hooks::policy::Verdict;

use crate::config::{
    Config, Located, UserNotFound, name_fault, strip_location, yaml_in_plain_words,
};

/// A table of policy tests, as written in its YAML file:
///
/// ```yaml
/// config: examples/policies/gateway.yaml   # or --config
/// cases:
///   - name: staff may echo
///     principal: { user: alice }            # a user of the configuration
///     tool: echo
///     arguments: { text: hello }
///     expect: allow
///     policies: [staff-echo]                # the enforced policies that decided
///   - principal: { id: eve, roles: [], claims: { scopes: [read] } }
///     tool: echo
///     arguments: { text: "DROP TABLE users" }
///     transport: mcp
///     expect: deny
///     reason: drops a table                 # a part of what the caller is told
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTable {
    /// The gateway configuration the cases run against, relative to the working
    /// directory (as the paths in a configuration are); `--config` overrides it.
    #[serde(default)]
    pub config: Option<PathBuf>,
    /// The cases, run in order.
    pub cases: Vec<PolicyCase>,
}

/// One call and the decision expected for it.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "CaseEntry")]
pub struct PolicyCase {
    /// What the case is about, in the report (default: who calls which tool).
    pub name: Option<String>,
    /// Who calls.
    pub principal: Principal,
    /// The tool called.
    pub tool: String,
    /// The call's arguments (default `{}`).
    pub arguments: Value,
    /// How the call comes in: `http` (`/v1`, the default) or `mcp` (`/mcp`):
    /// `context.transport` in Cedar.
    pub transport: Transport,
    /// The decision expected.
    pub expect: Verdict,
    /// A part of the refusal the caller is told, for an expected `deny`.
    pub reason: Option<String>,
    /// The ids of the enforced Cedar policies expected to determine the decision (the
    /// satisfied `permit`s of an allow, the satisfied `forbid`s of a denial; `[]` for a
    /// denial because no policy permits), in any order.
    pub policies: Option<Vec<String>>,
    /// The decision expected with the shadow policies enforced too.
    pub shadow: Option<Verdict>,
}

/// A case as written, checked into a [`PolicyCase`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseEntry {
    name: Option<String>,
    principal: Principal,
    tool: String,
    #[serde(default = "no_arguments")]
    arguments: Value,
    #[serde(default)]
    transport: Transport,
    expect: Verdict,
    reason: Option<String>,
    policies: Option<Vec<String>>,
    shadow: Option<Verdict>,
}

fn no_arguments() -> Value {
    Value::Object(Map::new())
}

impl TryFrom<CaseEntry> for PolicyCase {
    type Error = String;

    fn try_from(entry: CaseEntry) -> Result<Self, String> {
        if entry.reason.is_some() && entry.expect == Verdict::Allow {
            return Err(
                "`reason` is what a refused caller is told: give it only with `expect: deny`"
                    .to_owned(),
            );
        }
        Ok(PolicyCase {
            name: entry.name,
            principal: entry.principal,
            tool: entry.tool,
            arguments: entry.arguments,
            transport: entry.transport,
            expect: entry.expect,
            reason: entry.reason,
            policies: entry.policies,
            shadow: entry.shadow,
        })
    }
}

/// How a call comes in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// `/v1`.
    #[default]
    Http,
    /// `/mcp`.
    Mcp,
}

impl Transport {
    /// `http` or `mcp`, as policies see it in `context.transport`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Mcp => "mcp",
        }
    }
}

/// Who calls: a user of the configuration (`user: alice`, with its roles and tenant), or
/// one described in full (`id`, `roles`, `tenant`); `roles` and `tenant` given beside
/// `user` replace the configured ones, and where `users:` has the id in several tenants,
/// `tenant` picks the user of that tenant ([`Config::user_named`]). With `claims`
/// (`{scopes: [...]}`) the caller comes with an OAuth token, as when serving: policies see
/// `auth` (`oauth`) and `scopes` as tags, the scopes grant the roles of
/// `identity.oauth.scope_roles`, and the tools' `required_scopes` apply.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "PrincipalEntry")]
pub struct Principal {
    configured: Option<String>,
    id: String,
    roles: Option<Vec<String>>,
    tenant: Option<String>,
    /// The token's scopes, for a caller with a token.
    scopes: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalEntry {
    user: Option<String>,
    id: Option<String>,
    roles: Option<Vec<String>>,
    tenant: Option<String>,
    #[serde(default)]
    claims: Map<String, Value>,
}

impl TryFrom<PrincipalEntry> for Principal {
    type Error = String;

    fn try_from(entry: PrincipalEntry) -> Result<Self, String> {
        let (configured, id) = match (entry.user, entry.id) {
            (Some(user), None) => (Some(user.clone()), user),
            (None, Some(id)) => (None, id),
            (Some(_), Some(_)) => {
                return Err(
                    "give `user` (a user of the configuration) or `id` (any caller), not both"
                        .to_owned(),
                );
            }
            (None, None) => {
                return Err(
                    "say who calls: `user: NAME` (a user of the configuration) or `id: NAME`"
                        .to_owned(),
                );
            }
        };
        // The rule of the configuration's `users:` and a token's claims: no caller whose
        // id or tenant breaks it reaches the policies when serving.
        if let Some(fault) = name_fault(&id) {
            return Err(format!("a caller's id {fault}"));
        }
        if let Some(fault) = entry.tenant.as_deref().and_then(name_fault) {
            return Err(format!(
                "a caller's tenant {fault}: leave `tenant` out for a caller of no tenant"
            ));
        }
        let scopes = token_scopes(&entry.claims)?;
        Ok(Principal {
            configured,
            id,
            roles: entry.roles,
            tenant: entry.tenant,
            scopes,
        })
    }
}

impl Principal {
    /// The caller's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The user calls are made as, from `config`'s users where the principal names one.
    ///
    /// # Errors
    ///
    /// What to write instead, when the principal names a user `config` does not have.
    pub fn user(&self, config: &Config) -> Result<User, String> {
        let mut user = User::new(self.id.clone());
        if let Some(name) = &self.configured {
            // A user id is unique only within its tenant: `tenant` beside `user` picks the
            // user of that id in that tenant; when there is none, it replaces the tenant of
            // the one user of that id (of no tenant, or the only one).
            let tenant = self.tenant.as_deref();
            let mut entry = config.user_named(name, tenant);
            if let Err(UserNotFound::NotInTenant { .. }) = entry
                && let Ok(only) = config.user_named(name, None)
            {
                entry = Ok(only);
            }
            let entry = entry.map_err(|e| match e {
                UserNotFound::Unknown { .. } => {
                    // Each id once, though it may be a user of several tenants.
                    let mut seen = std::collections::BTreeSet::new();
                    let known: Vec<&str> = (config.users.iter())
                        .map(|u| u.id.as_str())
                        .filter(|id| seen.insert(*id))
                        .collect();
                    format!(
                        "no user `{name}` in the configuration's `users` (it has: {}); describe the caller with `id`, `roles` and `tenant` instead",
                        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                    )
                }
                e => format!("{e} (write `tenant` beside `user`)"),
            })?;
            user.roles.clone_from(&entry.roles);
            user.tenant.clone_from(&entry.tenant);
        }
        if let Some(roles) = &self.roles {
            user.roles.clone_from(roles);
        }
        if let Some(tenant) = &self.tenant {
            user.tenant = Some(tenant.clone());
        }
        if let Some(scopes) = &self.scopes {
            // As a token's caller is made when serving.
            let none = Default::default();
            let scope_roles = (config.identity.oauth.as_ref()).map_or(&none, |o| &o.scope_roles);
            crate::identity::token::with_token_scopes(&mut user, scopes, scope_roles);
        }
        Ok(user)
    }
}

/// The scopes of a token caller's `claims`: `None` without claims (a caller with an API
/// key). A token's claims reach policies only as its scopes (and its roles and tenant,
/// written as `roles` and `tenant`), so no other claim is accepted: a case could not
/// describe a caller who exists when serving.
fn token_scopes(claims: &Map<String, Value>) -> Result<Option<Vec<String>>, String> {
    if let Some(other) = claims.keys().find(|k| k.as_str() != "scopes") {
        return Err(format!(
            "claim `{other}` never reaches a policy when serving: a token's caller has its `scopes` (write `claims: {{ scopes: [...] }}`), and its roles and tenant (write `roles` and `tenant`)"
        ));
    }
    let Some(scopes) = claims.get("scopes") else {
        return Ok(None);
    };
    let scopes = match scopes {
        Value::String(text) => text.split_whitespace().map(str::to_owned).collect(),
        Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("`claims.scopes` is a list of scopes (strings)")?,
        _ => return Err("`claims.scopes` is a list of scopes (strings)".to_owned()),
    };
    Ok(Some(scopes))
}

/// The table could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The file could not be read.
    #[error("cannot read the policy test table {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a table: a value is malformed, misspelt or missing.
    #[error("{}", Located { origin: file, line: *line, column: *column, field, message })]
    Malformed {
        /// The file.
        file: String,
        /// The 1-based line, when known.
        line: Option<usize>,
        /// The 1-based column, when known.
        column: Option<usize>,
        /// Where in the table, e.g. `cases[2].expect`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl PolicyTable {
    /// Reads the table at `path`.
    ///
    /// # Errors
    ///
    /// [`TableError`]: the file cannot be read, or is malformed (at its line and column).
    pub fn load(path: &Path) -> Result<PolicyTable, TableError> {
        let text = std::fs::read_to_string(path).map_err(|source| TableError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses table text; errors are reported against `file`.
    ///
    /// # Errors
    ///
    /// [`TableError::Malformed`], at its line and column.
    pub fn parse(text: &str, file: &str) -> Result<PolicyTable, TableError> {
        let malformed = |field: String, line, column, message: String| TableError::Malformed {
            file: file.to_owned(),
            line,
            column,
            field,
            message,
        };
        let deserializer = yaml_serde::Deserializer::from_str(text);
        let table: PolicyTable =
            serde_path_to_error::deserialize(deserializer).map_err(|error| {
                let field = error.path().to_string();
                let inner = error.into_inner();
                let location = inner.location();
                let message = yaml_in_plain_words(&strip_location(&inner.to_string(), &field));
                malformed(
                    field,
                    location.as_ref().map(|l| l.line()),
                    location.as_ref().map(|l| l.column()),
                    message,
                )
            })?;
        if table.cases.is_empty() {
            return Err(malformed(
                "cases".to_owned(),
                None,
                None,
                "the table has no cases: list them under `cases:`".to_owned(),
            ));
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_expectation_is_reported_at_its_line_and_column() {
        let text = "cases:\n  - principal: { id: ann }\n    tool: echo\n    expect: alow\n";
        let error = PolicyTable::parse(text, "t.yaml").unwrap_err().to_string();
        assert!(
            error.starts_with("t.yaml:4:13: `cases[0].expect`:"),
            "{error}"
        );
        assert!(error.contains("`allow`"), "{error}");
    }

    #[test]
    fn a_principal_with_both_user_and_id_is_refused_at_its_case() {
        let text = "cases:\n  - tool: echo\n    expect: deny\n    principal: { user: a, id: b }\n";
        let error = PolicyTable::parse(text, "t.yaml").unwrap_err().to_string();
        assert!(
            error.starts_with("t.yaml:2:5: `cases[0].principal`:"),
            "{error}"
        );
        assert!(error.contains("not both"), "{error}");
    }

    #[test]
    fn a_principal_with_an_empty_or_unprintable_tenant_is_refused_at_its_case() {
        for tenant in ["''", "\"ac\\u202Eme\""] {
            let text = format!(
                "cases:\n  - tool: echo\n    expect: deny\n    principal: {{ id: ann, tenant: {tenant} }}\n"
            );
            let error = PolicyTable::parse(&text, "t.yaml").unwrap_err().to_string();
            assert!(
                error.starts_with("t.yaml:2:5: `cases[0].principal`:"),
                "{error}"
            );
            assert!(error.contains("leave `tenant` out"), "{error}");
        }
        let text = "cases:\n  - tool: echo\n    expect: deny\n    principal: { id: \"a\\nb\" }\n";
        let error = PolicyTable::parse(text, "t.yaml").unwrap_err().to_string();
        assert!(error.contains("a caller's id may not hold"), "{error}");
    }

    #[test]
    fn a_configured_user_in_several_tenants_is_picked_by_the_cases_tenant() {
        let config = crate::config::parse(&format!(
            "users:\n  - {{id: ann, key_sha256: \"{}\", tenant: acme, roles: [analyst]}}\n  - {{id: ann, key_sha256: \"{}\", tenant: globex, roles: [intern]}}\n",
            "ab".repeat(32),
            "cd".repeat(32),
        ))
        .unwrap();
        let principal = |yaml: &str| {
            let text = format!("cases:\n  - tool: echo\n    expect: deny\n    principal: {yaml}\n");
            PolicyTable::parse(&text, "t.yaml").unwrap().cases[0]
                .principal
                .user(&config)
        };
        for (tenant, role) in [("acme", "analyst"), ("globex", "intern")] {
            let ann = principal(&format!("{{ user: ann, tenant: {tenant} }}")).unwrap();
            assert_eq!(ann.tenant.as_deref(), Some(tenant));
            assert_eq!(ann.roles, [role]);
        }
        let which = principal("{ user: ann }").unwrap_err();
        assert!(
            which.contains("tenant `acme` and tenant `globex`")
                && which.contains("write `tenant` beside `user`"),
            "{which}"
        );
        let neither = principal("{ user: ann, tenant: initech }").unwrap_err();
        assert!(
            neither.contains("no user `ann` of tenant `initech`"),
            "{neither}"
        );
    }

    #[test]
    fn arguments_default_to_an_empty_object_and_transport_to_http() {
        let table = PolicyTable::parse(
            "cases:\n  - { principal: { id: ann }, tool: current_time, expect: allow }\n",
            "t.yaml",
        )
        .unwrap();
        let case = &table.cases[0];
        assert_eq!(case.arguments, serde_json::json!({}));
        assert_eq!(case.transport, Transport::Http);
        assert_eq!(case.principal.id(), "ann");
    }

    #[test]
    fn a_table_without_cases_is_refused() {
        let error = PolicyTable::parse("cases: []\n", "t.yaml").unwrap_err();
        assert!(error.to_string().contains("no cases"), "{error}");
    }
}
