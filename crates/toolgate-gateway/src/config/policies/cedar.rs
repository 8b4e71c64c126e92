//! `policies.cedar:` — the Cedar policy files. They are loaded, and validated against the
//! schema made from the tools' input schemas, by the gateway once the tools are known.

use serde::Deserialize;

use crate::config::ConfigError;

/// `cedar:` — Cedar policies evaluated for every call and every listing, beside the
/// `authorization` rules (a call must pass both). Loaded, and validated against the schema
/// made from the tools' input schemas, when the configuration is (`toolgate check`, start,
/// reload).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CedarPolicy {
    /// The policy files, relative to the working directory as other paths of the file.
    pub files: Vec<String>,
}

impl CedarPolicy {
    /// Refuses a section without files (field paths relative to the section).
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.files.is_empty() {
            return Err(ConfigError::invalid(
                "files",
                "name at least one Cedar policy file, or remove `cedar`",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cedar_section_names_at_least_one_file() {
        let error = crate::config::parse("policies:\n  cedar:\n    files: []\n").unwrap_err();
        assert_eq!(error.field(), "policies.cedar.files");
        assert!(error.to_string().contains("at least one"), "{error}");
    }
}
