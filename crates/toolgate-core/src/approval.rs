//! What an approval is bound to: the exact call a person saw.
//!
//! When a call waits for a person, the pipeline records a [`CallBinding`] with it: the
//! caller, the tool, a digest of the tool's definition as it was, a digest of the input
//! the tool would run with (validated, with defaults filled in and redacted: the input at
//! the end of `will_redact_input`), and the pipeline's configuration
//! [generation](crate::PipelineBuilder::generation). The pipeline computes it; no caller
//! supplies it.
//!
//! An approval holds only for its binding:
//!
//! * [`Pipeline::resume`](crate::Pipeline::resume) runs a waiting call only while the
//!   tool's definition is the one the call waited under, and only once (the store hands
//!   the call out once). A mismatch is refused with `approval_mismatch` (409) and leaves
//!   the call waiting: the approval is not used up. A change of configuration does not
//!   void it: the resumed call is authorized again by the hooks as they are now.
//! * [`Pipeline::approve_retry`](crate::Pipeline::approve_retry) turns a waiting call into
//!   an approval for its caller to make the same call again: a later call whose binding is
//!   equal runs once, without waiting; any other call (other arguments, caller, tool,
//!   definition or generation) waits as usual and leaves the approval in place.
//! * An approved call must start to run within the pipeline's
//!   [`approval_run_within`](crate::PipelineBuilder::approval_run_within) of the decision,
//!   or it is refused with `approval_expired` (410).
//!
//! Inputs are compared in their canonical form (RFC 8785, the JSON Canonicalization
//! Scheme): key order, `7` against `7.0`, and escapes make no difference. Integers past
//! 2^53, which that form writes rounded to the nearest double (as JavaScript would), are
//! compared exactly: an approval to delete account `1234567890123456789` is not one to
//! delete account `1234567890123456800`.
//!
//! ```
//! use serde_json::json;
//! use toolgate_core::approval::digest;
//!
//! assert_eq!(digest(&json!({"n": 7, "a": "x"})), digest(&json!({"a": "x", "n": 7.0})));
//! assert_ne!(digest(&json!({"n": 7})), digest(&json!({"n": "7"})));
//! assert_ne!(
//!     digest(&json!({"id": 1234567890123456789u64})),
//!     digest(&json!({"id": 1234567890123456790u64})),
//! );
//! ```

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::definition::ToolDefinition;
use crate::user::User;

/// The facts an approval is bound to; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CallBinding {
    /// The caller's user id.
    pub user: String,
    /// The caller's tenant, when they have one: two users of one id in two tenants are two
    /// callers, and one's approval is not the other's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The tool's name.
    pub tool: String,
    /// The [`digest`] of the tool's definition when the call waited.
    pub definition: String,
    /// The [`digest`] of the input the tool would run with.
    pub input: String,
    /// The configuration generation of the pipeline the call waited in.
    pub generation: String,
}

impl CallBinding {
    /// The binding of a call of the tool `definition` by `user` with `input`, in a pipeline
    /// of configuration `generation`.
    pub fn of(definition: &ToolDefinition, user: &User, input: &Value, generation: &str) -> Self {
        Self::with_definition_digest(
            definition,
            definition_digest(definition),
            user,
            input,
            generation,
        )
    }

    /// As [`of`](Self::of), with the definition's digest already made (a pipeline keeps it
    /// per tool).
    pub(crate) fn with_definition_digest(
        definition: &ToolDefinition,
        definition_digest: String,
        user: &User,
        input: &Value,
        generation: &str,
    ) -> Self {
        CallBinding {
            user: user.id.clone(),
            tenant: user.tenant.clone(),
            tool: definition.name.clone(),
            definition: definition_digest,
            input: digest(input),
            generation: generation.to_owned(),
        }
    }

    /// One digest of the whole binding: two bindings have the same key exactly when they
    /// are equal. Stores index approvals for a retry by it.
    pub fn key(&self) -> String {
        let mut hasher = Sha256::new();
        if let Some(tenant) = &self.tenant {
            // Only a binding with a tenant hashes one, so every key of a caller without one
            // is what it was before tenants were bound (a caller with one whose approval
            // for a retry was kept before then waits for a new one).
            hasher.update(b"tenant\0");
            hasher.update((tenant.len() as u64).to_be_bytes());
            hasher.update(tenant.as_bytes());
        }
        for part in [
            &self.user,
            &self.tool,
            &self.definition,
            &self.input,
            &self.generation,
        ] {
            // Length-prefixed, so that no two different bindings hash the same bytes.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        hex(&hasher.finalize())
    }

    /// The first fact on which `self` differs from `other`, in words for an error message;
    /// `None` when they are equal.
    pub fn mismatch(&self, other: &CallBinding) -> Option<&'static str> {
        if self.user != other.user || self.tenant != other.tenant {
            Some("the caller")
        } else if self.tool != other.tool {
            Some("the tool")
        } else if self.definition != other.definition {
            Some("the tool's definition")
        } else if self.input != other.input {
            Some("the input")
        } else if self.generation != other.generation {
            Some("the configuration generation")
        } else {
            None
        }
    }
}

/// The canonical form of `value`: RFC 8785 (the JSON Canonicalization Scheme) — object
/// keys sorted by their UTF-16 code units, no whitespace, numbers written as ECMAScript
/// writes them (`7.0` is `7`).
///
/// ```
/// use serde_json::json;
/// use toolgate_core::approval::canonical_json;
///
/// assert_eq!(canonical_json(&json!({"b": 1.0, "a": [true, null]})), r#"{"a":[true,null],"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    // A `Value` always serializes: its keys are strings and its numbers finite.
    serde_json_canonicalizer::to_string(value).unwrap_or_default()
}

/// `sha256:` and the hex SHA-256 of the [canonical form](canonical_json) of `value` (a
/// [`Value`], or anything that serializes to JSON, such as an arguments map), and of the
/// exact value of every integer in it past 2^53, which the canonical form rounds.
pub fn digest<T: serde::Serialize>(value: &T) -> String {
    // Anything that serializes to JSON makes a `Value`; what cannot hashes as `null`.
    let value = serde_json::to_value(value).unwrap_or_default();
    let canonical = serde_json_canonicalizer::to_vec(&value).unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(&canonical);
    let mut exact = String::new();
    write_rounded_integers(&value, &mut 0, &mut exact);
    if !exact.is_empty() {
        // Only inputs that hold such integers hash more than their canonical form, so
        // every other digest is what it always was.
        hasher.update(b"\0exact integers:");
        hasher.update(exact.as_bytes());
    }
    format!("sha256:{}", hex(&hasher.finalize()))
}

/// Writes `position:value;` for every integer of `value` past 2^53 (which a double, and so
/// the canonical form, does not keep exactly), numbers counted in the canonical form's
/// order (object members by their keys' UTF-16 code units) from `seen`.
fn write_rounded_integers(value: &Value, seen: &mut u64, out: &mut String) {
    const EXACT_IN_A_DOUBLE: u64 = 1 << 53;
    match value {
        Value::Number(number) => {
            *seen += 1;
            let integer = match (number.as_i64(), number.as_u64()) {
                (Some(i), _) => Some(i128::from(i)),
                (None, Some(u)) => Some(i128::from(u)),
                (None, None) => None,
            };
            if let Some(integer) = integer
                && integer.unsigned_abs() > u128::from(EXACT_IN_A_DOUBLE)
            {
                let _ = write!(out, "{seen}:{integer};");
            }
        }
        Value::Array(items) => {
            for item in items {
                write_rounded_integers(item, seen, out);
            }
        }
        Value::Object(members) => {
            let mut members: Vec<_> = members.iter().collect();
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            for (_, member) in members {
                write_rounded_integers(member, seen, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// The digest of a tool's definition: every field, so that a changed description, schema
/// or annotation is a changed definition.
pub fn definition_digest(definition: &ToolDefinition) -> String {
    // A definition always serializes to JSON: it holds strings, JSON values and flags.
    digest(&serde_json::to_value(definition).unwrap_or_default())
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn definition(description: &str) -> ToolDefinition {
        ToolDefinition {
            name: "wipe".into(),
            title: None,
            description: description.into(),
            version: "1".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: Default::default(),
            tags: Vec::new(),
            source: Default::default(),
        }
    }

    #[test]
    fn key_order_number_spelling_and_escapes_do_not_change_the_digest() {
        let a = json!({"path": "/tmp/é", "depth": 7, "opts": {"z": true, "a": [1.5, 2]}});
        let b: Value = serde_json::from_str(
            r#"{"opts":{"a":[1.50,2.0],"z":true},"depth":7.0,"path":"/tmp/\u00e9"}"#,
        )
        .unwrap();

        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"path": "/tmp/é", "depth": 8})));
        assert!(digest(&a).starts_with("sha256:") && digest(&a).len() == 7 + 64);
    }

    #[test]
    fn integers_past_2_to_the_53_are_told_apart_where_the_canonical_form_rounds_them() {
        let id = |n: u64| json!({"account": {"id": n}, "note": "close"});
        let (a, b) = (1_234_567_890_123_456_789, 1_234_567_890_123_456_790);
        assert_eq!(
            canonical_json(&id(a)),
            canonical_json(&id(b)),
            "RFC 8785 rounds both"
        );
        assert_ne!(digest(&id(a)), digest(&id(b)));
        assert_eq!(digest(&id(a)), digest(&id(a)));
        assert_ne!(digest(&json!(i64::MIN)), digest(&json!(i64::MIN + 1)));
        // The same integer written as a double is another input; so is one moved to
        // another place among numbers of the same canonical text.
        assert_ne!(digest(&json!([a])), digest(&json!([a as f64])));
        assert_ne!(digest(&json!([a, a as f64])), digest(&json!([a as f64, a])));
        // Integers a double holds exactly hash as their canonical form alone, as before.
        let small = json!({"n": 9_007_199_254_740_992u64});
        let canonical = serde_json_canonicalizer::to_vec(&small).unwrap();
        assert_eq!(
            digest(&small),
            format!("sha256:{}", hex(&Sha256::digest(canonical)))
        );
    }

    #[test]
    fn a_map_and_the_value_it_makes_have_one_digest() {
        let value = json!({"b": 12_345_678_901_234_567_890u64, "a": [1, "x"]});
        let map = value.as_object().unwrap();
        assert_eq!(digest(map), digest(&value));
    }

    #[test]
    fn canonical_form_follows_rfc_8785() {
        // From RFC 8785 §3.2.2/§3.2.3: numbers as ECMAScript writes them, keys by UTF-16.
        let value: Value =
            serde_json::from_str(r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"\u20ac":1,"\r":2,"1":3}"#)
                .unwrap();

        assert_eq!(
            canonical_json(&value),
            "{\"\\r\":2,\"1\":3,\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"€\":1}"
        );
    }

    #[test]
    fn bindings_differing_in_any_fact_have_different_keys_and_name_it() {
        let ann = User::new("ann");
        let base = CallBinding::of(&definition("Wipes."), &ann, &json!({"disk": 1}), "g1");
        let changes = [
            (
                CallBinding::of(
                    &definition("Wipes."),
                    &User::new("bob"),
                    &json!({"disk": 1}),
                    "g1",
                ),
                "the caller",
            ),
            (
                CallBinding::of(
                    &definition("Wipes."),
                    &User::new("ann").with_tenant("globex"),
                    &json!({"disk": 1}),
                    "g1",
                ),
                "the caller",
            ),
            (
                CallBinding::of(&definition("Wipes all."), &ann, &json!({"disk": 1}), "g1"),
                "the tool's definition",
            ),
            (
                CallBinding::of(&definition("Wipes."), &ann, &json!({"disk": 2}), "g1"),
                "the input",
            ),
            (
                CallBinding::of(&definition("Wipes."), &ann, &json!({"disk": 1}), "g2"),
                "the configuration generation",
            ),
        ];

        for (other, what) in changes {
            assert_ne!(base.key(), other.key(), "{what}");
            assert_eq!(other.mismatch(&base), Some(what));
        }
        let same = CallBinding::of(&definition("Wipes."), &ann, &json!({"disk": 1.0}), "g1");
        assert_eq!((same.key(), same.mismatch(&base)), (base.key(), None));
    }
}
