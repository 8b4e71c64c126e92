//! [`User`]: who is calling.

use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};

/// Who is calling. At least an id; roles and tenant feed authorization and cache scoping.
///
/// ```
/// use toolgate_core::User;
/// let alice = User::new("alice").with_roles(["admin"]).with_tenant("acme");
/// assert!(alice.has_role("admin"));
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct User {
    /// The user's id.
    pub id: String,
    /// The user's roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The tenant the user belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Anything else policies may look at.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub attributes: Map<String, Value>,
}

impl User {
    /// A user with this id and nothing else.
    pub fn new(id: impl Into<String>) -> Self {
        User {
            id: id.into(),
            roles: Vec::new(),
            tenant: None,
            attributes: Map::new(),
        }
    }

    /// The user of calls that name none: id `anonymous`, no roles.
    pub fn anonymous() -> Arc<User> {
        Arc::clone(&ANONYMOUS)
    }

    /// The same user with these roles.
    #[must_use]
    pub fn with_roles<I, S>(mut self, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// The same user in this tenant.
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Whether the user has this role.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    /// Whether `other` is the same caller: the same id in the same tenant. Roles and
    /// attributes may differ, as they change over time; `ann` of another tenant is another
    /// caller.
    ///
    /// ```
    /// use toolgate_core::User;
    /// let ann = User::new("ann").with_tenant("acme");
    /// assert!(ann.is_same_caller(&User::new("ann").with_tenant("acme").with_roles(["admin"])));
    /// assert!(!ann.is_same_caller(&User::new("ann").with_tenant("globex")));
    /// ```
    pub fn is_same_caller(&self, other: &User) -> bool {
        self.id == other.id && self.tenant == other.tenant
    }

    /// This caller as a message names them: `` `ann` ``, or `` `ann` of tenant `acme` ``.
    ///
    /// ```
    /// use toolgate_core::User;
    /// assert_eq!(User::new("ann").named(), "`ann`");
    /// assert_eq!(User::new("ann").with_tenant("acme").named(), "`ann` of tenant `acme`");
    /// ```
    pub fn named(&self) -> String {
        named(&self.id, self.tenant.as_deref())
    }

    /// One text naming this caller — the id in its tenant — and no other: a key for what is
    /// counted or kept per caller in a string (a rate limit's budget, a cached result's
    /// scope, a remembered consent), where `ann` of `acme` and `ann` of `globex` must not
    /// meet.
    ///
    /// It is the id as it is for a caller without a tenant (so keys made before tenants
    /// counted are still found), unless the id starts with U+0000. Otherwise it starts
    /// with U+0000, then the tenant's length in bytes, `:` and the tenant (or `-` for no
    /// tenant), then U+0000 and the id: two different callers never have the same key,
    /// whatever their ids and tenants hold.
    ///
    /// ```
    /// use toolgate_core::User;
    /// assert_eq!(User::new("ann").caller_key(), "ann");
    /// assert_eq!(User::new("ann").with_tenant("acme").caller_key(), "\u{0}4:acme\u{0}ann");
    /// assert_ne!(
    ///     User::new("ann").with_tenant("acme").caller_key(),
    ///     User::new("ann").with_tenant("globex").caller_key()
    /// );
    /// ```
    pub fn caller_key(&self) -> std::borrow::Cow<'_, str> {
        caller_key(&self.id, self.tenant.as_deref())
    }

    /// The length in bytes of [`caller_key`](Self::caller_key), without making it: to size
    /// a buffer for [`push_caller_key`](Self::push_caller_key).
    ///
    /// ```
    /// use toolgate_core::User;
    /// let ann = User::new("ann").with_tenant("acme");
    /// assert_eq!(ann.caller_key_len(), ann.caller_key().len());
    /// ```
    pub fn caller_key_len(&self) -> usize {
        caller_key_len(&self.id, self.tenant.as_deref())
    }

    /// Appends [`caller_key`](Self::caller_key) to `key`: for a key with more parts than
    /// the caller, built in one allocation.
    ///
    /// ```
    /// use toolgate_core::User;
    /// let ann = User::new("ann").with_tenant("acme");
    /// let mut key = String::with_capacity(5 + ann.caller_key_len());
    /// key.push_str("rate:");
    /// ann.push_caller_key(&mut key);
    /// assert_eq!(key, format!("rate:{}", ann.caller_key()));
    /// ```
    pub fn push_caller_key(&self, key: &mut String) {
        push_caller_key(&self.id, self.tenant.as_deref(), key);
    }
}

/// [`User::caller_key`] of the caller `id` in `tenant`.
fn caller_key<'a>(id: &'a str, tenant: Option<&str>) -> std::borrow::Cow<'a, str> {
    if tenant.is_none() && !id.starts_with('\0') {
        return std::borrow::Cow::Borrowed(id);
    }
    let mut key = String::with_capacity(caller_key_len(id, tenant));
    push_caller_key(id, tenant, &mut key);
    std::borrow::Cow::Owned(key)
}

/// [`User::caller_key_len`] of the caller `id` in `tenant`.
fn caller_key_len(id: &str, tenant: Option<&str>) -> usize {
    match tenant {
        None if !id.starts_with('\0') => id.len(),
        // U+0000, `-`, U+0000, the id.
        None => 3 + id.len(),
        Some(tenant) => {
            let digits = tenant.len().checked_ilog10().map_or(1, |d| d as usize + 1);
            // U+0000, the length, `:`, the tenant, U+0000, the id.
            1 + digits + 1 + tenant.len() + 1 + id.len()
        }
    }
}

/// [`User::push_caller_key`] of the caller `id` in `tenant`.
fn push_caller_key(id: &str, tenant: Option<&str>, key: &mut String) {
    use std::fmt::Write;
    match tenant {
        None if !id.starts_with('\0') => {}
        None => key.push_str("\0-\0"),
        Some(tenant) => {
            // Writing to a `String` cannot fail.
            let _ = write!(key, "\0{}:{tenant}\0", tenant.len());
        }
    }
    key.push_str(id);
}

/// A caller, by id and tenant, as a message names them ([`User::named`]).
pub(crate) fn named(id: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("`{id}` of tenant `{tenant}`"),
        None => format!("`{id}`"),
    }
}

/// Who a caller is, and no more: a user id in a tenant, as [`User::is_same_caller`]
/// compares users. A key for what is counted or kept per caller — roles and attributes
/// change over time and are left out; `ann` of `globex` is not `ann` of `acme`.
///
/// ```
/// use toolgate_core::{CallerId, User};
///
/// let ann = User::new("ann").with_tenant("acme");
/// let id = CallerId::of(&ann);
/// assert!(id.is(&ann.clone().with_roles(["admin"])));
/// assert!(!id.is(&User::new("ann").with_tenant("globex")));
/// assert!(id.to_user().is_same_caller(&ann));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallerId {
    /// The user id.
    pub id: String,
    /// The tenant, if the caller has one.
    pub tenant: Option<String>,
}

impl CallerId {
    /// The caller `user` is.
    pub fn of(user: &User) -> Self {
        CallerId {
            id: user.id.clone(),
            tenant: user.tenant.clone(),
        }
    }

    /// Whether `user` is this caller.
    pub fn is(&self, user: &User) -> bool {
        self.id == user.id && self.tenant == user.tenant
    }

    /// This caller's [`User::caller_key`]: the key of what is kept per caller.
    ///
    /// ```
    /// use toolgate_core::{CallerId, User};
    ///
    /// let ann = User::new("ann").with_tenant("acme");
    /// assert_eq!(CallerId::of(&ann).caller_key(), ann.caller_key());
    /// assert_eq!(CallerId::from("ann").caller_key(), "ann");
    /// ```
    pub fn caller_key(&self) -> std::borrow::Cow<'_, str> {
        caller_key(&self.id, self.tenant.as_deref())
    }

    /// This caller as a [`User`] with no roles or attributes.
    pub fn to_user(&self) -> User {
        User {
            tenant: self.tenant.clone(),
            ..User::new(self.id.clone())
        }
    }
}

/// A user id alone names the caller of that id without a tenant.
impl From<&str> for CallerId {
    fn from(id: &str) -> Self {
        CallerId {
            id: id.to_owned(),
            tenant: None,
        }
    }
}

/// A user id alone names the caller of that id without a tenant.
impl From<String> for CallerId {
    fn from(id: String) -> Self {
        CallerId { id, tenant: None }
    }
}

/// The caller `user` is: their id in their tenant.
impl From<&User> for CallerId {
    fn from(user: &User) -> Self {
        CallerId::of(user)
    }
}

/// The user of invocations that name none.
pub(crate) static ANONYMOUS: LazyLock<Arc<User>> =
    LazyLock::new(|| Arc::new(User::new("anonymous")));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_callers_never_share_a_caller_key_whatever_their_ids_and_tenants_hold() {
        let callers = [
            User::new("ann"),
            User::new("ann").with_tenant("acme"),
            User::new("ann").with_tenant("globex"),
            User::new("ann").with_tenant(""),
            User::new("4:acme\u{0}ann"),
            User::new("\u{0}4:acme\u{0}ann"),
            User::new("\u{0}-\u{0}ann"),
            User::new("acme\u{0}ann").with_tenant(""),
            User::new("ann").with_tenant("acme\u{0}"),
            User::new("").with_tenant("acme\u{0}ann"),
            User::new("\u{0}"),
            User::new("ann").with_tenant("a tenant of two digits"),
        ];
        for (i, a) in callers.iter().enumerate() {
            for b in &callers[i + 1..] {
                assert_ne!(a.caller_key(), b.caller_key(), "{a:?} and {b:?}");
            }
            assert_eq!(a.caller_key_len(), a.caller_key().len(), "{a:?}");
            let same = a.clone().with_roles(["admin"]);
            assert_eq!(a.caller_key(), same.caller_key());
        }
    }

    #[test]
    fn a_caller_without_a_tenant_is_keyed_by_its_id_as_before() {
        assert!(matches!(
            User::new("ann").caller_key(),
            std::borrow::Cow::Borrowed("ann")
        ));
        assert_eq!(User::new("\u{0}x").caller_key(), "\u{0}-\u{0}\u{0}x");
    }
}
