//! What happens to a value a detector found.

use crate::fingerprint::sha256_hex;

/// What happens to a sensitive value once found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedactionMode {
    /// Replaced by a placeholder naming the detector: `[REDACTED:email]`. The default.
    #[default]
    Redact,
    /// All but the last four characters replaced by `*` (everything, for values of eight
    /// characters or fewer): `************1111`.
    Mask,
    /// Replaced by a salted SHA-256 prefix, so equal values stay recognisably equal
    /// without being readable: `[email:3f9a0c17d2e4]`. Use a secret salt: phone numbers
    /// and card numbers are few enough to be guessed from an unsalted hash.
    Hash {
        /// Mixed into every hash.
        salt: String,
    },
    /// The call fails with code `sensitive_data` (status 422) and a message naming the
    /// detector and where the value was.
    Block,
}

impl RedactionMode {
    /// The replacement of `found`, or `None` for [`RedactionMode::Block`].
    pub fn replacement(&self, detector: &str, found: &str) -> Option<String> {
        match self {
            RedactionMode::Redact => Some(format!("[REDACTED:{detector}]")),
            RedactionMode::Mask => {
                let chars: Vec<char> = found.chars().collect();
                let keep = if chars.len() > 8 { 4 } else { 0 };
                let mut masked = "*".repeat(chars.len() - keep);
                masked.extend(&chars[chars.len() - keep..]);
                Some(masked)
            }
            RedactionMode::Hash { salt } => {
                let digest = sha256_hex(format!("{salt}\u{0}{found}").as_bytes());
                Some(format!("[{detector}:{}]", &digest[..12]))
            }
            RedactionMode::Block => None,
        }
    }
}
