//! Redaction: keep personal data and credentials out of what a tool receives, what it
//! returns, and everything recorded about the call.
//!
//! [`Redaction`] scans every string of the input at `will_redact_input` and of the output
//! at `will_write_cache` (so what is cached is already redacted) and `will_redact_output`
//! (so a cached or short-circuited output is redacted too). Built-in
//! [detectors](Detector::builtins): emails, phone numbers, payment cards (Luhn-checked),
//! IBANs (mod-97-checked), AWS access key ids, bearer tokens, JWTs and PEM private keys;
//! add your own with [`Detector::pattern`], and name JSON paths whose whole value is
//! always redacted. Each detector's [`RedactionMode`] is redact, mask, hash, or block.
//!
//! Because the input is redacted before the cache is read, before the audit record is
//! written and before metrics are taken, redacted values reach none of them. Object keys
//! are scanned like values (`{"ann@example.com": 3}` becomes `{"[REDACTED:email]": 3}`;
//! keys that become the same placeholder are numbered, so no value is lost). The base64
//! payloads of MCP content — `data` of image and audio blocks, `blob` of binary resource
//! contents — are not scanned: they are not text. A call
//! refused before its input was redacted (forbidden, rate limited, invalid) is recorded
//! by [`Audit`](crate::audit::Audit) with the same rules applied: give the audit hook
//! the [`Redactor`] with [`AuditBuilder::redact_with`](crate::audit::AuditBuilder::redact_with).
//! Counts of what was redacted are kept in the invocation
//! metadata under [`REDACTIONS_METADATA_KEY`].
//!
//! # Examples
//!
//! ```
//! use serde_json::json;
//! use toolgate_hooks::redaction::{Detector, Redaction, RedactionMode};
//!
//! let redaction = Redaction::builder()
//!     .mode_for("card", RedactionMode::Mask)
//!     .detect(Detector::pattern("ticket", r"\bTCK-\d{6}\b")?)
//!     .path("customer.ssn")
//!     .build();
//!
//! let mut value = json!({
//!     "note": "mail ann@example.com about TCK-000042, card 4111 1111 1111 1111",
//!     "customer": { "ssn": "078-05-1120" }
//! });
//! redaction.redactor().redact_value(&mut value).unwrap();
//! assert_eq!(value, json!({
//!     "note": "mail [REDACTED:email] about [REDACTED:ticket], card ***************1111",
//!     "customer": { "ssn": "[REDACTED:path]" }
//! }));
//! # Ok::<(), toolgate_hooks::redaction::RedactionError>(())
//! ```

mod detector;
mod hook;
mod mode;
mod redactor;

pub use detector::{Detector, iban_valid, luhn_valid};
pub use hook::{REDACTION_PRIORITY, REDACTIONS_METADATA_KEY, Redaction, RedactionBuilder};
pub(crate) use hook::{input_redacted, output_redacted};
pub use mode::RedactionMode;
pub use redactor::{Blocked, Findings, Redactor};

/// A redaction rule could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedactionError {
    /// A user pattern is not a valid regular expression.
    #[error(
        "redaction pattern `{name}` is not a valid regular expression ({reason}): fix the pattern (regex crate syntax)"
    )]
    InvalidPattern {
        /// The detector's name.
        name: String,
        /// What the regex parser said.
        reason: String,
    },
}
