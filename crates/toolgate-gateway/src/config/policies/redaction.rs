//! `policies.redaction:` — sensitive values found in input and output, made into a
//! [`Redaction`] hook.

use serde::Deserialize;
use toolgate_hooks::Redaction;
use toolgate_hooks::redaction::{Detector, RedactionMode};

use super::yes;
use crate::config::ConfigError;
use crate::config::values::EnvString;

/// The shortest `salt` accepted: a salt shorter than this is a word, not a secret, and the
/// few values a detector finds (phone numbers, card numbers) could be found again from
/// their hashes by trying them all.
const MIN_SALT_BYTES: usize = 16;

/// `redaction:` — sensitive values found in input and output.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPolicy {
    /// Built-in detectors by name: `email`, `phone`, `card`, `iban`, `aws_access_key`,
    /// `bearer_token`, `jwt`, `private_key` (default: all).
    pub detectors: Option<Vec<String>>,
    /// Extra detectors: a name and a regular expression.
    #[serde(default)]
    pub patterns: Vec<RedactionPattern>,
    /// What replaces a value (default `redact`).
    #[serde(default)]
    pub mode: RedactionModeName,
    /// The salt of `hash` mode: a secret of at least 16 bytes, from the environment
    /// (`salt: ${REDACTION_SALT}`, made with `openssl rand -hex 16`).
    pub salt: Option<EnvString>,
    /// Redact the input (default true).
    #[serde(default = "yes")]
    pub input: bool,
    /// Redact the output (default true).
    #[serde(default = "yes")]
    pub output: bool,
}

/// One custom detector.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPattern {
    /// Its name, shown in placeholders.
    pub name: String,
    /// The regular expression.
    pub regex: String,
}

/// What replaces a sensitive value.
// A mirror of `RedactionMode`: its `Hash` carries the salt, which is a field of its own
// (`salt`) in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactionModeName {
    /// `[REDACTED:email]`.
    #[default]
    Redact,
    /// All but the last four characters masked.
    Mask,
    /// A salted hash prefix (set `salt`).
    Hash,
    /// The call fails with 422.
    Block,
}

impl RedactionPolicy {
    /// Refuses `hash` mode without a salt, and a salt too short to be a secret (field
    /// paths relative to the section).
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.mode == RedactionModeName::Hash && self.salt.is_none() {
            return Err(ConfigError::invalid(
                "salt",
                "`hash` mode needs a secret salt: set `salt: ${REDACTION_SALT}`",
            ));
        }
        if let Some(salt) = &self.salt
            && salt.0.len() < MIN_SALT_BYTES
        {
            // The salt is a secret: the message never quotes it.
            return Err(ConfigError::invalid(
                "salt",
                format!(
                    "the salt is {} bytes long, too short to be a secret: it must be at least {MIN_SALT_BYTES} bytes (32 random hex characters is right); make one with `openssl rand -hex 16` and set it from a secret, `salt: ${{REDACTION_SALT}}`",
                    salt.0.len()
                ),
            ));
        }
        Ok(())
    }

    /// The detectors it names, built-in ones first (field paths relative to the section).
    fn detectors(&self) -> Result<Vec<Detector>, ConfigError> {
        let builtins = Detector::builtins();
        let mut detectors = match &self.detectors {
            None => builtins,
            Some(names) => (names.iter().enumerate())
                .map(|(i, name)| {
                    let found = builtins.iter().find(|d| d.name() == name);
                    found.cloned().ok_or_else(|| {
                        let known: Vec<&str> = builtins.iter().map(Detector::name).collect();
                        ConfigError::invalid(
                            format!("detectors[{i}]"),
                            format!(
                                "unknown detector `{name}`; the built-in ones are: {}",
                                known.join(", ")
                            ),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        for (i, pattern) in self.patterns.iter().enumerate() {
            let detector = Detector::pattern(pattern.name.clone(), &pattern.regex)
                .map_err(|e| ConfigError::invalid(format!("patterns[{i}].regex"), e.to_string()))?;
            detectors.push(detector);
        }
        Ok(detectors)
    }
}

impl TryFrom<&RedactionPolicy> for Redaction {
    type Error = ConfigError;

    fn try_from(policy: &RedactionPolicy) -> Result<Self, ConfigError> {
        let mode = match policy.mode {
            RedactionModeName::Redact => RedactionMode::Redact,
            RedactionModeName::Mask => RedactionMode::Mask,
            RedactionModeName::Block => RedactionMode::Block,
            RedactionModeName::Hash => RedactionMode::Hash {
                salt: (policy.salt.as_ref())
                    .map(|s| s.0.clone())
                    .unwrap_or_default(),
            },
        };
        Ok(Redaction::builder()
            .detectors(policy.detectors()?)
            .mode(mode)
            .input(policy.input)
            .output(policy.output)
            .build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_mode_needs_a_salt() {
        let error = crate::config::parse("policies:\n  redaction:\n    mode: hash\n").unwrap_err();
        assert_eq!(error.field(), "policies.redaction.salt");
        assert!(error.to_string().contains("REDACTION_SALT"), "{error}");
        crate::config::parse(
            "policies:\n  redaction:\n    mode: hash\n    salt: 3f9a0c17d2e4b5a68c1e0f7d9b2a4c6e\n",
        )
        .unwrap();
    }

    #[test]
    fn unknown_detectors_and_bad_patterns_are_refused_with_their_field() {
        let policy = |text: &str| -> RedactionPolicy { serde_json::from_str(text).unwrap() };
        let unknown = Redaction::try_from(&policy(r#"{"detectors": ["email", "ssn"]}"#))
            .err()
            .unwrap();
        assert_eq!(unknown.field(), "detectors[1]");
        assert!(unknown.to_string().contains("`ssn`"), "{unknown}");
        let bad = Redaction::try_from(&policy(
            r#"{"patterns": [{"name": "ticket", "regex": "T-("}]}"#,
        ))
        .err()
        .unwrap();
        assert_eq!(bad.field(), "patterns[0].regex");
        assert!(Redaction::try_from(&policy("{}")).is_ok());
    }
}
