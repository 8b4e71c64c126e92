//! Scrubbing injected secret values out of outputs and errors.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde_json::Value;
use toolgate_core::{SecretSlot, ToolError};

/// What replaces a scrubbed secret.
pub const SCRUBBED: &str = "[REDACTED:secret]";

/// The forms of each secret that are scrubbed: the raw value, its base64 (standard and
/// URL-safe, with and without padding) and its URL (percent) encoding.
pub struct Scrubber {
    needles: Vec<String>,
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

impl Scrubber {
    /// A scrubber for every secret in the slot.
    pub fn for_slot(slot: &SecretSlot) -> Self {
        Self::for_values(slot.values().map(|s| s.expose()))
    }

    /// A scrubber for these values (empty ones are skipped).
    pub fn for_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut needles = Vec::new();
        for raw in values.into_iter().filter(|v| !v.is_empty()) {
            let bytes = raw.as_bytes();
            needles.push(raw.to_owned());
            for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
                needles.push(engine.encode(bytes));
            }
            needles.push(percent_encode(raw, false));
            needles.push(percent_encode(raw, true));
            needles.push(percent_encode(raw, false).to_lowercase());
        }
        // Longest first, so a padded encoding goes before its unpadded prefix.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        needles.dedup();
        Scrubber { needles }
    }

    /// Whether there is nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// `text` with every form of every secret replaced, or `None` when none occurs.
    pub fn scrub_text(&self, text: &str) -> Option<String> {
        let mut current: Option<String> = None;
        for needle in &self.needles {
            let haystack = current.as_deref().unwrap_or(text);
            if haystack.contains(needle.as_str()) {
                current = Some(haystack.replace(needle.as_str(), SCRUBBED));
            }
        }
        current
    }

    /// Scrubs every string and object key of `value` in place; returns how many strings
    /// changed.
    pub fn scrub_value(&self, value: &mut Value) -> usize {
        match value {
            Value::String(s) => match self.scrub_text(s) {
                Some(clean) => {
                    *s = clean;
                    1
                }
                None => 0,
            },
            Value::Array(items) => items.iter_mut().map(|v| self.scrub_value(v)).sum(),
            Value::Object(map) => {
                let mut changed = 0;
                let dirty: Vec<String> = map
                    .keys()
                    .filter(|k| self.scrub_text(k).is_some())
                    .cloned()
                    .collect();
                for key in dirty {
                    if let Some(v) = map.remove(&key) {
                        let clean = self.scrub_text(&key).unwrap_or_default();
                        map.insert(clean, v);
                        changed += 1;
                    }
                }
                changed + map.values_mut().map(|v| self.scrub_value(v)).sum::<usize>()
            }
            _ => 0,
        }
    }

    /// Scrubs the messages of an error in place.
    pub fn scrub_error(&self, error: &mut ToolError) {
        let fix = |s: &mut String| {
            if let Some(clean) = self.scrub_text(s) {
                *s = clean;
            }
        };
        match error {
            ToolError::Aborted { reason, .. }
            | ToolError::RetryAfter { reason, .. }
            | ToolError::Suspended { reason, .. } => fix(reason),
            ToolError::Execution { message, .. } | ToolError::Internal { message } => fix(message),
            ToolError::InvalidInput(violations) => {
                for v in &mut violations.0 {
                    fix(&mut v.path);
                    fix(&mut v.message);
                }
            }
            ToolError::UnknownTool { name } => fix(name),
            _ => {}
        }
    }
}
