//! [`Redactor`]: detectors, JSON paths and modes applied to a JSON value.

use std::collections::BTreeMap;

use regex::RegexSet;
use serde_json::{Map, Value};

use crate::json::{binary_payload_key, unique_key};

use super::{Detector, RedactionMode};

/// A sensitive value that blocks the call: which detector (or `path`) and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The detector's name, or `path` for a configured JSON path.
    pub detector: String,
    /// Where in the JSON value (`items[0].note`; empty for the root).
    pub path: String,
}

/// Applies detectors to every string of a JSON value, and replaces whole values at
/// configured JSON paths.
#[derive(Clone, Debug)]
pub struct Redactor {
    pub(crate) detectors: Vec<Detector>,
    pub(crate) modes: BTreeMap<String, RedactionMode>,
    pub(crate) default_mode: RedactionMode,
    pub(crate) paths: Vec<Vec<String>>,
    /// Every detector's pattern in one automaton: a string none of them matches (the
    /// common case) is scanned once, not once per detector.
    pub(crate) prefilter: Option<RegexSet>,
}

/// How many values each detector replaced (`path` counts JSON-path replacements).
pub type Findings = BTreeMap<String, u64>;

impl Redactor {
    pub(crate) fn new(
        detectors: Vec<Detector>,
        modes: BTreeMap<String, RedactionMode>,
        default_mode: RedactionMode,
        paths: Vec<Vec<String>>,
    ) -> Self {
        let prefilter = RegexSet::new(detectors.iter().map(Detector::pattern_str)).ok();
        Redactor {
            detectors,
            modes,
            default_mode,
            paths,
            prefilter,
        }
    }

    /// Whether [`redact_value`](Self::redact_value) could change `value`: some JSON path is
    /// configured, or some string matches some detector's pattern. A quick check that
    /// lets the hook skip copying values that hold nothing sensitive.
    pub fn may_redact(&self, value: &Value) -> bool {
        if !self.paths.is_empty() {
            return true;
        }
        match value {
            Value::String(s) => self.may_redact_text(s),
            Value::Array(items) => items.iter().any(|v| self.may_redact(v)),
            Value::Object(map) => {
                let binary = binary_payload_key(map);
                map.iter().any(|(k, v)| {
                    self.may_redact_text(k) || (Some(k.as_str()) != binary && self.may_redact(v))
                })
            }
            _ => false,
        }
    }

    fn may_redact_text(&self, text: &str) -> bool {
        self.prefilter.as_ref().is_none_or(|set| set.is_match(text))
    }

    /// The same rules with every [`RedactionMode::Block`] turned into
    /// [`RedactionMode::Redact`]: for a record of what was refused, where the value must
    /// be left out rather than refused again.
    pub fn without_blocking(&self) -> Redactor {
        let unblock = |mode: &RedactionMode| match mode {
            RedactionMode::Block => RedactionMode::Redact,
            other => other.clone(),
        };
        Redactor {
            detectors: self.detectors.clone(),
            modes: self
                .modes
                .iter()
                .map(|(name, mode)| (name.clone(), unblock(mode)))
                .collect(),
            default_mode: unblock(&self.default_mode),
            paths: self.paths.clone(),
            prefilter: self.prefilter.clone(),
        }
    }

    fn mode(&self, detector: &str) -> &RedactionMode {
        self.modes.get(detector).unwrap_or(&self.default_mode)
    }

    /// Redacts one text. Returns `Ok(None)` when nothing was found.
    ///
    /// # Errors
    ///
    /// [`Blocked`] when a detector whose mode is [`RedactionMode::Block`] finds something.
    pub fn redact_text(
        &self,
        text: &str,
        path: &str,
        findings: &mut Findings,
    ) -> Result<Option<String>, Blocked> {
        let mut current: Option<String> = None;
        for detector in &self.detectors {
            let haystack = current.as_deref().unwrap_or(text);
            let ranges = detector.find(haystack);
            if ranges.is_empty() {
                continue;
            }
            let mode = self.mode(detector.name());
            let mut out = String::with_capacity(haystack.len());
            let mut last = 0;
            for range in &ranges {
                let replacement = mode
                    .replacement(detector.name(), &haystack[range.clone()])
                    .ok_or_else(|| Blocked {
                        detector: detector.name().to_owned(),
                        path: path.to_owned(),
                    })?;
                out.push_str(&haystack[last..range.start]);
                out.push_str(&replacement);
                last = range.end;
            }
            out.push_str(&haystack[last..]);
            *findings.entry(detector.name().to_owned()).or_default() += ranges.len() as u64;
            current = Some(out);
        }
        Ok(current)
    }

    /// Redacts every string in `value` and every value at a configured path, in place.
    ///
    /// # Errors
    ///
    /// [`Blocked`] as for [`redact_text`](Self::redact_text); `value` may then be partly
    /// redacted.
    pub fn redact_value(&self, value: &mut Value) -> Result<Findings, Blocked> {
        let mut findings = Findings::new();
        for path in &self.paths {
            self.redact_path(value, path, String::new(), &mut findings)?;
        }
        self.walk(value, String::new(), &mut findings)?;
        Ok(findings)
    }

    fn redact_path(
        &self,
        value: &mut Value,
        path: &[String],
        here: String,
        findings: &mut Findings,
    ) -> Result<(), Blocked> {
        let Some((first, rest)) = path.split_first() else {
            if value.is_null() {
                return Ok(());
            }
            let text = match &*value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let replacement = self
                .mode("path")
                .replacement("path", &text)
                .ok_or_else(|| Blocked {
                    detector: "path".to_owned(),
                    path: here.clone(),
                })?;
            *value = Value::String(replacement);
            *findings.entry("path".to_owned()).or_default() += 1;
            return Ok(());
        };
        match value {
            Value::Object(map) if first == "*" => {
                for (key, v) in map.iter_mut() {
                    self.redact_path(v, rest, join(&here, key), findings)?;
                }
            }
            Value::Object(map) => {
                if let Some(v) = map.get_mut(first) {
                    self.redact_path(v, rest, join(&here, first), findings)?;
                }
            }
            Value::Array(items) if first == "*" => {
                for (i, v) in items.iter_mut().enumerate() {
                    self.redact_path(v, rest, format!("{here}[{i}]"), findings)?;
                }
            }
            Value::Array(items) => {
                if let Some(v) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    self.redact_path(v, rest, format!("{here}[{first}]"), findings)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn walk(
        &self,
        value: &mut Value,
        here: String,
        findings: &mut Findings,
    ) -> Result<(), Blocked> {
        match value {
            Value::String(s) => {
                if let Some(redacted) = self.redact_text(s, &here, findings)? {
                    *s = redacted;
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter_mut().enumerate() {
                    self.walk(v, format!("{here}[{i}]"), findings)?;
                }
            }
            Value::Object(map) => {
                self.redact_keys(map, &here, findings)?;
                let binary = binary_payload_key(map);
                for (key, v) in map.iter_mut() {
                    if Some(key.as_str()) != binary {
                        self.walk(v, join(&here, key), findings)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Redacts the keys of `map` (an email used as a key is as personal as one used as a
    /// value). Keys that become the same placeholder stay apart (`[REDACTED:email] (2)`),
    /// so no value is lost; the order of the keys is kept.
    fn redact_keys(
        &self,
        map: &mut Map<String, Value>,
        here: &str,
        findings: &mut Findings,
    ) -> Result<(), Blocked> {
        if !map.keys().any(|k| self.may_redact_text(k)) {
            return Ok(());
        }
        let mut renamed = Vec::new();
        for (i, key) in map.keys().enumerate() {
            if let Some(clean) = self.redact_text(key, here, findings)? {
                renamed.push((i, clean));
            }
        }
        if renamed.is_empty() {
            return Ok(());
        }
        let mut renamed = renamed.into_iter().peekable();
        for (i, (key, v)) in std::mem::take(map).into_iter().enumerate() {
            let key = match renamed.next_if(|(at, _)| *at == i) {
                Some((_, clean)) => clean,
                None => key,
            };
            map.insert(unique_key(map, key), v);
        }
        Ok(())
    }
}

fn join(here: &str, key: &str) -> String {
    if here.is_empty() {
        key.to_owned()
    } else {
        format!("{here}.{key}")
    }
}

/// Splits a JSON path (`user.ssn`, `items[*].card`, `items.0.card`) into segments.
pub(crate) fn parse_path(path: &str) -> Vec<String> {
    path.replace('[', ".")
        .replace(']', "")
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
