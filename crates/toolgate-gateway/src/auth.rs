//! API keys: `Authorization: Bearer <key>` → a [`User`] with roles.
//!
//! The configuration holds the SHA-256 of every key, never the key. A presented key is
//! hashed and compared with every configured hash in constant time, without stopping at a
//! match, so neither the comparison nor the position of the matching user shows in the
//! response time. Keys are never logged.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use toolgate_core::User;
use toolgate_hooks::fingerprint::sha256_hex;

use crate::config::{KeyHash, UserEntry};

/// The users of a configuration, by key hash.
#[derive(Clone, Default)]
pub struct ApiKeys {
    users: Vec<(KeyHash, Arc<User>)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("users", &self.users.len())
            .finish()
    }
}

impl ApiKeys {
    /// The users of a configuration.
    pub fn new(users: &[UserEntry]) -> Self {
        ApiKeys {
            users: users
                .iter()
                .map(|entry| (entry.key_sha256, Arc::new(entry.user())))
                .collect(),
        }
    }

    /// The user whose key this is, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use toolgate_gateway::auth::{hash_key, ApiKeys};
    /// use toolgate_gateway::config::parse;
    ///
    /// let config = parse(&format!(
    ///     "users:\n  - {{id: alice, key_sha256: \"{}\", roles: [admin]}}\n",
    ///     hash_key("tg_alice_secret")
    /// ))?;
    /// let keys = ApiKeys::new(&config.users);
    /// assert_eq!(keys.authenticate("tg_alice_secret").unwrap().id, "alice");
    /// assert!(keys.authenticate("tg_guess").is_none());
    /// # Ok::<(), toolgate_gateway::config::ConfigError>(())
    /// ```
    pub fn authenticate(&self, key: &str) -> Option<Arc<User>> {
        self.by_hash(&key_digest(key))
    }

    /// The configured user who is `caller` — the same id in the same tenant
    /// ([`User::is_same_caller`]) — as the configuration has them now (their roles of now),
    /// if any. `ann` of `acme` finds neither `ann` of `globex` nor `ann` of no tenant: a
    /// user id is unique only within its tenant.
    ///
    /// # Examples
    ///
    /// ```
    /// use toolgate_core::User;
    /// use toolgate_gateway::auth::{hash_key, ApiKeys};
    /// use toolgate_gateway::config::parse;
    ///
    /// let config = parse(&format!(
    ///     "users:\n  - {{id: ann, key_sha256: \"{}\", tenant: acme, roles: [admin]}}\n",
    ///     hash_key("tg_ann_secret")
    /// ))?;
    /// let keys = ApiKeys::new(&config.users);
    /// let ann = keys.by_caller(&User::new("ann").with_tenant("acme")).unwrap();
    /// assert!(ann.has_role("admin"));
    /// assert!(keys.by_caller(&User::new("ann").with_tenant("globex")).is_none());
    /// assert!(keys.by_caller(&User::new("ann")).is_none());
    /// # Ok::<(), toolgate_gateway::config::ConfigError>(())
    /// ```
    pub fn by_caller(&self, caller: &User) -> Option<Arc<User>> {
        (self.users.iter())
            .find(|(_, user)| user.is_same_caller(caller))
            .map(|(_, user)| user.clone())
    }

    /// The user whose key has this SHA-256, if any: a console session keeps the hash of
    /// the key it was opened with, never the key, and finds its user again on every
    /// request (so a key taken out of the configuration ends its sessions at the reload).
    pub fn by_hash(&self, hash: &[u8; 32]) -> Option<Arc<User>> {
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, (known, _)) in self.users.iter().enumerate() {
            let equal = known.0.ct_eq(hash);
            index.conditional_assign(&(i as u32), equal);
            found |= equal;
        }
        bool::from(found).then(|| self.users[index as usize].1.clone())
    }

    /// Whether a user with this id, in any tenant or in none, signs in with an API key.
    ///
    /// Not who a caller is (that is the id in its tenant: [`by_caller`](Self::by_caller)):
    /// for the checks that compare ids across tenants on purpose, such as refusing a
    /// token whose subject is an API-key user's id (`subjects_are_api_key_users`).
    pub fn has_id_in_any_tenant(&self, id: &str) -> bool {
        self.users.iter().any(|(_, user)| user.id == id)
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The SHA-256 of an API key.
pub fn key_digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The SHA-256 of an API key in hex: what goes into `key_sha256`.
pub fn hash_key(key: &str) -> String {
    sha256_hex(key.as_bytes())
}

/// A new random API key: `tg_` and 64 hex digits (256 bits from the kernel's random
/// source).
///
/// # Errors
///
/// When `/dev/urandom` cannot be read.
pub fn generate_key() -> std::io::Result<String> {
    use std::fmt::Write;
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let mut key = String::from("tg_");
    for b in bytes {
        let _ = write!(key, "{b:02x}");
    }
    Ok(key)
}
