//! The credentials an upstream configuration holds, and scrubbing them from whatever
//! comes back from the upstream.

use toolgate_core::secret::Secret;
use toolgate_hooks::secrets::Scrubber;

use super::{UpstreamConfig, UpstreamTransport};

/// Words that mark an environment variable or a URL query parameter as a credential.
const CREDENTIAL_WORDS: [&str; 9] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
];

/// Values chosen by their name alone are treated as credentials only from this length
/// on: a flag such as `USE_API_KEY=true` must not turn every `true` in every output into
/// a placeholder. The configured credential is always one, whatever its length.
pub const MIN_GUESSED_SECRET_LEN: usize = 8;

/// Whether a variable or parameter called `name` holds a credential, by its name:
/// `GITHUB_TOKEN`, `api_key`, `DB_PASSWORD`, `X-Auth`…
///
/// ```
/// use toolgate_mcp::is_credential_name;
/// assert!(is_credential_name("GITHUB_TOKEN") && is_credential_name("api_key"));
/// assert!(!is_credential_name("LOG_LEVEL") && !is_credential_name("HOME"));
/// ```
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS.iter().any(|word| upper.contains(word))
}

impl UpstreamConfig {
    /// Every credential this configuration holds, which the upstream must never get to
    /// echo back through toolgate: the value of [`credential_env`](Self::credential_env)
    /// (read from the environment now), the stdio program's environment variables whose
    /// names mark them as credentials ([`is_credential_name`]), and the URL's password
    /// and query parameters named like credentials. Values guessed by name count from
    /// [`MIN_GUESSED_SECRET_LEN`] characters.
    ///
    /// The tools [`Upstream`](crate::Upstream) imports scrub these from every result and
    /// error before the pipeline sees them; a host adds them to its log and audit
    /// scrubbing.
    pub fn secrets(&self) -> Vec<Secret> {
        let mut found: Vec<String> = Vec::new();
        if let Some(value) = self
            .credential_env
            .as_ref()
            .and_then(|var| std::env::var(var).ok())
        {
            found.push(value);
        }
        let mut guessed = Vec::new();
        match &self.transport {
            UpstreamTransport::Stdio { env, .. } => {
                guessed.extend(
                    env.iter()
                        .filter(|(name, _)| is_credential_name(name))
                        .map(|(_, value)| value.clone()),
                );
            }
            UpstreamTransport::Http { url } => {
                if let Ok(url) = url::Url::parse(url) {
                    guessed.extend(url.password().map(str::to_owned));
                    guessed.extend(
                        url.query_pairs()
                            .filter(|(name, _)| is_credential_name(name))
                            .map(|(_, value)| value.into_owned()),
                    );
                }
            }
        }
        found.extend(
            guessed
                .into_iter()
                .filter(|v| v.chars().count() >= MIN_GUESSED_SECRET_LEN),
        );
        found.sort();
        found.dedup();
        found.into_iter().map(Secret::new).collect()
    }

    /// A scrubber for [`secrets`](Self::secrets).
    pub(crate) fn scrubber(&self) -> Scrubber {
        Scrubber::for_secrets(&self.secrets())
    }
}
