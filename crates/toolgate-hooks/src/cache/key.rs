//! Cache keys: which results may be shared with whom.

use std::fmt;

use serde_json::Value;
use toolgate_core::User;
use toolgate_core::tool::ToolDefinition;

use crate::fingerprint::{canonical_json, sha256_hex};

/// Whose results a cached entry may be served to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyScope {
    /// Only the same caller: a user id in its tenant, written as its
    /// [`caller_key`](User::caller_key) (the id for a caller without a tenant).
    User(String),
    /// Every user of the same tenant.
    Tenant(String),
    /// Everyone: only for tools that declare their results public.
    Public,
}

impl KeyScope {
    fn parts(&self) -> (&str, &str) {
        match self {
            KeyScope::User(id) => ("user", id),
            KeyScope::Tenant(id) => ("tenant", id),
            KeyScope::Public => ("public", ""),
        }
    }
}

/// A cache key: `toolgate:<tool>:<sha256>`.
///
/// The tool name is kept readable so that a backend can drop every entry of one tool
/// (`toolgate:weather:*`); everything else is inside the SHA-256, so the key holds no
/// argument, user id or tenant in clear text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

impl CacheKey {
    /// The key as text, for a backend to store it under.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", self.0)
    }
}

/// The cache key of a call: the tool's name and version, the caller scope and the
/// normalized input, so that
///
/// * a new tool version never reads an older version's results;
/// * one user's (or tenant's) results are never served to another — the scope is left
///   out only for [`KeyScope::Public`];
/// * equal inputs match whatever the order of their fields (the input is written as
///   canonical JSON: sorted keys, no whitespace).
///
/// The input is taken after the input phase — repaired, normalized and redacted — and
/// never contains secrets, which live in the context's secret slot, not in the input.
/// Each part is length-prefixed before hashing, so no two different calls can produce
/// the same bytes (`user "a:b"` + input `c` differs from `user "a"` + input `b:c`).
///
/// ```
/// use serde_json::json;
/// use toolgate_core::User;
/// use toolgate_core::tool::ToolDefinition;
/// use toolgate_hooks::cache::{cache_key, KeyScope};
///
/// let tool: ToolDefinition = serde_json::from_value(json!({
///     "name": "weather", "description": "", "version": "2", "input_schema": {}
/// }))?;
/// let alice = KeyScope::User("alice".into());
/// let a = cache_key(&tool, &alice, &json!({"city": "Oslo", "days": 3}));
/// let b = cache_key(&tool, &alice, &json!({"days": 3, "city": "Oslo"}));
/// let c = cache_key(&tool, &KeyScope::User("bob".into()), &json!({"city": "Oslo", "days": 3}));
/// assert_eq!(a, b);
/// assert_ne!(a, c);
/// assert!(a.as_str().starts_with("toolgate:weather:"));
/// # let _ = User::new("x");
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn cache_key(tool: &ToolDefinition, scope: &KeyScope, input: &Value) -> CacheKey {
    key_of(tool, scope, input, None)
}

/// The cache key of a call whose result depends on per-call provider values as well
/// (`ResultCacheBuilder::key_includes`): as [`cache_key`], with `providers` (an object of
/// values by key name, as canonical JSON) as one more length-prefixed part. Calls with
/// different provider values never share an entry.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::tool::ToolDefinition;
/// use toolgate_hooks::cache::{cache_key, cache_key_with_providers, KeyScope};
///
/// let tool: ToolDefinition = serde_json::from_value(json!({
///     "name": "whoami", "description": "", "version": "1", "input_schema": {}
/// }))?;
/// let ann = KeyScope::User("ann".into());
/// let home = cache_key_with_providers(&tool, &ann, &json!({}), &json!({"addr": "10.0.0.1"}));
/// let away = cache_key_with_providers(&tool, &ann, &json!({}), &json!({"addr": "10.9.9.9"}));
/// assert_ne!(home, away);
/// assert_ne!(home, cache_key(&tool, &ann, &json!({})));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn cache_key_with_providers(
    tool: &ToolDefinition,
    scope: &KeyScope,
    input: &Value,
    providers: &Value,
) -> CacheKey {
    key_of(tool, scope, input, Some(providers))
}

fn key_of(
    tool: &ToolDefinition,
    scope: &KeyScope,
    input: &Value,
    providers: Option<&Value>,
) -> CacheKey {
    let (scope_kind, scope_id) = scope.parts();
    let input = canonical_json(input);
    let providers = providers.map(canonical_json);
    let mut bytes = Vec::with_capacity(64 + input.len());
    let parts = [
        "toolgate-cache-v1",
        &tool.name,
        &tool.version,
        scope_kind,
        scope_id,
        &input,
    ];
    let extra = providers.as_deref().map(|p| ["providers", p]);
    for part in parts.into_iter().chain(extra.into_iter().flatten()) {
        bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
        bytes.extend_from_slice(part.as_bytes());
    }
    CacheKey(format!("toolgate:{}:{}", tool.name, sha256_hex(&bytes)))
}

/// How a [`ResultCache`](super::ResultCache) scopes results of tools that are not public.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScopeBy {
    /// Per caller: a user id in its tenant, so `ann` of `acme` is never served what `ann`
    /// of `globex` was. The default.
    #[default]
    User,
    /// Per tenant for users that have one, per user id for those that do not.
    Tenant,
}

impl ScopeBy {
    /// The scope of `user`'s calls.
    pub fn scope_of(self, user: &User) -> KeyScope {
        match (self, &user.tenant) {
            (ScopeBy::Tenant, Some(tenant)) => KeyScope::Tenant(tenant.clone()),
            _ => KeyScope::User(user.caller_key().into_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_without_a_tenant_keeps_the_scope_and_so_the_entries_it_had() {
        for scope_by in [ScopeBy::User, ScopeBy::Tenant] {
            assert_eq!(
                scope_by.scope_of(&User::new("ann")),
                KeyScope::User("ann".to_owned())
            );
        }
        assert_ne!(
            ScopeBy::User.scope_of(&User::new("ann").with_tenant("acme")),
            ScopeBy::User.scope_of(&User::new("ann").with_tenant("globex"))
        );
    }
}
