//! The secret slot of an invocation.
//!
//! Secrets injected for a call live here and nowhere else. [`Secret`] implements neither
//! `Debug`, `Display` nor `Serialize`, so it cannot reach a log line, a span, an audit
//! record, an error message or a cache key by accident; reading it takes an explicit
//! [`Secret::expose`].

use std::collections::HashMap;
use std::fmt;

/// A secret value. Its only way out is [`Secret::expose`].
///
/// ```
/// use toolgate_core::secret::Secret;
/// let key = Secret::new("sk-live-123");
/// assert_eq!(key.expose(), "sk-live-123");
/// ```
///
/// It cannot be printed:
///
/// ```compile_fail
/// let key = toolgate_core::secret::Secret::new("sk-live-123");
/// println!("{key:?}");
/// ```
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Every call site is a place where a secret leaves the slot: keep
    /// them few and never pass the result to logging or serialization.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl Clone for Secret {
    fn clone(&self) -> Self {
        Secret(self.0.clone())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // Best effort: overwrite the bytes before the allocation is freed.
        let mut bytes = std::mem::take(&mut self.0).into_bytes();
        bytes.fill(0);
        std::hint::black_box(&bytes);
    }
}

/// The secrets injected for one invocation, by name.
///
/// Its `Debug` output lists how many secrets there are, never their names' values.
#[derive(Default)]
pub struct SecretSlot {
    /// Made on the first insert: most calls carry no secret, and an empty slot then costs
    /// nothing to make or drop.
    secrets: Option<HashMap<String, Secret>>,
}

impl SecretSlot {
    /// Puts a secret under `name`, replacing an earlier one.
    pub fn insert(&mut self, name: impl Into<String>, secret: Secret) {
        self.secrets
            .get_or_insert_with(HashMap::new)
            .insert(name.into(), secret);
    }

    /// The secret under `name`.
    pub fn get(&self, name: &str) -> Option<&Secret> {
        self.secrets.as_ref()?.get(name)
    }

    /// The names of the secrets held.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.secrets
            .iter()
            .flat_map(HashMap::keys)
            .map(String::as_str)
    }

    /// Every secret held, for scrubbing outputs.
    pub fn values(&self) -> impl Iterator<Item = &Secret> {
        self.secrets.iter().flat_map(HashMap::values)
    }

    /// Whether the slot holds no secret.
    pub fn is_empty(&self) -> bool {
        self.secrets.as_ref().is_none_or(HashMap::is_empty)
    }
}

impl fmt::Debug for SecretSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SecretSlot({} secrets)",
            self.secrets.as_ref().map_or(0, HashMap::len)
        )
    }
}
