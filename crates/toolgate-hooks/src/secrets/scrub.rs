//! Scrubbing known secret values out of outputs, errors, records and log lines.

use std::fmt;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde_json::Value;

use crate::json::unique_key;
use toolgate_core::ToolError;
use toolgate_core::secret::{Secret, SecretSlot};

/// What replaces a scrubbed secret.
pub const SCRUBBED: &str = "[REDACTED:secret]";

/// Finds and replaces every known form of a set of secrets: the raw value, its base64
/// (standard and URL-safe, with and without padding), its URL (percent) encoding, and
/// the escaped forms a JSON document or a log line gives it.
///
/// All forms of all secrets are searched in one pass over the text. Cloning is cheap (the
/// search automaton is shared), and its `Debug` output shows how many values it holds,
/// never the values.
///
/// ```
/// use toolgate_hooks::secrets::{Scrubber, SCRUBBED};
///
/// let scrubber = Scrubber::for_values(["sk-live-123"]);
/// assert_eq!(scrubber.scrub_text("key=sk-live-123").as_deref(), Some("key=[REDACTED:secret]"));
/// // base64 of the same key:
/// assert_eq!(scrubber.scrub_text("c2stbGl2ZS0xMjM=").as_deref(), Some(SCRUBBED));
/// assert_eq!(scrubber.scrub_text("nothing to see"), None);
/// ```
#[derive(Clone, Default)]
pub struct Scrubber {
    /// `None` when there is nothing to scrub.
    finder: Option<AhoCorasick>,
    /// How many secret values (not forms) are held, for `Debug`.
    values: usize,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scrubber({} secrets)", self.values)
    }
}

fn percent_encode(value: &str, space_as_plus: bool) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            b' ' if space_as_plus => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Every form of `raw` that is searched for.
fn forms(raw: &str) -> Vec<String> {
    let bytes = raw.as_bytes();
    let mut forms = vec![raw.to_owned()];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        forms.push(engine.encode(bytes));
    }
    let percent = percent_encode(raw, false);
    forms.push(percent.to_lowercase());
    forms.push(percent);
    forms.push(percent_encode(raw, true));
    // Inside a JSON string (an audit line, a JSON log) and a `{:?}`-formatted log field.
    if let Ok(json) = serde_json::to_string(raw) {
        forms.push(json[1..json.len() - 1].to_owned());
    }
    forms.push(raw.escape_debug().to_string());
    forms
}

impl Scrubber {
    /// A scrubber for every secret in the slot.
    pub fn for_slot(slot: &SecretSlot) -> Self {
        Self::for_values(slot.values().map(Secret::expose))
    }

    /// A scrubber for these secrets.
    pub fn for_secrets<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        Self::for_values(secrets.into_iter().map(Secret::expose))
    }

    /// A scrubber for these values (empty ones are skipped).
    pub fn for_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut needles = Vec::new();
        let mut count = 0;
        for raw in values.into_iter().filter(|v| !v.is_empty()) {
            count += 1;
            needles.extend(forms(raw));
        }
        needles.sort_unstable();
        needles.dedup();
        if needles.is_empty() {
            return Scrubber::default();
        }
        // Leftmost-longest, so a padded encoding wins over its unpadded prefix. A
        // contiguous NFA is quick to build: per-call scrubbers are built on every call.
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .kind(Some(AhoCorasickKind::ContiguousNFA))
            .build(&needles)
            .ok();
        Scrubber {
            finder,
            values: count,
        }
    }

    /// Whether there is nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.finder.is_none()
    }

    /// Whether some form of some secret occurs in `text`.
    pub fn occurs_in(&self, text: &str) -> bool {
        self.finder.as_ref().is_some_and(|f| f.is_match(text))
    }

    /// Whether some form of some secret occurs in a string or an object key of `value`.
    pub fn occurs_in_value(&self, value: &Value) -> bool {
        if self.is_empty() {
            return false;
        }
        match value {
            Value::String(s) => self.occurs_in(s),
            Value::Array(items) => items.iter().any(|v| self.occurs_in_value(v)),
            Value::Object(map) => map
                .iter()
                .any(|(k, v)| self.occurs_in(k) || self.occurs_in_value(v)),
            _ => false,
        }
    }

    /// `text` with every form of every secret replaced by [`SCRUBBED`], or `None` when
    /// none occurs.
    pub fn scrub_text(&self, text: &str) -> Option<String> {
        let finder = self.finder.as_ref()?;
        if !finder.is_match(text) {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        finder.replace_all_with(text, &mut out, |_, _, out| {
            out.push_str(SCRUBBED);
            true
        });
        Some(out)
    }

    /// `bytes` with every form of every secret replaced by [`SCRUBBED`], or `None` when
    /// none occurs: for a log line or a record on its way to a file.
    pub fn scrub_bytes(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let finder = self.finder.as_ref()?;
        if !finder.is_match(bytes) {
            return None;
        }
        let mut out = Vec::with_capacity(bytes.len());
        finder.replace_all_with_bytes(bytes, &mut out, |_, _, out| {
            out.extend_from_slice(SCRUBBED.as_bytes());
            true
        });
        Some(out)
    }

    /// Replaces every form of every secret in `text`, in place; whether it changed.
    pub fn scrub_string(&self, text: &mut String) -> bool {
        match self.scrub_text(text) {
            Some(clean) => {
                *text = clean;
                true
            }
            None => false,
        }
    }

    /// Scrubs every string and object key of `value` in place; returns how many strings
    /// changed.
    pub fn scrub_value(&self, value: &mut Value) -> usize {
        if self.is_empty() {
            return 0;
        }
        match value {
            Value::String(s) => usize::from(self.scrub_string(s)),
            Value::Array(items) => items.iter_mut().map(|v| self.scrub_value(v)).sum(),
            Value::Object(map) => {
                let mut changed = 0;
                if map.keys().any(|k| self.occurs_in(k)) {
                    let old = std::mem::take(map);
                    for (key, v) in old {
                        let key = match self.scrub_text(&key) {
                            Some(clean) => {
                                changed += 1;
                                clean
                            }
                            None => key,
                        };
                        map.insert(unique_key(map, key), v);
                    }
                }
                changed + map.values_mut().map(|v| self.scrub_value(v)).sum::<usize>()
            }
            _ => 0,
        }
    }

    /// Scrubs the messages of an error in place.
    pub fn scrub_error(&self, error: &mut ToolError) {
        if self.is_empty() {
            return;
        }
        match error {
            ToolError::Aborted { reason, .. }
            | ToolError::RetryAfter { reason, .. }
            | ToolError::Suspended { reason, .. } => {
                self.scrub_string(reason);
            }
            ToolError::Execution { message, .. } | ToolError::Internal { message } => {
                self.scrub_string(message);
            }
            ToolError::InvalidInput(violations) => {
                for v in &mut violations.0 {
                    self.scrub_string(&mut v.path);
                    self.scrub_string(&mut v.message);
                }
            }
            ToolError::UnknownTool { name } => {
                self.scrub_string(name);
            }
            ToolError::InputRequired { requests, state } => {
                self.scrub_value(requests);
                if let Some(state) = state {
                    self.scrub_string(state);
                }
            }
            _ => {}
        }
    }
}
