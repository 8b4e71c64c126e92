//! Where secrets come from: the [`SecretSource`] trait and the environment, file and
//! in-memory sources.

use std::collections::HashMap;
use std::path::PathBuf;

use async_trait::async_trait;
use toolgate_core::secret::Secret;

/// A secret source failed (not "the secret is absent", which is `Ok(None)`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The source could not be read.
    #[error(
        "secret source `{source_name}` could not be read for secret `{name}` ({reason}): check the source's configuration and permissions"
    )]
    Unavailable {
        /// The source.
        source_name: String,
        /// The secret's name (never its value).
        name: String,
        /// What went wrong.
        reason: String,
    },
}

/// Where secrets come from. Object-safe and async, so a vault client can implement it.
///
/// `fetch` returns `Ok(None)` when the source does not hold the secret (the next source
/// is then asked), and an error only when the source itself fails.
///
/// Write `fetch` as an `async fn` under [`#[async_trait]`](crate::async_trait),
/// re-exported by this crate so that an implementer needs no dependency of their own;
/// `name` stays a plain `fn`.
///
/// # Examples
///
/// Each team's secrets under its own prefix in one shared source, which could be a vault
/// as well as the in-memory source here:
///
/// ```
/// use toolgate_core::secret::Secret;
/// use toolgate_hooks::async_trait;
/// use toolgate_hooks::secrets::{InMemorySecrets, SecretError, SecretSource};
///
/// struct TeamSecrets<S> {
///     team: String,
///     shared: S,
/// }
///
/// #[async_trait]
/// impl<S: SecretSource> SecretSource for TeamSecrets<S> {
///     fn name(&self) -> &str {
///         "team"
///     }
///
///     async fn fetch(&self, name: &str) -> Result<Option<Secret>, SecretError> {
///         self.shared.fetch(&format!("{}/{name}", self.team)).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), SecretError> {
/// let shared = InMemorySecrets::new().with("search/api-key", "sk-123");
/// let source = TeamSecrets { team: "search".to_owned(), shared };
/// let key = source.fetch("api-key").await?.expect("the search team has one");
/// assert_eq!(key.expose(), "sk-123");
/// assert!(source.fetch("db-password").await?.is_none());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait SecretSource: Send + Sync + 'static {
    /// A name for error messages.
    fn name(&self) -> &str;

    /// The secret called `name`, if this source holds it.
    async fn fetch(&self, name: &str) -> Result<Option<Secret>, SecretError>;
}

/// Secrets from environment variables: `name` is looked up as `PREFIX` + `NAME` upper-cased
/// with `-` and `.` turned into `_` (`github-token` → `TOOLGATE_SECRET_GITHUB_TOKEN` with
/// the default prefix).
#[derive(Clone, Debug)]
pub struct EnvSecrets {
    prefix: String,
}

impl Default for EnvSecrets {
    fn default() -> Self {
        EnvSecrets::with_prefix("TOOLGATE_SECRET_")
    }
}

impl EnvSecrets {
    /// Variables named with this prefix.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        EnvSecrets {
            prefix: prefix.into(),
        }
    }

    /// The variable a secret name maps to.
    pub fn variable(&self, name: &str) -> String {
        let name: String = name
            .chars()
            .map(|c| {
                if c == '-' || c == '.' {
                    '_'
                } else {
                    c.to_ascii_uppercase()
                }
            })
            .collect();
        format!("{}{name}", self.prefix)
    }
}

#[async_trait]
impl SecretSource for EnvSecrets {
    fn name(&self) -> &str {
        "environment"
    }

    async fn fetch(&self, name: &str) -> Result<Option<Secret>, SecretError> {
        Ok(std::env::var(self.variable(name)).ok().map(Secret::new))
    }
}

/// Secrets from files: one file per secret in a directory (as Kubernetes and Docker
/// mount them), trailing newlines trimmed. Names with path separators or `..` are
/// refused.
#[derive(Clone, Debug)]
pub struct FileSecrets {
    dir: PathBuf,
}

impl FileSecrets {
    /// Secrets from files in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSecrets { dir: dir.into() }
    }
}

#[async_trait]
impl SecretSource for FileSecrets {
    fn name(&self) -> &str {
        "file"
    }

    async fn fetch(&self, name: &str) -> Result<Option<Secret>, SecretError> {
        let fail = |reason: String| SecretError::Unavailable {
            source_name: "file".to_owned(),
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() || name.contains(['/', '\\']) || name.contains("..") {
            return Err(fail("the name is not a plain file name".to_owned()));
        }
        match std::fs::read_to_string(self.dir.join(name)) {
            Ok(text) => Ok(Some(Secret::new(text.trim_end_matches(['\n', '\r'])))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(fail(e.kind().to_string())),
        }
    }
}

/// Secrets held in memory (tests, or values loaded at start-up).
#[derive(Clone, Default)]
pub struct InMemorySecrets {
    secrets: HashMap<String, Secret>,
}

impl std::fmt::Debug for InMemorySecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InMemorySecrets({} secrets)", self.secrets.len())
    }
}

impl InMemorySecrets {
    /// No secrets.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same source with one more secret.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.secrets.insert(name.into(), Secret::new(value));
        self
    }
}

#[async_trait]
impl SecretSource for InMemorySecrets {
    fn name(&self) -> &str {
        "memory"
    }

    async fn fetch(&self, name: &str) -> Result<Option<Secret>, SecretError> {
        Ok(self.secrets.get(name).cloned())
    }
}
