//! Bounds on input: size and nesting depth, checked before any hook runs.

use serde_json::Value;

use crate::error::{InputViolations, ToolError};

/// Which limit a walk went past.
enum Exceeded {
    Depth,
    Size,
}

/// How large and how deep an input may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// The most bytes of JSON: of the text, for text input; of the value as compact JSON,
    /// for parsed input (escapes as written: a control character is 6 bytes as `\u0001`).
    /// A parsed input far under the limit is passed on an estimate; one near it or past it
    /// is measured.
    pub max_bytes: usize,
    /// The deepest nesting of arrays and objects.
    pub max_depth: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_bytes: 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// How far the walk's estimate can lie from an input's size as compact JSON, either way: a
/// string's escapes make it up to 6 times larger than counted (a control character is 6
/// bytes as `\u0001`), and a number, counted as 8 bytes, is as short as 1. So an estimate
/// under a sixth of the limit passes, one over 8 times the limit is refused, and in between
/// the input is measured exactly.
const STRINGS_GROW_BY: usize = 6;
const NUMBERS_SHRINK_BY: usize = 8;

/// The estimated JSON size of a scalar (a string without its escapes, a number as 8 bytes:
/// [`InputLimits::check`] measures an input exactly where that could matter).
#[inline]
fn scalar_size(scalar: &Value) -> usize {
    match scalar {
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        _ => 5,
    }
}

impl InputLimits {
    /// Checks a parsed input.
    ///
    /// # Errors
    ///
    /// [`ToolError::InputTooDeep`] or [`ToolError::InputTooLarge`].
    #[inline]
    pub fn check(&self, input: &Value) -> Result<(), ToolError> {
        let mut size = 0usize;
        match self.walk(input, 1, &mut size) {
            // Most inputs are far under the limit: the estimate settles it.
            Ok(()) if size.saturating_mul(STRINGS_GROW_BY) <= self.max_bytes => Ok(()),
            Ok(()) => self.check_exactly(input),
            Err(exceeded) => Err(self.exceeded(exceeded, size)),
        }
    }

    /// The size check of an input whose estimate does not settle it: measured as compact
    /// JSON, escapes and numbers as written.
    #[cold]
    fn check_exactly(&self, input: &Value) -> Result<(), ToolError> {
        let size = crate::json::text_len(input);
        if size > self.max_bytes {
            return Err(self.exceeded(Exceeded::Size, size));
        }
        Ok(())
    }

    /// The error for an input over a limit (`size`: as far as the walk counted).
    #[cold]
    fn exceeded(&self, exceeded: Exceeded, size: usize) -> ToolError {
        match exceeded {
            Exceeded::Depth => ToolError::InputTooDeep {
                limit: self.max_depth,
            },
            Exceeded::Size => ToolError::InputTooLarge {
                size,
                limit: self.max_bytes,
            },
        }
    }

    /// Adds the estimated size of `value` to `size`. The error is one byte wide, so the
    /// recursion passes no `ToolError` around. Scalars inside a container are counted in
    /// its loop (no call each), and the size is compared once per container: a parsed
    /// input is already in memory, so only the verdict matters, not stopping early.
    ///
    /// In place for the input itself, which every call checks; a container inside it is
    /// walked by [`walk_nested`](Self::walk_nested).
    #[inline]
    fn walk(&self, value: &Value, depth: usize, size: &mut usize) -> Result<(), Exceeded> {
        match value {
            Value::Array(items) => {
                if depth > self.max_depth {
                    return Err(Exceeded::Depth);
                }
                *size += 2 + items.len();
                for item in items {
                    self.walk_item(item, depth, size)?;
                }
            }
            Value::Object(fields) => {
                if depth > self.max_depth {
                    return Err(Exceeded::Depth);
                }
                *size += 2;
                for (key, item) in fields {
                    *size += key.len() + 4;
                    self.walk_item(item, depth, size)?;
                }
            }
            scalar => *size += scalar_size(scalar),
        }
        // Past what any input within the limit can be estimated at: refused unmeasured.
        if *size > self.max_bytes.saturating_mul(NUMBERS_SHRINK_BY) {
            return Err(Exceeded::Size);
        }
        Ok(())
    }

    /// One item of a container at `depth`: a scalar is counted here, a container walked.
    #[inline]
    fn walk_item(&self, item: &Value, depth: usize, size: &mut usize) -> Result<(), Exceeded> {
        match item {
            Value::Array(_) | Value::Object(_) => self.walk_nested(item, depth + 1, size),
            scalar => {
                *size += scalar_size(scalar);
                Ok(())
            }
        }
    }

    /// A container inside another, walked out of line: the walk recurses here.
    #[inline(never)]
    fn walk_nested(&self, value: &Value, depth: usize, size: &mut usize) -> Result<(), Exceeded> {
        self.walk(value, depth, size)
    }

    /// Parses JSON text within the limits.
    ///
    /// # Errors
    ///
    /// [`ToolError::InputTooLarge`], [`ToolError::InputTooDeep`], or
    /// [`ToolError::InvalidInput`] when the text is not JSON.
    pub fn parse(&self, json: &str) -> Result<Value, ToolError> {
        if json.len() > self.max_bytes {
            return Err(ToolError::InputTooLarge {
                size: json.len(),
                limit: self.max_bytes,
            });
        }
        let value: Value = serde_json::from_str(json).map_err(|e| {
            if e.to_string().starts_with("recursion limit exceeded") {
                ToolError::InputTooDeep {
                    limit: self.max_depth,
                }
            } else {
                ToolError::InvalidInput(InputViolations::one(
                    "",
                    format!("the arguments are not valid JSON: {e}"),
                ))
            }
        })?;
        self.check(&value)?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!(1), |v, _| json!([v]))
    }

    #[test]
    fn depth_at_the_limit_passes_and_one_more_fails() {
        let limits = InputLimits {
            max_bytes: 1 << 20,
            max_depth: 8,
        };
        assert!(limits.check(&nested(8)).is_ok());
        assert_eq!(
            limits.check(&nested(9)),
            Err(ToolError::InputTooDeep { limit: 8 })
        );
    }

    #[test]
    fn text_deeper_than_serde_allows_is_too_deep_not_a_panic() {
        let text = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            InputLimits::default().parse(&text),
            Err(ToolError::InputTooDeep { .. })
        ));
    }

    #[test]
    fn large_input_is_refused() {
        let limits = InputLimits {
            max_bytes: 100,
            max_depth: 8,
        };
        let big = json!({ "text": "x".repeat(200) });
        assert!(matches!(
            limits.check(&big),
            Err(ToolError::InputTooLarge { .. })
        ));
        assert!(matches!(
            limits.parse(&big.to_string()),
            Err(ToolError::InputTooLarge { .. })
        ));
    }

    #[test]
    fn a_megabyte_of_control_characters_is_refused_under_a_one_mebibyte_limit() {
        let input = json!({ "v": "\u{1}".repeat(1_000_000) });
        assert_eq!(serde_json::to_string(&input).unwrap().len(), 6_000_008);

        let refused = InputLimits::default().check(&input);

        assert!(
            matches!(refused, Err(ToolError::InputTooLarge { size, .. }) if size >= 6_000_000),
            "{refused:?}"
        );
    }

    #[test]
    fn a_string_is_counted_as_serialized_escapes_included_and_a_key_too() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        let input = json!(format!("{every_ascii}\"\\ plain é ✓"));
        let serialized = serde_json::to_string(&input).unwrap().len();
        let key = json!({ "\u{1}".repeat(1000): 1 });
        let exact = InputLimits {
            max_bytes: serialized,
            max_depth: 8,
        };
        let one_less = InputLimits {
            max_bytes: serialized - 1,
            ..exact
        };

        assert_eq!(exact.check(&input), Ok(()));
        assert!(matches!(
            one_less.check(&input),
            Err(ToolError::InputTooLarge { .. })
        ));
        assert!(matches!(
            InputLimits {
                max_bytes: 5000,
                ..exact
            }
            .check(&key),
            Err(ToolError::InputTooLarge { .. })
        ));
    }

    #[test]
    fn numbers_are_measured_as_written_near_the_limit() {
        // 480,000 zeros: 960,001 bytes as JSON, estimated at 4.3 MB.
        let zeros = json!(vec![0; 480_000]);
        assert_eq!(serde_json::to_string(&zeros).unwrap().len(), 960_001);
        assert_eq!(InputLimits::default().check(&zeros), Ok(()));
        // Long numbers, estimated at 8 bytes each: 25 bytes each as written.
        let long = json!(vec![-1.234_567_890_123_456_7e-300; 50_000]);
        let size = serde_json::to_string(&long).unwrap().len();
        assert!(size > 1024 * 1024, "{size}");
        assert_eq!(
            InputLimits::default().check(&long),
            Err(ToolError::InputTooLarge {
                size,
                limit: 1024 * 1024
            })
        );
    }
}
